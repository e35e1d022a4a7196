"""Flask extension: ``REMEMBER_*`` config to a plugin, identity bound per request.

::

    from flask import Flask
    from remember_sync.integrations.flask import RememberSync, remember

    app = Flask(__name__)
    app.config.update(REMEMBER_STORE="redis", REMEMBER_REDIS_URL="redis://127.0.0.1:6379/0")
    RememberSync(app)                      # or: ext = RememberSync(); ext.init_app(app)

    @app.post("/theme")
    def set_theme():
        remember.set("theme", request.json["theme"], scope="user")
        return {"ok": True}

Configuration (every key optional):

``REMEMBER_STORE``
    ``memory`` (default), ``redis``, ``vercel-kv`` or ``global-store``.
``REMEMBER_REDIS_URL``
    the Redis URL for ``redis`` (required there) and ``global-store``.
``REMEMBER_KV_URL`` / ``REMEMBER_KV_TOKEN``
    Vercel KV (Upstash REST) for ``vercel-kv`` and ``global-store``; without
    them ``vercel-kv`` reads ``KV_REST_API_URL`` / ``KV_REST_API_TOKEN``.
``REMEMBER_DEFAULT_TTL``
    seconds (``0``: entries do not expire).
``REMEMBER_SECRET``
    the master secret, or a list ``[new, old, ...]`` while rotating (default:
    the ``REMEMBER_SECRET`` environment variable, see the secret rules).
``REMEMBER_KEY_PREFIX``, ``REMEMBER_TOOLS``, ``REMEMBER_ENCRYPTION``
    the plugin's ``key_prefix``, ``tools`` and ``encryption`` options.
``REMEMBER_OPTIONS``
    any other :meth:`RememberPlugin.init` options, as a dict.
``REMEMBER_PLUGIN``
    a ready :class:`~remember_sync.RememberPlugin` to use instead (not closed
    by the extension); every store option above is then ignored.
``REMEMBER_PRINCIPAL_RESOLVER`` / ``REMEMBER_USER_LOADER``
    who the signed-in user is: an ``environ -> principal | None`` callable,
    or a zero-argument callable run inside the app's request context (so it
    may read ``flask.session`` or Flask-Login's ``current_user``) returning the
    principal, or a Flask-Login user object (``lambda: current_user``: its
    ``get_id()`` when ``is_authenticated``, else no principal).  Default:
    the ``REMOTE_USER`` the server or an auth layer in front sets.
``REMEMBER_TOKEN_VERIFIER``
    ``token -> principal | None`` for ``Authorization: Bearer`` tokens,
    asked for a caller the user resolver does not identify.
``REMEMBER_SESSION_HEADER``, ``REMEMBER_REJECT_UNVERIFIED_SESSION``
    see :class:`~remember_sync.integrations.wsgi.RememberMiddleware`.

An :class:`~remember_sync.mcp.McpServer` built on the extension's plugin
(``McpServer(get_plugin(app), path=None)``, mounted with werkzeug's
``DispatcherMiddleware`` or returned from a view) takes the same user and
token verifier by default, so the model's ``user`` memory is the signed-in
user's (see :func:`remember_sync.mcp.auth.register_host_auth`).

The plugin is ``app.extensions["remember_sync"]``.  ``init_app`` wraps
``app.wsgi_app`` in :class:`~remember_sync.integrations.wsgi.RememberMiddleware`,
so the identity is bound for each request (only a session id the server
signed for the same principal is bound) and unbound when the response is
done, also for streamed responses.  A :class:`~remember_sync.errors.RememberError`
escaping a view becomes a JSON response with its status and code, e.g. ``403``
``{"error": {"code": "REMEMBER_IDENTITY_REQUIRED", ...}}``.  With
``REMEMBER_STORE="global-store"`` the store comes from this app's
``REMEMBER_REDIS_URL`` or ``REMEMBER_KV_URL``/``REMEMBER_KV_TOKEN`` (passed to
the plugin explicitly: no other plugin sees them), else the environment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

try:
    from flask import Flask, Response, current_app, has_request_context, jsonify, request
    from werkzeug.local import LocalProxy
except ImportError as exc:  # pragma: no cover - exercised by the no-framework import test
    raise ImportError(
        "remember_sync.integrations.flask needs Flask: pip install 'remember-sync[flask]'"
    ) from exc

from .._config import REDIS_URL_ENV
from ..accessor import RememberAccessor
from ..errors import RememberConfigurationError, RememberError
from ..mcp.auth import TokenVerifier, register_host_auth
from ..plugin import RememberPlugin
from ..types import Identity, identity_part
from .wsgi import (
    ENVIRON_IDENTITY,
    PrincipalResolver,
    RememberMiddleware,
    error_payload,
    host_plugin,
    mounted_principal_resolver,
    remote_user_resolver,
    user_or_token_resolver,
)

__all__ = [
    "EXTENSION_KEY",
    "RememberSync",
    "current_accessor",
    "get_plugin",
    "issue_session",
    "options_from_config",
    "remember",
    "request_identity",
]

log = logging.getLogger("remember_sync")

#: ``app.extensions`` key of the plugin.
EXTENSION_KEY = "remember_sync"
_STATE_KEY = "remember_sync.state"

#: Config keys copied to a plugin option unchanged.
_DIRECT = {
    "REMEMBER_STORE": "type",
    "REMEMBER_DEFAULT_TTL": "default_ttl",
    "REMEMBER_KEY_PREFIX": "key_prefix",
    "REMEMBER_TOOLS": "tools",
    "REMEMBER_ENCRYPTION": "encryption",
}
_KNOWN = frozenset(
    {
        *_DIRECT,
        REDIS_URL_ENV,
        "REMEMBER_KV_URL",
        "REMEMBER_KV_TOKEN",
        "REMEMBER_SECRET",
        "REMEMBER_OPTIONS",
        "REMEMBER_PLUGIN",
        "REMEMBER_PRINCIPAL_RESOLVER",
        "REMEMBER_TOKEN_VERIFIER",
        "REMEMBER_USER_LOADER",
        "REMEMBER_SESSION_HEADER",
        "REMEMBER_REJECT_UNVERIFIED_SESSION",
    }
)
# REMEMBER_COOKIE_* belongs to Flask-Login; REMEMBER_ENV / REMEMBER_PREVIOUS_SECRETS are our
# environment variables, which some apps load into config wholesale.
_FOREIGN_PREFIXES = ("REMEMBER_COOKIE_", "REMEMBER_ENV", "REMEMBER_PREVIOUS_SECRETS")


@dataclass
class _State:
    plugin: RememberPlugin
    middleware: RememberMiddleware
    owns_plugin: bool


def _config_error(key: str, message: str) -> RememberConfigurationError:
    return RememberConfigurationError(f"Flask config {key}: {message}")


def options_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Translate ``REMEMBER_*`` config into :meth:`RememberPlugin.init` keyword arguments."""
    for key in config:
        if (
            isinstance(key, str)
            and key.startswith("REMEMBER_")
            and key not in _KNOWN
            and not key.startswith(_FOREIGN_PREFIXES)
        ):
            log.warning("remember: unknown Flask config key %s is ignored", key)
    extra = config.get("REMEMBER_OPTIONS") or {}
    if not isinstance(extra, Mapping):
        raise _config_error("REMEMBER_OPTIONS", f"must be a dict; got {type(extra).__name__}")
    options: dict[str, Any] = dict(extra)
    for key, option in _DIRECT.items():
        if config.get(key) is not None:
            options[option] = config[key]
    store_type = options.setdefault("type", "memory")

    redis_url = config.get(REDIS_URL_ENV)
    if store_type in ("redis", "global-store") and redis_url:
        options["config"] = {**(options.get("config") or {}), "url": redis_url}
    elif store_type == "redis" and not options.get("config"):
        raise _config_error(
            REDIS_URL_ENV, "REMEMBER_STORE='redis' needs it (e.g. redis://127.0.0.1:6379/0)"
        )
    kv_url, kv_token = config.get("REMEMBER_KV_URL"), config.get("REMEMBER_KV_TOKEN")
    if bool(kv_url) != bool(kv_token):
        raise _config_error(
            "REMEMBER_KV_URL", "set both REMEMBER_KV_URL and REMEMBER_KV_TOKEN, or neither"
        )
    if kv_url and (store_type == "vercel-kv" or (store_type == "global-store" and not redis_url)):
        options["url"], options["token"] = kv_url, kv_token

    secret = config.get("REMEMBER_SECRET")
    if secret is not None:
        secrets = [secret] if isinstance(secret, str) else secret
        if (
            not isinstance(secrets, (list, tuple))
            or not secrets
            or not all(isinstance(s, str) and s for s in secrets)
        ):
            raise _config_error("REMEMBER_SECRET", "must be a non-empty string or a list of them")
        encryption = options.get("encryption") or {}
        if not isinstance(encryption, Mapping):
            raise _config_error("REMEMBER_ENCRYPTION", "must be a dict")
        options["encryption"] = {**encryption, "secrets": list(secrets)}
    return options


def _user_resolver(app: Flask, config: Mapping[str, Any]) -> PrincipalResolver:
    """The signed-in user: REMEMBER_PRINCIPAL_RESOLVER, REMEMBER_USER_LOADER or REMOTE_USER."""
    resolver = config.get("REMEMBER_PRINCIPAL_RESOLVER")
    loader = config.get("REMEMBER_USER_LOADER")
    if resolver is not None and loader is not None:
        raise _config_error(
            "REMEMBER_USER_LOADER", "set REMEMBER_PRINCIPAL_RESOLVER or it, not both"
        )
    if loader is not None:
        if not callable(loader):
            raise _config_error("REMEMBER_USER_LOADER", "must be a callable: () -> principal")
        return _in_request_context(app, loader)
    if resolver is not None:
        if not callable(resolver):
            raise _config_error(
                "REMEMBER_PRINCIPAL_RESOLVER", "must be a callable: environ -> principal"
            )
        return cast("PrincipalResolver", resolver)
    return remote_user_resolver


def _loaded_principal(value: object) -> str | None:
    """A ``REMEMBER_USER_LOADER`` result as a principal.

    A user object in Flask-Login's shape (``is_authenticated`` and ``get_id()``,
    e.g. ``current_user`` itself) is its ``get_id()`` when ``is_authenticated``
    is ``True``, else no principal: Flask-Login's anonymous user is truthy and
    must never sign anyone in.
    """
    if hasattr(value, "is_authenticated") and hasattr(value, "get_id"):
        user: Any = value
        if user.is_authenticated is not True:
            return None
        value = user.get_id()
    return identity_part(value, "REMEMBER_USER_LOADER's result")


def _in_request_context(app: Flask, loader: Any) -> PrincipalResolver:
    def resolve(environ: Mapping[str, Any]) -> str | None:
        if has_request_context() and request.environ is environ:
            return _loaded_principal(loader())
        # The middleware runs before Flask pushes the request context (and a mounted MCP
        # server never gets one): push one, on a copy so the app's own Request is untouched.
        with app.request_context(dict(environ)):
            return _loaded_principal(loader())

    return resolve


def _token_verifier(config: Mapping[str, Any]) -> TokenVerifier | None:
    verifier = config.get("REMEMBER_TOKEN_VERIFIER")
    if verifier is not None and not callable(verifier):
        raise _config_error("REMEMBER_TOKEN_VERIFIER", "must be a callable: token -> principal")
    return cast("TokenVerifier | None", verifier)


def _error_response(exc: RememberError) -> tuple[Response, int]:
    status, payload = error_payload(exc)
    return jsonify(payload), status


class RememberSync:
    """The Flask extension.  ``RememberSync(app)`` or ``RememberSync().init_app(app)``."""

    def __init__(self, app: Flask | None = None) -> None:
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Build the plugin from *app*'s config and bind identities around its requests.

        :raises RememberConfigurationError: a bad ``REMEMBER_*`` value (at
            startup, not on the first request).
        """
        if _STATE_KEY in app.extensions:
            raise RuntimeError(f"RememberSync is already initialised on app {app.name!r}")
        config = app.config
        user = _user_resolver(app, config)
        verifier = _token_verifier(config)
        resolver = user if verifier is None else user_or_token_resolver(user, verifier)
        plugin, owns = host_plugin(
            config.get("REMEMBER_PLUGIN"),
            "Flask config REMEMBER_PLUGIN",
            lambda: options_from_config(config),
        )
        try:
            middleware = RememberMiddleware(
                app.wsgi_app,
                plugin,
                principal_resolver=resolver,
                session_header=config.get("REMEMBER_SESSION_HEADER", "Mcp-Session-Id"),
                reject_unverified_session=bool(
                    config.get("REMEMBER_REJECT_UNVERIFIED_SESSION", False)
                ),
                # Flask's own error handler (below) answers RememberErrors.
                error_responses=False,
            )
        except BaseException:
            if owns:
                plugin.close()
            raise
        app.wsgi_app = middleware  # type: ignore[method-assign]
        # An McpServer built on this plugin (mounted beside the views) takes the same users.
        register_host_auth(
            plugin,
            app,
            principal_resolver=mounted_principal_resolver(user),
            token_verifier=verifier,
            host=f"Flask app {app.name!r}",
        )
        app.extensions[EXTENSION_KEY] = plugin
        app.extensions[_STATE_KEY] = _State(plugin, middleware, owns)
        app.register_error_handler(RememberError, _error_response)

    @staticmethod
    def close(app: Flask) -> None:
        """Close the plugin the extension built for *app* (not one given as REMEMBER_PLUGIN)."""
        state = app.extensions.get(_STATE_KEY)
        if isinstance(state, _State) and state.owns_plugin:
            state.plugin.close()


def _state(app: Flask | None = None) -> _State:
    target = app if app is not None else current_app
    state = target.extensions.get(_STATE_KEY)
    if not isinstance(state, _State):
        raise RuntimeError(
            "remember_sync is not initialised on this Flask app: call RememberSync(app) "
            "or RememberSync().init_app(app)"
        )
    return state


def get_plugin(app: Flask | None = None) -> RememberPlugin:
    """The plugin of *app* (default: the current app)."""
    return _state(app).plugin


def request_identity() -> Identity:
    """The identity resolved for the current request (empty outside one)."""
    if has_request_context():
        bound = request.environ.get(ENVIRON_IDENTITY)
        if isinstance(bound, Identity):
            return bound
    return Identity()


def issue_session() -> str:
    """A new session id for the caller of the current request.

    Return it to the client (e.g. in the ``Mcp-Session-Id`` response header);
    when presented back by the same principal, it is bound as the session.
    """
    return _state().middleware.issue_session(request_identity().user_id)


def current_accessor() -> RememberAccessor:
    """The accessor for the current request's identity, as a plain object.

    Unlike the :data:`remember` proxy it can be handed to a worker thread: it
    is bound to the request's identity, not to the request context.  Outside a
    request (e.g. a CLI command in an app context) it is ``plugin.remember``,
    which follows the identity bound in the context.
    """
    plugin = _state().plugin
    if has_request_context():
        bound = request.environ.get(ENVIRON_IDENTITY)
        if isinstance(bound, Identity):
            return plugin.accessor(bound)
    return plugin.remember


#: The accessor for the current request's identity (``plugin.remember`` outside a request).
remember: RememberAccessor = cast(RememberAccessor, LocalProxy(current_accessor))
