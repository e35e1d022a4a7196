"""Acceptance: the official ``mcp`` client against ``remember-sync serve`` in a subprocess.

Every server here is a real process on 127.0.0.1, on a port it picked itself
(``--port 0``; the startup line says which), stopped with SIGTERM or SIGINT
at teardown -- which also checks the clean shutdown.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from mcp import Client

from tests.conftest import TEST_SECRET, require_component
from tests.mcp_client import connect, error_code, run, structured
from tests.mcp_wire import DEFAULT_MAX_VALUE_BYTES, body_limit
from tests.served import Served, ServeFactory, serving, write_tokens

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
MODERN = "2026-07-28"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeFactory]:
    """Start ``python -m remember_sync serve --port 0 ARGS``; stopped (and checked) at teardown."""
    # These tests pin anonymous behaviour unless they choose an authentication.
    with serving(tmp_path, anonymous_unless=("--auth-tokens", "--no-token", "--allow-anonymous"),
                 stopped_banner=True) as start:
        yield start


@pytest.fixture
def server(serve: ServeFactory) -> Served:
    return serve()


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path / "tokens", {ALICE: "alice", BOB: "bob"}, "# token principal\n")


@pytest.fixture
def secured(serve: ServeFactory, tokens_file: Path) -> Served:
    return serve("--auth-tokens", str(tokens_file))


async def tool_error(client: Client, name: str, args: dict[str, Any]) -> str:
    """error_code: the code of our text form "<CODE>: <message>" (no structured content)."""
    return await error_code(client, name, args)


# -- acceptance ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_lists_the_memory_tools(server: Served, mode: str) -> None:
    """The client lists the memory tools with their schemas and annotations, in both eras."""

    async def main() -> None:
        async with connect(server.url, mode=mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
            if mode == "legacy":  # a pinned client adopts 2026-07-28 without asking the server
                assert client.server_info is not None
                assert client.server_info.name == "remember-sync"
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert list(tools) == [
                "remember_this", "recall", "forget", "list_memories", "search_memories"
            ]
            assert tools["remember_this"].input_schema["required"] == ["key", "value"]
            assert tools["forget"].annotations is not None
            assert tools["forget"].annotations.destructive_hint is True
            assert tools["recall"].annotations is not None
            assert tools["recall"].annotations.read_only_hint is True
            assert tools["list_memories"].output_schema is not None

    run(main)


def test_remember_then_recall_in_one_session(server: Served) -> None:
    """remember_this then recall in the same session finds the value."""

    async def main() -> None:
        async with connect(server.url) as client:
            stored = await structured(client, "remember_this",
                                      {"key": "theme", "value": {"mode": "dark"}, "ttl": 600})
            assert stored["success"] is True and stored["expiresAt"] > time.time() * 1000
            found = await structured(client, "recall", {"key": "theme"})
            assert found["found"] is True and found["value"] == {"mode": "dark"}
            assert found["expiresAt"] == stored["expiresAt"]
            listed = await structured(client, "list_memories", {})
            assert listed == {"keys": ["theme"], "scope": "session", "count": 1,
                              "truncated": False}

    run(main)


def test_second_session_cannot_recall_the_first(server: Served) -> None:
    """A second session does not see the first session's session-scope value."""

    async def main() -> None:
        async with connect(server.url) as first, connect(server.url) as second:
            await structured(first, "remember_this", {"key": "secret", "value": 42})
            assert (await structured(second, "recall", {"key": "secret"}))["found"] is False
            assert (await structured(first, "recall", {"key": "secret"}))["value"] == 42

    run(main)


def test_bearer_users_are_separated_and_shared_across_sessions(secured: Served) -> None:
    """With two users' tokens, user scope is per user and shared by each user's sessions."""

    async def main() -> None:
        async with connect(secured.url, token=ALICE) as alice1:
            await structured(alice1, "remember_this", {"key": "lang", "value": "fr",
                                                       "scope": "user"})
        async with connect(secured.url, token=ALICE) as alice2, \
                connect(secured.url, token=BOB) as bob:
            assert (await structured(alice2, "recall", {"key": "lang", "scope": "user"}))[
                "value"] == "fr"
            assert (await structured(bob, "recall", {"key": "lang", "scope": "user"}))[
                "found"] is False
            await structured(bob, "remember_this", {"key": "lang", "value": "de",
                                                    "scope": "user"})
            assert (await structured(alice2, "recall", {"key": "lang", "scope": "user"}))[
                "value"] == "fr"
        # The same user-scope memory through 2026-07-28 (no sessions, same principal).
        async with connect(secured.url, token=BOB, mode=MODERN) as bob_modern:
            assert (await structured(bob_modern, "recall", {"key": "lang", "scope": "user"}))[
                "value"] == "de"

    run(main)


def test_requests_without_a_valid_token_are_refused(secured: Served) -> None:
    """With --auth-tokens, a request without (or with a wrong) token gets 401."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert requests.post(secured.url, json=body, timeout=10).status_code == 401
    reply = requests.post(secured.url, json=body, timeout=10,
                          headers={"Authorization": "Bearer wrong"})
    assert reply.status_code == 401 and "invalid_token" in reply.headers["WWW-Authenticate"]


def test_anonymous_stateless_recall_in_session_scope_is_refused(server: Served) -> None:
    """A 2026-07-28 anonymous call to recall in session scope gets REMEMBER_IDENTITY_REQUIRED."""

    async def main() -> None:
        async with connect(server.url, mode=MODERN) as client:
            assert client.protocol_version == MODERN
            assert await tool_error(client, "recall", {"key": "k"}) == "REMEMBER_IDENTITY_REQUIRED"
            assert await tool_error(client, "remember_this", {"key": "k", "value": 1,
                                                              "scope": "tool"}
                                    ) == "REMEMBER_IDENTITY_REQUIRED"

    run(main)


def test_forged_session_id_gets_404(server: Served) -> None:
    """Raw HTTP: an Mcp-Session-Id the server did not issue gets 404; the issued one works."""
    headers = {"Accept": "application/json, text/event-stream"}
    init = requests.post(server.url, headers=headers, timeout=10, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}},
    })
    assert init.status_code == 200
    issued = init.headers["Mcp-Session-Id"]
    recall = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "recall", "arguments": {"key": "k"}}}
    good = requests.post(server.url, json=recall, timeout=10,
                         headers={**headers, "Mcp-Session-Id": issued})
    assert good.status_code == 200 and good.json()["result"]["isError"] is False
    for forged in ("forged-session", issued[:-4] + "AAAA", issued.replace("rs1.", "rs1.x", 1)):
        if forged == issued:
            continue
        reply = requests.post(server.url, json=recall, timeout=10,
                              headers={**headers, "Mcp-Session-Id": forged})
        assert reply.status_code == 404, forged
        assert reply.json()["error"]["message"] == "Session not found"


def test_recall_in_tool_scope_does_not_see_remember_this(server: Served) -> None:
    """Each memory tool has its own tool scope: recall does not see remember_this's value."""

    async def main() -> None:
        async with connect(server.url) as client:
            await structured(client, "remember_this", {"key": "k", "value": 1, "scope": "tool"})
            found = await structured(client, "recall", {"key": "k", "scope": "tool"})
            assert found == {"found": False, "key": "k", "scope": "tool"}

    run(main)


@pytest.mark.parametrize("mode", ["legacy", MODERN, "auto"])
def test_the_same_client_works_in_every_mode(secured: Served, mode: str) -> None:
    """The official client works with the handshake, pinned to 2026-07-28, and auto-negotiated."""

    async def main() -> None:
        async with connect(secured.url, mode=mode, token=ALICE) as client:
            expected = "2025-11-25" if mode == "legacy" else MODERN
            assert client.protocol_version == expected
            if mode != MODERN:  # initialize, or server/discover with its serverInfo stamp
                assert client.server_info is not None
                assert client.server_info.name == "remember-sync"
            key = f"note-{mode}"
            await structured(client, "remember_this", {"key": key, "value": [mode]})
            assert (await structured(client, "recall", {"key": key}))["value"] == [mode]
            assert key in (await structured(client, "list_memories", {}))["keys"]
            assert (await structured(client, "forget", {"key": key}))["existed"] is True
            code = await tool_error(client, "remember_this",
                                    {"key": key, "value": 1, "scope": "global"})
            assert code == "REMEMBER_SCOPE_NOT_ALLOWED"
            assert await tool_error(client, "remember_this", {"key": key}) == (
                "REMEMBER_INVALID_INPUT")

    run(main)


USER_APP = """
import sys
from remember_sync import RememberPlugin
from remember_sync.mcp import McpServer, ToolContext
from remember_sync.cli.serve import run_server

plugin = RememberPlugin.init(tools={"enabled": True, "prefix": "memory_"})
server = McpServer(plugin, name="user-tools")

@server.tool(
    name="greet",
    description="Greet someone and remember who was greeted last",
    input_schema={"type": "object", "properties": {"name": {"type": "string"}},
                  "required": ["name"]},
)
def greet(input, ctx):
    previous = ctx.remember.get("last_greeted", scope="session")
    ctx.remember.set("last_greeted", input["name"], scope="session")
    ctx.remember.set("count", ctx.remember.get("count", scope="tool", default=0) + 1,
                     scope="tool")
    return {"previous": previous, "count": ctx.remember.get("count", scope="tool")}

class SetTheme(ToolContext):
    name = "set_theme"
    description = "Set the user's theme"
    input_schema = {"type": "object", "properties": {"theme": {"enum": ["light", "dark"]}},
                    "required": ["theme"]}

    def execute(self, input):
        previous = self.remember.get("theme", scope="session", default="light")
        self.remember.set("theme", input["theme"], scope="session")
        return f"theme {previous} -> {input['theme']}"

server.add_tool(SetTheme)
sys.exit(run_server(server, port=0))
"""


def test_user_tools_in_both_styles_read_and_write_memory(tmp_path: Path) -> None:
    """A function tool and a ToolContext subclass read and write memory through the client."""
    served = Served([sys.executable, "-c", USER_APP], tmp_path)
    try:
        served.wait_ready()

        async def main() -> None:
            async with connect(served.url) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                assert names == ["memory_remember_this", "memory_recall", "memory_forget",
                                 "memory_list_memories", "memory_search_memories", "greet",
                                 "set_theme"]
                first = await structured(client, "greet", {"name": "Ada"})
                second = await structured(client, "greet", {"name": "Grace"})
                assert first == {"previous": None, "count": 1}
                assert second == {"previous": "Ada", "count": 2}
                themed = await client.call_tool("set_theme", {"theme": "dark"})
                assert themed.content[0].text == "theme light -> dark"  # type: ignore[union-attr]
                themed = await client.call_tool("set_theme", {"theme": "light"})
                assert themed.content[0].text == "theme dark -> light"  # type: ignore[union-attr]
                # The function tool's session value is visible to the memory tools;
                # its tool-scope counter is not (memory_recall is another tool).
                seen = await structured(client, "memory_recall", {"key": "last_greeted"})
                assert seen["value"] == "Grace"
                hidden = await structured(client, "memory_recall", {"key": "count",
                                                                    "scope": "tool"})
                assert hidden["found"] is False
                bad = await client.call_tool("set_theme", {"theme": "blue"})
                assert bad.is_error is True

        run(main)
    finally:
        assert served.stop(signal.SIGINT) == 0, served.output
    assert "remember-sync: stopped" in served.output


# -- the serve command -----------------------------------------------------------------------


def test_startup_line_names_store_secret_and_auth(secured: Served, tokens_file: Path) -> None:
    """The startup line says where it listens, the store and the secret source; no secret."""
    first = secured.lines[0]
    assert re.fullmatch(
        r"remember-sync: MCP server listening on http://127\.0\.0\.1:\d+/mcp \| "
        r"store: memory \(in-process; lost on exit; at most 256 MiB, 100000 entries\) \| "
        r"secret: env:REMEMBER_SECRET \| "
        r"auth: bearer tokens for 2 principal\(s\)",
        first,
    ), first
    assert TEST_SECRET not in secured.output and ALICE not in secured.output


def test_sigint_stops_the_server_cleanly(serve: ServeFactory) -> None:
    """Ctrl-C (SIGINT) stops the server with exit code 0 and a last line."""
    served = serve("--tools-prefix", "mem_", "--allowed-scopes", "user,global")
    assert "tools: mem_remember_this" in served.output
    assert "allowed scopes: user, global" in served.output
    assert served.stop(signal.SIGINT) == 0
    assert served.lines[-1] == "remember-sync: stopped"


def test_serve_refuses_a_token_file_others_can_read(tmp_path: Path, tokens_file: Path) -> None:
    """--auth-tokens with a file readable by others exits 1 with a clear message."""
    tokens_file.chmod(0o644)
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", "--auth-tokens",
         str(tokens_file)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "REMEMBER_SECRET": TEST_SECRET},
    )
    assert done.returncode == 1
    assert "chmod 600" in done.stderr and "0644" in done.stderr


def test_serve_rejects_bad_options(tmp_path: Path) -> None:
    """Bad option values are usage errors naming the option."""
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--allowed-scopes", "session,forever"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "--allowed-scopes" in done.stderr


def test_connections_are_kept_alive(server: Served) -> None:
    """Many requests travel over one HTTP/1.1 connection, even after a 413."""
    host, port = re.findall(r"http://([\d.]+):(\d+)", server.url)[0]
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    limit = body_limit(DEFAULT_MAX_VALUE_BYTES)
    try:
        conn.request("POST", "/mcp", json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}},
        }), headers)
        reply = conn.getresponse()
        assert reply.status == 200 and reply.read()
        headers["Mcp-Session-Id"] = reply.headers["Mcp-Session-Id"]
        conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
                     headers)
        reply = conn.getresponse()
        assert reply.status == 200 and reply.read()
        sock = conn.sock
        for i in range(5):
            conn.request("POST", "/mcp",
                         json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/list"}), headers)
            reply = conn.getresponse()
            assert reply.status == 200 and not reply.will_close
            reply.read()
        assert conn.sock is sock
        # An oversized body is refused unread, then drained: the connection is kept.
        conn.request("POST", "/mcp", b"x" * (limit + 500), headers)
        reply = conn.getresponse()
        assert reply.status == 413 and f"at most {limit} bytes".encode() in reply.read()
        conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
                     headers)
        reply = conn.getresponse()
        assert reply.status == 200 and reply.read() and conn.sock is sock
    finally:
        conn.close()
    after = requests.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                          headers={"Mcp-Session-Id": headers["Mcp-Session-Id"]}, timeout=10)
    assert after.status_code == 200


def test_gunicorn_runs_create_app_with_shared_redis(tmp_path: Path, redis_url: str,
                                                     redis_client: Any) -> None:
    """gunicorn 'remember_sync.mcp:create_app()' with 2 workers on Redis serves one memory."""
    try:
        import gunicorn  # noqa: F401
        available = True
    except ImportError:
        available = False
    require_component("gunicorn", available, "pip install gunicorn")
    served = Served(
        [sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", "127.0.0.1:0",
         "--graceful-timeout", "5", "remember_sync.mcp:create_app()"],
        tmp_path,
        env={"REMEMBER_REDIS_URL": redis_url, "REMEMBER_ENV": "production"},
    )
    try:
        served.wait_ready()

        async def main() -> None:
            async with connect(served.url) as client:
                await structured(client, "remember_this", {"key": "k", "value": "shared"})
                # Several fresh connections land on either worker: each verifies the
                # session and reads the same Redis.
                for _ in range(6):
                    async with connect(served.url) as other:
                        await other.list_tools()
                    found = await structured(client, "recall", {"key": "k"})
                    assert found["value"] == "shared"

        run(main)
        assert any(k.startswith(b"remember:v2:session:") for k in redis_client.keys("*"))
    finally:
        served.stop()


def test_serve_fails_fast_when_the_store_is_unreachable(tmp_path: Path) -> None:
    """--redis-url to a port nobody listens on: exit 1 naming the store, password hidden."""
    from remember_sync.testing.redis_server import free_port

    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", "--allow-anonymous",
         "--redis-url", url],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "REMEMBER_SECRET": TEST_SECRET},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot reach the store (redis redis://:***@127.0.0.1:" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr
