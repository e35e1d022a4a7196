"""Encrypted, scoped memory for AI-agent tools.

Quick start::

    from remember_sync import RememberPlugin, identity

    plugin = RememberPlugin.init()
    with identity(session_id="s-1", user_id="alice"):
        plugin.remember.set("theme", "dark", scope="user")
"""

from ._audit import AuditEvent, AuditTrail, AuditVerification
from ._options import (
    AuditOptions,
    EncryptionOptions,
    QuotaOptions,
    RedisConfig,
    SearchOptions,
    StoreType,
    ToolsOptions,
)
from ._secrets import generate_secret
from .accessor import RememberAccessor
from .errors import (
    RememberConfigurationError,
    RememberConflictError,
    RememberDecryptionError,
    RememberError,
    RememberIdentityError,
    RememberInputError,
    RememberInputTypeError,
    RememberIntegrityError,
    RememberQuotaError,
    RememberScopeNotAllowedError,
    RememberStoreError,
    RememberUnavailableError,
)
from .identity import current_identity, identity
from .plugin import RememberPlugin
from .types import BRANDS, SCOPES, ErasureReceipt, Identity, RememberEntry, SearchHit

__all__ = [
    "AuditEvent",
    "AuditOptions",
    "AuditTrail",
    "AuditVerification",
    "BRANDS",
    "EncryptionOptions",
    "ErasureReceipt",
    "Identity",
    "QuotaOptions",
    "RedisConfig",
    "RememberAccessor",
    "RememberConfigurationError",
    "RememberConflictError",
    "RememberDecryptionError",
    "RememberEntry",
    "RememberError",
    "RememberIdentityError",
    "RememberInputError",
    "RememberInputTypeError",
    "RememberIntegrityError",
    "RememberPlugin",
    "RememberQuotaError",
    "RememberScopeNotAllowedError",
    "RememberStoreError",
    "RememberUnavailableError",
    "SCOPES",
    "SearchHit",
    "SearchOptions",
    "StoreType",
    "ToolsOptions",
    "current_identity",
    "generate_secret",
    "identity",
]
