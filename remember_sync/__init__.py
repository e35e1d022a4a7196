"""Encrypted, scoped memory for AI-agent tools.

Quick start::

    from remember_sync import RememberPlugin, identity

    plugin = RememberPlugin.init()
    with identity(session_id="s-1", user_id="alice"):
        plugin.remember.set("theme", "dark", scope="user")
"""

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
    RememberQuotaError,
    RememberScopeNotAllowedError,
    RememberStoreError,
    RememberUnavailableError,
)
from .identity import current_identity, identity
from .plugin import RememberPlugin
from .types import BRANDS, SCOPES, Identity, RememberEntry

__all__ = [
    "BRANDS",
    "Identity",
    "RememberAccessor",
    "RememberConfigurationError",
    "RememberConflictError",
    "RememberDecryptionError",
    "RememberEntry",
    "RememberError",
    "RememberIdentityError",
    "RememberInputError",
    "RememberInputTypeError",
    "RememberPlugin",
    "RememberQuotaError",
    "RememberScopeNotAllowedError",
    "RememberStoreError",
    "RememberUnavailableError",
    "SCOPES",
    "current_identity",
    "generate_secret",
    "identity",
]
