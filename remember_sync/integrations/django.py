"""Django middleware: ``settings.REMEMBER`` to one plugin per process, identity per request.

``settings.py``::

    MIDDLEWARE = [
        ...,
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "remember_sync.integrations.django.RememberMiddleware",   # after authentication
    ]
    REMEMBER = {
        "type": "redis",
        "config": {"url": "redis://127.0.0.1:6379/0"},
        "default_ttl": 86_400,
    }

A view::

    def theme(request):
        request.remember.set("theme", "dark", scope="user")
        return JsonResponse({"theme": request.remember.get("theme", scope="user")})

``settings.REMEMBER`` takes the :meth:`RememberPlugin.init` options under
their own names (``type``, ``config``, ``url``, ``token``, ``default_ttl``,
``key_prefix``, ``encryption``, ``tools``, ...) plus these integration keys:

``plugin``
    a ready :class:`~remember_sync.RememberPlugin` to use (never closed here);
    the store options are then ignored.
``principal_resolver``
    ``request -> principal | None`` (a callable or its dotted path).  Default:
    :func:`user_resolver`, the primary key of an authenticated
    ``request.user`` -- put this middleware after ``AuthenticationMiddleware``.
``token_verifier``
    ``token -> principal | None`` (a callable or its dotted path) for
    ``Authorization: Bearer <token>``: a caller the principal resolver does
    not identify (no signed-in user) is the token's principal.  Signed-in
    users keep working beside tokens (:func:`user_or_token_resolver`).
``session_header`` (``"Mcp-Session-Id"``), ``reject_unverified_session`` (``False``)
    as in :class:`remember_sync.integrations.wsgi.RememberMiddleware`: a
    session header is bound only if it is a session id signed (with the
    master secret, like the MCP server's) for the same principal; otherwise it
    is ignored, or answered with ``404`` when ``reject_unverified_session``.
``global_store``
    where ``type="global-store"`` finds the host's store: ``{"redis_url":
    ...}`` or ``{"url": ..., "token": ...}`` (Vercel KV).  Without it, the
    ``config["url"]`` or ``url``/``token`` of ``settings.REMEMBER``, then the
    ``LOCATION`` of a ``django.core.cache.backends.redis.RedisCache`` in
    ``settings.CACHES``, then the environment (``REDIS_URL``, ``KV_REST_API_*``).

The MCP endpoint: route a path to :func:`mcp_view` of an
:class:`~remember_sync.mcp.McpServer` on this plugin, so MCP requests pass
this middleware and the server takes its user::

    # urls.py
    from remember_sync.integrations.django import get_plugin, mcp_view
    from remember_sync.mcp import McpServer

    urlpatterns = [path("mcp", mcp_view(McpServer(get_plugin(), path=None)))]

Per request the middleware sets ``request.remember`` (an accessor bound to
the request's identity), ``request.remember_identity`` and binds
:func:`remember_sync.identity` while the view runs and around each chunk of a
streaming response (so nothing stays bound in the worker thread after the
response, even if it is never closed).  A
:class:`~remember_sync.errors.RememberError` raised by a view becomes a JSON
response with the error's status and code (``403`` and
``REMEMBER_IDENTITY_REQUIRED`` for a missing identity).  The plugin is built
once per process, when Django loads its middleware, so a configuration error
shows at startup; changing ``settings.REMEMBER`` (``override_settings`` in
tests) rebuilds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

try:
    from django.conf import settings
    from django.core.signals import setting_changed
    from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
    from django.utils.module_loading import import_string
except ImportError as exc:  # pragma: no cover - exercised by the no-framework import test
    raise ImportError(
        "remember_sync.integrations.django needs Django: pip install 'remember-sync[django]'"
    ) from exc

from .._fork import ForkSafeLock
from .._sessions import SessionSigner
from ..errors import (
    RememberConfigurationError,
    RememberError,
    RememberInputTypeError,
    RememberUnavailableError,
)
from ..identity import identity
from ..mcp.auth import register_host_auth
from ..plugin import RememberPlugin
from ..types import Identity, identity_part
from .wsgi import (
    ENVIRON_IDENTITY,
    SESSION_NOT_FOUND,
    error_payload,
    host_plugin,
    mounted_principal_resolver,
    principal_from_authorization,
    session_signer,
    verified_session,
)

__all__ = [
    "RememberMiddleware",
    "close_plugin",
    "get_plugin",
    "issue_session",
    "mcp_view",
    "remote_user_resolver",
    "user_or_token_resolver",
    "user_resolver",
]

log = logging.getLogger("remember_sync")

#: ``request -> principal | None``.
RequestPrincipalResolver = Callable[[HttpRequest], "str | int | None"]

_INTEGRATION_KEYS = frozenset(
    {
        "plugin",
        "principal_resolver",
        "token_verifier",
        "session_header",
        "reject_unverified_session",
        "global_store",
    }
)
_REDIS_CACHE_BACKEND = "django.core.cache.backends.redis.RedisCache"


def user_resolver(request: HttpRequest) -> str | None:
    """The primary key of ``request.user`` when authenticated (stable across renames)."""
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


def remote_user_resolver(request: HttpRequest) -> str | None:
    """``REMOTE_USER`` as set by the server or an auth layer in front."""
    value = request.META.get("REMOTE_USER")
    return value if isinstance(value, str) and value else None


def user_or_token_resolver(
    verify: Callable[[str], str | None], user: RequestPrincipalResolver = user_resolver
) -> RequestPrincipalResolver:
    """The signed-in user (*user*, default :func:`user_resolver`); else a bearer token's principal.

    What the middleware uses when ``settings.REMEMBER`` has a ``token_verifier``:
    browser sessions and API tokens side by side.  A request with both a
    signed-in user and a token is the signed-in user's.  A token *verify*
    refuses, or a verifier that raises (logged), leaves the caller anonymous.
    """

    def resolve(request: HttpRequest) -> str | None:
        principal = identity_part(user(request), "the principal resolver's result")
        if principal:
            return principal
        return principal_from_authorization(verify, request.headers.get("Authorization"))

    return resolve


def _config_error(key: str, message: str) -> RememberConfigurationError:
    return RememberConfigurationError(f"settings.REMEMBER[{key!r}]: {message}")


def _callable(value: object, key: str) -> Callable[..., Any]:
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise _config_error(key, f"cannot import {value!r}: {exc}") from exc
    if not callable(value):
        raise _config_error(key, "must be a callable or its dotted path")
    return value


def _settings() -> Mapping[str, Any]:
    value = getattr(settings, "REMEMBER", None) or {}
    if not isinstance(value, Mapping):
        raise RememberConfigurationError(
            f"settings.REMEMBER must be a dict; got {type(value).__name__}"
        )
    return value


def _redis_cache_location() -> str | None:
    caches = getattr(settings, "CACHES", None) or {}
    for cache in caches.values():
        if isinstance(cache, Mapping) and cache.get("BACKEND") == _REDIS_CACHE_BACKEND:
            location = cache.get("LOCATION")
            if isinstance(location, (list, tuple)):
                location = location[0] if location else None
            if isinstance(location, str) and location:
                # A comma-separated LOCATION lists a primary first, then replicas.
                return location.split(",")[0].strip()
    return None


def _global_store_options(options: dict[str, Any], explicit: object) -> None:
    """Make ``type="global-store"`` explicit: put where the host's store is into *options*.

    ``global_store`` wins, then the plugin's own ``config``/``url``, then the
    ``LOCATION`` of a ``RedisCache`` in ``settings.CACHES`` (else the plugin
    reads the environment).  Nothing is registered process-wide.
    """
    if explicit and not isinstance(explicit, Mapping):
        raise _config_error("global_store", "must be {'redis_url': ...} or {'url', 'token'}")
    if isinstance(explicit, Mapping) and explicit:
        redis_url = explicit.get("redis_url")
        options.pop("config", None)
        options["url"], options["token"] = explicit.get("url"), explicit.get("token")
    elif options.get("config") or options.get("url"):
        return
    else:
        redis_url = _redis_cache_location()
    if redis_url:
        options.update(config={"url": redis_url}, url=None, token=None)


@dataclass
class _Runtime:
    plugin: RememberPlugin
    owns_plugin: bool
    signer: SessionSigner
    resolver: RequestPrincipalResolver
    session_header: str
    reject_unverified_session: bool


# A thread of the parent may have held it at a fork (see _fork), e.g. while building the
# runtime on a first request.  _runtime is assigned only once built, so the child sees a
# whole runtime or None (and then builds its own).
_lock = ForkSafeLock()
_runtime: _Runtime | None = None


def _build() -> _Runtime:
    options = dict(_settings())
    integration = {k: options.pop(k) for k in list(options) if k in _INTEGRATION_KEYS}
    if options.get("type") == "global-store":
        _global_store_options(options, integration.get("global_store"))
    resolver: Callable[..., Any] = user_resolver
    if integration.get("principal_resolver") is not None:
        resolver = _callable(integration["principal_resolver"], "principal_resolver")
    verify: Callable[[str], Any] | None = None
    if integration.get("token_verifier") is not None:
        verify = _callable(integration["token_verifier"], "token_verifier")
        resolver = user_or_token_resolver(verify, resolver)
    header = integration.get("session_header", "Mcp-Session-Id")
    if not isinstance(header, str) or not header.strip():
        raise _config_error("session_header", "must be a non-empty header name")
    plugin, owns = host_plugin(
        integration.get("plugin"), "settings.REMEMBER['plugin']", lambda: options
    )
    try:
        signer = session_signer(plugin)
    except BaseException:
        if owns:
            plugin.close()
        raise
    # An McpServer on this plugin, served through mcp_view, takes the identity this
    # middleware resolved; without one (a caller with no user), the token verifier.
    register_host_auth(
        plugin,
        "django",
        principal_resolver=mounted_principal_resolver(None),
        token_verifier=verify,
        host="Django",
    )
    return _Runtime(
        plugin=plugin,
        owns_plugin=owns,
        signer=signer,
        resolver=resolver,
        session_header=header.strip(),
        reject_unverified_session=bool(integration.get("reject_unverified_session", False)),
    )


def _get_runtime() -> _Runtime:
    global _runtime
    runtime = _runtime
    if runtime is None:
        with _lock:
            if _runtime is None:
                _runtime = _build()
            runtime = _runtime
    return runtime


def get_plugin() -> RememberPlugin:
    """The process's plugin, built from ``settings.REMEMBER`` on first use."""
    return _get_runtime().plugin


def close_plugin() -> None:
    """Close the process's plugin (if built here); the next use builds a new one."""
    global _runtime
    with _lock:
        runtime, _runtime = _runtime, None
    if runtime is not None and runtime.owns_plugin:
        runtime.plugin.close()


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    if setting in ("REMEMBER", "CACHES"):
        close_plugin()


setting_changed.connect(_on_setting_changed, dispatch_uid="remember_sync.integrations.django")


def issue_session(request: HttpRequest) -> str:
    """A new session id for the caller of *request* (send it to the client to present back)."""
    bound = getattr(request, "remember_identity", None)
    principal = bound.user_id if isinstance(bound, Identity) else None
    return _get_runtime().signer.issue(principal)


def _json_error(exc: RememberError) -> JsonResponse:
    status, payload = error_payload(exc)
    return JsonResponse(payload, status=status)


def _bound_chunks(content: Iterable[Any], bound: Identity) -> Iterator[Any]:
    """*content*, with the identity bound while each chunk is produced and at close."""
    iterator = iter(content)
    try:
        while True:
            with identity(bound=bound):
                try:
                    chunk = next(iterator)
                except StopIteration:
                    return
            # Yield outside the binding: while suspended, the thread is the server's.
            yield chunk
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            with identity(bound=bound):
                close()


class RememberMiddleware:
    """Django middleware binding the caller's identity; see the module documentation."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        _get_runtime()  # build now: a configuration error shows when Django loads middleware

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        runtime = _get_runtime()
        try:
            principal = runtime.resolver(request)
        except RememberUnavailableError as exc:  # e.g. an OAuth issuer that is down: 503
            return _json_error(exc)
        principal = identity_part(principal, "the principal resolver's result") or None
        presented = request.headers.get(runtime.session_header)
        session = verified_session(runtime.signer, presented, principal)
        if presented and session is None and runtime.reject_unverified_session:
            return JsonResponse(SESSION_NOT_FOUND, status=404)
        bound = Identity(session_id=session, user_id=principal)
        request.remember_identity = bound
        request.META[ENVIRON_IDENTITY] = bound  # for an McpServer called through mcp_view
        request.remember_session_rejected = bool(presented) and session is None
        request.remember = runtime.plugin.accessor(bound)
        with identity(bound=bound):
            response = self.get_response(request)
        if getattr(response, "streaming", False) and not getattr(response, "is_async", False):
            response.streaming_content = _bound_chunks(response.streaming_content, bound)
            # The view's generator registered its own close() with the response first, so
            # closing a half-read stream runs it before ours: bind around the whole close.
            close = response.close

            def bound_close() -> None:
                with identity(bound=bound):
                    close()

            response.close = bound_close
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> JsonResponse | None:
        """A :class:`RememberError` from a view becomes a JSON response with its status."""
        if isinstance(exception, RememberError):
            return _json_error(exception)
        return None


def mcp_view(server: Callable[..., Iterable[bytes]]) -> Callable[[HttpRequest], HttpResponse]:
    """A Django view serving the WSGI app *server*, an :class:`~remember_sync.mcp.McpServer`.

    Route the MCP path to it (``path("mcp", mcp_view(McpServer(get_plugin(),
    path=None)))``): the request then passes :class:`RememberMiddleware` and
    the rest of ``MIDDLEWARE`` first, and the server takes the identity the
    middleware resolved -- a signed-in user, else a token's principal.  The
    view is exempt from Django's CSRF check (MCP clients send JSON with a bearer
    token or a session cookie, not a form; the server's own ``Origin`` check
    refuses browser pages of other origins).  The body is streamed to the
    server, not read into memory by Django first.
    """
    if not callable(server):
        raise RememberInputTypeError("mcp_view(server) takes a WSGI application, e.g. an McpServer")

    def view(request: HttpRequest) -> HttpResponse:
        environ = dict(request.META)
        environ["wsgi.input"] = request  # HttpRequest.read() streams the (unread) body
        started: list[Any] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            started[:] = [status, headers]
            return lambda data: None

        result = server(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        status, headers = started
        response = HttpResponse(body, status=int(status.split(" ", 1)[0]))
        for name, value in headers:
            response[name] = value
        return response

    # What django.views.decorators.csrf.csrf_exempt sets (CsrfViewMiddleware reads it).
    view.csrf_exempt = True  # type: ignore[attr-defined]
    return view
