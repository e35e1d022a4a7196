"""The one exception tree of :mod:`remember_sync`.

Every error the library raises on purpose derives from :class:`RememberError`,
which carries a stable machine-readable ``code`` and the ``http_status`` a host
should answer with.  Bad input additionally subclasses the matching builtin
(:class:`ValueError` or :class:`TypeError`) so plain ``except ValueError`` code
keeps working.  This module imports nothing from the package.
"""

from __future__ import annotations

__all__ = [
    "DemoFailed",
    "JsonRpcError",
    "LayoutMarkerError",
    "RateLimitOptionError",
    "RedisOptionError",
    "RememberConfigurationError",
    "RememberConflictError",
    "RememberDecryptionError",
    "RememberError",
    "RememberIdentityError",
    "RememberInputError",
    "RememberInputTypeError",
    "RememberIntegrityError",
    "RememberQuotaError",
    "RememberScopeNotAllowedError",
    "RememberStoreError",
    "RememberUnavailableError",
    "ToolError",
]


class RememberError(Exception):
    """Root of every error raised by remember_sync.

    :param message: human-readable explanation.
    :param code: overrides the class's default ``code``.
    """

    code: str = "REMEMBER_ERROR"
    http_status: int = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class RememberConfigurationError(RememberError):
    """The plugin or a store was configured wrongly; fix the options or environment."""

    code = "REMEMBER_CONFIGURATION_ERROR"
    http_status = 500


class RedisOptionError(RememberConfigurationError):
    """A Redis connection option is invalid; ``option`` names it, ``detail`` says why."""

    def __init__(self, option: str, detail: str) -> None:
        super().__init__(f"Redis option {option!r}: {detail}")
        self.option = option
        self.detail = detail


class RateLimitOptionError(RememberConfigurationError, ValueError):
    """A rate limit (``serve --rate-limit``, ``REMEMBER_RATE_LIMIT``, ``rate_limit=``) is
    not one rate like ``60/minute``; ``source`` names where it came from."""

    def __init__(self, message: str, source: str = "") -> None:
        super().__init__(message)
        self.source = source


class RememberIdentityError(RememberError):
    """The scope needs an identity the current request does not have.

    Raised before any store I/O.  The host should answer 403.
    """

    code = "REMEMBER_IDENTITY_REQUIRED"
    http_status = 403


class RememberScopeNotAllowedError(RememberError, ValueError):
    """A memory tool was called with a scope outside ``allowed_scopes``."""

    code = "REMEMBER_SCOPE_NOT_ALLOWED"
    http_status = 400


class RememberInputError(RememberError, ValueError):
    """An argument has the right type but an invalid value (key, ttl, scope, pattern, size)."""

    code = "REMEMBER_INVALID_INPUT"
    http_status = 400


class RememberInputTypeError(RememberError, TypeError):
    """An argument has a type that cannot be stored (not JSON-serialisable, bad metadata)."""

    code = "REMEMBER_INVALID_INPUT"
    http_status = 400


class RememberStoreError(RememberError):
    """The store was unreachable or failed; the driver's exception is the ``__cause__``."""

    code = "REMEMBER_STORE_ERROR"
    http_status = 503


class RememberQuotaError(RememberError):
    """A write would take its principal over its quota; nothing was written.

    Quotas count the entries and bytes of one principal (a signed-in user, a
    token's or OAuth principal, or an anonymous caller's session) across all of
    its namespaces.  Forget entries, write smaller ones, or wait for entries
    with a TTL to expire; a write is never made room for by evicting anyone
    else's entries.
    """

    code = "REMEMBER_QUOTA_EXCEEDED"
    http_status = 429


class RememberUnavailableError(RememberError):
    """A service needed to answer could not be reached; nothing was decided, retry later.

    Raised, for example, by :class:`~remember_sync.mcp.oauth.OAuthVerifier` when
    the issuer's keys cannot be fetched: the token is neither valid nor invalid
    yet.  :class:`~remember_sync.mcp.McpServer` answers ``503`` with
    ``Retry-After`` (never ``401``, never an anonymous caller).

    :param retry_after_s: seconds after which a retry may succeed (``None``: unknown).
    """

    code = "REMEMBER_UNAVAILABLE"
    http_status = 503

    def __init__(
        self, message: str, *, code: str | None = None, retry_after_s: int | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class RememberConflictError(RememberStoreError):
    """A read-modify-write lost its compare-and-set too many times in a row.

    Too many concurrent writers on one key; nothing was written by the call
    that raised it.  Retry later, or spread the writes over more keys.
    """

    code = "REMEMBER_CONFLICT"
    http_status = 409


class JsonRpcError(RememberError):
    """A JSON-RPC error the MCP server sends back (raised while it handles a request).

    :param rpc_code: the JSON-RPC error code (e.g. ``-32602``, invalid params).
    :param message: the error's message, as sent.
    :param data: the error's optional ``data`` member.
    """

    code = "REMEMBER_JSONRPC_ERROR"
    http_status = 400

    def __init__(self, rpc_code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code
        self.data = data


class RememberDecryptionError(RememberError):
    """A stored entry could not be decrypted or parsed (wrong secret, tampering, garbage)."""

    code = "REMEMBER_DECRYPTION_FAILED"
    http_status = 500


class RememberIntegrityError(RememberError):
    """The store was changed by someone without the secret (verified mode).

    An entry the namespace's manifest lists as live is missing, holds another
    version than the manifest's, is not in the manifest at all, or the manifest
    fails its check or is older than the witness: the store deleted, replayed,
    rolled back or inserted something.  Never reported as "not found".
    """

    code = "REMEMBER_INTEGRITY"
    http_status = 500


class LayoutMarkerError(RememberError):
    """The layout marker cannot be trusted, so nothing may be purged; fix or delete it.

    :attr reason: ``"unreadable"`` (present but not ``{"firstSeenAt": <number>, ...}``)
        or ``"vanished"`` (our only-if-absent write lost a race, then the
        winner's marker was gone).
    :attr key: the marker's storage key.
    :attr raw: the stored text (``None`` when vanished).
    """

    code = "REMEMBER_LAYOUT_MARKER_UNUSABLE"
    http_status = 500

    def __init__(self, message: str, *, key: str, reason: str, raw: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.reason = reason
        self.raw = raw


class ToolError(RememberError):
    """Raise inside a user tool to return a tool error (``isError: true``) to the model.

    :param message: what went wrong, written for the model.
    :param code: a stable machine-readable code (default ``TOOL_ERROR``).
    """

    code = "TOOL_ERROR"
    http_status = 400


class DemoFailed(RememberError):
    """A step of ``remember-sync demo`` did not come out as narrated (a bug: please report it)."""

    code = "REMEMBER_DEMO_FAILED"
    http_status = 500
