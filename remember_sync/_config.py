"""The one reader of the environment: ``REMEMBER_*``, ``REDIS_URL``, ``KV_REST_API_*``.

Every entry point -- ``RememberPlugin.init(type="global-store")``,
``remember-sync serve``, :func:`remember_sync.mcp.create_app` and the other CLI
commands -- asks this module which store the environment names, so one
environment means one store everywhere.  The precedence, highest first
(``docs/configuration.rst`` has the full table):

1. an explicit argument: a command-line flag (``--redis-url``,
   ``--vercel-kv``) or a keyword argument (``create_app(redis_url=...)``);
2. ``REMEMBER_REDIS_URL`` -- or ``REMEMBER_VERCEL_KV=1`` (Vercel KV from
   ``KV_REST_API_URL`` / ``KV_REST_API_TOKEN``); both set is an error, since
   nothing says which one was meant;
3. ``REDIS_URL``, the name hosting platforms (Heroku, Render, Railway, Vercel)
   set;
4. ``KV_REST_API_URL`` together with ``KV_REST_API_TOKEN``;
5. nothing: the in-process memory store (``global-store`` refuses instead).

A more specific name wins over a generic one: ``REMEMBER_REDIS_URL`` is this
library's own, ``REDIS_URL`` may belong to another part of the application.
When both are set to different URLs the specific one is used and a warning
names both variables (never their values: a URL may carry a password).

Keyword arguments are the configuration; this module only turns environment
text into plain arguments (STYLE.md rule 5) and never builds a store.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .errors import RememberConfigurationError
from .types import SCOPES

log = logging.getLogger("remember_sync")

#: This library's Redis URL variable (precedence 2).
REDIS_URL_ENV = "REMEMBER_REDIS_URL"
#: ``1``/``true``/``yes``/``on``: use Vercel KV (precedence 2, beside ``REMEMBER_REDIS_URL``).
VERCEL_KV_ENV = "REMEMBER_VERCEL_KV"
#: The platforms' Redis URL variable (precedence 3).
PLATFORM_REDIS_URL_ENV = "REDIS_URL"
#: Vercel KV / Upstash REST endpoint and token (precedence 4, and what ``vercel-kv`` reads).
KV_URL_ENV = "KV_REST_API_URL"
KV_TOKEN_ENV = "KV_REST_API_TOKEN"  # noqa: S105 - a variable name, not a secret
#: Server settings read by ``create_app`` (``serve`` has flags for them).
TOOLS_PREFIX_ENV = "REMEMBER_TOOLS_PREFIX"
ALLOWED_SCOPES_ENV = "REMEMBER_ALLOWED_SCOPES"
DEFAULT_TTL_ENV = "REMEMBER_DEFAULT_TTL"
AUTH_TOKENS_ENV = "REMEMBER_AUTH_TOKENS"
#: Bounds read by ``serve`` and ``create_app`` when no flag or argument gives them.
MAX_BYTES_ENV = "REMEMBER_MAX_BYTES"
MAX_ENTRIES_ENV = "REMEMBER_MAX_ENTRIES"
MAX_VALUE_BYTES_ENV = "REMEMBER_MAX_VALUE_BYTES"
#: ``max_bytes`` of the in-process memory store that ``serve`` and ``create_app``
#: build (256 MiB): an HTTP server must not let anonymous callers grow it without
#: limit.  ``--max-bytes`` / ``REMEMBER_MAX_BYTES`` change it.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: ``max_entries`` of that store; ``--max-entries`` / ``REMEMBER_MAX_ENTRIES`` change it.
DEFAULT_MAX_ENTRIES = 100_000
#: The environment variable of each bound, and its default.
BOUND_ENV = {
    "max_bytes": (MAX_BYTES_ENV, DEFAULT_MAX_BYTES),
    "max_entries": (MAX_ENTRIES_ENV, DEFAULT_MAX_ENTRIES),
}
#: Where ``serve`` and ``create_app`` answer MCP requests.
DEFAULT_PATH = "/mcp"
#: Where ``serve --metrics`` serves the Prometheus text.
METRICS_PATH = "/metrics"
#: ``audit=True`` when ``init`` is not given ``audit``.
AUDIT_ENV = "REMEMBER_AUDIT"
#: Per-principal quotas read by ``serve`` and ``create_app`` (``--quota-entries``/``-bytes``).
QUOTA_ENTRIES_ENV = "REMEMBER_QUOTA_ENTRIES"
QUOTA_BYTES_ENV = "REMEMBER_QUOTA_BYTES"
#: OAuth resource server settings read by ``create_app`` (``serve``: ``--oauth-*``), name ->
#: :class:`~remember_sync.mcp.oauth.OAuthVerifier` argument.
OAUTH_ENV = {
    "REMEMBER_OAUTH_ISSUER": "issuer",
    "REMEMBER_OAUTH_AUDIENCE": "audience",
    "REMEMBER_OAUTH_JWKS_URL": "jwks_url",
    "REMEMBER_OAUTH_RESOURCE": "resource",
}

#: Verified mode (``integrity="verified"``) and its witness, read by ``init`` when not given.
INTEGRITY_ENV = "REMEMBER_INTEGRITY"
WITNESS_ENV = "REMEMBER_WITNESS"
#: The keystore of per-person keys: a file path or a ``redis://`` URL; turns subject keys on.
KEYSTORE_ENV = "REMEMBER_KEYSTORE"
#: ``1``: record metrics and report them to OpenTelemetry (``RememberPlugin.init(metrics=True)``).
METRICS_ENV = "REMEMBER_METRICS"
#: The rate limit of ``serve`` and ``create_app`` (``60/minute``; ``serve --rate-limit``).
RATE_LIMIT_ENV = "REMEMBER_RATE_LIMIT"
#: The in-process ended-session table of ``serve`` and ``create_app`` (memory store only):
#: its cap and each principal's share (``serve --max-ended-sessions`` and
#: ``--max-ended-per-principal``), by :class:`~remember_sync.mcp.McpServer` argument.
ENDED_ENV = {
    "max_ended_sessions": "REMEMBER_MAX_ENDED_SESSIONS",
    "max_ended_per_principal": "REMEMBER_MAX_ENDED_PER_PRINCIPAL",
}
#: Their defaults: about 33 MB of records at most (some 330 bytes each), and each
#: principal's (or all anonymous callers' together) share of them.
DEFAULT_MAX_ENDED_SESSIONS = 100_000
DEFAULT_MAX_ENDED_PER_PRINCIPAL = 10_000

#: Older secrets that still decrypt, comma-separated, newest first (after the current one).
PREVIOUS_SECRETS_ENV = "REMEMBER_PREVIOUS_SECRETS"  # noqa: S105 - a variable name
#: The URL schemes a Redis URL may have (:func:`check_redis_url`).
REDIS_SCHEMES = (
    "redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://",
    "redis+cluster://", "rediss+cluster://",
)

StoreKind = Literal["memory", "redis", "vercel-kv"]
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True)
class StoreSettings:
    """The store an environment (and the explicit arguments) name.

    :attr kind: ``memory``, ``redis`` or ``vercel-kv``.
    :attr redis_url: the URL for ``redis`` (may hold a password: never print it).
    :attr source: what decided, for messages: ``"argument"`` (a flag or
        keyword argument), the variable's name, or ``"default"``.
    """

    kind: StoreKind
    redis_url: str | None = None
    source: str = "default"


def _get(env: Mapping[str, str], name: str) -> str:
    return (env.get(name) or "").strip()


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """A boolean variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``/unset.

    :raises RememberConfigurationError: any other value (a typo must not read as "off").
    """
    text = _get(env, name).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise RememberConfigurationError(
        f"{name} must be 1/true/yes/on or 0/false/no/off; got {text!r}"
    )


def env_whole(env: Mapping[str, str], name: str, *, minimum: int, unit: str) -> int | None:
    """The whole number in variable *name* (``None`` if unset or blank).

    :raises RememberConfigurationError: not a whole number, or below *minimum*.
    """
    text = _get(env, name)
    if not text:
        return None
    try:
        value = int(text, 10)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise RememberConfigurationError(f"{name} must be {unit}, at least {minimum}; got {text!r}")
    return value


def integrity_settings(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``REMEMBER_INTEGRITY`` (``default``/``verified``), ``REMEMBER_WITNESS``; ``None``: unset.

    :raises RememberConfigurationError: another integrity mode.
    """
    mode = _get(env, INTEGRITY_ENV).lower() or None
    if mode not in (None, "default", "verified"):
        raise RememberConfigurationError(
            f"{INTEGRITY_ENV} must be 'default' or 'verified'; got {mode!r}"
        )
    return mode, _get(env, WITNESS_ENV) or None


def _named_error(name: str, detail: str) -> RememberConfigurationError:
    # No name: a command-line parser adds the flag's own ("argument --x: ...").
    return RememberConfigurationError(f"{name}: {detail}" if name else detail)


def scope_list(value: str | Sequence[object], name: str) -> list[str]:
    """The scopes in *value* -- comma-separated text or a list -- in order, once each.

    :param name: what gave *value*, for the message (``""``: no name).

    :raises RememberConfigurationError: a name that is not a scope, or none at all.
    """
    if isinstance(value, str):
        value = [s.strip() for s in value.split(",") if s.strip()]
    bad = [str(s) for s in value if s not in SCOPES]
    if bad or not value:
        got = f"unknown scope(s) {', '.join(bad)}" if bad else "no scope"
        raise _named_error(name, f"{got}; choose from {', '.join(SCOPES)}")
    return list(dict.fromkeys(str(s) for s in value))


def env_scopes(env: Mapping[str, str], name: str = ALLOWED_SCOPES_ENV) -> list[str] | None:
    """A comma-separated scope list (``None`` if unset or blank).

    :raises RememberConfigurationError: a name that is not a scope.
    """
    text = _get(env, name)
    return scope_list(text, name) if text.strip(", ") else None


def quota_settings(
    env: Mapping[str, str], entries: int | None = None, nbytes: int | None = None
) -> dict[str, int | None] | None:
    """Every principal's quota: *entries* and *nbytes* (flags, arguments), else
    ``REMEMBER_QUOTA_ENTRIES`` and ``REMEMBER_QUOTA_BYTES``; ``None`` when neither is set.

    :raises RememberConfigurationError: a variable that is not a whole number >= 1.
    """
    quota = {"entries": entries, "bytes": nbytes}
    for part, name in (("entries", QUOTA_ENTRIES_ENV), ("bytes", QUOTA_BYTES_ENV)):
        if quota[part] is None:
            quota[part] = env_whole(env, name, minimum=1, unit="a whole number")
    return None if quota["entries"] is None and quota["bytes"] is None else quota


def env_rate_limit(env: Mapping[str, str]) -> str | None:
    """The rate in ``REMEMBER_RATE_LIMIT`` (``None`` if unset or blank); checked by its user."""
    return _get(env, RATE_LIMIT_ENV) or None


def previous_secrets(env: Mapping[str, str]) -> list[str]:
    """The older secrets in ``REMEMBER_PREVIOUS_SECRETS`` (blank items dropped)."""
    return [s.strip() for s in _get(env, PREVIOUS_SECRETS_ENV).split(",") if s.strip()]


def check_redis_url(url: str, source: str) -> str:
    """*url* if it has a Redis scheme (:data:`REDIS_SCHEMES`).

    :param source: what gave it, for the message (``"redis_url"``,
        ``"environment variable REDIS_URL"``; ``""``: no name).
    :raises RememberConfigurationError: another scheme; the message never
        repeats the URL (it may carry a password).
    """
    if not url.startswith(REDIS_SCHEMES):
        raise _named_error(
            source,
            "must be a redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, "
            "redis+cluster:// or rediss+cluster:// URL",
        )
    return url


def _env_redis_url(url: str, name: str) -> str:
    return check_redis_url(url, f"environment variable {name}")


def store_settings(
    env: Mapping[str, str] | None = None,
    *,
    redis_url: str | None = None,
    vercel_kv: bool = False,
) -> StoreSettings:
    """The store named by the explicit arguments, else by *env* (default :data:`os.environ`).

    See the module documentation for the precedence.

    :raises RememberConfigurationError: both arguments given, or both
        ``REMEMBER_REDIS_URL`` and ``REMEMBER_VERCEL_KV=1`` set, or a bad
        ``REMEMBER_VERCEL_KV`` value, or a Redis URL without a Redis scheme.
    """
    if redis_url and vercel_kv:
        raise RememberConfigurationError("give either a Redis URL or Vercel KV, not both")
    if redis_url:
        return StoreSettings("redis", check_redis_url(redis_url, "redis_url"), "argument")
    if vercel_kv:
        return StoreSettings("vercel-kv", None, "argument")
    env = os.environ if env is None else env
    own_url, own_kv = _get(env, REDIS_URL_ENV), env_flag(env, VERCEL_KV_ENV)
    if own_url and own_kv:
        raise RememberConfigurationError(
            f"both {REDIS_URL_ENV} and {VERCEL_KV_ENV} are set: give a Redis URL or Vercel KV, "
            "not both (unset one)"
        )
    platform_url = _get(env, PLATFORM_REDIS_URL_ENV)
    if own_url:
        if platform_url and platform_url != own_url:
            log.warning(
                "remember: %s and %s name different Redis servers; using %s",
                REDIS_URL_ENV,
                PLATFORM_REDIS_URL_ENV,
                REDIS_URL_ENV,
            )
        return StoreSettings("redis", _env_redis_url(own_url, REDIS_URL_ENV), REDIS_URL_ENV)
    if own_kv:
        return StoreSettings("vercel-kv", None, VERCEL_KV_ENV)
    if platform_url:
        url = _env_redis_url(platform_url, PLATFORM_REDIS_URL_ENV)
        return StoreSettings("redis", url, PLATFORM_REDIS_URL_ENV)
    if _get(env, KV_URL_ENV) and _get(env, KV_TOKEN_ENV):
        return StoreSettings("vercel-kv", None, KV_URL_ENV)
    return StoreSettings("memory")
