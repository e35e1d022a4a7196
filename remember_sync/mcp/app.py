"""Building an :class:`~remember_sync.mcp.McpServer` from plain options and the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _config
from .._config import BOUND_ENV, DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES
from ..errors import RememberConfigurationError
from ..plugin import RememberPlugin
from ..stores.memory import MemoryStore
from ._ratelimit import check_rate
from .auth import StaticTokenVerifier
from .oauth import oauth_verifier_from_env
from .server import McpServer

__all__ = [
    "BOUND_ENV",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "create_app",
    "ended_session_caps",
    "plugin_from_options",
]


def plugin_from_options(
    *,
    redis_url: str | None = None,
    vercel_kv: bool = False,
    tools_prefix: str = "",
    allowed_scopes: Sequence[str] | None = None,
    default_ttl: int = 0,
    max_bytes: int | None = None,
    max_entries: int | None = None,
    max_value_bytes: int | None = None,
    quota_entries: int | None = None,
    quota_bytes: int | None = None,
    **extra: Any,
) -> RememberPlugin:
    """A plugin with the memory tools enabled: memory store, or Redis, or Vercel KV.

    The memory store is always bounded: *max_bytes* and *max_entries* if
    given, else ``REMEMBER_MAX_BYTES`` and ``REMEMBER_MAX_ENTRIES`` from the
    environment (``extra["environ"]`` or :data:`os.environ`), else
    :data:`DEFAULT_MAX_BYTES` and :data:`DEFAULT_MAX_ENTRIES`.  A bound given
    with Redis or Vercel KV is refused (it only applies to the memory store).
    With Redis or Vercel KV a configured secret is required
    (``encryption={"require_secret": True}`` unless *encryption* says otherwise).
    *max_value_bytes* (else ``REMEMBER_MAX_VALUE_BYTES``, else the plugin's
    default) bounds each value; the server's HTTP body limit follows it.
    *quota_entries* and *quota_bytes* (else ``REMEMBER_QUOTA_ENTRIES`` and
    ``REMEMBER_QUOTA_BYTES``, else none) are every principal's quota
    (``RememberPlugin.init(quota=...)``; ``docs/many-users.rst``).
    Extra keyword arguments go to :meth:`RememberPlugin.init`.
    """
    store = _config.store_settings({}, redis_url=redis_url, vercel_kv=vercel_kv)  # the checks
    if not all(c.isalnum() or c in "_-." for c in tools_prefix):
        raise RememberConfigurationError(
            f"tools prefix {tools_prefix!r} may only use letters, digits, '_', '-' and '.' "
            "(MCP tool names)"
        )
    scopes = _config.scope_list(allowed_scopes, "allowed_scopes") if allowed_scopes else None
    options: dict[str, Any] = {
        "tools": {"enabled": True, "prefix": tools_prefix, "allowed_scopes": scopes},
        "default_ttl": default_ttl,
        **extra,
    }
    env: Mapping[str, str] = extra.get("environ") or os.environ
    given = {"max_bytes": max_bytes, "max_entries": max_entries}
    for option, (name, default) in BOUND_ENV.items():
        value = given[option]
        if value is None:
            value = _config.env_whole(env, name, minimum=1, unit="a whole number")
        if value is None and store.kind == "memory":
            value = default
        if value is not None:
            options[option] = value  # with Redis or Vercel KV, init names the mistake
    if max_value_bytes is None:
        max_value_bytes = _config.env_whole(
            env, _config.MAX_VALUE_BYTES_ENV, minimum=1, unit="a whole number"
        )
    if max_value_bytes is not None:
        options["max_value_bytes"] = max_value_bytes
    quota = _config.quota_settings(env, quota_entries, quota_bytes)
    if quota is not None:
        options["quota"] = quota
    if store.kind == "redis":
        options.update(type="redis", config={"url": store.redis_url})
    elif store.kind == "vercel-kv":
        options["type"] = "vercel-kv"
    if store.kind != "memory":
        # A real store outlives this process and is shared: never invent a secret for it
        # (a development file in whatever directory the server started in).  The memory
        # store dies with the process, so it keeps the library's fallbacks.
        options["encryption"] = {"require_secret": True, **options.get("encryption", {})}
    return RememberPlugin.init(**options)


def ended_session_caps(
    plugin: RememberPlugin, env: Mapping[str, str], given: Mapping[str, int | None]
) -> dict[str, int]:
    """The :class:`McpServer` caps of the in-process ended-session table.

    Each of ``max_ended_sessions`` and ``max_ended_per_principal`` comes from
    *given* (a flag or argument), else its variable in :data:`_config.ENDED_ENV`,
    else the server's default (left out).  Only the in-process memory store has
    such a table: with a shared store a cap is refused rather than ignored.

    :param given: option -> value (``None``: not given); a key missing is not given.
    :raises RememberConfigurationError: a bad variable, or a cap with a shared store.
    """
    caps: dict[str, int] = {}
    for option, name in _config.ENDED_ENV.items():
        value = given.get(option)
        source = f"--{option.replace('_', '-')}"
        if value is None:
            value = _config.env_whole(env, name, minimum=1, unit="a whole number")
            source = name
        if value is None:
            continue
        if not isinstance(plugin.store, MemoryStore):
            raise RememberConfigurationError(
                f"{source} bounds the in-process table of the memory store; with "
                f"{plugin.store_type} ended sessions live in the store, without a cap "
                "(docs/many-users.rst)"
            )
        caps[option] = value
    return caps


def create_app(
    *,
    plugin: RememberPlugin | None = None,
    redis_url: str | None = None,
    vercel_kv: bool | None = None,
    tools_prefix: str | None = None,
    allowed_scopes: Sequence[str] | None = None,
    default_ttl: int | None = None,
    auth_tokens: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    max_bytes: int | None = None,
    max_entries: int | None = None,
    quota_entries: int | None = None,
    quota_bytes: int | None = None,
    **server_options: Any,
) -> McpServer:
    """An :class:`McpServer` for a WSGI server: ``gunicorn 'remember_sync.mcp:create_app()'``.

    Without *plugin*, builds one with the memory tools enabled from the
    arguments, falling back to the environment: the store as every entry point
    reads it (``REMEMBER_REDIS_URL``, ``REMEMBER_VERCEL_KV=1``, ``REDIS_URL``,
    ``KV_REST_API_URL``/``KV_REST_API_TOKEN``, in that order; see
    ``docs/configuration.rst``), ``REMEMBER_TOOLS_PREFIX``,
    ``REMEMBER_ALLOWED_SCOPES`` (comma-separated),
    ``REMEMBER_DEFAULT_TTL``, ``REMEMBER_AUTH_TOKENS`` (a token file, see
    :mod:`remember_sync.mcp.auth`) or ``REMEMBER_OAUTH_ISSUER`` +
    ``REMEMBER_OAUTH_AUDIENCE`` (+ optional ``REMEMBER_OAUTH_JWKS_URL``,
    ``REMEMBER_OAUTH_RESOURCE``: OAuth access tokens, see
    :mod:`remember_sync.mcp.oauth`), and for the memory store
    ``REMEMBER_MAX_BYTES`` / ``REMEMBER_MAX_ENTRIES`` (defaults
    :data:`DEFAULT_MAX_BYTES`, :data:`DEFAULT_MAX_ENTRIES`; see
    :func:`plugin_from_options`), ``REMEMBER_MAX_VALUE_BYTES``,
    ``REMEMBER_RATE_LIMIT`` (``60/minute``: ``McpServer(rate_limit=...)``),
    ``REMEMBER_MAX_ENDED_SESSIONS`` / ``REMEMBER_MAX_ENDED_PER_PRINCIPAL`` (the memory
    store's ended-session table, see :func:`ended_session_caps`), and every
    principal's quota ``REMEMBER_QUOTA_ENTRIES`` / ``REMEMBER_QUOTA_BYTES``
    (*quota_entries*, *quota_bytes*; none by default).  The master secret comes from
    ``REMEMBER_SECRET`` as usual.  Other keyword arguments go to
    :class:`McpServer`.

    Callers are anonymous unless ``REMEMBER_AUTH_TOKENS`` (or *auth_tokens*,
    or ``token_verifier=``) is given: ``serve``'s local token has no
    counterpart here, because a WSGI app does not know which address its
    server binds (loopback or the network) and a deployment should not create
    credentials in a home directory.  For a single user, a tokens file with
    one ``<token> <user>`` line does the same (``docs/clients.rst``).
    """
    env = os.environ if environ is None else environ
    tokens = auth_tokens if auth_tokens is not None else env.get(_config.AUTH_TOKENS_ENV) or None
    oauth = None if "token_verifier" in server_options else oauth_verifier_from_env(env)
    if tokens is not None and oauth is not None:
        raise RememberConfigurationError(
            "give either REMEMBER_AUTH_TOKENS (static tokens) or REMEMBER_OAUTH_ISSUER (OAuth), "
            "not both"
        )
    if oauth is not None:
        server_options["token_verifier"] = oauth
    if tokens is not None and "token_verifier" not in server_options:
        server_options["token_verifier"] = StaticTokenVerifier.from_file(tokens)
    owns = plugin is None
    if plugin is None:
        store = _config.store_settings(env, redis_url=redis_url, vercel_kv=bool(vercel_kv))
        if default_ttl is None:
            default_ttl = _config.env_whole(
                env, _config.DEFAULT_TTL_ENV, minimum=0, unit="whole seconds"
            )
        plugin = plugin_from_options(
            redis_url=store.redis_url,
            vercel_kv=store.kind == "vercel-kv",
            tools_prefix=tools_prefix
            if tools_prefix is not None
            else env.get(_config.TOOLS_PREFIX_ENV, ""),
            allowed_scopes=allowed_scopes
            if allowed_scopes is not None
            else _config.env_scopes(env, _config.ALLOWED_SCOPES_ENV),
            default_ttl=default_ttl or 0,
            max_bytes=max_bytes,
            max_entries=max_entries,
            quota_entries=quota_entries,
            quota_bytes=quota_bytes,
            environ=env,
        )
    server_options.setdefault("owns_plugin", owns)
    try:
        given = {o: server_options.pop(o, None) for o in _config.ENDED_ENV}
        server_options.update(ended_session_caps(plugin, env, given))
        if "rate_limit" not in server_options:
            rate = server_options["rate_limit"] = _config.env_rate_limit(env)
            if rate is not None:
                check_rate(rate, _config.RATE_LIMIT_ENV)  # name the variable if bad
        return McpServer(plugin, **server_options)
    except BaseException:
        if owns:
            plugin.close()
        raise
