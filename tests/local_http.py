"""HTTP servers the tests run on a thread of their own, on a loopback port the kernel picks."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer
from types import TracebackType
from typing import Any, Self


def serve_in_thread(httpd: BaseServer) -> threading.Thread:
    """Run ``httpd.serve_forever`` on a daemon thread (polling shutdown every 50 ms)."""
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    return thread


def stop_serving(httpd: BaseServer, thread: threading.Thread) -> None:
    """Stop what :func:`serve_in_thread` started and close the listening socket."""
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def stop_apps(running: list[tuple[BaseServer, threading.Thread, Any]]) -> None:
    """Stop each ``(server, its thread, the plugin it serves)`` and close the plugin."""
    for httpd, thread, plugin in running:
        stop_serving(httpd, thread)
        plugin.close()


class LocalHttp:
    """A threaded ``http.server`` with *handler* on *host*; stopped by :meth:`stop` or ``with``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = serve_in_thread(self.httpd)

    def stop(self) -> None:
        stop_serving(self.httpd, self.thread)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
