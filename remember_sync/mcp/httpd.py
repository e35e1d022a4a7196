"""A small threaded WSGI server with HTTP/1.1 keep-alive, on the standard library only.

:mod:`wsgiref.simple_server` answers one request per connection and writes a
response in several unbuffered pieces; MCP clients keep connections open and
send many small requests, so that costs a TCP handshake (and, with Nagle's
algorithm, delayed-ACK stalls) per call.  This module keeps wsgiref's WSGI
handling and adds:

* one thread per connection (:class:`socketserver.ThreadingMixIn`, daemon
  threads, so an idle keep-alive connection never blocks shutdown);
* persistent HTTP/1.1 connections, closed after an idle timeout, when the
  client asks, or when a request's body framing is unknown (no
  ``Content-Length``) or its unread remainder is large;
* buffered writes and ``TCP_NODELAY``: a response leaves in one segment.

It is meant for ``remember-sync serve`` and tests; behind the internet, run
the same WSGI app under gunicorn (see the docs).
"""

from __future__ import annotations

import logging
import socket
import socketserver
from collections.abc import Callable
from typing import Any, BinaryIO, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

__all__ = ["KeepAliveWSGIServer", "make_server"]

access_log = logging.getLogger("remember_sync.mcp.access")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]

#: An unread request-body remainder up to this size is drained to keep the connection
#: (and so the client reads our 413 instead of a connection reset); larger ones close it.
_DRAIN_LIMIT = 16 * 1024 * 1024


class _BodyReader:
    """``wsgi.input`` limited to the request's ``Content-Length``.

    Reading past the body would block on (or swallow) the next request of a
    keep-alive connection; the handler drains or closes based on ``remaining``.
    """

    def __init__(self, stream: BinaryIO, length: int) -> None:
        self._stream = stream
        self.remaining = length

    def _take(self, read: Callable[[int], bytes], size: int | None) -> bytes:
        """At most *size* bytes (all that is left when ``None`` or negative) by *read*."""
        if self.remaining <= 0:
            return b""
        if size is None or size < 0 or size > self.remaining:
            size = self.remaining
        data = read(size)
        self.remaining -= len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        data = self._take(self._stream.read, size)
        if not data:
            self.remaining = 0
        return data

    def readline(self, size: int = -1) -> bytes:
        return self._take(self._stream.readline, size)

    def readlines(self, hint: int = -1) -> list[bytes]:
        return self.read().splitlines(keepends=True)

    def __iter__(self) -> Any:
        return iter(self.readlines())


class _Handler(ServerHandler):
    """wsgiref's handler speaking HTTP/1.1; closes the connection when length is unknown."""

    http_version = "1.1"
    # Set by wsgiref at run time (undeclared in typeshed).
    status: str | None
    headers: Any
    request_handler: Any

    def cleanup_headers(self) -> None:
        super().cleanup_headers()
        status = (self.status or "").split(" ", 1)[0]
        if "Content-Length" not in self.headers and status not in ("204", "304"):
            # No length, no framing: the end of the body is the end of the connection.
            self.request_handler.close_connection = True
        if self.request_handler.close_connection:
            self.headers["Connection"] = "close"


class _RequestHandler(WSGIRequestHandler):
    protocol_version = "HTTP/1.1"
    # Buffered: status line, headers and body go out in one write.
    wbufsize = -1
    disable_nagle_algorithm = True
    #: Seconds an idle keep-alive connection is kept open.
    timeout = 75

    def handle(self) -> None:
        # BaseHTTPRequestHandler.handle: loop over requests until close_connection.
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            self.handle_one_request()

    def handle_expect_100(self) -> bool:
        ok = super().handle_expect_100()
        self.wfile.flush()  # the buffered 100 Continue must leave now
        return bool(ok)

    def handle_one_request(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = ""
                self.request_version = ""
                self.command = ""
                self.send_error(414)
                self.close_connection = True
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            self._run_app()
            self.wfile.flush()
        except (TimeoutError, ConnectionError):
            self.close_connection = True

    def _run_app(self) -> None:
        environ = self.get_environ()
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
            chunked = True  # unknown framing: answer, then close
        if chunked or self.command == "HEAD":
            # Unknown request framing, or a response body HEAD must not carry (wsgiref
            # sends it anyway): answer, then close, so the stream never desynchronises.
            self.close_connection = True
        body = _BodyReader(cast(BinaryIO, self.rfile), 0 if chunked else max(0, length))
        out = cast(Any, self.wfile)
        handler = _Handler(body, out, self.get_stderr(), environ, multithread=True)
        handler.request_handler = self
        handler.run(self.server.get_app())  # type: ignore[attr-defined]
        if self.close_connection or body.remaining > _DRAIN_LIMIT:
            self.close_connection = True
        else:
            while body.remaining and body.read(65536):
                pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        access_log.info("%s - %s", self.address_string(), format % args)

    def address_string(self) -> str:
        return str(self.client_address[0])


class KeepAliveWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """A threaded :class:`wsgiref.simple_server.WSGIServer` (see the module docs)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the FQDN of the host, which can stall on DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


class _KeepAliveWSGIServer6(KeepAliveWSGIServer):
    address_family = socket.AF_INET6


def make_server(host: str, port: int, app: WSGIApp) -> KeepAliveWSGIServer:
    """Bind *app* on *host*:*port* (``0``: any free port); call ``serve_forever()`` to run it."""
    server_class = _KeepAliveWSGIServer6 if ":" in host else KeepAliveWSGIServer
    server = server_class((host, port), _RequestHandler)
    server.set_app(app)
    return server
