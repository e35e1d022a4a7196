"""The HTTP side of :class:`~remember_sync.mcp.McpServer`: replies, HTTP checks, CORS, auth.

:class:`HttpEndpoint` turns one WSGI call into one :class:`McpRequest` (the caller
authenticated once) and hands it to the server; the protocol eras are in
:mod:`._dispatch`, sessions and the rate limit in :mod:`._gate`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .. import _metrics
from ..errors import RememberInputError, RememberUnavailableError
from ..identity import is_anonymous
from ..types import identity_part
from .auth import PrincipalResolver, TokenVerifier
from .oauth import ProtectedResource, metadata_url, request_resource, well_known_resource
from .protocol import INTERNAL_ERROR, INVALID_REQUEST, decode_header_value, error_body

log = logging.getLogger("remember_sync.mcp")

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
    429: "429 Too Many Requests",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}

StartResponse = Callable[..., Any]
_PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _is_loopback(address: str) -> bool:
    """Whether *address* (a ``REMOTE_ADDR``) is this machine: 127.0.0.0/8 or ::1."""
    return address.startswith(("127.", "::ffff:127.")) or address == "::1"

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
    :raises RememberInputError: not an ``http``/``https`` origin with a valid port and no
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
        raise RememberInputError(
            f"cors_origins: {origin!r} is not an origin; give scheme://host[:port], "
            "e.g. https://app.example.com or http://localhost:6274"
        )
    return text

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

    @classmethod
    def too_many(cls, rate: str, retry_after_s: int) -> _Response:
        """``429`` with ``Retry-After``: the caller's rate limit is used up for now."""
        return cls.error(
            429,
            f"Too many requests: this server allows {rate} per caller; retry after "
            f"{retry_after_s} s",
            headers=[("Retry-After", str(retry_after_s))],
        )

    @classmethod
    def unavailable(cls, why: str, retry_after_s: int = 5, request_id: Any = None) -> _Response:
        """``503`` with ``Retry-After``: nothing was decided, the caller may try again."""
        return cls.error(
            503, f"Service unavailable: {why}; try again later", code=INTERNAL_ERROR,
            request_id=request_id, headers=[("Retry-After", str(retry_after_s))],
        )


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


@dataclass(frozen=True)
class McpRequest:
    """One request to the MCP endpoint, read once from the WSGI environ after the caller
    was authenticated: what session handling, the protocol eras and the tools need."""

    #: ``POST`` or ``DELETE``.
    method: str
    #: The caller, resolved once (principal resolver, else bearer token); ``None``: anonymous.
    principal: str | None
    #: The ``Mcp-Session-Id`` header; ``None`` when absent or blank (a missing id).
    session_id: str | None
    #: The ``MCP-Protocol-Version`` header as sent, ``None`` when absent.
    protocol_version: str | None
    #: The ``Mcp-Method`` header (2026-07-28).
    mcp_method: str | None
    #: The ``Mcp-Name`` header, decoded (2026-07-28).
    mcp_name: str | None
    #: The network peer (``REMOTE_ADDR``), whom an anonymous caller without a session counts as.
    remote_addr: str
    #: The WSGI environ, for the body.
    environ: Mapping[str, Any]

    @classmethod
    def read(cls, environ: Mapping[str, Any], principal: str | None) -> McpRequest:
        """The request *environ* carries, from *principal*."""
        get = environ.get
        name = get("HTTP_MCP_NAME")
        return cls(
            get("REQUEST_METHOD", "GET"),
            principal,
            str(get("HTTP_MCP_SESSION_ID") or "").strip() or None,
            get("HTTP_MCP_PROTOCOL_VERSION"),
            get("HTTP_MCP_METHOD"),
            None if name is None else decode_header_value(name),
            str(get("REMOTE_ADDR") or ""),
            environ,
        )


#: What serves an authenticated request: the server's sessions, rate limit and protocol.
RequestHandler = Callable[[McpRequest], "_Response"]


@dataclass(kw_only=True)
class HttpEndpoint:
    """The HTTP side of :class:`~remember_sync.mcp.McpServer`: one WSGI call and its checks.

    Routes the metrics and RFC 9728 paths, guards Host and Origin, answers CORS
    preflights, authenticates the caller once and hands the :class:`McpRequest` to
    the server's handler; every reply gets its CORS headers and ``Content-Length``.
    The settings are the server's constructor arguments of the same names.
    """

    token_verifier: TokenVerifier | None
    principal_resolver: PrincipalResolver | None
    path: str | None
    allowed_hosts: frozenset[str] | None
    allowed_origins: frozenset[str]
    cors_origins: frozenset[str]
    max_body_bytes: int
    metrics_path: str | None
    # (verifier, the same as a ProtectedResource or None), for the last verifier seen: a
    # runtime protocol check is slow, and the verifier rarely changes.  One tuple, so a
    # thread never pairs one verifier with another's answer.
    _protection: tuple[object, ProtectedResource | None] = field(
        default=(object(), None), init=False, repr=False, compare=False
    )

    def _protected(self) -> ProtectedResource | None:
        """The token verifier when it publishes RFC 9728 metadata, else ``None``."""
        verifier = self.token_verifier
        seen, protected = self._protection
        if seen is not verifier:
            protected = verifier if isinstance(verifier, ProtectedResource) else None
            self._protection = (verifier, protected)
        return protected

    def serve(
        self, environ: Mapping[str, Any], start_response: StartResponse, handler: RequestHandler
    ) -> list[bytes]:
        """Answer one WSGI call; *handler* serves the authenticated MCP request."""
        try:
            response = self._handle(environ, handler)
        except Exception:  # noqa: BLE001 - the WSGI boundary: never a traceback on the wire
            log.exception("remember-sync MCP: request failed")
            response = _Response.error(500, "Internal server error", code=INTERNAL_ERROR)
        _metrics.publish()  # before the reply leaves: a scrape by another worker then counts it
        headers = list(response.headers)
        if self.cors_origins:
            headers.extend(self._cors_headers(environ))
        if response.status != 204:  # RFC 9110: a 204 carries no Content-Length
            headers.append(("Content-Length", str(len(response.body))))
        start_response(_STATUS_TEXT.get(response.status, f"{response.status} Error"), headers)
        return [response.body] if response.body else []

    def _handle(self, environ: Mapping[str, Any], handler: RequestHandler) -> _Response:
        if self.metrics_path is not None and environ.get("PATH_INFO") == self.metrics_path:
            return self._metrics(environ)
        protected = self._protected()
        if protected is not None and well_known_resource(
            str(environ.get("PATH_INFO", "")), self.path
        ):
            return self._resource_metadata(environ, protected)
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
        return handler(McpRequest.read(environ, principal))

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
                given = self.principal_resolver(environ)
            except Exception:  # noqa: BLE001 - a failing resolver refuses, it never lets in
                log.warning("remember-sync MCP: the principal resolver raised", exc_info=True)
                return _Response.unavailable("the caller could not be identified")
            resolved = identity_part(given, "the principal_resolver's result")
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
            return _Response.unavailable(
                "the bearer token cannot be verified now", exc.retry_after_s or 5
            )
        except Exception:  # noqa: BLE001 - a failing verifier refuses, it never lets in
            log.warning("remember-sync MCP: the token verifier raised", exc_info=True)
            principal = None
        if isinstance(principal, int) and not isinstance(principal, bool):
            principal = identity_part(principal, "the token verifier's result")
        if not isinstance(principal, str) or not principal:
            return self._unauthorized(environ, "the bearer token is not valid", invalid=True)
        return principal

    def _metrics(self, environ: Mapping[str, Any]) -> _Response:
        """``GET <metrics_path>``: the Prometheus text, to a loopback peer that came through no
        proxy and, when this server checks callers, that authenticates as one."""
        peer = str(environ.get("REMOTE_ADDR") or "")
        forwarded = environ.get("HTTP_FORWARDED") or environ.get("HTTP_X_FORWARDED_FOR")
        if not _is_loopback(peer) or forwarded:
            return _Response.error(403, "Forbidden: metrics are served to loopback clients only")
        if environ.get("REQUEST_METHOD", "GET") != "GET":
            return _Response.error(405, "Method not allowed", headers=[("Allow", "GET")])
        principal = self._authenticate(environ)
        if isinstance(principal, _Response):
            return principal
        body = _metrics.prometheus_text().encode("utf-8")
        return _Response(200, body, [("Content-Type", _PROMETHEUS_TYPE)])

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
        protected = self._protected()
        if protected is not None:
            url = metadata_url(self._resource_url(environ, protected))
            challenge += f', resource_metadata="{url}"'
        if invalid:
            challenge += ', error="invalid_token"'
        return _Response.error(
            401, f"Unauthorized: {message}", headers=[("WWW-Authenticate", challenge)]
        )

    def read_post(self, request: McpRequest) -> bytes | _Response:
        """The body of a ``POST``, or the reply refusing it (media types, length, size)."""
        refused = _check_media_types(request.environ)
        if refused is not None:
            return refused
        environ = request.environ
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
