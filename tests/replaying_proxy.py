"""An HTTP proxy on loopback that sends every request twice and answers with the second reply.

Put it in front of the Vercel KV emulator: each command runs twice on the
server, and the client sees what the repeat answered -- a ``SET ... NX`` that
wrote reports "not written", a compare-and-set that swapped reports "no swap".
What a client sees when a network path (or an edge) replays requests.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class ReplayingProxy:
    """A threaded HTTP/1.1 proxy to *target_url* on ``http://127.0.0.1:<port>``."""

    def __init__(self, target_url: str) -> None:
        target = urlsplit(target_url)
        host, port = target.hostname or "127.0.0.1", target.port or 80
        #: Requests forwarded (each one twice).
        self.replayed = 0
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self._forward()

            def do_GET(self) -> None:
                self._forward()

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                reply = b""
                status = 502
                for _ in range(2):
                    conn = http.client.HTTPConnection(host, port, timeout=10)
                    try:
                        conn.request(self.command, self.path, body=body or None, headers=headers)
                        answer = conn.getresponse()
                        status, reply = answer.status, answer.read()
                    finally:
                        conn.close()
                with lock:
                    proxy.replayed += 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
