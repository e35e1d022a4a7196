"""The memory tools on an ``mcp`` SDK server (``MCPServer``, formerly ``FastMCP``).

::

    from mcp.server.mcpserver import MCPServer
    from remember_sync import RememberPlugin
    from remember_sync.integrations.fastmcp import register_memory_tools

    plugin = RememberPlugin.init(tools={"enabled": True})
    server = MCPServer("my-server")
    register_memory_tools(server, plugin)

The memory tools are served by a middleware on the SDK server (``server.middleware``),
so they keep the exact schemas, descriptions and results of
:meth:`~remember_sync.RememberPlugin.tool_definitions` and
:meth:`~remember_sync.RememberPlugin.call_tool`: ``tools/list`` gets them
appended and ``tools/call`` for one of them runs it in a worker thread (the
plugin is synchronous; a Redis round trip must not block the event loop).
A server tool with the same name as a memory tool is shadowed by it.
Requires the ``mcp`` SDK 2.x; a low-level ``mcp.server.Server`` works too.

Identity is taken from the SDK's request context:

* **session** -- only where the SDK itself vouches for it.  On the stateful
  Streamable HTTP transport the SDK issues the ``Mcp-Session-Id`` and answers
  ``404`` to ids it does not know (or that belong to another credential), so
  its connection's session id is used.  On a long-lived connection without
  one (stdio, the in-process transport) the connection *is* the session: it
  gets a random id of its own, kept for the connection's life.  Stateless
  HTTP and protocol ``2026-07-28`` (no sessions) bind none: ``session`` scope
  then falls back to the principal, and an anonymous caller is refused.
* **principal** -- ``principal(ctx)`` when you pass one; else the SDK's
  verified access token (``mcp.server.auth``): its ``subject``, or its
  ``client_id``.  No token: anonymous.
* **tool** -- the memory tool being called.

The session is read from the SDK's per-connection state
(``ctx.session``'s connection); this was written against ``mcp`` 2.3.0.  If a
future SDK hides it, no session is bound (the safe direction).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any

import anyio.to_thread

from ..errors import RememberInputError, RememberInputTypeError
from ..identity import STATELESS_SESSION_ID
from ..plugin import RememberPlugin
from ..tools import error_result
from ..types import Identity

__all__ = ["PrincipalResolver", "register_memory_tools"]

#: ``ctx -> principal | None``: who is calling, from the SDK's ``ServerRequestContext``.
PrincipalResolver = Callable[[Any], "str | int | None"]

_MODERN_VERSIONS = ("2026-07-28",)
_CONNECTION_SESSION_KEY = "remember_sync.session_id"


def _connection(ctx: Any) -> Any:
    """The SDK ``Connection`` behind a request context (``None`` when not reachable)."""
    return getattr(getattr(ctx, "session", None), "_connection", None)


def session_id_for(ctx: Any) -> str | None:
    """The session id the SDK vouches for on this request, or ``None`` (see the module docs)."""
    if getattr(ctx, "protocol_version", None) in _MODERN_VERSIONS:
        return None  # 2026-07-28 has no sessions
    conn = _connection(ctx)
    if conn is None:
        return None
    sdk_session = getattr(conn, "session_id", None)
    if isinstance(sdk_session, str) and sdk_session and sdk_session != STATELESS_SESSION_ID:
        return sdk_session
    if getattr(conn, "has_standalone_channel", False):
        # A long-lived connection (stdio, in-process): one client, one channel.
        state = getattr(conn, "state", None)
        if isinstance(state, dict):
            value = state.get(_CONNECTION_SESSION_KEY)
            if value is None:
                value = state[_CONNECTION_SESSION_KEY] = "conn:" + secrets.token_urlsafe(18)
            return str(value)
    return None  # stateless HTTP: a fresh connection per request


def sdk_principal(ctx: Any) -> str | None:
    """The principal of the SDK's verified access token: ``subject``, else ``client_id``."""
    from mcp.server.auth.middleware.auth_context import get_access_token

    token = get_access_token()
    if token is None:
        return None
    return token.subject or token.client_id or None


def register_memory_tools(
    server: Any,
    plugin: RememberPlugin,
    *,
    principal: PrincipalResolver | None = None,
) -> list[str]:
    """Serve *plugin*'s memory tools on the ``mcp`` SDK *server*.

    :param server: an ``mcp.server.mcpserver.MCPServer`` or a low-level
        ``mcp.server.Server`` (anything with a ``middleware`` list).
    :param plugin: a plugin built with ``tools={"enabled": True}``.
    :param principal: ``ctx -> principal | None``; default :func:`sdk_principal`.
    :returns: the registered tool names.
    :raises RememberInputError: (a :class:`ValueError`) the plugin's tools are not enabled.
    """
    tools = plugin.tools
    if tools is None:
        raise RememberInputError(
            "the plugin's memory tools are disabled; build it with tools={'enabled': True}"
        )
    chain = getattr(server, "middleware", None)
    if not isinstance(chain, list):
        raise RememberInputTypeError(
            f"{type(server).__name__} has no middleware list; pass an mcp SDK 2.x MCPServer "
            "or mcp.server.Server"
        )
    middleware = _MemoryToolsMiddleware(plugin, principal or sdk_principal)
    chain.append(middleware)
    return list(tools.names.values())


class _MemoryToolsMiddleware:
    """Lists the memory tools and answers calls to them; everything else passes through."""

    def __init__(self, plugin: RememberPlugin, principal: PrincipalResolver) -> None:
        self._plugin = plugin
        self._principal = principal

    def __repr__(self) -> str:
        return f"MemoryToolsMiddleware({self._plugin!r})"

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        method = getattr(ctx, "method", None)
        if method == "tools/list":
            return await self._list(ctx, call_next)
        if method == "tools/call":
            params = ctx.params if isinstance(ctx.params, Mapping) else {}
            name = params.get("name")
            tools = self._plugin.tools
            conn = _connection(ctx)
            ready = conn is None or getattr(conn, "initialize_accepted", True)
            if isinstance(name, str) and tools is not None and tools.handles(name) and ready:
                return await self._call(ctx, name, params.get("arguments"))
        return await call_next(ctx)

    async def _list(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp_types import METHOD_NOT_FOUND

        try:
            result = await call_next(ctx)
        except MCPError as exc:
            if exc.code != METHOD_NOT_FOUND:
                raise
            result = {"tools": []}  # a server with no tools of its own
            if getattr(ctx, "protocol_version", None) in _MODERN_VERSIONS:
                result.update(resultType="complete", ttlMs=0, cacheScope="public")
        listing = _as_dict(result)
        if listing.get("nextCursor") is None:  # ours go on the last page
            ours = self._plugin.tool_definitions()
            names = {d["name"] for d in ours}
            kept = [t for t in listing.get("tools", []) if t.get("name") not in names]
            listing["tools"] = kept + ours
        return listing

    async def _call(self, ctx: Any, name: str, arguments: Any) -> dict[str, Any]:
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            return error_result("REMEMBER_INVALID_INPUT", "the arguments must be an object")
        who = Identity(session_id=session_id_for(ctx), user_id=self._principal(ctx))
        plugin = self._plugin
        args = dict(arguments)

        def run() -> dict[str, Any]:
            return plugin.call_tool(name, args, identity=who)

        result: dict[str, Any] = await anyio.to_thread.run_sync(run)
        if getattr(ctx, "protocol_version", None) in _MODERN_VERSIONS:
            # Short-circuiting the chain skips the SDK's result envelope: 2026-07-28
            # results must say what they are.
            result["resultType"] = "complete"
        return result


def _as_dict(result: Any) -> dict[str, Any]:
    if result is None:
        return {"tools": []}
    if isinstance(result, Mapping):
        return dict(result)
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        dumped: dict[str, Any] = dump(by_alias=True, mode="json", exclude_none=True)
        return dumped
    raise TypeError(f"unexpected tools/list result {type(result).__name__}")
