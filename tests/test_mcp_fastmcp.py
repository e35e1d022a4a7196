"""The memory tools on the ``mcp`` SDK's own server, driven by the SDK's in-process client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer

from remember_sync import Identity, RememberPlugin
from remember_sync.integrations.fastmcp import register_memory_tools
from tests.mcp_client import error_code, run, structured
from tests.test_tools import store_kind  # noqa: F401 - the fixture: one store (memory)

MODERN = "2026-07-28"
Factory = Callable[..., RememberPlugin]


@pytest.fixture
def tools_plugin(make_plugin: Factory) -> RememberPlugin:
    return make_plugin(tools={"enabled": True, "prefix": "memory_"})


@pytest.fixture
def server(tools_plugin: RememberPlugin) -> MCPServer:
    app = MCPServer("fastmcp-test")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    register_memory_tools(app, tools_plugin)
    return app


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_tools_are_listed_beside_the_servers_own(
    server: MCPServer, tools_plugin: RememberPlugin, mode: str
) -> None:
    """tools/list shows the server's tools and the four memory tools with our exact schemas."""

    async def main() -> None:
        async with Client(server, mode=mode) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert list(tools) == ["add", "memory_remember_this", "memory_recall",
                                   "memory_forget", "memory_list_memories",
                                   "memory_search_memories"]
            ours = {d["name"]: d for d in tools_plugin.tool_definitions()}
            for name, definition in ours.items():
                assert tools[name].input_schema == definition["inputSchema"]
                assert tools[name].output_schema == definition["outputSchema"]
                assert tools[name].description == definition["description"]
            assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {
                "result": 5}

    run(main)


def test_one_connection_is_one_session(server: MCPServer) -> None:
    """Over the in-process (stdio-like) transport each connection is its own session."""

    async def main() -> None:
        async with Client(server, mode="legacy") as first, Client(server, mode="legacy") as second:
            await structured(first, "memory_remember_this", {"key": "k", "value": [1, 2]})
            found = await structured(first, "memory_recall", {"key": "k"})
            assert found["found"] is True and found["value"] == [1, 2]
            assert (await structured(second, "memory_recall", {"key": "k"}))["found"] is False

    run(main)


def test_search_memories_through_the_sdk(server: MCPServer) -> None:
    """memory_search_memories finds what this session's model stored, marked as a tool write."""

    async def main() -> None:
        async with Client(server, mode="legacy") as first, Client(server, mode="legacy") as second:
            await structured(first, "memory_remember_this",
                             {"key": "trip", "value": "Flight to Lisbon on Friday"})
            found = await structured(first, "memory_search_memories", {"query": "lisbon flight"})
            assert [(r["key"], r["writtenBy"]) for r in found["results"]] == [
                ("trip", "memory_remember_this")]
            other = await structured(second, "memory_search_memories", {"query": "lisbon"})
            assert other == {"results": [], "count": 0}

    run(main)


def test_tool_scope_is_per_memory_tool(server: MCPServer) -> None:
    """memory_recall does not see what memory_remember_this stored in tool scope."""

    async def main() -> None:
        async with Client(server, mode="legacy") as client:
            await structured(client, "memory_remember_this",
                             {"key": "k", "value": 1, "scope": "tool"})
            assert (await structured(client, "memory_recall", {"key": "k", "scope": "tool"}))[
                "found"] is False

    run(main)


def test_modern_anonymous_session_scope_is_refused(server: MCPServer) -> None:
    """2026-07-28 has no sessions: an anonymous session-scope call is REMEMBER_IDENTITY_REQUIRED."""

    async def main() -> None:
        async with Client(server, mode=MODERN) as client:
            assert client.protocol_version == MODERN
            code = await error_code(client, "memory_recall", {"key": "k"})
            assert code == "REMEMBER_IDENTITY_REQUIRED"

    run(main)


def test_principal_resolver_gives_user_and_stateless_session(
    tools_plugin: RememberPlugin,
) -> None:
    """With a principal, user scope works and 2026-07-28 session scope falls back to it."""
    app = MCPServer("with-principal")
    seen: list[Any] = []

    def principal(ctx: Any) -> str:
        seen.append(ctx)
        return "alice"

    register_memory_tools(app, tools_plugin, principal=principal)

    async def main() -> None:
        async with Client(app, mode=MODERN) as client:
            await structured(client, "memory_remember_this", {"key": "k", "value": "v"})
            await structured(client, "memory_remember_this",
                             {"key": "u", "value": "w", "scope": "user"})
        async with Client(app, mode="legacy") as client:
            assert (await structured(client, "memory_recall", {"key": "u", "scope": "user"}))[
                "value"] == "w"

    run(main)
    assert tools_plugin.accessor(Identity(user_id="alice")).get("k") == "v"
    assert seen and all(getattr(ctx, "method", None) == "tools/call" for ctx in seen)


def test_validation_and_scope_errors_reach_the_client(server: MCPServer) -> None:
    """Bad arguments and a scope outside allowed_scopes are tool errors with their codes."""

    async def main() -> None:
        async with Client(server, mode="legacy") as client:
            assert await error_code(client, "memory_remember_this", {"key": "k"}) == (
                "REMEMBER_INVALID_INPUT")
            assert await error_code(client, "memory_recall", {"key": "k", "scope": "global"}) == (
                "REMEMBER_SCOPE_NOT_ALLOWED")

    run(main)


def test_low_level_server_without_tools_of_its_own(tools_plugin: RememberPlugin) -> None:
    """A low-level mcp.server.Server with no tools handler still lists and runs the memory tools."""
    app: Server[Any] = Server("bare")
    names = register_memory_tools(app, tools_plugin)
    assert names == ["memory_remember_this", "memory_recall", "memory_forget",
                     "memory_list_memories", "memory_search_memories"]

    async def main() -> None:
        for mode in ("legacy", MODERN):
            async with Client(app, mode=mode) as client:
                listed = [t.name for t in (await client.list_tools()).tools]
                assert listed == names
                result = await client.call_tool("memory_remember_this",
                                                {"key": "k", "value": 1, "scope": "tool"})
                assert result.is_error is (mode == MODERN)  # no session, no principal there

    run(main)


def test_register_refuses_disabled_tools_and_odd_servers(make_plugin: Factory) -> None:
    """Registering needs enabled tools and an SDK server with a middleware chain."""
    with pytest.raises(ValueError, match="disabled"):
        register_memory_tools(MCPServer("x"), make_plugin())
    with pytest.raises(TypeError, match="middleware"):
        register_memory_tools(object(), make_plugin(tools={"enabled": True}))


@pytest.mark.parametrize("stateless", [False, True])
def test_streamable_http_session_only_where_the_sdk_issued_it(
    server: MCPServer, tools_plugin: RememberPlugin, stateless: bool
) -> None:
    """Over the SDK's Streamable HTTP app the SDK's own session id binds; stateless binds none."""
    import re

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    app = server.streamable_http_app(json_response=True, stateless_http=stateless)
    url = "http://127.0.0.1:8000/mcp"

    async def main() -> None:
        async with app.router.lifespan_context(app), httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as http:
            async with Client(streamable_http_client(url, http_client=http),
                              mode="legacy") as first:
                stored = await first.call_tool("memory_remember_this", {"key": "k", "value": 1})
                if stateless:
                    assert stored.is_error is True and stored.structured_content is None
                    assert stored.content[0].text.startswith(  # type: ignore[union-attr]
                        "REMEMBER_IDENTITY_REQUIRED: ")
                    return
                assert (await structured(first, "memory_recall", {"key": "k"}))["value"] == 1
            async with Client(streamable_http_client(url, http_client=http),
                              mode="legacy") as second:
                assert (await structured(second, "memory_recall", {"key": "k"}))["found"] is False

    run(main)
    keys = list(tools_plugin.store.scan("*"))
    if stateless:
        assert keys == []
    else:
        (key,) = keys
        assert re.fullmatch(r"remember:v2:session:[0-9a-f]{32}:k", key), key
