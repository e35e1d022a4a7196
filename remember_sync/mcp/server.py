"""An MCP server as a WSGI application: Streamable HTTP with JSON responses.

:class:`McpServer` hosts the plugin's memory tools (when ``tools.enabled``)
and your own tools (see :mod:`remember_sync.mcp.authoring`).  Every reply is
one ``application/json`` body: no SSE stream is ever opened, so ``GET``
answers ``405``.

Two protocol eras are served on the same endpoint, chosen as the official SDK
chooses them, by the ``MCP-Protocol-Version`` header:

* absent or a handshake revision (``2024-11-05`` .. ``2025-11-25``): the
  ``initialize`` handshake.  ``initialize`` issues an ``Mcp-Session-Id``
  signed with a key derived from the master secret and bound to the caller's
  principal (:class:`~remember_sync._sessions.SessionSigner`), so any worker
  sharing the secret verifies it.  ``DELETE`` ends a session for the rest of
  its signed lifetime, recorded in the plugin's store so that every worker
  sharing it knows (:mod:`remember_sync.mcp.revocations`).  A request carrying
  an id the server did not issue -- or issued to another principal, or ended --
  gets ``404`` and never binds a session; one whose end cannot be checked
  (the store failed) gets ``503``.  Every request but ``initialize`` must
  carry the header: one without it gets ``400`` (the spec's "Servers that
  require a session ID SHOULD respond to requests without an Mcp-Session-Id
  header (other than initialization) with HTTP 400").  Clients of
  ``2024-11-05`` and ``2025-03-26`` (no ``MCP-Protocol-Version`` header, or one
  naming those) may POST a JSON-RPC batch; later revisions removed batches and
  get ``400`` for one.
* anything else (``2026-07-28``): no handshake and no sessions; every request
  carries its protocol version, client info and capabilities in
  ``params._meta`` and repeats the version, method and tool name in the
  ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers, which
  must agree with the body.  ``server/discover`` replaces ``initialize``.
  ``session`` scope falls back to the signed-in principal.

An ``MCP-Protocol-Version`` header naming no revision this server speaks gets
``400`` with error ``-32022`` listing every revision it does speak.

Browsers may call the server from the origins given as ``cors_origins``
(opt-in CORS: preflight ``OPTIONS`` answered, ``Access-Control-*`` headers on
every reply to those origins, error replies included).

The caller's principal comes from the optional bearer-token verifier
(:mod:`remember_sync.mcp.auth`); without one every caller is anonymous.  A
verifier that raises :class:`~remember_sync.errors.RememberUnavailableError`
(it cannot tell now) gets ``503`` with ``Retry-After``.  A verifier that is a
:class:`~remember_sync.mcp.oauth.ProtectedResource` (OAuth) has its RFC 9728
metadata served at ``/.well-known/oauth-protected-resource[/<path>]`` and
linked from every ``401``.  For
each tool call the identity ``(verified session, principal, tool name)`` is
bound with :func:`remember_sync.identity` and reset afterwards.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .. import _config
from .._secrets import resolve_keyring
from .._sessions import SessionSigner
from ..errors import RememberConfigurationError, RememberStoreError, RememberUnavailableError
from ..identity import identity as bind_identity
from ..identity import is_anonymous
from ..plugin import RememberPlugin
from ..types import SCOPES, Identity
from .auth import (
    FROM_HOST,
    PrincipalResolver,
    StaticTokenVerifier,
    TokenVerifier,
    _FromHost,
    host_auth,
)
from .authoring import ToolContext, ToolFunction, UserTool
from .oauth import (
    ProtectedResource,
    metadata_url,
    oauth_verifier_from_env,
    request_resource,
    well_known_resource,
)
from .protocol import (
    ALL_PROTOCOL_VERSIONS,
    BATCH_PROTOCOL_VERSIONS,
    CLIENT_CAPABILITIES_META_KEY,
    HANDSHAKE_PROTOCOL_VERSIONS,
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_HANDSHAKE_VERSION,
    MAX_BATCH_MESSAGES,
    METHOD_NOT_FOUND,
    MODERN_PROTOCOL_VERSIONS,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    JsonRpcError,
    declares_modern_version,
    decode_header_value,
    error_body,
    is_request_id,
    modern_error_status,
    params_of,
)
from .revocations import DEFAULT_MAX_LOCAL, FULL_CODE, EndedSessions

__all__ = [
    "BODY_ENVELOPE_BYTES",
    "DEFAULT_PATH",
    "McpServer",
    "check_cors_origin",
    "create_app",
    "default_max_body_bytes",
    "plugin_from_options",
]

log = logging.getLogger("remember_sync.mcp")

DEFAULT_PATH = "/mcp"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_STATUS_TEXT = {
    200: "200 OK",
    202: "202 Accepted",
    204: "204 No Content",
    400: "400 Bad Request",
    401: "401 Unauthorized",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    406: "406 Not Acceptable",
    411: "411 Length Required",
    413: "413 Content Too Large",
    415: "415 Unsupported Media Type",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}

StartResponse = Callable[..., Any]
_ToolClass = TypeVar("_ToolClass", bound=type[ToolContext])

#: Room left in the default body limit for the JSON-RPC envelope around a value
#: (method, tool name, key, scope, ttl, brand): see :func:`default_max_body_bytes`.
BODY_ENVELOPE_BYTES = 64 * 1024
_CORS_ALLOW_METHODS = "POST, DELETE"
_CORS_ALLOW_HEADERS = (
    "content-type, authorization, mcp-session-id, mcp-protocol-version, mcp-method, "
    "mcp-name, last-event-id"
)
_CORS_EXPOSE_HEADERS = "Mcp-Session-Id, WWW-Authenticate"
#: Seconds a browser may cache a preflight answer (Chromium caps it at 7200).
_CORS_MAX_AGE = "7200"


def default_max_body_bytes(max_value_bytes: int) -> int:
    """The default HTTP body limit for a plugin whose entries hold *max_value_bytes*.

    ``3 * max_value_bytes + BODY_ENVELOPE_BYTES``.  ``max_value_bytes`` bounds an
    entry serialised as UTF-8 JSON; a client may send the same value escaped
    differently.  A client escaping everything outside ASCII as ``\\uXXXX``
    (Python's ``json.dumps`` default) sends at most 3 bytes per stored byte (a
    2-byte character becomes 6 bytes, a 4-byte one a 12-byte surrogate pair), so
    every value up to the limit fits the body and one a little over it comes back
    as the tool error ``REMEMBER_INVALID_INPUT`` the model can act on, not a
    transport ``413``.  Only a client escaping plain ASCII too (up to 6x) can hit
    ``413`` below the value limit; allowing for it would double the memory one
    request may pin for no real client.
    """
    return 3 * max_value_bytes + BODY_ENVELOPE_BYTES


def check_cors_origin(origin: object) -> str:
    """A CORS origin (``McpServer(cors_origins=...)``, ``serve --cors-origin``), normalised.

    :returns: ``scheme://host[:port]`` in lower case, without a trailing ``/``.
    :raises ValueError: not an ``http``/``https`` origin with a valid port and no
        user, path, query, fragment or wildcard.
    """
    text = origin.rstrip("/").lower() if isinstance(origin, str) else ""
    parts = urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts = urlsplit("")
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.path
        or parts.query
        or parts.fragment
        or any(c in text for c in "*?#")
    ):
        raise ValueError(
            f"cors_origins: {origin!r} is not an origin; give scheme://host[:port], "
            "e.g. https://app.example.com or http://localhost:6274"
        )
    return text


def _package_version() -> str:
    try:
        return metadata.version("remember-sync")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


@dataclass
class _Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def json(cls, status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> _Response:
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate the client sent (valid JSON "\ud800", not Unicode), echoed
            # in an id, a method or a name: escaped, it goes back exactly as it came.
            body = json.dumps(payload, separators=(",", ":")).encode("ascii")
        return cls(status, body, [("Content-Type", "application/json"), *headers])

    @classmethod
    def error(
        cls,
        status: int,
        message: str,
        *,
        code: int = INVALID_REQUEST,
        request_id: Any = None,
        data: Any = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> _Response:
        return cls.json(status, error_body(request_id, code, message, data), headers)


@dataclass
class _Call:
    """One JSON-RPC request being served."""

    request_id: Any
    method: str
    params: dict[str, Any]
    identity: Identity
    modern: bool


def _preflight(methods: str) -> _Response:
    """``204`` to a CORS preflight from an allowed origin (the origin header is added later)."""
    return _Response(
        204,
        headers=[
            ("Access-Control-Allow-Methods", methods),
            ("Access-Control-Allow-Headers", _CORS_ALLOW_HEADERS),
            ("Access-Control-Max-Age", _CORS_MAX_AGE),
        ],
    )


class McpServer:
    """A WSGI application serving MCP (Streamable HTTP, JSON responses).

    :param plugin: the :class:`~remember_sync.RememberPlugin` whose memory the
        tools use; its memory tools are listed when ``tools.enabled``.
    :param name: the server name clients see.
    :param version: the server version clients see (default: this package's).
    :param token_verifier: ``token -> principal | None`` (see
        :mod:`remember_sync.mcp.auth`).  Given, every request the principal
        resolver does not identify needs a valid ``Authorization: Bearer``
        token (else ``401``); ``None``: such callers are anonymous.  Default:
        the verifier of the host that built *plugin* (the Flask extension's
        ``REMEMBER_TOKEN_VERIFIER``, Django's ``token_verifier``), else ``None``.
        An :class:`~remember_sync.mcp.oauth.OAuthVerifier` also publishes
        RFC 9728 metadata (:mod:`remember_sync.mcp.oauth`).
    :param principal_resolver: ``environ -> principal | None``: the host's own
        idea of the caller (``serve --no-token`` returns the local user; a
        framework passes its signed-in user).  Asked first on every request; a
        principal it returns is the caller and no token is read.  ``None``
        falls through to ``token_verifier`` (or to an anonymous caller when
        there is none).  A resolver that raises fails the request with ``503``:
        it never lets a caller in, and never demotes one to anonymous.
        Default: the signed-in user of the host that built *plugin* (the
        Flask extension and the Django middleware register theirs with
        :func:`~remember_sync.mcp.auth.register_host_auth`), else ``None``;
        pass ``None`` to ignore the host's users.
    :param session_signer: signs and verifies ``Mcp-Session-Id`` values
        (default: a :class:`~remember_sync._sessions.SessionSigner` over the
        plugin's master secrets, or over :func:`~remember_sync._secrets.resolve_keyring`
        when encryption is disabled).
    :param max_body_bytes: larger request bodies get ``413`` (default:
        :func:`default_max_body_bytes` of the plugin's ``max_value_bytes``, so
        an oversized value gets the tool error rather than ``413``).
    :param instructions: optional guidance for the model, sent at connect.
    :param path: the endpoint path (``None``: every path).
    :param allowed_hosts: when given, the ``Host`` header must be one of these
        (``host`` or ``host:port``); a DNS-rebinding guard for local servers.
    :param allowed_origins: browser origins (``scheme://host[:port]``) allowed
        besides loopback ones; a request with any other ``Origin`` gets ``403``.
    :param cors_origins: browser origins (``scheme://host[:port]``) that may
        call the server cross-origin (opt-in CORS, ``serve --cors-origin``).
        Each is also an allowed origin.  A request from one of them gets
        ``Access-Control-Allow-Origin`` (that origin) and
        ``Access-Control-Expose-Headers: Mcp-Session-Id, WWW-Authenticate`` on
        every reply, errors included, and its preflight ``OPTIONS`` gets ``204``.
        Loopback origins are not implied: a page on another local port is
        another application, so list it (e.g. ``http://localhost:6274``).
        Without CORS origins ``OPTIONS`` gets ``405``.
    :param owns_plugin: close the plugin in :meth:`close` (``create_app`` does).
    :param max_ended_sessions: with the in-process memory store, how many ended
        sessions this server remembers at once (each until its signed lifetime
        ends); when full, ``DELETE`` answers ``503`` (see
        :mod:`remember_sync.mcp.revocations`).  Shared stores have no such cap.
    """

    def __init__(
        self,
        plugin: RememberPlugin,
        *,
        name: str = "remember-sync",
        version: str | None = None,
        token_verifier: TokenVerifier | None | _FromHost = FROM_HOST,
        principal_resolver: PrincipalResolver | None | _FromHost = FROM_HOST,
        session_signer: SessionSigner | None = None,
        max_body_bytes: int | None = None,
        instructions: str | None = None,
        path: str | None = DEFAULT_PATH,
        allowed_hosts: Sequence[str] | None = None,
        allowed_origins: Sequence[str] = (),
        owns_plugin: bool = False,
        max_ended_sessions: int = DEFAULT_MAX_LOCAL,
        cors_origins: Sequence[str] = (),
    ) -> None:
        if not isinstance(plugin, RememberPlugin):
            raise TypeError(f"plugin must be a RememberPlugin; got {type(plugin).__name__}")
        if max_body_bytes is None:
            max_body_bytes = default_max_body_bytes(plugin._core.max_value_bytes)
        if isinstance(cors_origins, str):
            raise TypeError("cors_origins must be a list of origins, not one string")
        cors = frozenset(check_cors_origin(o) for o in cors_origins)
        if principal_resolver is FROM_HOST or token_verifier is FROM_HOST:
            host = host_auth(plugin)
            if principal_resolver is FROM_HOST:
                principal_resolver = host.principal_resolver if host is not None else None
            if token_verifier is FROM_HOST:
                token_verifier = host.token_verifier if host is not None else None
        if (
            isinstance(max_body_bytes, bool)
            or not isinstance(max_body_bytes, int)
            or max_body_bytes < 1
        ):
            raise ValueError(f"max_body_bytes must be a positive int; got {max_body_bytes!r}")
        if token_verifier is not None and not callable(token_verifier):
            raise TypeError("token_verifier must be a callable: token -> principal | None")
        if principal_resolver is not None and not callable(principal_resolver):
            raise TypeError("principal_resolver must be a callable: environ -> principal | None")
        self.plugin = plugin
        self.principal_resolver = principal_resolver
        self.name = name
        self.version = version if version is not None else _package_version()
        self.token_verifier = token_verifier
        if session_signer is None:
            keyring = plugin.keyring if plugin.keyring is not None else resolve_keyring()
            session_signer = SessionSigner(keyring)
        self.session_signer = session_signer
        self.max_body_bytes = max_body_bytes
        self.instructions = instructions
        self.path = path
        self.allowed_hosts = (
            None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
        )
        self.cors_origins = cors
        self.allowed_origins = (
            frozenset(o.rstrip("/").lower() for o in allowed_origins) | cors
        )
        self._owns_plugin = owns_plugin
        self._user_tools: dict[str, UserTool] = {}
        self._listing: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        # Ended sessions (DELETE), kept until their signature expires anyway.
        self._ended = EndedSessions(
            plugin.store, plugin.key_prefix, max_local=max_ended_sessions
        )

    def __repr__(self) -> str:
        auth = "bearer" if self.token_verifier is not None else "anonymous"
        if self.principal_resolver is not None:
            auth = f"resolver+{auth}"
        return f"McpServer(name={self.name!r}, plugin={self.plugin!r}, auth={auth})"

    def close(self) -> None:
        """Close the plugin when this server created it (``create_app``)."""
        self._ended.close()
        if self._owns_plugin:
            self.plugin.close()

    # -- tool authoring -----------------------------------------------------------------

    def tool(
        self,
        *,
        name: str,
        description: str,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        annotations: Mapping[str, Any] | None = None,
        title: str | None = None,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Register a function tool: ``fn(input: dict, ctx: ToolContext) -> result``.

        ``ctx.remember`` is the caller's accessor with ``tool_name=name``.
        """

        def decorator(function: ToolFunction) -> ToolFunction:
            self._register(
                UserTool(
                    name=name,
                    description=description,
                    input_schema=input_schema,
                    output_schema=output_schema,
                    annotations=annotations,
                    title=title,
                    function=function,
                )
            )
            return function

        return decorator

    def add_tool(self, tool_class: _ToolClass) -> _ToolClass:
        """Register a :class:`ToolContext` subclass (usable as a class decorator)."""
        if not (isinstance(tool_class, type) and issubclass(tool_class, ToolContext)):
            raise TypeError("add_tool takes a ToolContext subclass")
        if tool_class.execute is ToolContext.execute:
            raise TypeError(f"{tool_class.__name__} must implement execute(self, input)")
        self._register(
            UserTool(
                name=tool_class.name,
                description=tool_class.description,
                input_schema=tool_class.input_schema,
                output_schema=tool_class.output_schema,
                annotations=tool_class.annotations,
                title=tool_class.title,
                cls=tool_class,
            )
        )
        return tool_class

    def _register(self, tool: UserTool) -> None:
        with self._lock:
            memory = self.plugin._tools
            if memory is not None and memory.handles(tool.name):
                raise ValueError(f"tool name {tool.name!r} is taken by a memory tool")
            if tool.name in self._user_tools:
                raise ValueError(f"a tool named {tool.name!r} is already registered")
            self._user_tools[tool.name] = tool
            self._listing = None

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Every tool this server lists: the memory tools, then the user's."""
        listing = self._listing
        if listing is None:
            listing = self.plugin.tool_definitions() + [
                t.definition() for t in self._user_tools.values()
            ]
            self._listing = listing
        return listing

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        who: Identity,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run tool *name* for caller *who*; a ``CallToolResult`` dict.

        :raises JsonRpcError: ``-32602`` when no such tool exists.
        """
        memory = self.plugin._tools
        if memory is not None and memory.handles(name):
            return self.plugin.call_tool(name, arguments, identity=who)
        tool = self._user_tools.get(name)
        if tool is None:
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        running = who.with_tool(name)
        with bind_identity(bound=running):
            return tool.run(
                arguments,
                remember=self.plugin.accessor(running),
                identity=running,
                meta=meta or {},
            )

    # -- WSGI ---------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        try:
            response = self._handle(environ)
        except Exception:  # noqa: BLE001 - the WSGI boundary: never a traceback on the wire
            log.exception("remember-sync MCP: request failed")
            response = _Response.error(500, "Internal server error", code=INTERNAL_ERROR)
        headers = list(response.headers)
        if self.cors_origins:
            headers.extend(self._cors_headers(environ))
        if response.status != 204:  # RFC 9110: a 204 carries no Content-Length
            headers.append(("Content-Length", str(len(response.body))))
        start_response(_STATUS_TEXT.get(response.status, f"{response.status} Error"), headers)
        return [response.body] if response.body else []

    def _handle(self, environ: Mapping[str, Any]) -> _Response:
        if isinstance(self.token_verifier, ProtectedResource) and well_known_resource(
            str(environ.get("PATH_INFO", "")), self.path
        ):
            return self._resource_metadata(environ, self.token_verifier)
        if self.path is not None and environ.get("PATH_INFO", "") not in (
            self.path,
            self.path + "/",
        ):
            return _Response.error(404, f"Not found: the MCP endpoint is {self.path}")
        refused = self._check_host_and_origin(environ)
        if refused is not None:
            return refused
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "OPTIONS" and self._cors_origin(environ) is not None:
            return _preflight(_CORS_ALLOW_METHODS)
        if method not in ("POST", "DELETE"):
            return _Response.error(
                405,
                "Method not allowed: this server answers every request in its POST response "
                "and opens no SSE stream",
                headers=[("Allow", "POST, DELETE")],
            )
        principal = self._authenticate(environ)
        if isinstance(principal, _Response):
            return principal
        if method == "DELETE":
            return self._delete(environ, principal)
        return self._post(environ, principal)

    # -- HTTP-level checks --------------------------------------------------------------

    def _check_host_and_origin(self, environ: Mapping[str, Any]) -> _Response | None:
        if self.allowed_hosts is not None:
            host = str(environ.get("HTTP_HOST", "")).lower()
            if host not in self.allowed_hosts:
                return _Response.error(403, f"Forbidden: unexpected Host header {host!r}")
        origin = environ.get("HTTP_ORIGIN")
        if origin:
            normalised = str(origin).rstrip("/").lower()
            hostname = urlsplit(normalised).hostname
            if normalised not in self.allowed_origins and hostname not in _LOOPBACK:
                return _Response.error(403, f"Forbidden: origin {origin!r} is not allowed")
        return None

    def _cors_origin(self, environ: Mapping[str, Any]) -> str | None:
        """The request's ``Origin`` as sent when it is a CORS origin; else ``None``."""
        origin = environ.get("HTTP_ORIGIN")
        if not origin or str(origin).rstrip("/").lower() not in self.cors_origins:
            return None
        return str(origin)

    def _cors_headers(self, environ: Mapping[str, Any]) -> list[tuple[str, str]]:
        headers = [("Vary", "Origin")]  # the reply depends on Origin: caches must know
        origin = self._cors_origin(environ)
        if origin is not None:
            headers += [
                ("Access-Control-Allow-Origin", origin),
                ("Access-Control-Expose-Headers", _CORS_EXPOSE_HEADERS),
            ]
        return headers

    def _authenticate(self, environ: Mapping[str, Any]) -> str | None | _Response:
        if self.principal_resolver is not None:
            try:
                resolved = self.principal_resolver(environ)
            except Exception:  # noqa: BLE001 - a failing resolver refuses, it never lets in
                log.warning("remember-sync MCP: the principal resolver raised", exc_info=True)
                return _Response.error(
                    503,
                    "Service unavailable: the caller could not be identified; try again later",
                    code=INTERNAL_ERROR,
                    headers=[("Retry-After", "5")],
                )
            if resolved is not None:
                if (
                    not isinstance(resolved, str)
                    or not resolved.strip()
                    or resolved != resolved.strip()
                    or is_anonymous(resolved)
                ):
                    raise TypeError(
                        "principal_resolver must return None or a non-blank, non-anonymous str "
                        f"without surrounding spaces; got {resolved!r}"
                    )
                return resolved
        if self.token_verifier is None:
            return None
        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return self._unauthorized(
                environ, "a bearer token is required (Authorization: Bearer <token>)"
            )
        try:
            principal = self.token_verifier(token)
        except RememberUnavailableError as exc:
            # The verifier cannot tell now (e.g. the OAuth issuer is down): neither 401 nor
            # an anonymous caller.
            log.warning("remember-sync MCP: cannot verify bearer tokens now: %s", exc.message)
            return _Response.error(
                503,
                "Service unavailable: the bearer token cannot be verified now; try again later",
                code=INTERNAL_ERROR,
                headers=[("Retry-After", str(exc.retry_after_s or 5))],
            )
        except Exception:  # noqa: BLE001 - a failing verifier refuses, it never lets in
            log.warning("remember-sync MCP: the token verifier raised", exc_info=True)
            principal = None
        if not isinstance(principal, str) or not principal:
            return self._unauthorized(environ, "the bearer token is not valid", invalid=True)
        return principal

    def _resource_url(self, environ: Mapping[str, Any], protected: ProtectedResource) -> str:
        return protected.resource or request_resource(environ, self.path)

    def _resource_metadata(
        self, environ: Mapping[str, Any], protected: ProtectedResource
    ) -> _Response:
        """``GET /.well-known/oauth-protected-resource[/<path>]``: the RFC 9728 document."""
        refused = self._check_host_and_origin(environ)  # it names the Host: guard it too
        if refused is not None:
            return refused
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "OPTIONS" and self._cors_origin(environ) is not None:
            return _preflight("GET")
        if method != "GET":
            return _Response.error(405, "Method not allowed", headers=[("Allow", "GET")])
        document = protected.resource_metadata(self._resource_url(environ, protected))
        return _Response.json(200, document, [("Cache-Control", "no-store")])

    def _unauthorized(
        self, environ: Mapping[str, Any], message: str, *, invalid: bool = False
    ) -> _Response:
        challenge = 'Bearer realm="remember-sync"'
        if isinstance(self.token_verifier, ProtectedResource):
            url = metadata_url(self._resource_url(environ, self.token_verifier))
            challenge += f', resource_metadata="{url}"'
        if invalid:
            challenge += ', error="invalid_token"'
        return _Response.error(
            401, f"Unauthorized: {message}", headers=[("WWW-Authenticate", challenge)]
        )

    def _read_body(self, environ: Mapping[str, Any]) -> bytes | _Response:
        stream = environ["wsgi.input"]
        limit = self.max_body_bytes
        length_text = str(environ.get("CONTENT_LENGTH") or "").strip()
        if length_text:
            # RFC 9110: 1*DIGIT (int() would also take "+5", "5_0" and non-ASCII digits).
            if not (length_text.isascii() and length_text.isdigit()):
                return _Response.error(400, f"Bad Content-Length {length_text!r}")
            length = int(length_text)
            if length > limit:
                return self._too_large(length)
            body: bytes = stream.read(length)
            return body
        if environ.get("wsgi.input_terminated"):
            body = stream.read(limit + 1)
            if len(body) > limit:
                return self._too_large(None)
            return body
        return _Response.error(411, "Length required: send a Content-Length header")

    def _too_large(self, length: int | None) -> _Response:
        size = f"{length} bytes" if length is not None else "larger than that"
        return _Response.error(
            413,
            f"Request body too large: {size}; this server accepts at most "
            f"{self.max_body_bytes} bytes",
        )

    @staticmethod
    def _check_media_types(environ: Mapping[str, Any]) -> _Response | None:
        accept = str(environ.get("HTTP_ACCEPT") or "").strip()
        if accept:
            kinds = {part.split(";")[0].strip().lower() for part in accept.split(",")}
            if not kinds & {"application/json", "application/*", "*/*"}:
                return _Response.error(
                    406, "Not acceptable: this server replies with application/json; accept it"
                )
        content_type = str(environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return _Response.error(
                415, "Unsupported media type: send the JSON-RPC message as application/json"
            )
        return None

    # -- sessions -----------------------------------------------------------------------

    def _refuse_session(
        self, session_id: str, principal: str | None, request_id: Any = None
    ) -> _Response | None:
        """``None`` when *session_id* is live and was issued to *principal*; else the reply.

        The signature is checked first: a store read happens only for an id this
        server issued to this caller, never for whatever a client sends.
        """
        if not self.session_signer.verify(session_id, principal):
            return _Response.error(404, "Session not found", request_id=request_id)
        try:
            ended = self._ended.is_ended(session_id)
        except RememberStoreError as exc:
            # Fail closed: a session whose end cannot be checked is not served.
            log.warning("remember-sync MCP: cannot check for ended sessions: %s", exc.message)
            return _Response.error(
                503,
                "Service unavailable: the store could not be read to check the session; "
                "try again later",
                code=INTERNAL_ERROR,
                request_id=request_id,
                headers=[("Retry-After", "5")],
            )
        if ended:
            return _Response.error(404, "Session not found", request_id=request_id)
        return None

    def _delete(self, environ: Mapping[str, Any], principal: str | None) -> _Response:
        session_id = self._session_header(environ)
        if not session_id:
            return _Response.error(400, "Bad request: DELETE needs the Mcp-Session-Id to end")
        refused = self._refuse_session(session_id, principal)
        if refused is not None:
            return refused
        now = time.time_ns() // 1_000_000
        try:
            self._ended.end(session_id, self.session_signer.deadline_ms(session_id), now)
        except RememberStoreError as exc:
            log.warning("remember-sync MCP: cannot end a session: %s", exc.message)
            # The store's own message can name hosts: only the cap's is shown.
            why = exc.message if exc.code == FULL_CODE else "the store could not be written"
            return _Response.error(
                503,
                f"Service unavailable: the session was not ended ({why}); try again later",
                code=INTERNAL_ERROR,
                headers=[("Retry-After", "60")],
            )
        return _Response(204)

    @staticmethod
    def _session_header(environ: Mapping[str, Any]) -> str | None:
        """The ``Mcp-Session-Id`` header; ``None`` when absent or blank (a missing id, 400)."""
        value = str(environ.get("HTTP_MCP_SESSION_ID") or "").strip()
        return value or None

    def _require_session(
        self, session_id: str | None, principal: str | None, request_id: Any = None
    ) -> _Response | None:
        """``None`` when the request may go on: it names a live session of this caller."""
        if session_id is None:
            return _Response.error(
                400, "Bad Request: Mcp-Session-Id header is required", request_id=request_id
            )
        return self._refuse_session(session_id, principal, request_id)

    # -- POST: one JSON-RPC message (or a 2025-03-26 batch) --------------------------------

    def _post(self, environ: Mapping[str, Any], principal: str | None) -> _Response:
        refused = self._check_media_types(environ)
        if refused is not None:
            return refused
        body = self._read_body(environ)
        if isinstance(body, _Response):
            return body
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return _Response.error(400, "Parse error: the body is not valid JSON", code=PARSE_ERROR)
        version = environ.get("HTTP_MCP_PROTOCOL_VERSION")
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            return self._legacy(message, environ, principal)
        if version in MODERN_PROTOCOL_VERSIONS or declares_modern_version(message):
            # A body with a 2026-07-28 envelope gets that era's answer even when its
            # version is unknown (-32022, or a header/body mismatch).
            return self._modern(message, environ, principal)
        request_id = message.get("id") if isinstance(message, dict) else None
        requested = str(version)
        return _Response.error(
            400,
            f"Bad Request: unsupported MCP-Protocol-Version header {requested[:64]!r}; this "
            f"server speaks {', '.join(ALL_PROTOCOL_VERSIONS)}",
            code=UNSUPPORTED_PROTOCOL_VERSION,
            request_id=request_id if is_request_id(request_id) else None,
            data={"supported": list(ALL_PROTOCOL_VERSIONS), "requested": requested},
        )

    def _legacy(self, message: Any, environ: Mapping[str, Any], principal: str | None) -> _Response:
        if isinstance(message, list):
            return self._legacy_batch(message, environ, principal)
        if not isinstance(message, dict):
            return _Response.error(
                400,
                "Invalid request: the body must be a JSON-RPC message object (or, at protocol "
                "revision 2025-03-26, a batch array of them)",
            )
        request_id = message.get("id") if is_request_id(message.get("id")) else None
        session_id = self._session_header(environ)
        if message.get("method") != "initialize" or session_id is not None:
            # Never bind (or even look at) a session this server did not issue to this
            # caller, or one that was ended.
            refused = self._require_session(session_id, principal, request_id)
            if refused is not None:
                return refused
        headers: list[tuple[str, str]] = []
        status, payload = self._legacy_message(
            message, Identity(session_id=session_id, user_id=principal), principal, headers
        )
        if payload is None:
            return _Response(202)
        return _Response.json(status, payload, headers)

    def _legacy_batch(
        self, batch: list[Any], environ: Mapping[str, Any], principal: str | None
    ) -> _Response:
        """A JSON-RPC batch (2025-03-26): every member answered in one JSON array."""
        version = environ.get("HTTP_MCP_PROTOCOL_VERSION")
        if version is not None and version not in BATCH_PROTOCOL_VERSIONS:
            return _Response.error(
                400,
                f"Bad Request: JSON-RPC batches are not part of protocol revision {version} "
                "(2025-06-18 removed them); send one message per request",
            )
        if not batch:
            return _Response.error(400, "Invalid request: the batch is empty")
        if len(batch) > MAX_BATCH_MESSAGES:
            return _Response.error(
                400,
                f"Invalid request: a batch of {len(batch)} messages; this server takes at most "
                f"{MAX_BATCH_MESSAGES} per request",
            )
        if any(isinstance(m, dict) and m.get("method") == "initialize" for m in batch):
            return _Response.error(
                400, "Invalid request: initialize must not be part of a JSON-RPC batch"
            )
        session_id = self._session_header(environ)
        refused = self._require_session(session_id, principal)
        if refused is not None:
            return refused
        who = Identity(session_id=session_id, user_id=principal)
        replies: list[dict[str, Any]] = []
        for message in batch:
            if not isinstance(message, dict):
                replies.append(
                    error_body(
                        None,
                        INVALID_REQUEST,
                        "Invalid request: each batch member must be a JSON-RPC message object",
                    )
                )
                continue
            _, payload = self._legacy_message(message, who, principal, [])
            if payload is not None:
                replies.append(payload)
        if not replies:
            return _Response(202)  # only notifications and responses
        return _Response.json(200, replies)

    def _legacy_message(
        self,
        message: dict[str, Any],
        who: Identity,
        principal: str | None,
        headers: list[tuple[str, str]],
    ) -> tuple[int, dict[str, Any] | None]:
        """One handshake-era message: ``(HTTP status, reply)``; ``None``: nothing to reply."""
        if "method" not in message:
            if "id" in message and ("result" in message or "error" in message):
                return 202, None  # a reply to a server request; we never send any
            return 400, error_body(None, INVALID_REQUEST, "Invalid request: no method")
        if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
            return 400, error_body(
                None, INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message"
            )
        if "id" not in message:
            return 202, None  # notifications/initialized, cancelled, ...: nothing to do
        request_id = message["id"]
        if not is_request_id(request_id):
            return 400, error_body(
                None, INVALID_REQUEST, "Invalid request: id must be a string or an integer"
            )
        call = _Call(
            request_id=request_id, method=message["method"], params={}, identity=who, modern=False
        )
        try:
            call.params = params_of(message)
            if call.method == "initialize":
                result = self._initialize(call, principal, headers)
            elif call.method == "ping":
                result = {}
            else:
                result = self._dispatch(call)
        except JsonRpcError as exc:
            return 200, error_body(request_id, exc.code, exc.message, exc.data)
        return 200, {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _initialize(
        self, call: _Call, principal: str | None, headers: list[tuple[str, str]]
    ) -> dict[str, Any]:
        requested = call.params.get("protocolVersion")
        if not isinstance(requested, str):
            raise JsonRpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        negotiated = (
            requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        )
        headers.append(("Mcp-Session-Id", self.session_signer.issue(principal)))
        result: dict[str, Any] = {
            "protocolVersion": negotiated,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.name, "version": self.version},
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    def _modern(self, message: Any, environ: Mapping[str, Any], principal: str | None) -> _Response:
        version_header = environ.get("HTTP_MCP_PROTOCOL_VERSION")
        if isinstance(message, list):
            return self._modern_error(
                None,
                INVALID_REQUEST,
                f"JSON-RPC batches are not part of protocol revision {version_header}; "
                "send one request or notification per HTTP request",
            )
        if not isinstance(message, dict):
            return self._modern_error(
                None,
                INVALID_REQUEST,
                "Body must be a single JSON-RPC request or notification object",
            )
        if "id" not in message:
            if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
                return self._modern_error(
                    None,
                    INVALID_REQUEST,
                    "Body must be a single JSON-RPC request or notification object",
                )
            if version_header not in MODERN_PROTOCOL_VERSIONS:
                return self._unsupported_version(None, str(version_header))
            return _Response(202)  # 2026-07-28 defines no client notifications: accept, drop
        request_id = message.get("id")
        if (
            message.get("jsonrpc") != "2.0"
            or not is_request_id(request_id)
            or not isinstance(message.get("method"), str)
            or not isinstance(message.get("params", {}), dict)
        ):
            return self._modern_error(
                None,
                INVALID_REQUEST,
                "Body must be a single JSON-RPC request or notification object",
            )
        method: str = message["method"]
        params: dict[str, Any] = message.get("params") or {}
        rejection = self._ladder(method, params, environ)
        if rejection is not None:
            return self._modern_error(request_id, *rejection)
        call = _Call(request_id, method, params, Identity(user_id=principal), modern=True)
        try:
            if method == "server/discover":
                result = self._discover()
            else:
                result = self._dispatch(call)
        except JsonRpcError as exc:
            return self._modern_error(request_id, exc.code, exc.message, exc.data)
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        result["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: self._server_info()}
        return _Response.json(200, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def _ladder(
        self, method: str, params: Mapping[str, Any], environ: Mapping[str, Any]
    ) -> tuple[int, str, Any] | None:
        """The 2026-07-28 envelope checks, in the SDK's order; the first failure or None."""
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            return (
                INVALID_PARAMS,
                "params._meta must be an object carrying the required "
                f"{PROTOCOL_VERSION_META_KEY!r} and {CLIENT_CAPABILITIES_META_KEY!r} envelope keys",
                None,
            )
        missing = [
            k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta
        ]
        if missing:
            return (
                INVALID_PARAMS,
                f"params._meta is missing the required envelope key(s): {', '.join(missing)}",
                None,
            )
        version = meta[PROTOCOL_VERSION_META_KEY]
        if environ.get("HTTP_MCP_PROTOCOL_VERSION") != version:
            return (
                HEADER_MISMATCH,
                "mcp-protocol-version header does not match the request envelope's protocol "
                "version",
                None,
            )
        if environ.get("HTTP_MCP_METHOD") != method:
            return (
                HEADER_MISMATCH,
                "mcp-method header does not match the request body's method",
                None,
            )
        if method == "tools/call" and params.get("name") is not None:
            if decode_header_value(environ.get("HTTP_MCP_NAME")) != params.get("name"):
                return (
                    HEADER_MISMATCH,
                    "mcp-name header does not match the request body's 'name' parameter",
                    None,
                )
        if not isinstance(version, str):
            return (INVALID_PARAMS, "the protocol-version envelope value must be a string", None)
        if version not in MODERN_PROTOCOL_VERSIONS:
            return self._unsupported_data(version)
        return None

    @staticmethod
    def _unsupported_data(requested: str) -> tuple[int, str, Any]:
        return (
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(ALL_PROTOCOL_VERSIONS), "requested": requested},
        )

    def _unsupported_version(self, request_id: Any, requested: str) -> _Response:
        return self._modern_error(request_id, *self._unsupported_data(requested))

    @staticmethod
    def _modern_error(request_id: Any, code: int, message: str, data: Any = None) -> _Response:
        return _Response.json(
            modern_error_status(code), error_body(request_id, code, message, data)
        )

    def _server_info(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}

    def _discover(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": list(MODERN_PROTOCOL_VERSIONS),
            "capabilities": {"tools": {"listChanged": False}},
            "resultType": "complete",
            # The answer is the same for every caller and changes only on a restart.
            "ttlMs": 0,
            "cacheScope": "public",
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    # -- methods shared by both eras ----------------------------------------------------

    def _dispatch(self, call: _Call) -> dict[str, Any]:
        if call.method == "tools/list":
            if call.params.get("cursor") is not None:
                raise JsonRpcError(
                    INVALID_PARAMS, "Invalid cursor: this server lists every tool at once"
                )
            result: dict[str, Any] = {"tools": self.tool_definitions()}
            if call.modern:
                result.update(ttlMs=0, cacheScope="public")
            return result
        if call.method == "tools/call":
            name = call.params.get("name")
            if not isinstance(name, str) or not name:
                raise JsonRpcError(INVALID_PARAMS, "tools/call needs params.name (a string)")
            arguments = call.params.get("arguments")
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise JsonRpcError(INVALID_PARAMS, "tools/call params.arguments must be an object")
            meta = call.params.get("_meta")
            log.debug("tools/call %s (session=%s)", name, bool(call.identity.session_id))
            return self.call_tool(
                name, arguments, call.identity, meta if isinstance(meta, dict) else None
            )
        raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {call.method}")


# -- building a server from plain options ---------------------------------------------------

#: ``max_bytes`` of the in-process memory store that ``serve`` and ``create_app``
#: build (256 MiB): an HTTP server must not let anonymous callers grow it without
#: limit.  ``--max-bytes`` / ``REMEMBER_MAX_BYTES`` change it.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: ``max_entries`` of that store; ``--max-entries`` / ``REMEMBER_MAX_ENTRIES`` change it.
DEFAULT_MAX_ENTRIES = 100_000
#: The environment variable of the largest value (``max_value_bytes``) for
#: ``serve`` and ``create_app``; ``--max-value-bytes`` changes it.
MAX_VALUE_BYTES_ENV = _config.MAX_VALUE_BYTES_ENV
#: The environment variable of each bound, and its default.
BOUND_ENV = {
    "max_bytes": (_config.MAX_BYTES_ENV, DEFAULT_MAX_BYTES),
    "max_entries": (_config.MAX_ENTRIES_ENV, DEFAULT_MAX_ENTRIES),
}


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
    Extra keyword arguments go to :meth:`RememberPlugin.init`.
    """
    if redis_url and vercel_kv:
        raise RememberConfigurationError("give either a Redis URL or Vercel KV, not both")
    if not all(c.isalnum() or c in "_-." for c in tools_prefix):
        raise RememberConfigurationError(
            f"tools prefix {tools_prefix!r} may only use letters, digits, '_', '-' and '.' "
            "(MCP tool names)"
        )
    scopes = list(allowed_scopes) if allowed_scopes else None
    if scopes is not None:
        bad = [s for s in scopes if s not in SCOPES]
        if bad:
            raise RememberConfigurationError(
                f"unknown scope(s) {', '.join(bad)}; choose from {', '.join(SCOPES)}"
            )
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
        if value is None and not (redis_url or vercel_kv):
            value = default
        if value is not None:
            options[option] = value  # with Redis or Vercel KV, init names the mistake
    if max_value_bytes is None:
        max_value_bytes = _config.env_whole(
            env, MAX_VALUE_BYTES_ENV, minimum=1, unit="a whole number"
        )
    if max_value_bytes is not None:
        options["max_value_bytes"] = max_value_bytes
    if redis_url:
        options.update(type="redis", config={"url": redis_url})
    elif vercel_kv:
        options["type"] = "vercel-kv"
    if redis_url or vercel_kv:
        # A real store outlives this process and is shared: never invent a secret for it
        # (a development file in whatever directory the server started in).  The memory
        # store dies with the process, so it keeps the library's fallbacks.
        options["encryption"] = {"require_secret": True, **options.get("encryption", {})}
    return RememberPlugin.init(**options)


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
    :func:`plugin_from_options`), ``REMEMBER_MAX_VALUE_BYTES``.  The master secret comes from
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
            environ=env,
        )
    server_options.setdefault("owns_plugin", owns)
    return McpServer(plugin, **server_options)
