"""The MCP WSGI app at the WSGI level: every JSON-RPC and HTTP error path, both eras."""

from __future__ import annotations

import base64
import io
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin, current_identity
from remember_sync.mcp import McpServer, ToolContext, ToolError
from tests.mcp_wire import MODERN, Reply, call, initialize, modern, rpc, tool_code

TOKENS = {"alice-token-0123456789": "alice", "bob-token-0123456789ab": "bob"}


class Wsgi:
    """Calls the app the way a WSGI server does (no sockets).

    After :meth:`started` every request carries the session's ``Mcp-Session-Id``
    unless it names one itself (handshake-era requests other than ``initialize``
    need one).
    """

    def __init__(self, app: McpServer) -> None:
        self.app = app
        self.read: list[int] = []
        self.session_id: str | None = None

    def started(self, headers: dict[str, str] | None = None) -> Wsgi:
        """Initialize a session that later requests carry; returns self."""
        self.session_id = self.initialize(headers)
        return self

    def request(
        self,
        body: Any = None,
        *,
        method: str = "POST",
        path: str = "/mcp",
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        content_type: str | None = "application/json",
        length: str | None = None,
    ) -> Reply:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        stream = io.BytesIO(data)
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8765",
            "wsgi.input": stream,
            "HTTP_ACCEPT": "application/json, text/event-stream",
            "HTTP_HOST": "127.0.0.1:8765",
        }
        if content_type is not None:
            environ["CONTENT_TYPE"] = content_type
        environ["CONTENT_LENGTH"] = str(len(data)) if length is None else length
        sent = dict(headers or {})
        if self.session_id is not None:
            sent.setdefault("Mcp-Session-Id", self.session_id)
        for name, value in sent.items():
            key = name.upper().replace("-", "_")
            if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[key] = value
            else:
                environ["HTTP_" + key] = value
        captured: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
            captured["status"] = int(status.split()[0])
            captured["headers"] = dict(response_headers)

        chunks = self.app(environ, start_response)
        self.read.append(stream.tell())
        return Reply(captured["status"], captured["headers"], b"".join(chunks))

    # JSON-RPC helpers

    def initialize(self, headers: dict[str, str] | None = None, version: str = "2025-11-25") -> str:
        reply = self.request(
            initialize(version),
            headers=headers,
        )
        assert reply.status == 200, reply
        return reply.headers["Mcp-Session-Id"]

    def modern(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        version: str = MODERN,
        request_id: Any = 1,
    ) -> Reply:
        message, sent = modern(method, params, version=version, request_id=request_id)
        return self.request(message, headers={**sent, **(headers or {})})


@pytest.fixture(params=["memory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tools_plugin(make_plugin: Callable[..., RememberPlugin]) -> RememberPlugin:
    return make_plugin(tools={"enabled": True})


@pytest.fixture
def app(tools_plugin: RememberPlugin) -> McpServer:
    return McpServer(tools_plugin, max_body_bytes=2000)


@pytest.fixture
def client(app: McpServer) -> Wsgi:
    """A client in a session (handshake-era requests need one)."""
    return Wsgi(app).started()


@pytest.fixture
def secured(tools_plugin: RememberPlugin) -> Wsgi:
    return Wsgi(McpServer(tools_plugin, token_verifier=TOKENS.get))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- HTTP layer ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "OPTIONS"])
def test_methods_other_than_post_and_delete_get_405(client: Wsgi, method: str) -> None:
    """GET (no SSE stream is ever opened) and other methods get 405 with Allow."""
    reply = client.request(method=method)
    assert reply.status == 405 and reply.headers["Allow"] == "POST, DELETE"
    assert reply.error["code"] == -32600


def test_other_paths_get_404(client: Wsgi) -> None:
    """Only the endpoint path is served."""
    reply = client.request(rpc("ping"), path="/other")
    assert reply.status == 404 and "/mcp" in reply.error["message"]


def test_bad_json_is_a_parse_error(client: Wsgi) -> None:
    """A body that is not JSON gets JSON-RPC -32700 with HTTP 400."""
    reply = client.request(raw=b'{"jsonrpc": "2.0", "id": 1,')
    assert reply.status == 400 and reply.error["code"] == -32700 and reply.json["id"] is None


def test_body_over_the_limit_gets_413_unread(client: Wsgi) -> None:
    """A body over max_body_bytes gets 413 with a clear JSON error, and is not read."""
    reply = client.request(call("remember_this", {"key": "k", "value": "x" * 3000}))
    assert reply.status == 413
    assert "at most 2000 bytes" in reply.error["message"] and client.read[-1] == 0


def test_missing_length_gets_411(client: Wsgi) -> None:
    """Without Content-Length (and no terminated input) the server asks for one."""
    assert client.request(rpc("ping"), length="").status == 411


def test_bad_length_gets_400(client: Wsgi) -> None:
    """A malformed Content-Length is a 400."""
    assert client.request(rpc("ping"), length="12x").status == 400


def test_terminated_input_without_length_is_read_up_to_the_limit(app: McpServer) -> None:
    """A server that terminates wsgi.input (gunicorn, chunked) works without Content-Length."""
    body = json.dumps(rpc("ping")).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/mcp", "CONTENT_TYPE": "application/json",
               "wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True,
               "HTTP_MCP_SESSION_ID": Wsgi(app).initialize()}
    statuses: list[str] = []
    out = b"".join(app(environ, lambda status, headers: statuses.append(status)))
    assert statuses == ["200 OK"] and json.loads(out)["result"] == {}
    environ.update({"wsgi.input": io.BytesIO(b"x" * 5000)})
    app(environ, lambda status, headers: statuses.append(status))
    assert statuses[-1].startswith("413")


def test_wrong_content_type_gets_415(client: Wsgi) -> None:
    """Only application/json bodies are accepted."""
    assert client.request(rpc("ping"), content_type="text/plain").status == 415
    assert client.request(rpc("ping"), content_type=None).status == 415
    assert client.request(rpc("ping"), content_type="application/json; charset=utf-8").status == 200


def test_accept_without_json_gets_406(client: Wsgi) -> None:
    """A client that does not accept application/json gets 406; a missing Accept is fine."""
    assert client.request(rpc("ping"), headers={"Accept": "text/event-stream"}).status == 406
    assert client.request(rpc("ping"), headers={"Accept": "*/*"}).status == 200


def test_foreign_origin_gets_403(client: Wsgi, tools_plugin: RememberPlugin) -> None:
    """A browser page from another origin is refused; loopback and listed origins are not."""
    assert client.request(rpc("ping"), headers={"Origin": "https://evil.example"}).status == 403
    assert client.request(rpc("ping"), headers={"Origin": "http://localhost:3000"}).status == 200
    listed = Wsgi(McpServer(tools_plugin, allowed_origins=["https://app.example"])).started()
    assert listed.request(rpc("ping"), headers={"Origin": "https://app.example"}).status == 200


def test_unexpected_host_gets_403(tools_plugin: RememberPlugin) -> None:
    """With allowed_hosts (serve sets it on loopback) another Host header is refused."""
    guarded = Wsgi(McpServer(tools_plugin, allowed_hosts=["127.0.0.1:8765"])).started()
    assert guarded.request(rpc("ping")).status == 200
    assert guarded.request(rpc("ping"), headers={"Host": "rebound.example:8765"}).status == 403


def test_crash_is_a_500_without_details(
    app: McpServer, client: Wsgi, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An unexpected failure answers 500 with a generic JSON-RPC error; details go to the log."""

    def explode(*args: Any) -> Any:
        raise RuntimeError("internal path /srv/secret")

    monkeypatch.setattr(app, "_dispatch", explode)
    with caplog.at_level(logging.ERROR, logger="remember_sync.mcp"):
        reply = client.request(rpc("tools/list"))
    assert reply.status == 500 and reply.error == {"code": -32603,
                                                   "message": "Internal server error"}
    assert "/srv/secret" in caplog.text


# -- bearer tokens ---------------------------------------------------------------------------


def test_missing_token_gets_401_with_challenge(secured: Wsgi) -> None:
    """With a verifier, a request without a bearer token gets 401 and WWW-Authenticate."""
    reply = secured.request(rpc("ping"))
    assert reply.status == 401
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="remember-sync"'
    assert secured.request(rpc("ping"), headers={"Authorization": "Basic abc"}).status == 401


def test_invalid_token_gets_401(secured: Wsgi) -> None:
    """An unknown token gets 401 with error="invalid_token"."""
    reply = secured.request(rpc("ping"), headers=bearer("nope"))
    assert reply.status == 401 and 'error="invalid_token"' in reply.headers["WWW-Authenticate"]


def test_raising_verifier_refuses(tools_plugin: RememberPlugin) -> None:
    """A verifier that raises refuses the request (401), it never lets it through."""

    def verifier(token: str) -> str | None:
        raise ConnectionError("introspection endpoint down")

    reply = Wsgi(McpServer(tools_plugin, token_verifier=verifier)).request(
        rpc("ping"), headers=bearer("anything")
    )
    assert reply.status == 401


def test_valid_token_sets_the_principal(secured: Wsgi) -> None:
    """A valid token's principal is the caller's user_id (user scope works)."""
    alice = bearer("alice-token-0123456789")
    alice["Mcp-Session-Id"] = secured.initialize(headers=alice)
    reply = secured.request(call("remember_this", {"key": "k", "value": 1, "scope": "user"}),
                            headers=alice)
    assert reply.status == 200 and reply.result["isError"] is False
    stored = secured.app.plugin.accessor(Identity(user_id="alice")).get("k", scope="user")
    assert stored == 1


# -- the handshake era -----------------------------------------------------------------------


def test_initialize_issues_a_verifiable_session(client: Wsgi, app: McpServer) -> None:
    """initialize answers the protocol result and an Mcp-Session-Id the server can verify."""
    reply = client.request(rpc("initialize", {"protocolVersion": "2025-03-26"}))
    assert reply.result["protocolVersion"] == "2025-03-26"
    assert reply.result["serverInfo"]["name"] == "remember-sync"
    assert reply.result["capabilities"] == {"tools": {"listChanged": False}}
    assert app.session_signer.verify(reply.headers["Mcp-Session-Id"], None)


def test_initialize_counter_offers_the_latest_handshake_version(client: Wsgi) -> None:
    """An unknown requested version is answered with the newest handshake revision."""
    reply = client.request(rpc("initialize", {"protocolVersion": "1999-01-01"}))
    assert reply.result["protocolVersion"] == "2025-11-25"


def test_initialize_without_protocol_version_is_invalid_params(client: Wsgi) -> None:
    """initialize needs params.protocolVersion."""
    reply = client.request(rpc("initialize", {}))
    assert reply.status == 200 and reply.error["code"] == -32602


def test_notifications_and_replies_get_202(client: Wsgi) -> None:
    """A notification (or a reply to a server request) gets 202 with no body."""
    reply = client.request({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (reply.status, reply.body) == (202, b"")
    assert client.request({"jsonrpc": "2.0", "id": 9, "result": {}}).status == 202


def test_ping_and_tools_list(client: Wsgi) -> None:
    """ping answers {}, tools/list the memory tools."""
    assert client.request(rpc("ping")).result == {}
    names = [t["name"] for t in client.request(rpc("tools/list")).result["tools"]]
    assert names == ["remember_this", "recall", "forget", "list_memories", "search_memories"]


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        ([], -32600, 400),
        (5, -32600, 400),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600, 400),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, -32600, 400),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, -32600, 400),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600, 400),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, -32600, 400),
        ({"jsonrpc": "2.0", "id": 1}, -32600, 400),
        (rpc("no/such/method"), -32601, 200),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}, -32602, 200),
        (rpc("tools/list", {"cursor": "abc"}), -32602, 200),
        (rpc("tools/call", {"arguments": {}}), -32602, 200),
        (rpc("tools/call", {"name": "recall", "arguments": [1]}), -32602, 200),
        (call("no_such_tool"), -32602, 200),
        (rpc("server/discover", {}), -32601, 200),
    ],
)
def test_json_rpc_errors_in_the_handshake_era(
    client: Wsgi, body: Any, code: int, status: int
) -> None:
    """Bad shapes are -32600 (400); unknown methods -32601, bad params -32602 (in a 200)."""
    reply = client.request(body)
    assert (reply.status, reply.error["code"]) == (status, code)


def test_string_request_ids_are_echoed(client: Wsgi) -> None:
    """A string id comes back as the same string."""
    assert client.request(rpc("ping", request_id="abc")).json["id"] == "abc"


def test_session_scope_needs_the_issued_session(client: Wsgi) -> None:
    """The issued session binds session scope; the same value is not visible without it."""
    sid = client.initialize()
    stored = client.request(call("remember_this", {"key": "k", "value": 1}),
                            headers={"Mcp-Session-Id": sid})
    assert stored.result["isError"] is False
    found = client.request(call("recall", {"key": "k"}), headers={"Mcp-Session-Id": sid})
    assert found.result["structuredContent"]["value"] == 1
    other = client.request(call("recall", {"key": "k"}))  # the client's own session
    assert other.result["structuredContent"]["found"] is False


def test_requests_without_a_session_get_400(app: McpServer) -> None:
    """Only initialize may come without Mcp-Session-Id: requests, notifications, replies get 400."""
    sessionless = Wsgi(app)
    for body in (
        call("recall", {"key": "k"}),
        rpc("ping"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 9, "result": {}},
    ):
        reply = sessionless.request(body)
        assert reply.status == 400, body
        assert reply.error["message"] == "Bad Request: Mcp-Session-Id header is required"
    # An empty header names no session: 400 as well (not 404, which means "start over").
    assert sessionless.request(rpc("ping"), headers={"Mcp-Session-Id": ""}).status == 400


@pytest.mark.parametrize("kind", ["random", "tampered", "other-secret", "garbage"])
def test_unissued_session_id_gets_404(
    client: Wsgi, app: McpServer, kind: str, make_plugin: Callable[..., RememberPlugin]
) -> None:
    """A session id the server did not issue gets 404 and never binds."""
    sid = client.initialize()
    if kind == "other-secret":  # a real id, issued by a server holding another secret
        other = make_plugin(encryption={"secrets": ["another-secret-0123456789abcdef"]})
        forged = Wsgi(McpServer(other)).initialize()
    else:
        forged = {
            "random": f"rs1.{'A' * 24}.{int(time.time() * 1000):x}.{'A' * 43}",
            "tampered": sid[:-2] + ("AA" if not sid.endswith("AA") else "BB"),
            "garbage": "my-own-session",
        }[kind]
    for body in (call("recall", {"key": "k"}), rpc("initialize", {"protocolVersion": "x"})):
        reply = client.request(body, headers={"Mcp-Session-Id": forged})
        assert reply.status == 404 and reply.error["message"] == "Session not found"


def test_session_of_another_principal_gets_404(secured: Wsgi) -> None:
    """A session issued to alice presented with bob's token gets 404."""
    sid = secured.initialize(headers=bearer("alice-token-0123456789"))
    ok = secured.request(rpc("ping"), headers={**bearer("alice-token-0123456789"),
                                               "Mcp-Session-Id": sid})
    assert ok.status == 200
    reply = secured.request(rpc("ping"), headers={**bearer("bob-token-0123456789ab"),
                                                  "Mcp-Session-Id": sid})
    assert reply.status == 404


def test_delete_ends_a_session(client: Wsgi) -> None:
    """DELETE with an issued session answers 204; the id then gets 404."""
    sid = client.initialize()
    reply = client.request(method="DELETE", headers={"Mcp-Session-Id": sid})
    assert (reply.status, reply.body) == (204, b"")
    assert "Content-Length" not in reply.headers
    assert client.request(rpc("ping"), headers={"Mcp-Session-Id": sid}).status == 404
    assert client.request(method="DELETE", headers={"Mcp-Session-Id": sid}).status == 404


def test_delete_needs_an_issued_session(app: McpServer) -> None:
    """DELETE without a session id is 400; with a forged one 404."""
    client = Wsgi(app)
    assert client.request(method="DELETE").status == 400
    assert client.request(method="DELETE", headers={"Mcp-Session-Id": "forged"}).status == 404


# -- 2026-07-28 ------------------------------------------------------------------------------


def test_discover_describes_the_server(client: Wsgi) -> None:
    """server/discover answers the supported versions, capabilities and serverInfo stamp."""
    reply = client.modern("server/discover")
    assert reply.status == 200 and "Mcp-Session-Id" not in reply.headers
    result = reply.result
    assert result["supportedVersions"] == [MODERN]
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["resultType"] == "complete" and result["ttlMs"] == 0
    assert result["cacheScope"] == "public"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "remember-sync"


def test_modern_tools_list_and_call_carry_the_envelope(client: Wsgi) -> None:
    """tools/list has cache hints; every result has resultType and the serverInfo stamp."""
    listed = client.modern("tools/list").result
    assert (listed["resultType"], listed["ttlMs"], listed["cacheScope"]) == ("complete", 0,
                                                                             "public")
    assert len(listed["tools"]) == 5
    called = client.modern("tools/call", {"name": "recall", "arguments": {"key": "k"}}).result
    assert called["resultType"] == "complete" and "io.modelcontextprotocol/serverInfo" in called[
        "_meta"]


def test_modern_anonymous_session_scope_is_refused(client: Wsgi) -> None:
    """2026-07-28 has no sessions: anonymous session scope is REMEMBER_IDENTITY_REQUIRED."""
    reply = client.modern("tools/call", {"name": "recall", "arguments": {"key": "k"}})
    assert reply.result["isError"] is True
    assert tool_code(reply.result) == "REMEMBER_IDENTITY_REQUIRED"


def test_modern_ignores_session_ids(client: Wsgi) -> None:
    """Under 2026-07-28 an Mcp-Session-Id, even an issued one, is never bound."""
    sid = client.initialize()
    reply = client.modern("tools/call", {"name": "recall", "arguments": {"key": "k"}},
                          headers={"Mcp-Session-Id": sid})
    assert tool_code(reply.result) == "REMEMBER_IDENTITY_REQUIRED"
    forged = client.modern("tools/list", headers={"Mcp-Session-Id": "forged"})
    assert forged.status == 200


def test_modern_session_scope_falls_back_to_the_principal(secured: Wsgi) -> None:
    """With a bearer token, 2026-07-28 session scope is stateless-user:<principal>."""
    alice = bearer("alice-token-0123456789")
    secured.modern("tools/call", {"name": "remember_this", "arguments": {"key": "k", "value": 2}},
                   headers=alice)
    mem = secured.app.plugin.accessor(Identity(user_id="alice"))
    assert mem.get("k") == 2
    again = secured.modern("tools/call", {"name": "recall", "arguments": {"key": "k"}},
                           headers=alice)
    assert again.result["structuredContent"]["value"] == 2


@pytest.mark.parametrize(
    ("mutate", "code", "status"),
    [
        (lambda m, h: m["params"].pop("_meta"), -32602, 400),
        (lambda m, h: m["params"]["_meta"].pop("io.modelcontextprotocol/clientCapabilities"),
         -32602, 400),
        (lambda m, h: h.update({"MCP-Protocol-Version": "2025-11-25x"}), -32020, 400),
        (lambda m, h: h.pop("Mcp-Method"), -32020, 400),
        (lambda m, h: h.update({"Mcp-Method": "tools/list"}), -32020, 400),
        (lambda m, h: h.update({"Mcp-Name": "forget"}), -32020, 400),
        (lambda m, h: h.pop("Mcp-Name"), -32020, 400),
        (lambda m, h: m.update({"method": "ping"}) or h.update({"Mcp-Method": "ping"}),
         -32601, 404),
        (lambda m, h: m.update({"method": "initialize"}) or h.update({"Mcp-Method": "initialize"}),
         -32601, 404),
        (lambda m, h: m["params"].update({"name": "nope"}) or h.update({"Mcp-Name": "nope"}),
         -32602, 400),
        (lambda m, h: m.update({"params": [1]}), -32600, 400),
        (lambda m, h: m.update({"id": None}), -32600, 400),
    ],
)
def test_modern_ladder_rejections(
    client: Wsgi, mutate: Callable[[dict[str, Any], dict[str, str]], Any], code: int,
    status: int,
) -> None:
    """The 2026-07-28 envelope and header checks answer the SDK's codes and HTTP statuses."""
    message = rpc("tools/call", {
        "name": "recall",
        "arguments": {"key": "k"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientCapabilities": {}},
    })
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "recall"}
    mutate(message, headers)
    reply = client.request(message, headers=headers)
    assert (reply.status, reply.error["code"]) == (status, code), reply.body


def test_modern_unsupported_version_names_the_supported_ones(client: Wsgi) -> None:
    """A version this server does not serve gets -32022 with supported/requested data."""
    reply = client.modern("tools/list", version="2099-01-01")
    assert reply.status == 400 and reply.error["code"] == -32022
    assert reply.error["data"] == {
        "supported": ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN],
        "requested": "2099-01-01",
    }


def test_modern_notifications(client: Wsgi) -> None:
    """2026-07-28 notifications are accepted and dropped (202); at another version, -32022."""
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    assert client.request(note, headers={"MCP-Protocol-Version": MODERN}).status == 202
    reply = client.request(note, headers={"MCP-Protocol-Version": "2099-01-01"})
    assert reply.status == 400 and reply.error["code"] == -32022
    bad = client.request({"jsonrpc": "2.0", "method": 7}, headers={"MCP-Protocol-Version": MODERN})
    assert bad.status == 400 and bad.error["code"] == -32600


def test_modern_batches_and_parse_errors(client: Wsgi) -> None:
    """At 2026-07-28 batches are -32600 and bad JSON -32700, both HTTP 400."""
    batch = client.request([rpc("tools/list")], headers={"MCP-Protocol-Version": MODERN})
    assert (batch.status, batch.error["code"]) == (400, -32600)
    parse = client.request(raw=b"[", headers={"MCP-Protocol-Version": MODERN})
    assert (parse.status, parse.error["code"]) == (400, -32700)


def test_modern_name_header_may_be_base64_wrapped(tools_plugin: RememberPlugin) -> None:
    """A non-ASCII tool name travels as =?base64?...?= in Mcp-Name and still matches."""
    app = McpServer(tools_plugin)

    @app.tool(name="größe", description="a non-ASCII name")
    def size(input: dict[str, Any], ctx: ToolContext) -> str:
        return "ok"

    wrapped = "=?base64?" + base64.b64encode("größe".encode()).decode() + "?="
    client = Wsgi(app)
    reply = client.modern("tools/call", {"name": "größe", "arguments": {}},
                          headers={"Mcp-Name": wrapped})
    assert reply.result["content"] == [{"type": "text", "text": "ok"}]
    bad = client.modern("tools/call", {"name": "größe", "arguments": {}},
                        headers={"Mcp-Name": "=?base64?!!!?="})
    assert bad.error["code"] == -32020


# -- user tools ------------------------------------------------------------------------------


def test_function_tool_gets_a_tool_scoped_accessor(client: Wsgi, app: McpServer) -> None:
    """A function tool's ctx.remember is the caller with tool_name = the tool; input validated."""
    seen: list[Identity] = []

    @app.tool(name="counter", description="count calls",
              input_schema={"type": "object", "properties": {"step": {"type": "integer"}},
                            "required": ["step"], "additionalProperties": False})
    def counter(input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        seen.append(current_identity())
        total = ctx.remember.get("total", scope="tool", default=0) + input["step"]
        ctx.remember.set("total", total, scope="tool")
        return {"total": total}

    sid = client.initialize()
    for expected in (2, 4):
        reply = client.request(call("counter", {"step": 2}), headers={"Mcp-Session-Id": sid})
        assert reply.result["structuredContent"] == {"total": expected}
    assert seen[0] == Identity(session_id=sid, user_id=None, tool_name="counter")
    bad = client.request(call("counter", {"step": "x"}), headers={"Mcp-Session-Id": sid})
    assert bad.result["isError"] is True
    assert tool_code(bad.result) == "REMEMBER_INVALID_INPUT"
    names = [t["name"] for t in client.request(rpc("tools/list")).result["tools"]]
    assert names[-1] == "counter" and len(names) == 6


def test_class_tool_uses_self_remember(client: Wsgi, app: McpServer) -> None:
    """A ToolContext subclass's execute() reads and writes through self.remember."""

    @app.add_tool
    class Preferences(ToolContext):
        name = "set_theme"
        description = "Set the theme"
        input_schema = {"type": "object", "properties": {"theme": {"enum": ["light", "dark"]}},
                        "required": ["theme"]}
        output_schema = {"type": "object", "properties": {"previous": {}},
                         "required": ["previous"]}

        def execute(self, input: dict[str, Any]) -> dict[str, Any]:
            previous = self.remember.get("theme", scope="session")
            self.remember.set("theme", input["theme"], scope="session")
            assert self.tool_name == "set_theme"
            return {"previous": previous}

    sid = client.initialize()
    first = client.request(call("set_theme", {"theme": "dark"}), headers={"Mcp-Session-Id": sid})
    second = client.request(call("set_theme", {"theme": "light"}), headers={"Mcp-Session-Id": sid})
    assert first.result["structuredContent"] == {"previous": None}
    assert second.result["structuredContent"] == {"previous": "dark"}
    definition = client.request(rpc("tools/list")).result["tools"][-1]
    assert definition["outputSchema"]["required"] == ["previous"]


def test_tool_errors_and_crashes_become_tool_errors(
    client: Wsgi, app: McpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """ToolError keeps its code and message; any other exception is internal and logged."""

    @app.tool(name="picky", description="refuses")
    def picky(input: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError("try again tomorrow", code="TOO_EARLY")

    @app.tool(name="buggy", description="crashes")
    def buggy(input: dict[str, Any], ctx: ToolContext) -> str:
        raise KeyError("database password=hunter2")

    refused = client.request(call("picky")).result
    assert refused == {"content": [{"type": "text", "text": "TOO_EARLY: try again tomorrow"}],
                       "isError": True}
    with caplog.at_level(logging.ERROR, logger="remember_sync"):
        crashed = client.request(call("buggy")).result
    assert tool_code(crashed) == "REMEMBER_INTERNAL_ERROR"
    assert "hunter2" not in json.dumps(crashed) and "hunter2" in caplog.text


def test_results_are_shaped_by_type(client: Wsgi, app: McpServer) -> None:
    """str -> one text block; dict -> structuredContent; other JSON -> its text."""

    @app.tool(name="many", description="returns a list")
    def many(input: dict[str, Any], ctx: ToolContext) -> list[int]:
        return [1, 2]

    result = client.request(call("many")).result
    assert result == {"content": [{"type": "text", "text": "[1,2]"}], "isError": False}


def test_output_schema_violations_are_internal(client: Wsgi, app: McpServer) -> None:
    """A tool breaking its own output_schema is reported as an internal error."""

    @app.tool(name="liar", description="bad output", output_schema={
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    def liar(input: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {"n": "one"}

    result = client.request(call("liar")).result
    assert tool_code(result) == "REMEMBER_INTERNAL_ERROR"


def test_registration_errors(app: McpServer) -> None:
    """Duplicate or reserved names, async functions and missing execute are refused early."""

    def plain(input: dict[str, Any], ctx: ToolContext) -> str:
        return ""

    async def coroutine(input: dict[str, Any], ctx: ToolContext) -> str:
        return ""

    app.tool(name="once", description="")(plain)
    with pytest.raises(ValueError, match="already registered"):
        app.tool(name="once", description="")(plain)
    with pytest.raises(ValueError, match="memory tool"):
        app.tool(name="recall", description="")(plain)
    with pytest.raises(TypeError, match="async def"):
        app.tool(name="later", description="")(coroutine)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="type 'object'"):
        app.tool(name="arr", description="", input_schema={"type": "array"})(plain)

    class NoExecute(ToolContext):
        name = "nothing"
        description = ""

    with pytest.raises(TypeError, match="execute"):
        app.add_tool(NoExecute)
    with pytest.raises(TypeError, match="ToolContext subclass"):
        app.add_tool(object)  # type: ignore[type-var]


def test_server_without_memory_tools_lists_only_user_tools(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """With tools.enabled=False only the user's tools are listed and callable."""
    app = McpServer(make_plugin())

    @app.tool(name="hello", description="")
    def hello(input: dict[str, Any], ctx: ToolContext) -> str:
        return "hi"

    client = Wsgi(app).started()
    assert [t["name"] for t in client.request(rpc("tools/list")).result["tools"]] == ["hello"]
    assert client.request(call("recall", {"key": "k"})).error["code"] == -32602

