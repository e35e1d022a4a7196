"""An MCP server as a WSGI application: Streamable HTTP with JSON responses.

:class:`McpServer` hosts the plugin's memory tools (when ``tools.enabled``)
and your own tools (see :mod:`remember_sync.mcp.authoring`).  The protocol
eras it serves on one endpoint and how it tells them apart, batches, CORS,
authentication and every HTTP status are ``docs/mcp.rst`` and
``docs/authentication.rst``.  Session ids are signed with a key derived from
the master secret (:class:`~remember_sync.mcp.SessionSigner`) so that
any worker sharing the secret verifies them, and bound to the caller's
principal; an ended session is recorded in the plugin's store
(:mod:`remember_sync.mcp.revocations`) so that every worker sharing it knows.
For each tool call the identity ``(verified session, principal, tool name)``
is bound with :func:`remember_sync.identity` and reset afterwards.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from .. import _metrics
from .._clock import Clock, system_clock
from .._config import DEFAULT_PATH
from .._secrets import keyring_or_resolved
from .._sessions import SessionSigner
from ..errors import (
    JsonRpcError,
    RememberConfigurationError,
    RememberInputError,
    RememberInputTypeError,
)
from ..identity import identity as bind_identity
from ..plugin import RememberPlugin
from ..types import Identity
from ._dispatch import ProtocolDispatch
from ._gate import SessionGate
from ._ratelimit import RateLimiter
from ._wsgi import (
    HttpEndpoint,
    McpRequest,
    _Response,
    check_cors_origin,
    default_max_body_bytes,
)
from .auth import FROM_HOST, PrincipalResolver, TokenVerifier, _FromHost, host_auth
from .authoring import ToolContext, ToolFunction, UserTool
from .protocol import INVALID_PARAMS

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse
from .revocations import DEFAULT_MAX_LOCAL, DEFAULT_MAX_PER_PRINCIPAL, EndedSessions

__all__ = ["McpServer"]

_ToolClass = TypeVar("_ToolClass", bound=type[ToolContext])
_T = TypeVar("_T")


def _package_version() -> str:
    try:
        return metadata.version("remember-sync")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


class _Kept(Generic[_T]):
    """A setting of :class:`McpServer` that one of its parts keeps (read and set through)."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, server: None, owner: type) -> _Kept[_T]: ...

    @overload
    def __get__(self, server: object, owner: type | None = None) -> _T: ...

    def __get__(self, server: object | None, owner: type | None = None) -> _T | _Kept[_T]:
        if server is None:
            return self
        value: _T = getattr(getattr(server, self.part), self.name)
        return value

    def __set__(self, server: object, value: _T) -> None:
        setattr(getattr(server, self.part), self.name, value)


class McpServer:
    """A WSGI application serving MCP (Streamable HTTP, JSON responses).

    It composes three parts: the HTTP endpoint (routes, Host/Origin, CORS, the
    body, the caller authenticated once), the session gate (signed sessions,
    their end, the rate limit) and the protocol dispatch (both protocol eras);
    one request value passes from each to the next, and this class holds the tools.

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
        (default: a :class:`~remember_sync.mcp.SessionSigner` over the
        plugin's master secrets, or over the secret resolved as for encryption
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
        ``create_app`` and ``serve`` read both from ``REMEMBER_MAX_ENDED_SESSIONS``
        and ``REMEMBER_MAX_ENDED_PER_PRINCIPAL`` (``serve``: ``--max-ended-*``).
    :param max_ended_per_principal: each principal's share of those (every
        anonymous caller together is one): a caller that fills its share gets
        ``503`` for its own ``DELETE`` while everyone else can still end theirs.
    :param clock: every reading of the time (session issue and expiry, ended
        sessions): epoch milliseconds, :func:`~remember_sync._clock.system_clock`
        by default.
    :param rate_limit: at most this many requests per caller in any moving
        window, e.g. ``"60/minute"`` (``serve --rate-limit``,
        ``REMEMBER_RATE_LIMIT``); more get ``429`` with ``Retry-After``.  A
        caller is its principal; an anonymous one its verified session, else
        its network address.  Counted in the plugin's store, so every worker
        sharing it shares the limit (the in-process memory store counts per
        process).  Needs the ``limits`` extra; ``None``: no limit.  See
        ``docs/limits-and-metrics.rst``.
    :param metrics_path: serve the ``remember_sync.*`` metrics in the
        Prometheus text format at this path (``serve --metrics``:
        ``/metrics``), and start recording them.  Only a loopback peer that
        came through no proxy gets them, and only with a valid token when this
        server checks callers.  ``None`` (default): no such path.  With
        ``PROMETHEUS_MULTIPROC_DIR`` set (``prometheus_client``'s multiprocess
        mode), every process of the server shares its counts there, so the path
        reports them all.
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
        max_ended_per_principal: int = DEFAULT_MAX_PER_PRINCIPAL,
        cors_origins: Sequence[str] = (),
        clock: Clock = system_clock,
        rate_limit: str | None = None,
        metrics_path: str | None = None,
    ) -> None:
        if not isinstance(plugin, RememberPlugin):
            raise RememberInputTypeError(
                f"plugin must be a RememberPlugin; got {type(plugin).__name__}"
            )
        if max_body_bytes is None:
            max_body_bytes = default_max_body_bytes(plugin.max_value_bytes)
        if isinstance(cors_origins, str):
            raise RememberInputTypeError("cors_origins must be a list of origins, not one string")
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
            raise RememberInputError(
                f"max_body_bytes must be a positive int; got {max_body_bytes!r}"
            )
        if not callable(clock):
            raise RememberInputTypeError("clock must be a callable returning epoch milliseconds")
        if token_verifier is not None and not callable(token_verifier):
            raise RememberInputTypeError(
                "token_verifier must be a callable: token -> principal | None"
            )
        if principal_resolver is not None and not callable(principal_resolver):
            raise RememberInputTypeError(
                "principal_resolver must be a callable: environ -> principal | None"
            )
        self.plugin = plugin
        self.name = name
        self.version = version if version is not None else _package_version()
        self.instructions = instructions
        keyring = None
        if session_signer is None or rate_limit is not None:
            keyring = keyring_or_resolved(plugin.keyring)
        if session_signer is None:
            assert keyring is not None
            session_signer = SessionSigner(keyring)
        rate_limiter = None
        if rate_limit is not None:
            assert keyring is not None
            rate_limiter = RateLimiter(rate_limit, plugin.store, plugin.key_prefix, keyring)
        if metrics_path is not None and not (metrics_path.startswith("/") and metrics_path != path):
            raise RememberInputError(
                f"metrics_path must be a path of its own starting with '/'; got {metrics_path!r}"
            )
        if metrics_path is not None:
            _metrics.start(require_otel=False)
            problem = _metrics.share(os.environ)
            if problem is not None:
                raise RememberConfigurationError(problem)
        self._owns_plugin = owns_plugin
        self._user_tools: dict[str, UserTool] = {}
        self._listing: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        # Ended sessions (DELETE), kept until their signature expires anyway.
        self._ended = EndedSessions(
            plugin.store, plugin.key_prefix, max_local=max_ended_sessions,
            max_per_principal=max_ended_per_principal, clock=clock,
        )
        self._http = HttpEndpoint(
            token_verifier=token_verifier,
            principal_resolver=principal_resolver,
            path=path,
            allowed_hosts=(
                None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
            ),
            allowed_origins=frozenset(o.rstrip("/").lower() for o in allowed_origins) | cors,
            cors_origins=cors,
            max_body_bytes=max_body_bytes,
            metrics_path=metrics_path,
        )
        self._sessions = SessionGate(session_signer, self._ended, rate_limiter, clock)
        self._dispatch = ProtocolDispatch(self, self._sessions)

    # The HTTP endpoint's settings and the session gate's, readable and settable here.
    token_verifier: _Kept[TokenVerifier | None] = _Kept("_http")
    principal_resolver: _Kept[PrincipalResolver | None] = _Kept("_http")
    path: _Kept[str | None] = _Kept("_http")
    allowed_hosts: _Kept[frozenset[str] | None] = _Kept("_http")
    allowed_origins: _Kept[frozenset[str]] = _Kept("_http")
    cors_origins: _Kept[frozenset[str]] = _Kept("_http")
    max_body_bytes: _Kept[int] = _Kept("_http")
    metrics_path: _Kept[str | None] = _Kept("_http")
    session_signer: _Kept[SessionSigner] = _Kept("_sessions")
    rate_limiter: _Kept[RateLimiter | None] = _Kept("_sessions")

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        """The WSGI application."""
        return self._http.serve(environ, start_response, self._serve)

    def _serve(self, request: McpRequest) -> _Response:
        """An authenticated request: rate limit, then ``DELETE`` (end a session) or ``POST``."""
        refused = self._sessions.rate_check(request)
        if refused is not None:
            return refused
        if request.method == "DELETE":
            return self._sessions.end(request)
        body = self._http.read_post(request)
        if isinstance(body, _Response):
            return body
        return self._dispatch(request, body)

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
            raise RememberInputTypeError("add_tool takes a ToolContext subclass")
        if tool_class.execute is ToolContext.execute:
            raise RememberInputTypeError(
                f"{tool_class.__name__} must implement execute(self, input)"
            )
        fields = ("name", "description", "input_schema", "output_schema", "annotations", "title")
        self._register(UserTool(**{f: getattr(tool_class, f) for f in fields}, cls=tool_class))
        return tool_class

    def _register(self, tool: UserTool) -> None:
        with self._lock:
            memory = self.plugin.tools
            if memory is not None and memory.handles(tool.name):
                raise RememberInputError(f"tool name {tool.name!r} is taken by a memory tool")
            if tool.name in self._user_tools:
                raise RememberInputError(f"a tool named {tool.name!r} is already registered")
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
        memory = self.plugin.tools
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
