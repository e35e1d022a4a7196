"""Streamable HTTP conformance over raw HTTP: a real server on 127.0.0.1, no MCP client library.

Each test pins one rule of the transport (2025-03-26 .. 2025-11-25, and the
2026-07-28 envelope where it differs) as a client on the wire sees it: status
codes, headers, JSON-RPC error codes, batches per revision, the tool error
shape, the body limit and opt-in CORS.  The server is an in-process
:class:`~remember_sync.mcp.McpServer` on the threaded stdlib server
(:func:`remember_sync.mcp.httpd.make_server`) bound to a free port, stopped in
the fixture's ``finally``.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from remember_sync import RememberPlugin
from remember_sync.mcp import McpServer
from remember_sync.mcp.httpd import make_server
from tests.conftest import TEST_SECRET
from tests.local_http import serve_in_thread, stop_apps
from tests.mcp_wire import Reply, body_limit, call, initialize, rpc

MAX_VALUE = 4096
MAX_BODY = body_limit(MAX_VALUE)
CORS_ORIGIN = "https://app.example"
EVERY_REVISION = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
TOKEN = "conformance-token-0123456789"


class Wire:
    """Raw HTTP/1.1 requests to the server: nothing added but what each test says."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.host = f"127.0.0.1:{port}"

    def send(
        self,
        method: str = "POST",
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        json_headers: bool = True,
    ) -> Reply:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Host": self.host}
        if json_headers and method == "POST":
            sent.update({"Content-Type": "application/json",
                         "Accept": "application/json, text/event-stream"})
        sent.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, "/mcp", skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                conn.putheader(name, value)
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders(data)
            response = conn.getresponse()
            return Reply(response.status, response.headers, response.read())
        finally:
            conn.close()

    def initialize(self, version: str = "2025-11-25", headers: dict[str, str] | None = None) -> str:
        """The handshake; the issued Mcp-Session-Id."""
        reply = self.send(body=initialize(version, client="conformance"), headers=headers)
        assert reply.status == 200 and reply.result["protocolVersion"] == version, reply.body
        session = reply.headers["Mcp-Session-Id"]
        assert session
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert self.send(body=initialized, headers={**(headers or {}),
                                                    "Mcp-Session-Id": session}).status == 202
        return session


ServeFactory = Callable[..., Wire]


@pytest.fixture
def serve() -> Iterator[ServeFactory]:
    """Start McpServers (memory tools on, max_value_bytes=4096) on free loopback ports."""
    running: list[tuple[Any, threading.Thread, RememberPlugin]] = []

    def start(**options: Any) -> Wire:
        plugin = RememberPlugin.init(
            encryption={"secrets": [TEST_SECRET]}, tools={"enabled": True},
            max_value_bytes=MAX_VALUE, skip_legacy_purge=True,
        )
        httpd = make_server("127.0.0.1", 0, lambda environ, start_response: [])
        port = httpd.server_port
        # The Host guard `serve` sets on loopback: a DNS-rebinding page sends another Host.
        options.setdefault("allowed_hosts", [f"127.0.0.1:{port}", f"localhost:{port}"])
        httpd.set_app(McpServer(plugin, **options))
        running.append((httpd, serve_in_thread(httpd), plugin))
        return Wire(port)

    try:
        yield start
    finally:
        stop_apps(running)


@pytest.fixture
def wire(serve: ServeFactory) -> Wire:
    return serve(cors_origins=[CORS_ORIGIN])


# -- HTTP layer ------------------------------------------------------------------------------


def test_accept_without_json_gets_406_and_other_media_types_415(wire: Wire) -> None:
    """POST must accept application/json (else 406) and send application/json (else 415)."""
    session = wire.initialize()
    ping = rpc("ping")
    only_sse = wire.send(body=ping, headers={"Mcp-Session-Id": session,
                                             "Accept": "text/event-stream"})
    assert only_sse.status == 406 and only_sse.error["code"] == -32600
    form = wire.send(body=ping, headers={"Mcp-Session-Id": session,
                                         "Content-Type": "application/x-www-form-urlencoded"})
    assert form.status == 415
    assert wire.send(body=ping, headers={"Mcp-Session-Id": session}).status == 200


def test_notifications_and_responses_get_202_without_a_body(wire: Wire) -> None:
    """A notification or a posted JSON-RPC response gets 202 Accepted and no body."""
    session = wire.initialize()
    for message in ({"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": 1}},
                    {"jsonrpc": "2.0", "id": "srv-1", "result": {}}):
        reply = wire.send(body=message, headers={"Mcp-Session-Id": session})
        assert (reply.status, reply.body) == (202, b""), message


def test_get_gets_405_no_sse_stream(wire: Wire) -> None:
    """GET (the SSE stream) is not offered: 405 with Allow: POST, DELETE."""
    session = wire.initialize()
    reply = wire.send("GET", headers={"Mcp-Session-Id": session, "Accept": "text/event-stream"})
    assert reply.status == 405 and reply.headers["Allow"] == "POST, DELETE"


def test_unknown_and_ended_sessions_get_404(wire: Wire) -> None:
    """An id the server never issued gets 404; after DELETE (204) the ended id gets 404 too."""
    forged = wire.send(body=rpc("tools/list"), headers={"Mcp-Session-Id": "rs2.forged.1.x"})
    assert forged.status == 404 and forged.error["message"] == "Session not found"
    session = wire.initialize()
    assert wire.send(body=rpc("ping"), headers={"Mcp-Session-Id": session}).status == 200
    ended = wire.send("DELETE", headers={"Mcp-Session-Id": session})
    assert (ended.status, ended.body) == (204, b"")
    for method, body in (("POST", rpc("ping")), ("POST", call("recall", {"key": "k"})),
                         ("DELETE", None)):
        assert wire.send(method, body, headers={"Mcp-Session-Id": session}).status == 404


def test_requests_without_the_session_header_get_400(wire: Wire) -> None:
    """After initialize, anything but initialize without Mcp-Session-Id gets 400."""
    wire.initialize()
    for message in (rpc("tools/list"), call("recall", {"key": "k"}), rpc("ping"),
                    {"jsonrpc": "2.0", "method": "notifications/initialized"}):
        reply = wire.send(body=message)
        assert reply.status == 400, message
        assert reply.error["message"] == "Bad Request: Mcp-Session-Id header is required"
    assert wire.send("DELETE").status == 400


def test_protocol_version_header(wire: Wire) -> None:
    """A known revision is served; an unknown one gets 400 naming the header and every revision."""
    session = wire.initialize("2025-06-18")
    known = wire.send(body=rpc("tools/list"), headers={"Mcp-Session-Id": session,
                                                      "MCP-Protocol-Version": "2025-06-18"})
    assert known.status == 200 and len(known.result["tools"]) == 5
    unknown = wire.send(body=rpc("tools/list"), headers={"Mcp-Session-Id": session,
                                                        "MCP-Protocol-Version": "2099-01-01"})
    assert unknown.status == 400 and unknown.error["code"] == -32022
    assert "MCP-Protocol-Version" in unknown.error["message"]
    assert "_meta" not in unknown.error["message"]
    assert unknown.error["data"] == {"supported": EVERY_REVISION, "requested": "2099-01-01"}
    # The 2026-07-28 envelope naming an unknown version: the same list, in that era's form.
    meta = {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
            "io.modelcontextprotocol/clientCapabilities": {}}
    modern = wire.send(body=rpc("tools/list", {"_meta": meta}),
                       headers={"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"})
    assert modern.status == 400 and modern.error["code"] == -32022
    assert modern.error["data"]["supported"] == EVERY_REVISION


def test_foreign_origin_and_rebound_host_get_403(wire: Wire) -> None:
    """A page from another origin, or a DNS-rebound Host header, is refused with 403."""
    session = wire.initialize()
    evil = wire.send(body=rpc("ping"), headers={"Mcp-Session-Id": session,
                                                "Origin": "https://evil.example"})
    assert evil.status == 403 and "origin" in evil.error["message"]
    assert "Access-Control-Allow-Origin" not in evil.headers
    rebound = wire.send(body=rpc("ping"), headers={"Mcp-Session-Id": session,
                                                   "Host": f"rebound.example:{wire.port}"})
    assert rebound.status == 403 and "Host" in rebound.error["message"]
    loopback = wire.send(body=rpc("ping"), headers={"Mcp-Session-Id": session,
                                                    "Origin": "http://localhost:5173"})
    assert loopback.status == 200


def test_parse_error_and_method_not_found(wire: Wire) -> None:
    """A body that is not JSON gets 400 with -32700 (id null); an unknown method -32601."""
    session = wire.initialize()
    bad = wire.send(raw=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers={
        "Mcp-Session-Id": session})
    assert bad.status == 400 and bad.error["code"] == -32700 and bad.json["id"] is None
    missing = wire.send(body=rpc("resources/list", request_id=7),
                        headers={"Mcp-Session-Id": session})
    assert missing.status == 200 and missing.error["code"] == -32601 and missing.json["id"] == 7


# -- batches ---------------------------------------------------------------------------------


def test_batches_are_served_at_2025_03_26(wire: Wire) -> None:
    """2025-03-26 (no version header, or that one): each request answered, notifications not."""
    session = wire.initialize("2025-03-26")
    headers = {"Mcp-Session-Id": session}
    stored = wire.send(body=[
        call("remember_this", {"key": "k", "value": "v"}, "a"),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}},
        call("recall", {"key": "k"}, "b"),
        rpc("no/such", request_id=3),
        {"jsonrpc": "2.0", "id": "srv-2", "result": {}},
    ], headers=headers)
    assert stored.status == 200 and stored.headers["Content-Type"] == "application/json"
    answers = {a["id"]: a for a in stored.json}
    assert set(answers) == {"a", "b", 3}
    assert answers["a"]["result"]["structuredContent"]["success"] is True
    assert answers["b"]["result"]["structuredContent"]["value"] == "v"
    assert answers[3]["error"]["code"] == -32601
    only_notifications = wire.send(body=[
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 9, "result": {}},
    ], headers=headers)
    assert (only_notifications.status, only_notifications.body) == (202, b"")
    with_header = wire.send(body=[rpc("ping", request_id=1), rpc("ping", request_id=2)],
                            headers={**headers, "MCP-Protocol-Version": "2025-03-26"})
    assert with_header.status == 200 and [a["id"] for a in with_header.json] == [1, 2]
    odd = wire.send(body=[5, rpc("ping")], headers=headers)
    assert odd.status == 200 and odd.json[0]["error"]["code"] == -32600 and odd.json[1]["id"] == 1


def test_batch_limits(wire: Wire) -> None:
    """Empty batch: -32600; over 100 members, or initialize inside, or no session: 400."""
    session = wire.initialize("2025-03-26")
    headers = {"Mcp-Session-Id": session}
    empty = wire.send(body=[], headers=headers)
    assert empty.status == 400 and empty.error["code"] == -32600
    at_limit = wire.send(body=[rpc("ping", request_id=i) for i in range(100)], headers=headers)
    assert at_limit.status == 200 and len(at_limit.json) == 100
    over = wire.send(body=[rpc("ping", request_id=i) for i in range(101)], headers=headers)
    assert over.status == 400 and "at most 100" in over.error["message"]
    handshake = wire.send(body=[rpc("initialize", {"protocolVersion": "2025-03-26"})])
    assert handshake.status == 400 and "initialize" in handshake.error["message"]
    sessionless = wire.send(body=[rpc("ping")])
    assert sessionless.status == 400
    assert sessionless.error["message"] == "Bad Request: Mcp-Session-Id header is required"


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", "2026-07-28"])
def test_batches_are_refused_after_2025_03_26(wire: Wire, version: str) -> None:
    """2025-06-18 removed batches: a batch at that revision or later gets 400 / -32600."""
    session = wire.initialize("2025-11-25" if version == "2026-07-28" else version)
    reply = wire.send(body=[rpc("ping")], headers={"Mcp-Session-Id": session,
                                                   "MCP-Protocol-Version": version})
    assert reply.status == 400 and reply.error["code"] == -32600
    assert "batch" in reply.error["message"] and version in reply.error["message"]


# -- tool results and the body limit ---------------------------------------------------------


def test_tool_errors_have_text_content_and_no_structured_content(wire: Wire) -> None:
    """isError results carry "<CODE>: <message>" as text and no structuredContent."""
    session = wire.initialize()
    headers = {"Mcp-Session-Id": session}
    cases = {
        "REMEMBER_SCOPE_NOT_ALLOWED": call("remember_this", {"key": "k", "value": 1,
                                                             "scope": "global"}),
        "REMEMBER_INVALID_INPUT": call("remember_this", {"key": "k"}),
        "REMEMBER_IDENTITY_REQUIRED": call("recall", {"key": "k", "scope": "user"}),
    }
    for code, message in cases.items():
        reply = wire.send(body=message, headers=headers)
        assert reply.status == 200
        result = reply.result
        assert set(result) == {"content", "isError"} and result["isError"] is True, result
        (content,) = result["content"]
        assert content["type"] == "text" and content["text"].startswith(code + ": "), content
    assert "Scope 'global' is not allowed" in wire.send(
        body=cases["REMEMBER_SCOPE_NOT_ALLOWED"], headers=headers
    ).result["content"][0]["text"]


def test_oversized_value_is_a_tool_error_and_oversized_body_a_413(wire: Wire) -> None:
    """A value over max_value_bytes inside the body limit is a tool error; a bigger body 413."""
    session = wire.initialize()
    headers = {"Mcp-Session-Id": session}
    # Escaped as \\u00e9 by json.dumps: about 3x the stored bytes, within the body limit.
    fits = "é" * (MAX_VALUE // 2 - 100)
    stored = wire.send(body=call("remember_this", {"key": "k", "value": fits}), headers=headers)
    assert stored.status == 200 and stored.result["isError"] is False, stored.body[:200]
    too_big = "é" * MAX_VALUE
    body = json.dumps(call("remember_this", {"key": "k", "value": too_big})).encode()
    assert MAX_VALUE < len(body) <= MAX_BODY
    refused = wire.send(raw=body, headers=headers)
    assert refused.status == 200, refused.body[:200]
    text = refused.result["content"][0]["text"]
    assert refused.result["isError"] is True and text.startswith("REMEMBER_INVALID_INPUT: ")
    assert "max_value_bytes" in text
    huge = json.dumps(call("remember_this", {"key": "k", "value": "x" * MAX_BODY})).encode()
    over = wire.send(raw=huge, headers=headers)
    assert over.status == 413 and f"at most {MAX_BODY} bytes" in over.error["message"]
    assert wire.send(body=rpc("ping"), headers=headers).status == 200


# -- CORS ------------------------------------------------------------------------------------


def test_cors_preflight_from_a_listed_origin(wire: Wire) -> None:
    """OPTIONS from a CORS origin: 204 with the exact origin, methods, headers and max age."""
    reply = wire.send("OPTIONS", headers={
        "Origin": CORS_ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,mcp-session-id,mcp-protocol-version",
    })
    assert (reply.status, reply.body) == (204, b"")
    assert reply.headers["Access-Control-Allow-Origin"] == CORS_ORIGIN
    assert reply.headers["Vary"] == "Origin"
    assert reply.headers["Access-Control-Allow-Methods"] == "POST, DELETE"
    allowed = {h.strip() for h in reply.headers["Access-Control-Allow-Headers"].split(",")}
    assert allowed >= {"content-type", "authorization", "mcp-session-id", "mcp-protocol-version",
                       "mcp-method", "mcp-name", "last-event-id"}
    assert int(reply.headers["Access-Control-Max-Age"]) > 0


def test_cors_preflight_from_other_origins(wire: Wire, serve: ServeFactory) -> None:
    """Unlisted loopback origin: 405 without CORS headers; foreign: 403; no cors config: 405."""
    loopback = wire.send("OPTIONS", headers={"Origin": "http://localhost:5173",
                                             "Access-Control-Request-Method": "POST"})
    assert loopback.status == 405 and "Access-Control-Allow-Origin" not in loopback.headers
    foreign = wire.send("OPTIONS", headers={"Origin": "https://evil.example",
                                            "Access-Control-Request-Method": "POST"})
    assert foreign.status == 403 and "Access-Control-Allow-Origin" not in foreign.headers
    plain = serve()
    reply = plain.send("OPTIONS", headers={"Origin": CORS_ORIGIN,
                                           "Access-Control-Request-Method": "POST"})
    assert reply.status == 403  # not an allowed origin there at all
    reply = plain.send("OPTIONS", headers={"Origin": "http://localhost:5173"})
    assert reply.status == 405 and "Access-Control-Allow-Origin" not in reply.headers
    assert "Vary" not in reply.headers


def test_cors_headers_on_every_reply_to_a_listed_origin(serve: ServeFactory) -> None:
    """Successes and errors (401, 404, 400) carry Allow-Origin and expose the session header."""
    secured = serve(cors_origins=[CORS_ORIGIN],
                    token_verifier=lambda token: "alice" if token == TOKEN else None)
    origin = {"Origin": CORS_ORIGIN}
    denied = secured.send(body=rpc("ping"), headers=origin)
    assert denied.status == 401 and "WWW-Authenticate" in denied.headers
    auth = {**origin, "Authorization": f"Bearer {TOKEN}"}
    session = secured.initialize(headers=auth)
    found = secured.send(body=rpc("ping"), headers={**auth, "Mcp-Session-Id": session})
    missing = secured.send(body=rpc("ping"), headers=auth)
    unknown = secured.send(body=rpc("ping"), headers={**auth, "Mcp-Session-Id": "nope"})
    init = secured.send(body=rpc("initialize", {"protocolVersion": "2025-11-25"}), headers=auth)
    for reply, status in ((denied, 401), (found, 200), (missing, 400), (unknown, 404),
                          (init, 200)):
        assert reply.status == status
        assert reply.headers["Access-Control-Allow-Origin"] == CORS_ORIGIN
        exposed = {h.strip().lower()
                   for h in reply.headers["Access-Control-Expose-Headers"].split(",")}
        assert exposed >= {"mcp-session-id", "www-authenticate"}
        assert reply.headers["Vary"] == "Origin"
    stored = secured.send(body=call("remember_this", {"key": "k", "value": 1, "scope": "user"}),
                          headers={**auth, "Mcp-Session-Id": session})
    assert stored.result["isError"] is False


def test_cors_origins_must_be_origins() -> None:
    """cors_origins takes scheme://host[:port]; a path, a wildcard or one bare string is refused."""
    plugin = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True)
    for bad in (["*"], ["https://app.example/path"], ["app.example"], ["ftp://app.example"],
                ["https://app.example:99999"]):
        with pytest.raises(ValueError, match="cors_origins"):
            McpServer(plugin, cors_origins=bad)
    with pytest.raises(TypeError, match="list of origins"):
        McpServer(plugin, cors_origins=CORS_ORIGIN)
    server = McpServer(plugin, cors_origins=["HTTPS://App.Example/"])
    assert server.cors_origins == {CORS_ORIGIN} and CORS_ORIGIN in server.allowed_origins
    assert McpServer(plugin).max_body_bytes == body_limit(1024 * 1024)
    plugin.close()
