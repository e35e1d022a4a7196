"""Hostile input against the MCP server over real HTTP: it answers right, stays up, leaks nothing.

One :class:`~remember_sync.mcp.McpServer` (bearer auth, memory on a real
redis-server) runs on the threaded stdlib server on ``127.0.0.1``.  Several
principals -- including ones whose names are glob and percent-encoding
specials (``al*``, ``al%2A``, ``alice:x``) -- each plant a secret value in
``session``, ``user`` and ``tool`` scope under ordinary and tricky keys
(``*``, ``%``, ``..``, ``a:b``).  Then every hostile request is sent and:

* the answer is the right HTTP status and JSON-RPC error (or MCP tool error);
* no planted secret of another principal appears anywhere in the answer;
* a normal call right after succeeds (the server stays up);
* at the end every planted secret is still there, unchanged.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin
from remember_sync.mcp import McpServer, StaticTokenVerifier
from remember_sync.mcp.httpd import make_server
from remember_sync.stores.redis import RedisStore
from tests.conftest import TEST_SECRET
from tests.mcp_wire import MODERN, Reply, initialize, modern, rpc

LEGACY = "2025-11-25"
MAX_BODY = 200_000
MAX_VALUE = 4096
PREFIX = "hostile:"

#: token -> principal.  The odd principals make namespace escaping matter end to end.
TOKENS = {
    "alice-token-0123456789": "alice",
    "bob-token-0123456789abc": "bob",  # the attacker in most cases
    "alstar-token-012345678": "al*",
    "alpct-token-0123456789": "al%2A",
    "alcolon-token-01234567": "alice:x",
}
TOKEN_OF = {p: t for t, p in TOKENS.items()}
PLANTERS = ["alice", "al*", "al%2A", "alice:x"]  # bob plants only his own "bob-secret"
PLANTED_KEYS = ["secret", "*", "%", "..", "a:b", "%2A", "secret*"]
PLANTED_SCOPES = ["session", "user"]


@dataclass
class Harness:
    """The running server, the principals' sessions and what they planted."""

    port: int
    server: McpServer
    plugin: RememberPlugin
    sessions: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, list[str]] = field(default_factory=dict)
    planted: dict[tuple[str, str, str], str] = field(default_factory=dict)
    hostile_inputs: int = 0
    alive_checks: int = 0

    # -- HTTP --------------------------------------------------------------------------

    def raw(
        self,
        method: str = "POST",
        body: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        path: str = "/mcp",
    ) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            data = body.encode("utf-8") if isinstance(body, str) else body
            sent = {k.lower() for k in (headers or {})}
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            if data is not None and "content-length" not in sent:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders(data)
            response = conn.getresponse()
            return Reply(response.status, dict(response.getheaders()), response.read())
        finally:
            conn.close()

    def post(
        self,
        message: Any,
        *,
        user: str | None = "alice",
        session: str | None | bool = True,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if user is not None:
            sent["Authorization"] = f"Bearer {TOKEN_OF[user]}"
        if session is True and user is not None:
            sent["Mcp-Session-Id"] = self.sessions[user]
        elif isinstance(session, str):
            sent["Mcp-Session-Id"] = session
        sent.update(headers or {})
        body = message if isinstance(message, (bytes, str)) else json.dumps(message)
        return self.raw("POST", body, sent)

    def tool(
        self,
        name: str,
        arguments: Any,
        *,
        user: str = "alice",
        session: str | None | bool = True,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        return self.post(
            rpc("tools/call", {"name": name, "arguments": arguments}),
            user=user,
            session=session,
            headers=headers,
        )

    def modern(
        self,
        method: str,
        params: dict[str, Any],
        *,
        user: str = "alice",
        headers: dict[str, str] | None = None,
    ) -> Reply:
        message, sent = modern(method, params)
        return self.post(message, user=user, session=False, headers={**sent, **(headers or {})})

    def initialize(self, user: str) -> str:
        reply = self.post(
            initialize(LEGACY, client="hostile-test"),
            user=user,
            session=False,
        )
        assert reply.status == 200, reply.body
        return reply.headers["Mcp-Session-Id"]

    # -- checks -------------------------------------------------------------------------

    def check(
        self,
        reply: Reply,
        *,
        actor: str | None,
        status: int,
        rpc_code: int | None = None,
        tool_code: str | None = None,
    ) -> None:
        """The expected answer, no foreign secret in it, and the server still serving."""
        self.hostile_inputs += 1
        forbidden = [s for who, found in self.secrets.items() if who != actor for s in found]
        leaked = [s for s in forbidden if s.encode() in reply.body]
        assert leaked == [], f"{actor} saw another principal's secret"
        assert reply.status == status, (reply.status, reply.body[:300])
        if rpc_code is not None:
            assert reply.json["error"]["code"] == rpc_code, reply.body[:300]
            assert isinstance(reply.json["error"]["message"], str)
        if tool_code is not None:
            assert reply.tool_code() == tool_code, reply.body[:300]
        self.assert_alive()

    def assert_alive(self) -> None:
        """A normal call right after: alice reads her own secret."""
        self.alive_checks += 1
        reply = self.tool("recall", {"key": "secret", "scope": "user"})
        assert reply.status == 200, reply.body
        assert reply.structured()["value"] == self.planted[("alice", "user", "secret")]


@pytest.fixture(scope="module")
def hostile(redis_url: str) -> Iterator[Harness]:
    """The server on 127.0.0.1:<free port>, every principal signed in with secrets planted."""
    store = RedisStore.from_url(redis_url)
    for key in list(store.scan(PREFIX + "*")):
        store.delete(key)
    plugin = RememberPlugin.init(
        store=store,
        key_prefix=PREFIX,
        tools={"enabled": True},
        skip_legacy_purge=True,
        max_value_bytes=MAX_VALUE,
        encryption={"secrets": [TEST_SECRET]},
    )
    server = McpServer(plugin, token_verifier=StaticTokenVerifier(TOKENS), max_body_bytes=MAX_BODY)
    httpd = make_server("127.0.0.1", 0, server)
    port = httpd.server_port
    server.allowed_hosts = frozenset({f"127.0.0.1:{port}", "127.0.0.1"})
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    h = Harness(port, server, plugin)
    try:
        for user in TOKENS.values():
            h.sessions[user] = h.initialize(user)
            h.secrets[user] = []
        for user in PLANTERS:
            for scope in PLANTED_SCOPES:
                for key in PLANTED_KEYS:
                    value = f"SECRET-{uuid.uuid4().hex}"
                    reply = h.tool(
                        "remember_this", {"key": key, "value": value, "scope": scope}, user=user
                    )
                    assert reply.structured()["success"] is True, reply.body
                    h.planted[(user, scope, key)] = value
                    h.secrets[user].append(value)
            value = f"SECRET-{uuid.uuid4().hex}"
            reply = h.tool(
                "remember_this", {"key": "secret", "value": value, "scope": "tool"}, user=user
            )
            assert reply.structured()["success"] is True
            h.planted[(user, "tool", "secret")] = value
            h.secrets[user].append(value)
        value = f"SECRET-{uuid.uuid4().hex}"
        assert h.tool(
            "remember_this", {"key": "bob-secret", "value": value, "scope": "user"}, user="bob"
        ).structured()["success"]
        h.secrets["bob"].append(value)
        h.planted[("bob", "user", "bob-secret")] = value
        yield h
    finally:
        print(f"\n[hostile mcp] hostile_inputs={h.hostile_inputs} alive_checks={h.alive_checks}")
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
        for key in list(store.scan(PREFIX + "*")):
            store.delete(key)
        plugin.close()
        store.close()


# -- malformed JSON and wrong JSON-RPC shapes -----------------------------------------------------

_PARSE = [
    pytest.param(b"{", id="truncated-object"),
    pytest.param(b"", id="empty-body"),
    pytest.param(b"\xff\xfe{}", id="not-utf8"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping"', id="unterminated"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping"}garbage', id="trailing-garbage"),
    pytest.param(b"\x00" * 100, id="nul-bytes"),
    pytest.param(b"{'jsonrpc': '2.0'}", id="single-quotes"),
    pytest.param(b'{"jsonrpc":"2.0","id":1,"method":"ping",}', id="trailing-comma"),
]


@pytest.mark.parametrize("body", _PARSE)
def test_malformed_json_is_a_parse_error(hostile: Harness, body: bytes) -> None:
    """Bodies that are not JSON get HTTP 400 with JSON-RPC -32700, and the server stays up."""
    hostile.check(hostile.post(body), actor="alice", status=400, rpc_code=-32700)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[" * 50_000 + b"]" * 50_000, id="nested-arrays-50k"),
        pytest.param(b'{"a":' * 5_000 + b"1" + b"}" * 5_000, id="nested-objects-5k"),
    ],
)
def test_deeply_nested_json_is_refused(hostile: Harness, body: bytes) -> None:
    """Deep nesting is refused with 400: a parse error, or (if it parses) not a request."""
    reply = hostile.post(body)
    hostile.check(reply, actor="alice", status=400)
    assert reply.json["error"]["code"] in (-32700, -32600)


_SHAPES = [
    pytest.param(b"[]", 400, -32600, id="empty-batch"),
    pytest.param(b"null", 400, -32600, id="null"),
    pytest.param(b"42", 400, -32600, id="number"),
    pytest.param(b'"ping"', 400, -32600, id="string"),
    pytest.param(
        json.dumps({"jsonrpc": "1.0", "id": 1, "method": "ping"}), 400, -32600, id="jsonrpc-1.0"
    ),
    pytest.param(json.dumps({"id": 1, "method": "ping"}), 400, -32600, id="no-jsonrpc"),
    pytest.param(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": 5}), 400, -32600, id="method-number"
    ),
    pytest.param(json.dumps({"jsonrpc": "2.0", "id": 1}), 400, -32600, id="no-method"),
    pytest.param(
        json.dumps({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}),
        400,
        -32600,
        id="id-object",
    ),
    pytest.param(
        json.dumps({"jsonrpc": "2.0", "id": True, "method": "ping"}), 400, -32600, id="id-bool"
    ),
    pytest.param(
        json.dumps({"jsonrpc": "2.0", "id": None, "method": "ping"}), 400, -32600, id="id-null"
    ),
    pytest.param(
        json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}), 400, -32600, id="id-float"
    ),
    pytest.param(json.dumps(rpc("no/such/method")), 200, -32601, id="unknown-method"),
    pytest.param(json.dumps(rpc("__proto__")), 200, -32601, id="proto-method"),
    pytest.param(json.dumps(rpc("tools/list", [])), 200, -32602, id="params-array"),
    pytest.param(json.dumps(rpc("tools/list", "x")), 200, -32602, id="params-string"),
    pytest.param(json.dumps(rpc("tools/list", {"cursor": "x"})), 200, -32602, id="bad-cursor"),
    pytest.param(json.dumps(rpc("tools/call", {})), 200, -32602, id="call-no-name"),
    pytest.param(json.dumps(rpc("tools/call", {"name": 5})), 200, -32602, id="call-name-number"),
    pytest.param(
        json.dumps(rpc("tools/call", {"name": "recall", "arguments": "key"})),
        200,
        -32602,
        id="arguments-string",
    ),
    pytest.param(
        json.dumps(rpc("tools/call", {"name": "recall", "arguments": ["key"]})),
        200,
        -32602,
        id="arguments-array",
    ),
    pytest.param(
        json.dumps(rpc("tools/call", {"name": "../recall", "arguments": {}})),
        200,
        -32602,
        id="unknown-tool",
    ),
    pytest.param(
        json.dumps(rpc("tools/call", {"name": "recall\x00", "arguments": {}})),
        200,
        -32602,
        id="tool-name-nul",
    ),
    pytest.param(json.dumps(rpc("initialize", {})), 200, -32602, id="initialize-no-version"),
]


@pytest.mark.parametrize(("body", "status", "code"), _SHAPES)
def test_wrong_json_rpc_shapes_get_the_right_error(
    hostile: Harness, body: bytes | str, status: int, code: int
) -> None:
    """Each malformed JSON-RPC message gets its HTTP status and JSON-RPC error code."""
    hostile.check(hostile.post(body), actor="alice", status=status, rpc_code=code)


def test_batches_cannot_escape_the_session_or_multiply_work(hostile: Harness) -> None:
    """A 2025-03-26 batch reads only the caller's memory; >100 members, later revisions: 400."""
    tricky = [
        rpc("tools/call", {"name": "recall", "arguments": {"key": key, "scope": scope}}, i)
        for i, (key, scope) in enumerate((k, s) for k in PLANTED_KEYS for s in PLANTED_SCOPES)
    ]
    reply = hostile.post(json.dumps([*tricky, 5, [], {"jsonrpc": "2.0", "method": "x"}]),
                         user="bob")
    hostile.check(reply, actor="bob", status=200)
    answers = reply.json
    assert len(answers) == len(tricky) + 2  # the notification gets no answer
    assert [a["error"]["code"] for a in answers[-2:]] == [-32600, -32600]
    too_many = json.dumps([rpc("ping", request_id=i) for i in range(101)])
    hostile.check(hostile.post(too_many), actor="alice", status=400, rpc_code=-32600)
    later = hostile.post(json.dumps([rpc("ping")]), headers={"MCP-Protocol-Version": LEGACY})
    hostile.check(later, actor="alice", status=400, rpc_code=-32600)


# -- HTTP-level abuse: size, framing, media types, methods, origin


def test_huge_declared_body_is_refused_before_reading(hostile: Harness) -> None:
    """Content-Length over the limit gets 413 naming the limit, without the body being read."""
    reply = hostile.raw(
        "POST",
        b"{}",
        {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {TOKEN_OF['alice']}",
            "Content-Length": str(50 * MAX_BODY),
        },
    )
    hostile.check(reply, actor="alice", status=413)
    assert str(MAX_BODY) in reply.json["error"]["message"]


def test_huge_actual_body_is_refused(hostile: Harness) -> None:
    """A real 1 MB body gets 413 with a clear message."""
    value = "x" * (5 * MAX_BODY)
    reply = hostile.tool("remember_this", {"key": "big", "value": value})
    hostile.check(reply, actor="alice", status=413)
    assert "too large" in reply.json["error"]["message"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({"Content-Length": "-5"}, 400, id="negative-length"),
        pytest.param({"Content-Length": "abc"}, 400, id="non-numeric-length"),
        pytest.param({"Content-Type": "text/plain"}, 415, id="text-plain"),
        pytest.param({"Content-Type": ""}, 415, id="no-content-type"),
        pytest.param({"Accept": "text/html"}, 406, id="accept-html"),
        pytest.param({"Origin": "http://evil.example"}, 403, id="foreign-origin"),
        pytest.param({"Host": "evil.example"}, 403, id="rebinding-host"),
    ],
)
def test_bad_http_framing_and_headers_are_refused(
    hostile: Harness, headers: dict[str, str], status: int
) -> None:
    """Bad lengths, media types, origins and hosts get their 4xx, never a 500."""
    hostile.check(hostile.post(rpc("ping"), headers=headers), actor="alice", status=status)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/mcp", 405),
        ("PUT", "/mcp", 405),
        ("PATCH", "/mcp", 405),
        ("POST", "/other", 404),
        ("POST", "/mcp/../mcp", 404),
        ("POST", "/MCP", 404),
    ],
)
def test_other_methods_and_paths_are_refused(
    hostile: Harness, method: str, path: str, status: int
) -> None:
    """Methods other than POST/DELETE get 405; other paths 404."""
    reply = hostile.raw(
        method,
        json.dumps(rpc("ping")),
        {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {TOKEN_OF['alice']}",
        },
        path=path,
    )
    hostile.check(reply, actor="alice", status=status)


def _raw_socket(port: int, data: bytes, *, close_write: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        pytest.param(b"GARBAGE\r\n\r\n", 400, id="garbage-request-line"),
        pytest.param(b"POST /mcp HTTP/9.9\r\n\r\n", 505, id="bad-http-version"),
        pytest.param(b"POST /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, id="huge-url"),
        pytest.param(
            b"POST /mcp HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431, id="huge-header"
        ),
        pytest.param(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + TOKEN_OF["alice"].encode() + b"\r\n"
            b'Content-Length: 100\r\n\r\n{"jsonrpc"',
            400,
            id="lying-length",
        ),
    ],
)
def test_broken_http_gets_an_error_and_the_server_stays_up(
    hostile: Harness, data: bytes, status: int
) -> None:
    """Garbage, oversized and truncated HTTP requests get an HTTP error; nothing hangs."""
    answer = _raw_socket(hostile.port, data)
    hostile.hostile_inputs += 1
    assert _answered_status(answer) == int(status), answer[:200]
    hostile.assert_alive()


def _answered_status(answer: bytes) -> int | None:
    """The status of a raw HTTP answer (http.server answers an unparsable line HTTP/0.9 style)."""
    if answer.startswith(b"HTTP/"):
        return int(answer.split(b" ", 2)[1])
    found = re.search(rb"Error code: (\d+)", answer)
    return int(found.group(1)) if found else None


def test_idle_connections_do_not_block_other_clients(hostile: Harness) -> None:
    """50 connections that never send a byte (slowloris) do not stop normal calls."""
    idle = [socket.create_connection(("127.0.0.1", hostile.port), timeout=5) for _ in range(50)]
    try:
        hostile.hostile_inputs += len(idle)
        start = time.monotonic()
        hostile.assert_alive()
        assert time.monotonic() - start < 5
    finally:
        for sock in idle:
            sock.close()


# -- authentication and sessions


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param(None, id="missing"),
        pytest.param("Bearer not-a-token-at-all-xyz", id="unknown-token"),
        pytest.param(f"Bearer {TOKEN_OF['alice'][:-1]}", id="truncated-token"),
        pytest.param(f"Bearer {TOKEN_OF['alice']}x", id="extended-token"),
        pytest.param(f"Basic {TOKEN_OF['alice']}", id="basic-scheme"),
        pytest.param("Bearer ", id="empty-bearer"),
        pytest.param("Bearer " + "A" * 8000, id="huge-token"),
        pytest.param(f"Bearer {TOKEN_OF['alice'].upper()}", id="case-changed-token"),
    ],
)
def test_bad_credentials_get_401_with_a_challenge(
    hostile: Harness, authorization: str | None
) -> None:
    """Missing, wrong or malformed bearer tokens get 401 and WWW-Authenticate; nothing is read."""
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    reply = hostile.raw(
        "POST",
        json.dumps(
            rpc("tools/call", {"name": "recall", "arguments": {"key": "secret", "scope": "user"}})
        ),
        headers,
    )
    hostile.check(reply, actor=None, status=401)
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")


def _flip_last(text: str) -> str:
    return text[:-1] + ("A" if text[-1] != "A" else "B")



def _issued_by_another_server(user: str) -> str:
    """A session id another MCP server, with another master secret, issued to *user*."""
    other = RememberPlugin.init(encryption={"secrets": ["another-secret-0123456789abcdef0123"]})
    try:
        return McpServer(other).session_signer.issue(user)
    finally:
        other.close()

_FORGED: list[tuple[str, Callable[[Harness], str]]] = [
    (
        "forged",
        lambda h: (
            "rs1.AAAAAAAAAAAAAAAAAAAAAAAA.18c0000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        ),
    ),
    ("garbage", lambda h: "not-a-session"),
    ("empty", lambda h: ""),
    ("blank", lambda h: " "),
    ("dots-only", lambda h: "..."),
    ("truncated-by-one", lambda h: h.sessions["alice"][:-1]),
    ("truncated-mac", lambda h: h.sessions["alice"].rsplit(".", 1)[0]),
    ("first-half", lambda h: h.sessions["alice"][: len(h.sessions["alice"]) // 2]),
    ("mac-changed", lambda h: _flip_last(h.sessions["alice"])),
    (
        "nonce-of-bob",
        lambda h: ".".join(
            [
                *h.sessions["alice"].split(".")[:1],
                h.sessions["bob"].split(".")[1],
                *h.sessions["alice"].split(".")[2:],
            ]
        ),
    ),
    ("over-256-chars", lambda h: h.sessions["alice"] + "." + "A" * 300),
    ("latin1", lambda h: h.sessions["alice"][:-2] + "é"),
    (
        "other-secret",
        lambda h: _issued_by_another_server("alice"),
    ),
    ("expired", lambda h: h.server.session_signer.issue("alice", now_ms=1_000)),
    (
        "future",
        lambda h: h.server.session_signer.issue(
            "alice", now_ms=time.time_ns() // 1_000_000 + 3_600_000
        ),
    ),
    ("issued-anonymous", lambda h: h.server.session_signer.issue(None)),
    ("issued-to-bob", lambda h: h.sessions["bob"]),
]


@pytest.mark.parametrize("make", [f[1] for f in _FORGED], ids=[f[0] for f in _FORGED])
def test_session_ids_not_issued_to_this_caller_get_404(
    hostile: Harness, make: Callable[[Harness], str]
) -> None:
    """Forged, truncated, foreign-secret, expired or another user's session ids get 404.

    An empty or blank header names no session at all: 400, as a missing one (the TS SDK
    server's rule, and this server's for DELETE).
    """
    session = make(hostile)
    reply = hostile.tool("recall", {"key": "secret", "scope": "session"}, session=session)
    if session.strip():
        hostile.check(reply, actor="alice", status=404)
        assert reply.json["error"]["message"] == "Session not found"
    else:
        hostile.check(reply, actor="alice", status=400)
        assert reply.json["error"]["message"] == "Bad Request: Mcp-Session-Id header is required"


def test_another_users_session_with_my_token_reads_nothing(hostile: Harness) -> None:
    """Bob's token with alice's session id (replayed to another user) gets 404, nothing more."""
    for scope in ("session", "user", "tool"):
        reply = hostile.tool(
            "recall",
            {"key": "secret", "scope": scope},
            user="bob",
            session=hostile.sessions["alice"],
        )
        hostile.check(reply, actor="bob", status=404)
    reply = hostile.raw(
        "DELETE",
        None,
        {"Authorization": f"Bearer {TOKEN_OF['bob']}", "Mcp-Session-Id": hostile.sessions["alice"]},
    )
    hostile.check(reply, actor="bob", status=404)


def test_an_ended_session_cannot_be_replayed(hostile: Harness) -> None:
    """After DELETE, the same session id gets 404 (in this process)."""
    session = hostile.initialize("alice")
    ended = hostile.raw(
        "DELETE", None, {"Authorization": f"Bearer {TOKEN_OF['alice']}", "Mcp-Session-Id": session}
    )
    assert ended.status == 204
    reply = hostile.tool("recall", {"key": "secret", "scope": "session"}, session=session)
    hostile.check(reply, actor="alice", status=404)


# -- tool arguments: scopes and keys with hostile text

_BAD_ARGUMENTS: list[tuple[str, str, dict[str, Any], str]] = [
    ("remember_this", "empty-key", {"key": "", "value": 1}, "REMEMBER_INVALID_INPUT"),
    ("remember_this", "nul-key", {"key": "a\x00b", "value": 1}, "REMEMBER_INVALID_INPUT"),
    ("remember_this", "key-1025-bytes", {"key": "k" * 1025, "value": 1}, "REMEMBER_INVALID_INPUT"),
    ("remember_this", "key-100k", {"key": "k" * 100_000, "value": 1}, "REMEMBER_INVALID_INPUT"),
    ("remember_this", "key-not-string", {"key": ["secret"], "value": 1}, "REMEMBER_INVALID_INPUT"),
    ("remember_this", "no-value", {"key": "k"}, "REMEMBER_INVALID_INPUT"),
    (
        "remember_this",
        "value-too-big",
        {"key": "k", "value": "x" * (MAX_VALUE + 1)},
        "REMEMBER_INVALID_INPUT",
    ),
    (
        "remember_this",
        "metadata-too-big",
        {"key": "k", "value": 1, "metadata": {"m": "x" * MAX_VALUE}},
        "REMEMBER_INVALID_INPUT",
    ),
    ("remember_this", "ttl-zero", {"key": "k", "value": 1, "ttl": 0}, "REMEMBER_INVALID_INPUT"),
    (
        "remember_this",
        "ttl-negative",
        {"key": "k", "value": 1, "ttl": -1},
        "REMEMBER_INVALID_INPUT",
    ),
    ("remember_this", "ttl-float", {"key": "k", "value": 1, "ttl": 1.5}, "REMEMBER_INVALID_INPUT"),
    (
        "remember_this",
        "ttl-string",
        {"key": "k", "value": 1, "ttl": "10"},
        "REMEMBER_INVALID_INPUT",
    ),
    ("remember_this", "ttl-bool", {"key": "k", "value": 1, "ttl": True}, "REMEMBER_INVALID_INPUT"),
    (
        "remember_this",
        "brand-reserved",
        {"key": "k", "value": 1, "brand": "approval"},
        "REMEMBER_INVALID_INPUT",
    ),
    (
        "remember_this",
        "metadata-array",
        {"key": "k", "value": 1, "metadata": [1]},
        "REMEMBER_INVALID_INPUT",
    ),
    (
        "remember_this",
        "extra-argument",
        {"key": "k", "value": 1, "user_id": "alice"},
        "REMEMBER_INVALID_INPUT",
    ),
    (
        "remember_this",
        "proto-argument",
        {"key": "k", "value": 1, "__proto__": {"x": 1}},
        "REMEMBER_INVALID_INPUT",
    ),
    ("recall", "scope-admin", {"key": "secret", "scope": "admin"}, "REMEMBER_SCOPE_NOT_ALLOWED"),
    ("recall", "scope-star", {"key": "secret", "scope": "*"}, "REMEMBER_SCOPE_NOT_ALLOWED"),
    ("recall", "scope-dotdot", {"key": "secret", "scope": ".."}, "REMEMBER_SCOPE_NOT_ALLOWED"),
    ("recall", "scope-newline", {"key": "secret", "scope": "user\n"}, "REMEMBER_SCOPE_NOT_ALLOWED"),
    ("recall", "scope-upper", {"key": "secret", "scope": "USER"}, "REMEMBER_SCOPE_NOT_ALLOWED"),
    ("recall", "scope-global", {"key": "secret", "scope": "global"}, "REMEMBER_SCOPE_NOT_ALLOWED"),
    ("recall", "scope-null", {"key": "secret", "scope": None}, "REMEMBER_INVALID_INPUT"),
    ("recall", "scope-list", {"key": "secret", "scope": ["user"]}, "REMEMBER_INVALID_INPUT"),
    (
        "forget",
        "scope-control",
        {"key": "secret", "scope": "\x1b[2Juser"},
        "REMEMBER_SCOPE_NOT_ALLOWED",
    ),
    ("list_memories", "pattern-21-wildcards", {"pattern": "*" * 21}, "REMEMBER_INVALID_INPUT"),
    ("list_memories", "pattern-501-chars", {"pattern": "x" * 501}, "REMEMBER_INVALID_INPUT"),
    ("list_memories", "pattern-nul", {"pattern": "\x00*"}, "REMEMBER_INVALID_INPUT"),
    ("list_memories", "limit-zero", {"limit": 0}, "REMEMBER_INVALID_INPUT"),
    ("list_memories", "limit-101", {"limit": 101}, "REMEMBER_INVALID_INPUT"),
    ("list_memories", "limit-string", {"limit": "5"}, "REMEMBER_INVALID_INPUT"),
    ("list_memories", "limit-huge", {"limit": 10**30}, "REMEMBER_INVALID_INPUT"),
]


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [pytest.param(t, a, c, id=f"{t}-{i}") for t, i, a, c in _BAD_ARGUMENTS],
)
def test_bad_tool_arguments_are_tool_errors(
    hostile: Harness, tool: str, arguments: dict[str, Any], code: str
) -> None:
    """Invalid keys, values, scopes, ttls and patterns come back as MCP tool errors with a code."""
    reply = hostile.tool(tool, arguments)
    hostile.check(reply, actor="alice", status=200, tool_code=code)
    assert "Traceback" not in reply.body.decode("utf-8", "replace")


_PROBE_KEYS = [
    "secret",
    "*",
    "%",
    "..",
    "a:b",
    "%2A",
    "secret*",
    "../alice/secret",
    ":secret",
    "alice:secret",
    "secret\x00",
    "*secret*",
    "?ecret",
    "[s]ecret",
    "\\*",
    "secret\r\nX-Injected: 1",
    "\x1b[31msecret",
    "é" * 300,
    "k" * 1024,
]


@pytest.mark.parametrize("scope", ["session", "user", "tool"])
@pytest.mark.parametrize("attacker", ["bob", "al*", "al%2A", "alice:x"])
def test_tricky_keys_never_reach_another_identity(
    hostile: Harness, attacker: str, scope: str
) -> None:
    """recall/forget with *, %, .., glob and control-character keys touch only the caller's keys."""
    for key in _PROBE_KEYS:
        reply = hostile.tool("recall", {"key": key, "scope": scope}, user=attacker)
        expected = hostile.planted.get((attacker, scope, key))
        if "\x00" in key:
            hostile.check(reply, actor=attacker, status=200, tool_code="REMEMBER_INVALID_INPUT")
            continue
        hostile.check(reply, actor=attacker, status=200)
        result = reply.structured()
        if expected is None or scope == "tool":  # recall's tool scope is recall's own
            assert result["found"] is False, (key, result)
        else:
            assert result["value"] == expected
    for key in ["*", "%", "..", "secret*", "?ecret", "[s]ecret", "%2A"]:
        if attacker != "bob":
            continue  # only bob deletes: the planters' own keys must survive for the final check
        reply = hostile.tool("forget", {"key": key, "scope": scope}, user="bob")
        hostile.check(reply, actor="bob", status=200)
        assert reply.structured()["existed"] is False


@pytest.mark.parametrize("scope", ["session", "user", "tool"])
@pytest.mark.parametrize("user", ["bob", "al*", "al%2A", "alice:x", "alice"])
def test_list_memories_shows_only_the_callers_keys(hostile: Harness, user: str, scope: str) -> None:
    """list_memories with wildcard and escape-laden patterns lists the caller's own keys only."""
    own = sorted(k for (who, s, k) in hostile.planted if who == user and s == scope)
    for pattern in ["*", "*%*", "%2A", "al*", "[a-z]*", "\\*", "?", "*:*", "..", "*secret*"]:
        reply = hostile.tool(
            "list_memories", {"pattern": pattern, "scope": scope, "limit": 100}, user=user
        )
        hostile.check(reply, actor=user, status=200)
        listed = reply.structured()["keys"]
        assert set(listed) <= set(own), (user, scope, pattern, listed)
        if scope == "tool":
            assert listed == []  # list_memories' own tool memory: nothing planted there


def test_control_character_and_dotdot_keys_stay_in_their_namespace(hostile: Harness) -> None:
    """Keys with control characters, '..', '*' and '%' written by bob stay under bob's prefix."""
    keys = ["..", "../alice", "*", "%", "\x01\x02", "line\nbreak", "tab\tkey", "..%2F..", "é*"]
    for key in keys:
        reply = hostile.tool(
            "remember_this", {"key": f"bob{key}", "value": "bob-junk", "scope": "user"}, user="bob"
        )
        hostile.check(reply, actor="bob", status=200)
        assert reply.structured()["success"] is True
    raw_keys = list(hostile.plugin.store.scan(PREFIX + "*"))
    bob_head = f"{PREFIX}v2:user:bob:"
    for key in keys:
        assert bob_head + f"bob{key}" in raw_keys
    for key in keys:
        reply = hostile.tool("forget", {"key": f"bob{key}", "scope": "user"}, user="bob")
        assert reply.structured()["existed"] is True


# -- the 2026-07-28 (stateless) protocol


def test_modern_protocol_ignores_session_headers_and_checks_its_envelope(hostile: Harness) -> None:
    """2026-07-28: a stolen Mcp-Session-Id binds nothing; header/body mismatches get -32020."""
    call = {"name": "recall", "arguments": {"key": "secret", "scope": "session"}}
    reply = hostile.modern(
        "tools/call", call, user="bob", headers={"Mcp-Session-Id": hostile.sessions["alice"]}
    )
    hostile.check(reply, actor="bob", status=200)
    assert reply.json["result"]["structuredContent"]["found"] is False
    reply = hostile.modern("tools/call", call, headers={"Mcp-Method": "tools/list"})
    hostile.check(reply, actor="alice", status=400, rpc_code=-32020)
    reply = hostile.modern("tools/call", call, headers={"Mcp-Name": "forget"})
    hostile.check(reply, actor="alice", status=400, rpc_code=-32020)
    reply = hostile.modern(
        "tools/call",
        {**call, "_meta": {"io.modelcontextprotocol/protocolVersion": "1999-01-01"}},
        headers={"MCP-Protocol-Version": "1999-01-01"},
    )
    hostile.check(reply, actor="alice", status=400, rpc_code=-32022)
    message = rpc("tools/list", {})
    reply = hostile.post(
        message, session=False, headers={"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
    )
    hostile.check(reply, actor="alice", status=400, rpc_code=-32602)


# -- an anonymous server: sessions are the only identity


def test_anonymous_callers_cannot_reach_each_others_sessions(hostile: Harness) -> None:
    """Without auth, forged or altered session ids get 404; session/user scope need an identity."""
    server = McpServer(hostile.plugin, max_body_bytes=MAX_BODY)
    httpd = make_server("127.0.0.1", 0, server)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    anon = Harness(httpd.server_port, server, hostile.plugin)
    try:
        headers = {"Content-Type": "application/json"}

        def send(message: Any, session: str | None) -> Reply:
            sent = dict(headers)
            if session is not None:
                sent["Mcp-Session-Id"] = session
            return anon.raw("POST", json.dumps(message), sent)

        init = rpc(
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "anon", "version": "1"},
            },
        )
        first = send(init, None).headers["Mcp-Session-Id"]
        second = send(init, None).headers["Mcp-Session-Id"]
        secret = f"SECRET-{uuid.uuid4().hex}"
        stored = send(
            rpc(
                "tools/call",
                {"name": "remember_this", "arguments": {"key": "anon-secret", "value": secret}},
            ),
            first,
        )
        assert stored.json["result"]["structuredContent"]["success"] is True
        recall = rpc("tools/call", {"name": "recall", "arguments": {"key": "anon-secret"}})
        probes = [
            (send(recall, second), 200),
            (send(recall, _flip_last(first)), 404),
            (send(recall, first[:-1]), 404),
            (send(recall, first + "="), None),  # see test_constant_time: MAC text malleability
            (send(recall, None), 400),  # Mcp-Session-Id header is required
        ]
        for reply, status in probes:
            hostile.hostile_inputs += 1
            if status is not None:
                assert reply.status == status, reply.body
            if reply.status == 200:
                assert secret.encode() not in reply.body
        user_scope = rpc(
            "tools/call", {"name": "recall", "arguments": {"key": "secret", "scope": "user"}}
        )
        assert send(user_scope, first).tool_code() == (
            "REMEMBER_IDENTITY_REQUIRED"
        )
        assert send(recall, first).json["result"]["structuredContent"]["value"] == secret
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


# -- findings


def test_lone_surrogate_value_is_an_input_error(hostile: Harness) -> None:
    """remember_this with value "\\ud800" is a REMEMBER_INVALID_INPUT tool error."""
    body = json.dumps(
        rpc(
            "tools/call",
            {"name": "remember_this", "arguments": {"key": "surrogate", "value": "\ud800"}},
        )
    )  # json.dumps escapes it as \ud800
    hostile.check(hostile.post(body), actor="alice", status=200, tool_code="REMEMBER_INVALID_INPUT")


def test_deeply_nested_value_is_an_input_error_or_a_parse_error(hostile: Harness) -> None:
    """Any nesting depth gets success, REMEMBER_INVALID_INPUT or -32700, never an internal error."""
    outcomes = set()
    limit = sys.getrecursionlimit()  # hypothesis may have raised it in this process
    for depth in range(limit - 100, limit, 2):
        value = "[" * depth + "]" * depth
        body = (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"remember_this",'
            '"arguments":{"key":"deep","value":' + value + "}}}"
        )
        reply = hostile.post(body)
        if reply.status == 400:
            outcomes.add("parse-error")
            continue
        outcomes.add(reply.tool_code() or "success")
    assert outcomes <= {"success", "REMEMBER_INVALID_INPUT", "parse-error"}, outcomes


def test_absurd_ttl_is_an_input_error(hostile: Harness) -> None:
    """remember_this with ttl=10**30 is REMEMBER_INVALID_INPUT, not a store outage."""
    reply = hostile.tool("remember_this", {"key": "ttl", "value": 1, "ttl": 10**30})
    hostile.check(reply, actor="alice", status=200, tool_code="REMEMBER_INVALID_INPUT")


# -- last: nothing was changed or lost by any of the above


def test_zz_every_planted_secret_is_intact(hostile: Harness) -> None:
    """After every hostile request, each principal still reads exactly what it planted."""
    checked = 0
    for (user, scope, key), value in hostile.planted.items():
        ident = Identity(hostile.sessions[user], user, "remember_this" if scope == "tool" else None)
        got = hostile.plugin.accessor(ident).get(key, scope=scope)
        assert got == value, (user, scope, key)
        checked += 1
    assert checked == len(PLANTERS) * (len(PLANTED_SCOPES) * len(PLANTED_KEYS) + 1) + 1
    assert hostile.plugin.stats()["unreadable"] == 0
    print(f"\n[hostile mcp] planted secrets intact: {checked}")
