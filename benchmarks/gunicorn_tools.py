"""Benchmark: ``tools/call recall`` under the README's gunicorn command, 8 clients, Redis.

Usage::

    python -m benchmarks.gunicorn_tools [--seconds 6] [--clients 8] [--threads 8]

Two gunicorn masters run side by side on free 127.0.0.1 ports, both with the
README's production settings (``-w 4 --threads 8``):

* **mcp** -- ``remember_sync.mcp:create_app()`` itself, configured through
  the environment as in production (``REMEMBER_REDIS_URL``,
  ``REMEMBER_SECRET``): every ``recall`` verifies the signed session id, checks
  the store for an ended session (one ``GET``), reads and decrypts the entry
  (one more ``GET``, AES-256-GCM) and shapes the MCP result;
* **canned** -- :func:`canned_app`, a WSGI app that parses the same JSON-RPC
  request and answers the very result the mcp server gave for the same call
  (captured once at start-up, so the reply has the same size), with no store
  and no MCP: the cost of HTTP, gunicorn and JSON alone.

Each of the *clients* threads keeps one HTTP/1.1 keep-alive connection, opens
its own MCP session the way a client does (``initialize``,
``notifications/initialized``, then ``Mcp-Session-Id`` and
``MCP-Protocol-Version`` on every request), stores a value with
``remember_this`` and then sends ``tools/call recall`` for it as fast as it
can; every reply is checked.  The two servers take turns in rounds (fresh
connections and sessions each round, so connections land on other workers),
alternating which goes first; the ratio is the median over pairs of mcp
requests/s over canned requests/s.  The clients run in this process: on a
small machine they compete with the servers for the CPUs, which compresses
the ratio towards 1 as much for either side.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .harness import run_clients, server_line

__all__ = ["CANNED_ENV", "canned_app", "main", "run"]

SECRET = "benchmark-secret-0123456789abcdef0123456789"
VERSION = "2025-11-25"
WORKERS = 4
#: The environment variable that hands the captured ``recall`` result to :func:`canned_app`.
CANNED_ENV = "REMEMBER_BENCH_CANNED_RESULT"
VALUE = {"theme": "dark", "language": "en", "recent": ["alpha", "beta", "gamma"]}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
_ROOT = Path(__file__).resolve().parent.parent
_INITIALIZED = {
    "protocolVersion": VERSION,
    "capabilities": {"tools": {"listChanged": False}},
    "serverInfo": {"name": "canned", "version": "1"},
}


# -- the baseline app (imported by gunicorn in its workers) -------------------------------------


def canned_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    """Parse one JSON-RPC request; answer the captured ``recall`` result with its id."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    message = json.loads(environ["wsgi.input"].read(length))
    if "id" not in message:  # a notification
        start_response("202 Accepted", [("Content-Length", "0")])
        return []
    headers = [("Content-Type", "application/json")]
    if message.get("method") == "initialize":
        headers.append(("Mcp-Session-Id", "canned"))
        result: Any = _INITIALIZED
    else:
        result = _canned_result()
    body = json.dumps(
        {"jsonrpc": "2.0", "id": message["id"], "result": result},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()
    start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
    return [body]


_CANNED: list[Any] = []


def _canned_result() -> Any:
    if not _CANNED:
        _CANNED.append(json.loads(os.environ[CANNED_ENV]))
    return _CANNED[0]


# -- gunicorn masters ----------------------------------------------------------------------------


class Gunicorn:
    """``gunicorn -w 4 --threads N -b 127.0.0.1:0 APP`` in a child process; a context manager."""

    def __init__(self, app: str, threads: int | None, env: dict[str, str]) -> None:
        self.runtime = tempfile.mkdtemp(prefix="bench-gunicorn-")
        argv = [sys.executable, "-m", "gunicorn", "-w", str(WORKERS)]
        if threads is not None:
            argv += ["--threads", str(threads)]
        argv += ["-b", "127.0.0.1:0", "--graceful-timeout", "5", app]
        child_env = {
            **os.environ,
            **env,
            # The checkout being measured, whatever is installed.
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")])),
            # gunicorn >= 24 opens a control socket there (else ~/.gunicorn): its own.
            "XDG_RUNTIME_DIR": self.runtime,
        }
        self.lines: list[str] = []
        self.booted: set[str] = set()
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            argv,
            cwd=self.runtime,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        self.port = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            booted = re.search(r"Booting worker with pid: (\d+)", line)
            if booted:
                self.booted.add(booted.group(1))
            if len(self.booted) >= WORKERS and any("Listening at" in x for x in self.lines):
                self._ready.set()
        self._ready.set()

    def __enter__(self) -> Gunicorn:
        try:
            if not self._ready.wait(60) or self.proc.poll() is not None:
                raise RuntimeError("gunicorn did not start:\n" + "\n".join(self.lines[-20:]))
            found = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", "\n".join(self.lines))
            assert found is not None
            self.port = int(found.group(1))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.runtime, ignore_errors=True)


# -- the clients ---------------------------------------------------------------------------------


def _post(
    conn: http.client.HTTPConnection, message: dict[str, Any], headers: dict[str, str]
) -> tuple[int, bytes, str | None]:
    conn.request("POST", "/mcp", json.dumps(message, separators=(",", ":")), headers)
    reply = conn.getresponse()
    return reply.status, reply.read(), reply.getheader("Mcp-Session-Id")


def _open_session(conn: http.client.HTTPConnection) -> dict[str, str]:
    """initialize + notifications/initialized + remember_this; return the request headers."""
    status, body, session = _post(
        conn,
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        },
        HEADERS,
    )
    if status != 200 or not session:
        raise RuntimeError(f"initialize failed: HTTP {status}: {body[:200]!r}")
    headers = {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, body, _ = _post(conn, notification, headers)
    if status != 202:
        raise RuntimeError(f"notifications/initialized: HTTP {status}: {body[:200]!r}")
    status, body, _ = _post(
        conn,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "remember_this", "arguments": {"key": "profile", "value": VALUE}},
        },
        headers,
    )
    if status != 200 or b'"isError":false' not in body:
        raise RuntimeError(f"remember_this failed: HTTP {status}: {body[:200]!r}")
    return headers


_RECALL = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "recall", "arguments": {"key": "profile"}},
    },
    separators=(",", ":"),
)


def _recall_once(port: int) -> tuple[Any, int]:
    """One session's ``recall`` result and the size of its reply body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = _open_session(conn)
        conn.request("POST", "/mcp", _RECALL, headers)
        reply = conn.getresponse()
        body = reply.read()
        if reply.status != 200 or b'"found":true' not in body:
            raise RuntimeError(f"recall failed: HTTP {reply.status}: {body[:200]!r}")
        return json.loads(body)["result"], len(body)
    finally:
        conn.close()


def _client(
    port: int,
    start: threading.Barrier,
    stop_at: list[float],
    out: list[float],
    errors: list[BaseException],
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = _open_session(conn)
        start.wait()
        clock = time.perf_counter
        while True:
            began = clock()
            if began >= stop_at[0]:
                break
            conn.request("POST", "/mcp", _RECALL, headers)
            reply = conn.getresponse()
            body = reply.read()
            if reply.status != 200 or b'"found":true' not in body:
                raise RuntimeError(f"bad reply {reply.status}: {body[:200]!r}")
            out.append(clock() - began)
    except BaseException as exc:  # noqa: BLE001 - reported by the caller
        errors.append(exc)
        start.abort()
    finally:
        conn.close()


def _round(port: int, clients: int, seconds: float) -> tuple[float, list[float]]:
    """*clients* keep-alive clients for *seconds*; return (requests/s, latencies)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    elapsed = run_clients(
        lambda i, start, stop_at, errors: _client(port, start, stop_at, latencies[i], errors),
        clients,
        seconds,
    )
    done = [x for part in latencies for x in part]
    return len(done) / elapsed, done


def run(
    redis_url: str,
    seconds: float = 6.0,
    *,
    clients: int = 8,
    threads: int | None = 8,
    min_pairs: int = 6,
    round_seconds: float = 0.5,
) -> dict[str, Any]:
    """Measure both servers for about *seconds* each, in alternating rounds.

    :param redis_url: the Redis the mcp server uses (a database it may fill).
    :param threads: gunicorn's ``--threads``; ``None`` leaves it out (sync workers).
    :returns: ``mcp_rps`` and ``canned_rps`` (medians over rounds), ``ratio``
        (median of the per-pair ratios), ``pairs``, ``p50_us``/``p99_us`` of
        each side, and the reply sizes of both (they must be equal).
    """
    pairs = max(min_pairs, round(seconds / round_seconds))
    per_round = seconds / pairs
    mcp_env = {"REMEMBER_SECRET": SECRET, "REMEMBER_REDIS_URL": redis_url}
    with Gunicorn("remember_sync.mcp:create_app()", threads, mcp_env) as mcp:
        result, mcp_size = _recall_once(mcp.port)
        canned_env = {CANNED_ENV: json.dumps(result, ensure_ascii=False, separators=(",", ":"))}
        with Gunicorn("benchmarks.gunicorn_tools:canned_app", threads, canned_env) as canned:
            _, canned_size = _recall_once(canned.port)
            if canned_size != mcp_size:
                raise RuntimeError(f"reply sizes differ: mcp {mcp_size}, canned {canned_size}")
            sides = {"mcp": mcp.port, "canned": canned.port}
            for port in sides.values():  # warm-up: every worker imports and connects
                _round(port, clients, max(0.2, per_round))
            rates: dict[str, list[float]] = {"mcp": [], "canned": []}
            latencies: dict[str, list[float]] = {"mcp": [], "canned": []}
            for pair in range(pairs):
                order = ["canned", "mcp"] if pair % 2 == 0 else ["mcp", "canned"]
                for side in order:
                    rate, lat = _round(sides[side], clients, per_round)
                    rates[side].append(rate)
                    latencies[side].extend(lat)
    ratios = [m / c for m, c in zip(rates["mcp"], rates["canned"], strict=True)]
    return {
        "clients": clients,
        "workers": WORKERS,
        "threads": threads,
        "pairs": pairs,
        "seconds": per_round * pairs,
        "mcp_rps": statistics.median(rates["mcp"]),
        "canned_rps": statistics.median(rates["canned"]),
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "reply_bytes": mcp_size,
        **{f"{side}_p50_us": _quantile(latencies[side], 0.5) for side in rates},
        **{f"{side}_p99_us": _quantile(latencies[side], 0.99) for side in rates},
    }


def _quantile(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1e6


def main(argv: list[str] | None = None) -> int:
    """Start a redis-server, run :func:`run`, print the figures."""
    from remember_sync.testing.redis_server import RedisServer, redis_server_version

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=6.0, help="per server (default 6)")
    parser.add_argument("--clients", type=int, default=8, help="connections (default 8)")
    parser.add_argument(
        "--threads", type=int, default=8, help="gunicorn --threads (default 8; 0: leave it out)"
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.clients < 1 or args.threads < 0:
        parser.error("--seconds and --clients must be positive, --threads at least 0")
    with RedisServer() as server:
        out = run(server.url, args.seconds, clients=args.clients,
                  threads=args.threads or None)  # fmt: skip
        version = redis_server_version(server.binary)
    threads = f"--threads {out['threads']}" if out["threads"] else "no --threads"
    print(server_line(".".join(map(str, version or ())) or "?", server.binary))
    print(
        f"tools/call recall, gunicorn -w {out['workers']} {threads}, {out['clients']} keep-alive "
        f"clients, {out['pairs']} pairs, Python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)"
    )
    for side in ("canned", "mcp"):
        print(
            f"  {side:<7} {out[f'{side}_rps']:>9,.0f} req/s   p50 {out[f'{side}_p50_us']:>8,.0f} us"
            f"   p99 {out[f'{side}_p99_us']:>8,.0f} us"
        )
    print(
        f"  ratio   {out['ratio']:.2f}x  (per pair: "
        f"{', '.join(f'{r:.2f}' for r in out['ratios'])}; replies {out['reply_bytes']} bytes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
