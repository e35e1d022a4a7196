"""The README's production command, for real: ``gunicorn -w 4 --threads 8`` over one Redis.

Each test starts gunicorn on 127.0.0.1 with 4 workers of 8 threads, the app
built by ``create_app()`` from the environment (``REMEMBER_REDIS_URL`` to a
throw-away redis-server, ``REMEMBER_SECRET``), and wrapped by
``tests/gunicorn_app.py`` only to add an ``X-Worker-Pid`` response header, so
the test sees which worker answered.  Requests go out from 8 threads, each on a
new connection, so they spread over the workers; every loop that waits for
"all 4 workers" is bounded.  gunicorn is stopped in ``finally`` (SIGTERM, then
SIGKILL).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_component
from tests.mcp_wire import call
from tests.mcp_wire import initialize as initialize_message
from tests.served import Served
from tests.test_cli import child_env

WORKERS = 4
THREADS = 8
SECRET = "gunicorn-secret-0123456789abcdef0123456789"
VERSION = "2025-11-25"
WORKER_HEADER = "X-Worker-Pid"  # added by tests/gunicorn_app.py
#: Bounds of every "until each worker has answered" loop.
MAX_REQUESTS = 4000
START_SECONDS = 60.0
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
VALUE = {"colour": "teal", "n": 42}


@dataclass(frozen=True)
class Reply:
    """One HTTP reply and the worker that sent it."""

    status: int
    pid: int
    body: bytes
    session_id: str | None

    def json(self) -> Any:
        return json.loads(self.body)


class Gunicorn(Served):
    """A gunicorn master on 127.0.0.1:<port chosen by the kernel> and everything it printed."""

    def __init__(self, cwd: Path, redis_url: str | None, **store_env: str) -> None:
        """*redis_url*: the store; ``None`` for the one *store_env* names (Vercel KV)."""
        runtime = cwd / "run"
        runtime.mkdir()
        if redis_url is not None:
            store_env = {"REMEMBER_REDIS_URL": redis_url, **store_env}
        env = child_env(
            REMEMBER_SECRET=SECRET,
            **store_env,
            # gunicorn >= 24 opens a control socket under XDG_RUNTIME_DIR (else ~/.gunicorn):
            # one of its own, so concurrent runs never share one.
            XDG_RUNTIME_DIR=str(runtime),
        )
        self.argv = [
            sys.executable, "-m", "gunicorn",
            "-w", str(WORKERS), "--threads", str(THREADS), "-b", "127.0.0.1:0",
            "--graceful-timeout", "5",
            "tests.gunicorn_app:app",
        ]  # fmt: skip
        super().__init__(self.argv, cwd, env, exact_env=True)


# -- HTTP, one new connection per request -----------------------------------------------------


def send(
    port: int,
    method: str,
    message: dict[str, Any] | None = None,
    session_id: str | None = None,
) -> Reply:
    """One request on a new connection (so the kernel hands it to any worker)."""
    headers = dict(HEADERS)
    if session_id is not None:
        headers.update({"Mcp-Session-Id": session_id, "MCP-Protocol-Version": VERSION})
    body = None if message is None else json.dumps(message)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, "/mcp", body, headers)
        reply = conn.getresponse()
        data = reply.read()
        pid = reply.getheader(WORKER_HEADER)
        assert pid is not None, f"no {WORKER_HEADER} on a {reply.status} reply"
        return Reply(reply.status, int(pid), data, reply.getheader("Mcp-Session-Id"))
    finally:
        conn.close()


def initialize(port: int) -> str:
    """Open an MCP session the way a client does; return its id."""
    reply = send(
        port,
        "POST",
        initialize_message(VERSION, id=0, client="gunicorn-test"),
    )
    assert reply.status == 200, reply
    assert reply.json()["result"]["protocolVersion"] == VERSION
    assert reply.session_id
    done = send(port, "POST", {"jsonrpc": "2.0", "method": "notifications/initialized"},
                reply.session_id)  # fmt: skip
    assert done.status == 202, done
    return reply.session_id


def tool_call(port: int, session_id: str, name: str, arguments: dict[str, Any], n: int) -> Reply:
    return send(port, "POST", call(name, arguments, n), session_id)


def spread(op: Callable[[int], Reply], *, at_least: int, workers: set[int]) -> list[Reply]:
    """Run *op* from 8 threads until it ran *at_least* times and every worker answered.

    Bounded by :data:`MAX_REQUESTS`; the caller asserts on what was seen.
    """
    replies: list[Reply] = []
    batch = 4 * THREADS
    with ThreadPoolExecutor(THREADS) as pool:
        while len(replies) < MAX_REQUESTS:
            start = len(replies)
            replies.extend(pool.map(op, range(start, start + batch)))
            if len(replies) >= at_least and {r.pid for r in replies} >= workers:
                break
    return replies


def worker_pids(port: int) -> set[int]:
    """Poll (bounded) until :data:`WORKERS` distinct workers answered; return their pids."""
    seen: set[int] = set()
    deadline = time.monotonic() + START_SECONDS
    with ThreadPoolExecutor(THREADS) as pool:
        while len(seen) < WORKERS and time.monotonic() < deadline:
            # GET is refused (405) without touching the store: any reply names its worker.
            seen.update(r.pid for r in pool.map(lambda _: send(port, "GET"), range(THREADS)))
    assert len(seen) == WORKERS, f"only workers {sorted(seen)} answered"
    return seen


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def served(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> Iterator[tuple[Gunicorn, set[int]]]:
    """gunicorn -w 4 --threads 8 on a flushed Redis, once all 4 workers answer."""
    require_component("gunicorn", find_spec("gunicorn") is not None, "pip install gunicorn")
    server = Gunicorn(tmp_path, redis_url)
    try:
        server.wait_ready(START_SECONDS)
        pids = worker_pids(server.port)
        yield server, pids
    finally:
        server.close()
    assert "Traceback" not in server.output, server.output


def _recalled(reply: Reply) -> Any:
    assert reply.status == 200, reply
    result = reply.json()["result"]
    assert result["isError"] is False, result
    return result["structuredContent"]


# -- the tests --------------------------------------------------------------------------------


def test_one_session_is_served_by_every_worker(served: tuple[Gunicorn, set[int]]) -> None:
    """A session's tool calls (>= 100, over new connections) all succeed on all 4 workers."""
    server, workers = served
    session = initialize(server.port)
    wrote = tool_call(server.port, session, "remember_this", {"key": "shared", "value": VALUE}, 1)
    assert wrote.status == 200 and wrote.json()["result"]["isError"] is False, wrote

    replies = spread(
        lambda n: tool_call(server.port, session, "recall", {"key": "shared"}, 10 + n),
        at_least=100,
        workers=workers,
    )

    assert len(replies) >= 100
    assert {r.pid for r in replies} == workers
    for reply in replies:
        found = _recalled(reply)
        assert found["found"] is True and found["value"] == VALUE, found
    # The value written through one worker was read through each of the other three.
    assert len({r.pid for r in replies} - {wrote.pid}) == WORKERS - 1


def _end_session(port: int) -> str:
    """A session holding a value, then ended with DELETE (204); return its id."""
    session = initialize(port)
    wrote = tool_call(port, session, "remember_this", {"key": "secret", "value": VALUE}, 1)
    assert wrote.status == 200 and wrote.json()["result"]["isError"] is False, wrote
    ended = send(port, "DELETE", session_id=session)
    assert ended.status == 204, ended
    return session


def _assert_all_refused(replies: list[Reply]) -> None:
    served_ok = [r for r in replies if r.status != 404]
    assert not served_ok, (
        f"{len(served_ok)} of {len(replies)} served: "
        f"{[(r.status, r.pid) for r in served_ok[:5]]} (status, worker)"
    )
    for reply in replies:
        assert reply.json()["error"]["message"] == "Session not found"
        assert b"teal" not in reply.body


def test_an_ended_session_is_refused_by_every_worker(served: tuple[Gunicorn, set[int]]) -> None:
    """After DELETE (204), 0 of >= 100 requests with the ended id succeed; each worker 404s."""
    server, workers = served
    session = _end_session(server.port)

    replies = spread(
        lambda n: tool_call(server.port, session, "recall", {"key": "secret"}, 10 + n),
        at_least=100,
        workers=workers,
    )

    assert len(replies) >= 100
    assert {r.pid for r in replies} == workers
    _assert_all_refused(replies)


def test_a_respawned_worker_refuses_an_ended_session(served: tuple[Gunicorn, set[int]]) -> None:
    """A worker killed with SIGKILL and respawned by gunicorn also answers 404 for the ended id."""
    server, workers = served
    session = _end_session(server.port)
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)

    # Keep asking until the new worker answers (bounded); every answer must be 404.
    replies: list[Reply] = []
    deadline = time.monotonic() + START_SECONDS
    fresh: set[int] = set()
    with ThreadPoolExecutor(THREADS) as pool:
        while not fresh and time.monotonic() < deadline:
            batch = pool.map(
                lambda n: tool_call(server.port, session, "recall", {"key": "secret"}, n),
                range(len(replies), len(replies) + THREADS),
            )
            replies.extend(batch)
            fresh = {r.pid for r in replies} - workers

    assert fresh, f"no respawned worker answered in {START_SECONDS:.0f} s:\n{server.output}"
    assert victim not in {r.pid for r in replies}
    assert [r for r in replies if r.pid in fresh], "the respawned worker's replies"
    _assert_all_refused(replies)
