"""One scrape for every worker: ``gunicorn -w 4`` with ``PROMETHEUS_MULTIPROC_DIR``.

gunicorn serves ``create_app(metrics_path="/metrics")`` (``tests/gunicorn_app.py``:
``metrics_app()``, which adds the answering worker's pid as a header) on a throw-away
Redis, with an empty multiprocess directory of the test's own.  A scripted workload is
sent from 8 threads on new connections until every worker has answered part of it; then
scrapes of ``/metrics`` (each on a new connection, answered by whichever worker) must
each report the whole workload.  The start-up refusals (directory missing, prometheus_client
imported before the variable was set) run in fresh interpreters.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TEST_SECRET, require_component
from tests.served import Served
from tests.test_cli import child_env
from tests.test_gunicorn_workers import (
    SECRET,
    START_SECONDS,
    THREADS,
    WORKER_HEADER,
    WORKERS,
    Reply,
    initialize,
    spread,
    tool_call,
    worker_pids,
)

SCRAPES = 8
#: Bound of the scrapes until two workers answered one.
MAX_SCRAPES = 200


class MetricsGunicorn(Served):
    """``gunicorn -w 4 --threads 8 'tests.gunicorn_app:metrics_app()'`` sharing *shared*."""

    def __init__(self, cwd: Path, redis_url: str, shared: Path) -> None:
        (cwd / "run").mkdir()  # gunicorn's control socket: a directory of its own
        env = child_env(REMEMBER_SECRET=SECRET, REMEMBER_REDIS_URL=redis_url,
                        PROMETHEUS_MULTIPROC_DIR=str(shared), XDG_RUNTIME_DIR=str(cwd / "run"))
        options = ["-w", str(WORKERS), "--threads", str(THREADS), "-b", "127.0.0.1:0",
                   "--graceful-timeout", "5"]  # fmt: skip
        argv = [sys.executable, "-m", "gunicorn", *options, "tests.gunicorn_app:metrics_app()"]
        super().__init__(argv, cwd, env, exact_env=True)


@pytest.fixture
def served(tmp_path: Path, redis_url: str, redis_client: Any) -> Iterator[tuple[int, set[int]]]:
    """The server's port and its 4 workers' pids, once every worker answers."""
    require_component("gunicorn", find_spec("gunicorn") is not None, "pip install gunicorn")
    shared = tmp_path / "prometheus"
    shared.mkdir()
    server = MetricsGunicorn(tmp_path, redis_url, shared)
    try:
        server.wait_ready(START_SECONDS)
        yield server.port, worker_pids(server.port)
    finally:
        server.close()
    assert "Traceback" not in server.output, server.output


def scrape(port: int) -> tuple[int, list[Any]]:
    """``GET /metrics`` on a new connection: the answering worker and the parsed samples."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        reply = conn.getresponse()
        body = reply.read().decode()
        assert reply.status == 200, body
        pid = int(reply.getheader(WORKER_HEADER) or 0)
    finally:
        conn.close()
    return pid, [s for f in text_string_to_metric_families(body) for s in f.samples]


def _by(samples: list[Any], name: str, *labels: str) -> dict[tuple[str, ...], float]:
    found: Counter[tuple[str, ...]] = Counter()
    for sample in samples:
        if sample.name == name:
            found[tuple(sample.labels[label] for label in labels)] += sample.value
    return dict(found)


def test_one_scrape_of_any_worker_reports_the_whole_servers_counts(
    served: tuple[int, set[int]],
) -> None:
    """Tool calls spread over all 4 workers (>= 200, each worker part of them): every one
    of at least 8 scrapes, answered by several workers, counts each call, each ``get_entry`` behind
    a ``recall``, each session and each latency observation exactly once -- also after one
    worker was killed halfway through the scrapes."""
    port, workers = served
    sessions = [initialize(port) for _ in range(3)]
    wrote = tool_call(port, sessions[0], "remember_this", {"key": "k", "value": 1}, 1)
    assert wrote.status == 200 and wrote.json()["result"]["isError"] is False, wrote

    def recall(n: int) -> Reply:
        key = "k" if n % 5 else ""  # every fifth is invalid input
        return tool_call(port, sessions[n % 3], "recall", {"key": key}, 10 + n)

    replies = spread(recall, at_least=200, workers=workers)
    assert {r.pid for r in replies} == workers, "the workload reached every worker"
    per_worker = Counter(r.pid for r in replies)
    assert all(per_worker[pid] > 0 for pid in workers)
    outcomes: Counter[tuple[str, str, str]] = Counter({("remember_this", "ok", ""): 1})
    for reply in replies:
        result = reply.json()["result"]
        code = result["content"][0]["text"].split(":")[0] if result["isError"] else ""
        outcomes[("recall", "error" if code else "ok", code)] += 1
    assert outcomes[("recall", "error", "REMEMBER_INVALID_INPUT")] > 0

    answered: set[int] = set()
    n = 0
    while n < SCRAPES or (len(answered) < 2 and n < MAX_SCRAPES):
        n += 1
        if n == SCRAPES // 2:
            # a worker gone (gunicorn replaces it) leaves its counts behind: nothing drops
            os.kill(min(workers), signal.SIGKILL)
        pid, samples = scrape(port)
        answered.add(pid)
        calls = _by(samples, "remember_sync_tool_calls_total", "tool", "outcome", "code")
        assert calls == {k: float(v) for k, v in outcomes.items()}, (pid, per_worker)
        latencies = _by(samples, "remember_sync_tool_call_duration_seconds_count", "tool",
                        "outcome")  # fmt: skip
        by_outcome: Counter[tuple[str, str]] = Counter()
        for (tool, outcome, _), n in outcomes.items():
            by_outcome[(tool, outcome)] += n
        assert latencies == {k: float(v) for k, v in by_outcome.items()}
        buckets = _by(samples, "remember_sync_tool_call_duration_seconds_bucket", "tool",
                      "outcome", "le")  # fmt: skip
        assert {k[:2]: v for k, v in buckets.items() if k[2] == "+Inf"} == latencies
        operations = _by(samples, "remember_sync_operations_total", "operation", "outcome")
        assert operations == {("get_entry", "ok"): float(outcomes[("recall", "ok", "")])}
        opened = _by(samples, "remember_sync_sessions_opened_total")
        assert opened == {(): 3.0}
    assert len(answered) >= 2, f"every scrape reached worker {answered}"


def _python(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=child_env(REMEMBER_SECRET=TEST_SECRET, **env), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_a_directory_that_cannot_be_shared_stops_the_start(tmp_path: Path) -> None:
    """PROMETHEUS_MULTIPROC_DIR naming no directory, or set after prometheus_client was
    imported (its counts would stay in memory): the metrics server does not start, and the
    error says why."""
    start = """
        from remember_sync import RememberConfigurationError, RememberPlugin
        from remember_sync.mcp import McpServer
        try:
            McpServer(RememberPlugin.init(skip_legacy_purge=True), metrics_path="/metrics")
        except RememberConfigurationError as exc:
            print(exc.message)
    """
    missing = tmp_path / "absent"
    done = _python(start, {"PROMETHEUS_MULTIPROC_DIR": str(missing)})
    assert done.returncode == 0, done.stderr
    assert f"PROMETHEUS_MULTIPROC_DIR={str(missing)!r} is not a directory" in done.stdout

    late = f"""
        import os
        import prometheus_client
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path)!r}
    """
    done = _python(late + start, {})
    assert done.returncode == 0, done.stderr
    assert "prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR" in done.stdout


def test_a_worker_creating_its_file_does_not_fail_a_scrape(tmp_path: Path) -> None:
    """A worker starting up creates its file empty and sizes it a moment later: a scrape in
    between (here: the empty file of a worker that is still starting) reports the counts of
    the others and of itself, and no error."""
    shared = tmp_path / "prometheus"
    shared.mkdir()
    (shared / "counter_999999.db").touch()
    (shared / "histogram_999999.db").touch()
    done = _python(
        """
        from remember_sync import Identity, RememberPlugin
        from remember_sync.mcp import McpServer
        plugin = RememberPlugin.init(skip_legacy_purge=True)
        app = McpServer(plugin, metrics_path="/metrics")
        plugin.accessor(Identity(session_id="s")).set("k", 1)
        seen = []
        body = app({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics",
                    "REMOTE_ADDR": "127.0.0.1"}, lambda status, headers: seen.append(status))
        print(seen[0])
        print(b"".join(body).decode())
        """,
        {"PROMETHEUS_MULTIPROC_DIR": str(shared)},
    )
    assert done.returncode == 0, done.stderr
    status, text = done.stdout.split("\n", 1)
    assert status.startswith("200"), text
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert _by(samples, "remember_sync_operations_total", "operation", "outcome") == {
        ("set", "ok"): 1.0
    }
