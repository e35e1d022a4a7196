"""Benchmark: MCP ``tools/call`` (``recall``) requests/s over HTTP keep-alive, 4 clients.

Usage::

    python benchmarks/mcp_tools.py [--seconds 5] [--clients 4]

Two servers are measured in the same run, one after the other, each in its
own process on a free 127.0.0.1 port and on the same HTTP server
(:mod:`remember_sync.mcp.httpd`: threaded, keep-alive):

* **bare** -- a WSGI app that reads the same JSON-RPC request and answers a
  canned ``recall`` result of the same shape, without touching memory: the
  cost of HTTP, the WSGI server and JSON alone;
* **mcp** -- :class:`remember_sync.mcp.McpServer` over the in-memory store
  with encryption on: every request verifies the signed session id,
  validates the arguments, resolves the namespace, reads and decrypts the
  entry (AES-256-GCM, cached HKDF key) and shapes the MCP result.

Each of the *clients* threads keeps one HTTP/1.1 connection open, opens an
MCP session (``initialize``), stores a value with ``remember_this`` and then
sends ``tools/call recall`` for that key as fast as it can.  Every reply is
checked.  The ratio is mcp requests/s over bare requests/s.  :func:`run` is
importable so a smoke test can run it for a fraction of a second.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

SECRET = "benchmark-secret-0123456789abcdef0123456789"
VALUE = {"theme": "dark", "language": "en", "recent": ["alpha", "beta", "gamma"]}
CANNED = {
    "content": [
        {
            "type": "text",
            "text": json.dumps(
                {
                    "found": True,
                    "key": "profile",
                    "value": VALUE,
                    "scope": "session",
                    "createdAt": 1_700_000_000_000,
                },
                separators=(",", ":"),
            ),
        }
    ],
    "structuredContent": {
        "found": True,
        "key": "profile",
        "value": VALUE,
        "scope": "session",
        "createdAt": 1_700_000_000_000,
    },
    "isError": False,
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


# -- the two servers (run in a child process: python mcp_tools.py --serve KIND) ---------------


def bare_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """Answer any JSON-RPC request with a canned recall result; no memory, no MCP."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    message = json.loads(environ["wsgi.input"].read(length))
    headers: list[tuple[str, str]] = [("Content-Type", "application/json")]
    if message.get("method") == "initialize":
        headers.append(("Mcp-Session-Id", "bare"))
    body = json.dumps(
        {"jsonrpc": "2.0", "id": message.get("id"), "result": CANNED}, separators=(",", ":")
    ).encode()
    start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
    return [body]


def _serve(kind: str) -> int:
    from remember_sync import RememberPlugin
    from remember_sync.cli.serve import run_server
    from remember_sync.mcp import McpServer

    if kind == "bare":
        return run_server(bare_app, port=0)
    plugin = RememberPlugin.init(
        tools={"enabled": True}, encryption={"secrets": [SECRET]}, skip_legacy_purge=True
    )
    return run_server(McpServer(plugin), port=0)


class _Server:
    """A child process serving one kind; stopped with SIGTERM."""

    def __init__(self, kind: str) -> None:
        env = {**os.environ, "REMEMBER_SECRET": SECRET}
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", kind],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        first = ""
        while time.monotonic() < deadline:
            first = self.proc.stdout.readline()
            if "listening on" in first or not first:
                break
        found = re.search(r"http://127\.0\.0\.1:(\d+)", first)
        if found is None:
            self.stop()
            raise RuntimeError(f"the {kind} server did not start: {first!r}")
        self.port = int(found.group(1))
        # Keep draining its output so it never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# -- the clients -------------------------------------------------------------------------------


def _post(
    conn: http.client.HTTPConnection, message: dict[str, Any], headers: dict[str, str]
) -> tuple[bytes, http.client.HTTPResponse]:
    conn.request("POST", "/mcp", json.dumps(message, separators=(",", ":")), headers)
    reply = conn.getresponse()
    body = reply.read()
    if reply.status != 200:
        raise RuntimeError(f"HTTP {reply.status}: {body[:200]!r}")
    return body, reply


def _client(
    port: int,
    index: int,
    start: threading.Barrier,
    stop_at: list[float],
    counts: list[int],
    errors: list[BaseException],
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        _, reply = _post(
            conn,
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            },
            HEADERS,
        )
        headers = {**HEADERS, "Mcp-Session-Id": reply.getheader("Mcp-Session-Id") or ""}
        _post(
            conn,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "remember_this",
                    "arguments": {"key": "profile", "value": VALUE},
                },
            },
            headers,
        )
        recall = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "recall", "arguments": {"key": "profile"}},
            },
            separators=(",", ":"),
        )
        start.wait()
        done = 0
        while time.perf_counter() < stop_at[0]:
            conn.request("POST", "/mcp", recall, headers)
            reply = conn.getresponse()
            body = reply.read()
            if reply.status != 200 or b'"found":true' not in body:
                raise RuntimeError(f"bad reply {reply.status}: {body[:200]!r}")
            done += 1
        counts[index] = done
    except BaseException as exc:  # noqa: BLE001 - reported by the caller
        errors.append(exc)
        try:
            start.abort()
        except threading.BrokenBarrierError:
            pass
    finally:
        conn.close()


def _measure(port: int, clients: int, seconds: float) -> tuple[int, float]:
    # Here, not at the top: this file also runs as a script (the servers it measures).
    from benchmarks.harness import run_clients

    counts = [0] * clients
    elapsed = run_clients(
        lambda i, start, stop_at, errors: _client(port, i, start, stop_at, counts, errors),
        clients,
        seconds,
        start_timeout=30,
    )
    return sum(counts), elapsed


def run(seconds: float = 5.0, *, clients: int = 4, rounds: int = 1) -> list[dict[str, Any]]:
    """Measure both servers for *seconds* each with *clients* keep-alive connections.

    Both servers run at once and take turns in *rounds* (of ``seconds /
    rounds`` each), alternating which goes first.

    :returns: one row per server: ``server``, ``clients``, ``requests``,
        ``seconds``, ``requests_per_s`` (all rounds together), ``ratios``
        (each round's requests/s over the bare server's) and ``ratio`` (their
        median).
    """
    labels = {
        "bare": "bare WSGI, canned JSON-RPC reply",
        "mcp": "McpServer recall, memory store, encrypted",
    }
    servers: dict[str, _Server] = {}
    done: dict[str, list[tuple[int, float]]] = {kind: [] for kind in labels}
    try:
        for kind in labels:
            servers[kind] = _Server(kind)
        for kind in labels:
            _measure(servers[kind].port, clients, min(0.5, seconds / 4))  # warm-up, not counted
        for rnd in range(rounds):
            for kind in labels if rnd % 2 == 0 else reversed(labels):
                done[kind].append(_measure(servers[kind].port, clients, seconds / rounds))
    finally:
        for server in servers.values():
            server.stop()
    rates = {kind: [n / t if t else 0.0 for n, t in done[kind]] for kind in labels}
    rows: list[dict[str, Any]] = []
    for kind, label in labels.items():
        requests = sum(n for n, _ in done[kind])
        elapsed = sum(t for _, t in done[kind])
        ratios = [r / b if b else 0.0 for r, b in zip(rates[kind], rates["bare"], strict=True)]
        rows.append(
            {
                "server": label,
                "clients": clients,
                "requests": requests,
                "seconds": elapsed,
                "requests_per_s": requests / elapsed if elapsed else 0.0,
                "ratios": ratios,
                "ratio": statistics.median(ratios),
            }
        )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as a plain-text table."""
    lines = [
        f"tools/call recall over HTTP/1.1 keep-alive, {rows[0]['clients']} concurrent clients, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)",
        f"{'server':<44} {'requests':>9} {'seconds':>8} {'req/s':>9} {'ratio':>6}",
    ]
    for row in rows:
        lines.append(
            f"{row['server']:<44} {row['requests']:>9,} {row['seconds']:>8.2f} "
            f"{row['requests_per_s']:>9,.0f} {row['ratio']:>6.2f}"
        )
    lines.append(
        f"recall through the MCP server runs at {rows[-1]['ratio']:.0%} of the bare server's "
        "rate (ratio = requests/s over the bare server's)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="per server (default 5)")
    parser.add_argument("--clients", type=int, default=4, help="connections (default 4)")
    parser.add_argument("--serve", choices=["bare", "mcp"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return _serve(args.serve)
    if args.seconds <= 0 or args.clients < 1:
        parser.error("--seconds and --clients must be positive")
    print(render(run(args.seconds, clients=args.clients)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
