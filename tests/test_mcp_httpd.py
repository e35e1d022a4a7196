"""The threaded keep-alive WSGI server behind ``serve``, over real sockets on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from remember_sync import RememberPlugin
from remember_sync.mcp import McpServer
from remember_sync.mcp.httpd import KeepAliveWSGIServer, make_server
from tests.mcp_wire import DEFAULT_MAX_VALUE_BYTES, body_limit

PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()


@pytest.fixture(params=["memory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def httpd(make_plugin: Callable[..., RememberPlugin]) -> Iterator[KeepAliveWSGIServer]:
    server = make_server("127.0.0.1", 0, McpServer(make_plugin(tools={"enabled": True})))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def exchange(server: KeepAliveWSGIServer, data: bytes) -> tuple[bytes, bool]:
    """Send raw bytes; return everything read and whether the server closed the connection."""
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=5) as sock:
        sock.sendall(data)
        sock.settimeout(1.0)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            return received, False
        return received, True


def post(body: bytes, *extra: str) -> bytes:
    head = ["POST /mcp HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def in_session(server: KeepAliveWSGIServer) -> str:
    """An Mcp-Session-Id header line for an anonymous session the app issued."""
    app: McpServer = server.get_app()  # type: ignore[assignment]
    return f"Mcp-Session-Id: {app.session_signer.issue(None)}"


def responses(data: bytes) -> list[bytes]:
    return [part for part in data.split(b"HTTP/1.1 ")[1:]]


def test_pipelined_requests_share_one_connection(httpd: KeepAliveWSGIServer) -> None:
    """Two requests on one connection get two framed answers; the connection stays open."""
    session = in_session(httpd)
    received, closed = exchange(httpd, post(PING, session) + post(PING, session))
    answers = responses(received)
    assert [a[:6] for a in answers] == [b"200 OK", b"200 OK"] and not closed
    assert all(b"Content-Length: 36" in a for a in answers)


def test_connection_close_is_honoured(httpd: KeepAliveWSGIServer) -> None:
    """A client asking to close gets Connection: close and the connection ends."""
    received, closed = exchange(httpd, post(PING, "Connection: close"))
    assert closed and b"Connection: close" in received


def test_chunked_body_gets_411_and_close(httpd: KeepAliveWSGIServer) -> None:
    """Chunked bodies (no length) get 411 and the connection is closed, never misread."""
    chunk = f"{len(PING):x}\r\n".encode() + PING + b"\r\n0\r\n\r\n"
    head = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    received, closed = exchange(httpd, head + chunk + post(PING))
    assert closed and [a[:3] for a in responses(received)] == [b"411"]


def test_head_closes_after_answering(httpd: KeepAliveWSGIServer) -> None:
    """HEAD gets 405 and a closed connection (wsgiref would send the body anyway)."""
    received, closed = exchange(httpd, b"HEAD /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert closed and received.startswith(b"HTTP/1.1 405")


def test_oversized_body_is_drained_and_the_connection_kept(httpd: KeepAliveWSGIServer) -> None:
    """A 413 body up to the drain limit is read away so the next request parses cleanly."""
    big = b"x" * (body_limit(DEFAULT_MAX_VALUE_BYTES) + 1000)
    received, closed = exchange(httpd, post(big) + post(PING, in_session(httpd)))
    assert [a[:3] for a in responses(received)] == [b"413", b"200"] and not closed


def test_ipv6_loopback(make_plugin: Callable[..., RememberPlugin]) -> None:
    """--host ::1 binds an IPv6 socket."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this kernel")
    try:
        server: Any = make_server("::1", 0, McpServer(make_plugin()))
    except OSError as exc:
        pytest.skip(f"IPv6 loopback unavailable: {exc}")
    try:
        assert server.socket.family == socket.AF_INET6
    finally:
        server.server_close()
