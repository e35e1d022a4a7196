"""WSGI middleware: bind the caller's identity for every request (SPEC section 8.3).

Wrap any WSGI application::

    from remember_sync import RememberPlugin
    from remember_sync.integrations.wsgi import RememberMiddleware

    plugin = RememberPlugin.init(type="redis", config={"url": "redis://127.0.0.1:6379/0"})
    app = RememberMiddleware(app, plugin)          # principal from REMOTE_USER

    def app(environ, start_response):              # inside, plugin.remember is the caller's
        plugin.remember.set("theme", "dark", scope="user")

Per request the middleware

1. resolves the **principal** (the caller's ``user_id``) with a pluggable
   resolver: :func:`remote_user_resolver` (the default, ``REMOTE_USER`` set by
   the server or an auth middleware in front) or
   :func:`bearer_token_resolver` (``Authorization: Bearer <token>`` checked by
   your verifier, ``token -> principal | None``), or both with
   :func:`user_or_token_resolver` (the signed-in user first, then a token --
   the order of the MCP server too);
2. reads the session header (``Mcp-Session-Id``) and binds it **only if** it
   verifies with :class:`~remember_sync.mcp.SessionSigner` for that
   principal -- the same signed ids the MCP server (:mod:`remember_sync.mcp`)
   issues, so a session handed out by one verifies in the other when they share
   the master secret.  Hand one out with :meth:`RememberMiddleware.issue_session`;
3. binds :func:`remember_sync.identity` around every piece of the
   application's work -- the call itself, each step of the response iterable
   and its ``close()`` -- and resets it with the ContextVar token after each.

**An unverified session header is ignored**: it is not bound, and the request
goes on as if it had no session (``environ["remember_sync.session_rejected"]``
is ``True`` so the application can tell).  ``session`` scope then works only
for a signed-in principal (``stateless-user:<principal>``), and is refused
with ``403 REMEMBER_IDENTITY_REQUIRED`` for an anonymous caller.  Unlike the
MCP server, which answers ``404`` to an unknown session (the MCP transport
tells clients to start a new one), a generic WSGI application may serve pages
that never needed the session, so refusing the whole request would be wrong.
Pass ``reject_unverified_session=True`` to answer ``404`` instead.

Why the binding is re-established per step instead of being held from the call
until ``close()``: a server that forgets ``close()`` (or drops the iterable
on another thread) would otherwise leave the identity bound in its thread, and
the next request handled there would run as the previous caller.  Binding per
step gives the application the identity everywhere it runs (the view, a
streaming generator, ``close()``) and never leaves it bound anywhere else.

A :class:`~remember_sync.errors.RememberError` raised while the application
is called becomes a JSON error response with the error's ``http_status`` and
``code`` (e.g. ``403`` / ``REMEMBER_IDENTITY_REQUIRED``), never a traceback;
an error raised after the body started streaming cannot change the status and
propagates to the server.

This module imports no web framework.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from .._secrets import keyring_or_resolved
from .._sessions import SessionSigner
from ..errors import (
    RememberConfigurationError,
    RememberError,
    RememberInputError,
    RememberInputTypeError,
    RememberUnavailableError,
)
from ..identity import identity
from ..plugin import RememberPlugin
from ..types import Identity, identity_part

if TYPE_CHECKING:
    from _typeshed import OptExcInfo
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = [
    "ENVIRON_IDENTITY",
    "ENVIRON_SESSION_REJECTED",
    "PrincipalResolver",
    "RememberMiddleware",
    "SESSION_NOT_FOUND",
    "TokenVerifier",
    "bearer_token",
    "bearer_token_resolver",
    "error_payload",
    "host_plugin",
    "mounted_principal_resolver",
    "principal_from_authorization",
    "remote_user_resolver",
    "session_signer",
    "user_or_token_resolver",
    "verified_session",
]

log = logging.getLogger("remember_sync")

#: ``environ`` key holding the :class:`~remember_sync.types.Identity` resolved for the request.
ENVIRON_IDENTITY = "remember_sync.identity"
#: ``environ`` key: ``True`` when the request carried a session header that did not verify.
ENVIRON_SESSION_REJECTED = "remember_sync.session_rejected"

#: ``environ -> principal | None`` (``None``: an anonymous caller).
PrincipalResolver = Callable[[Mapping[str, Any]], "str | int | None"]
#: ``token -> principal | None`` (``None``: not a valid token).
TokenVerifier = Callable[[str], "str | None"]


# -- principals -------------------------------------------------------------------------------


def remote_user_resolver(environ: Mapping[str, Any]) -> str | None:
    """The principal in ``REMOTE_USER`` (set by the server or an auth layer in front)."""
    value = environ.get("REMOTE_USER")
    return value if isinstance(value, str) and value else None


def bearer_token(header: object) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else ``None``."""
    if not isinstance(header, str):
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def bearer_token_resolver(verify: TokenVerifier) -> PrincipalResolver:
    """A resolver taking the principal from a bearer token checked by *verify*.

    A missing or invalid token makes the caller anonymous (the application's
    own authentication decides whether to refuse the request).  A verifier
    that raises is logged and treated as "not valid": a broken verifier never
    lets anyone in under a name.
    """
    if not callable(verify):
        raise RememberInputTypeError("verify must be a callable: token -> principal | None")

    def resolve(environ: Mapping[str, Any]) -> str | None:
        return principal_from_authorization(verify, environ.get("HTTP_AUTHORIZATION"))

    return resolve


def user_or_token_resolver(user: PrincipalResolver, verify: TokenVerifier) -> PrincipalResolver:
    """The host's signed-in user from *user*; for a caller without one, a bearer token.

    This is the order :class:`~remember_sync.mcp.McpServer` uses too (its
    ``principal_resolver`` first, then its ``token_verifier``), so a browser
    user and an agent holding a token are told apart the same way in the
    application's views and at its MCP endpoint.  A request with both a
    signed-in user and a token is the signed-in user's.
    """
    if not callable(user) or not callable(verify):
        raise RememberInputTypeError("user_or_token_resolver(user, verify) takes two callables")
    bearer = bearer_token_resolver(verify)

    def resolve(environ: Mapping[str, Any]) -> str | None:
        principal = _principal(user(environ))
        return principal if principal is not None else _principal(bearer(environ))

    return resolve


def mounted_principal_resolver(fallback: PrincipalResolver | None) -> PrincipalResolver:
    """The resolver a host gives an MCP server mounted in it.

    The principal :class:`RememberMiddleware` (or the Django middleware)
    already resolved for this request (``environ["remember_sync.identity"]``)
    when the server runs inside it -- e.g. called from a view --, else
    *fallback* (for a server mounted beside the app, e.g. with werkzeug's
    ``DispatcherMiddleware``, whose requests never pass the middleware).
    """

    def resolve(environ: Mapping[str, Any]) -> str | None:
        bound = environ.get(ENVIRON_IDENTITY)
        if isinstance(bound, Identity):
            return bound.user_id
        return None if fallback is None else _principal(fallback(environ))

    return resolve


def principal_from_authorization(verify: TokenVerifier, header: str | None) -> str | None:
    """The principal *verify* gives the bearer token in an ``Authorization`` header.

    ``None`` when there is no token, the verifier refuses it, or the verifier raises
    (logged): a broken verifier never lets anyone in under a name.  A verifier
    that cannot decide now (:class:`~remember_sync.errors.RememberUnavailableError`,
    e.g. an OAuth issuer that is down) is re-raised: the caller gets ``503``,
    never an anonymous identity.
    """
    token = bearer_token(header)
    if token is None:
        return None
    try:
        principal = verify(token)
    except RememberUnavailableError:
        raise
    except Exception:  # noqa: BLE001 - a failing verifier refuses, it never lets in
        log.warning("remember: the bearer token verifier raised", exc_info=True)
        return None
    try:
        return identity_part(principal, "the token verifier's result") or None
    except RememberInputError:
        log.warning("remember: the bearer token verifier returned %s", type(principal).__name__)
        return None


def _principal(value: object) -> str | None:
    """A resolver's principal: a str, an int's decimal string, or ``None`` for ``""``."""
    return identity_part(value, "the principal resolver's result") or None


def host_plugin(
    given: object, name: str, options: Callable[[], Mapping[str, Any]]
) -> tuple[RememberPlugin, bool]:
    """A framework integration's plugin, and whether the integration owns (closes) it.

    *given* is the host's ready plugin (config key *name*), used as it is; without
    one, a plugin is built from ``options()``, the host's configuration as explicit
    :meth:`RememberPlugin.init` arguments.

    :raises RememberConfigurationError: *given* is not a :class:`RememberPlugin`.
    """
    if given is None:
        return RememberPlugin.init(**options()), True
    if not isinstance(given, RememberPlugin):
        raise RememberConfigurationError(f"{name}: must be a RememberPlugin")
    return given, False


# -- sessions -------------------------------------------------------------------------------


def session_signer(plugin: RememberPlugin) -> SessionSigner:
    """The signer the MCP server would use for *plugin*: its master secrets.

    With encryption disabled the plugin has no keyring, so the secret is
    resolved as for encryption (``REMEMBER_SECRET``, the development file...).
    """
    return SessionSigner(keyring_or_resolved(plugin.keyring))


def verified_session(signer: SessionSigner, presented: object, principal: str | None) -> str | None:
    """*presented* when it is a session id *signer* issued to *principal*, else ``None``."""
    if isinstance(presented, str) and presented and signer.verify(presented, principal):
        return presented
    return None


# -- errors ---------------------------------------------------------------------------------


def error_payload(exc: RememberError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body for *exc*: ``{"error": {"code", "message", "status"}}``.

    Client errors (4xx) carry the error's own message, which says what to do.
    Server errors (5xx: store down, misconfiguration, unreadable entries) carry
    a generic message -- their text can name hosts or keys -- and are logged.
    """
    status = exc.http_status
    if status >= 500:
        log.error("remember: request failed with %s", exc.code, exc_info=exc)
        message = "Memory is unavailable because of a server-side error; see the server log."
    else:
        message = exc.message
    return status, {"error": {"code": exc.code, "message": message, "status": status}}


#: The body answering an unverified session header under ``reject_unverified_session``.
SESSION_NOT_FOUND: Mapping[str, Any] = {
    "error": {
        "code": "REMEMBER_SESSION_NOT_FOUND",
        "message": "Unknown or expired session: start a new one.",
        "status": 404,
    }
}


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Error"


def _json_response(
    start_response: StartResponse,
    status: int,
    payload: Mapping[str, Any],
    exc_info: OptExcInfo | None = None,
) -> list[bytes]:
    body = json.dumps(payload).encode("utf-8")
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    start_response(_status_line(status), headers, exc_info)
    return [body]


# -- the middleware ---------------------------------------------------------------------------


class _BoundResponse:
    """The application's response iterable, with the identity bound around each step."""

    def __init__(self, result: Iterable[bytes], bound: Identity) -> None:
        self._result = result
        self._iterator: Iterator[bytes] | None = None
        self._bound = bound
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        with identity(bound=self._bound):
            if self._iterator is None:
                self._iterator = iter(self._result)
            return next(self._iterator)

    def close(self) -> None:
        # PEP 3333: the server calls close() once the response is done (also after an error).
        if self._closed:
            return
        self._closed = True
        close = getattr(self._result, "close", None)
        if close is not None:
            with identity(bound=self._bound):
                close()


class RememberMiddleware:
    """Resolve, verify and bind the caller's identity around a WSGI application.

    :param app: the WSGI application to wrap.
    :param plugin: the plugin whose master secret signs sessions.
    :param principal_resolver: ``environ -> principal | None``
        (default :func:`remote_user_resolver`).
    :param session_header: the HTTP header carrying the session id.
    :param signer: signs and verifies session ids (default
        :func:`session_signer` of *plugin*, the same as the MCP server's).
    :param reject_unverified_session: answer ``404`` to a request whose session
        header does not verify, instead of serving it without a session.
    :param error_responses: turn a :class:`RememberError` raised by the
        application into a JSON error response (``False``: let it propagate,
        e.g. when the framework inside has its own error handler).

    The resolved identity is also put in ``environ["remember_sync.identity"]``.
    """

    def __init__(
        self,
        app: WSGIApplication,
        plugin: RememberPlugin,
        *,
        principal_resolver: PrincipalResolver | None = None,
        session_header: str = "Mcp-Session-Id",
        signer: SessionSigner | None = None,
        reject_unverified_session: bool = False,
        error_responses: bool = True,
    ) -> None:
        if not isinstance(plugin, RememberPlugin):
            raise RememberInputTypeError(
                f"plugin must be a RememberPlugin; got {type(plugin).__name__}"
            )
        if principal_resolver is not None and not callable(principal_resolver):
            raise RememberInputTypeError(
                "principal_resolver must be a callable: environ -> principal | None"
            )
        if not isinstance(session_header, str) or not session_header.strip():
            raise RememberInputError("session_header must be a non-empty header name")
        self.app = app
        self.plugin = plugin
        self.principal_resolver: PrincipalResolver = principal_resolver or remote_user_resolver
        self.session_header = session_header
        self._environ_key = "HTTP_" + session_header.strip().upper().replace("-", "_")
        self.signer = signer if signer is not None else session_signer(plugin)
        self.reject_unverified_session = reject_unverified_session
        self.error_responses = error_responses

    def __repr__(self) -> str:
        return f"RememberMiddleware(app={self.app!r}, session_header={self.session_header!r})"

    def issue_session(self, principal: str | None = None) -> str:
        """A new session id for *principal* (``None``: an anonymous caller).

        Send it to the client, which presents it in the session header; it
        verifies only for the same principal.
        """
        return self.signer.issue(principal)

    def resolve(self, environ: Mapping[str, Any]) -> tuple[Identity, bool]:
        """The identity for a request and whether its session header was rejected."""
        principal = _principal(self.principal_resolver(environ))
        presented = environ.get(self._environ_key)
        session = verified_session(self.signer, presented, principal)
        return Identity(session_id=session, user_id=principal), bool(presented) and session is None

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            bound, rejected = self.resolve(environ)
        except RememberUnavailableError as exc:  # who the caller is cannot be known now
            # Always answered here: the application has not run, so no handler of its
            # own could turn this into a response.
            status, payload = error_payload(exc)
            return _json_response(start_response, status, payload)
        environ[ENVIRON_IDENTITY] = bound
        environ[ENVIRON_SESSION_REJECTED] = rejected
        if rejected and self.reject_unverified_session:
            return _json_response(start_response, 404, SESSION_NOT_FOUND)
        with identity(bound=bound):
            try:
                result = self.app(environ, start_response)
            except RememberError as exc:
                if not self.error_responses:
                    raise
                status, payload = error_payload(exc)
                # exc_info lets us replace a status the application already set.
                return _json_response(start_response, status, payload, sys.exc_info())
        wrapper = environ.get("wsgi.file_wrapper")
        if isinstance(wrapper, type) and isinstance(result, wrapper):
            return result  # the server streams the file itself (sendfile); no code of ours runs
        return _BoundResponse(result, bound)
