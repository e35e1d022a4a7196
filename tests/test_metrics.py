"""The ``remember_sync.*`` metrics: exact counts after a scripted workload.

* the library, read through the OpenTelemetry SDK's ``InMemoryMetricReader`` (in a fresh
  interpreter: the global meter provider can be set once per process);
* ``remember-sync serve --metrics`` in a subprocess, driven over HTTP and scraped, the scrape
  parsed with ``prometheus_client``'s own parser;
* who may read ``/metrics`` (loopback peers that came through no proxy, with a token when the
  server checks callers), and the library without OpenTelemetry installed.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from remember_sync import RememberPlugin, _metrics
from remember_sync.mcp import McpServer
from remember_sync.mcp.auth import StaticTokenVerifier
from tests.conftest import TEST_SECRET
from tests.served import serve
from tests.test_cli import child_env

VERSION = "2025-11-25"


def _python(script: str, tmp_path: Path) -> Any:
    """Run *script* in a fresh interpreter; the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path,
        env=child_env(REMEMBER_SECRET=TEST_SECRET), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the library, through OpenTelemetry ------------------------------------------------------

_LIBRARY_WORKLOAD = """
    import json
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from remember_sync import Identity, RememberConflictError, RememberPlugin
    from remember_sync.mcp import McpServer
    from remember_sync.stores.memory import MemoryStore

    reader, other_reader = InMemoryMetricReader(), InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader, other_reader]))

    class LosingStore(MemoryStore):
        # A store another writer keeps beating: its first `lose` compare-and-sets fail.
        lose = 0
        def compare_and_set(self, key, expected, value, *, ttl_ms=None):
            if self.lose:
                self.lose -= 1
                return False
            return super().compare_and_set(key, expected, value, ttl_ms=ttl_ms)

    store = LosingStore(max_entries=3)
    plugin = RememberPlugin.init(store=store, metrics=True, encryption={"secrets": ["a" * 32]},
                                 skip_legacy_purge=True)
    other = RememberPlugin.init(store=store, encryption={"secrets": ["b" * 32]},
                                skip_legacy_purge=True)
    mem = plugin.accessor(Identity(session_id="s-1", user_id="alice"))
    for n in range(5):
        mem.set(f"k{n}", n)              # 5 set ok; max_entries=3: 2 evictions
    for n in range(5):
        mem.get(f"k{n}")                 # 5 get ok (2 of them missing: still ok)
    for bad in ("", "x" * 2000):
        try:
            mem.set(bad, 1)              # 2 set error REMEMBER_INVALID_INPUT
        except ValueError:
            pass
    try:
        mem.get("k", scope="user" * 2)   # 1 get error (unknown scope)
    except ValueError:
        pass
    store.lose = 2
    mem.increment("n")                   # created: no compare-and-set
    mem.increment("n")                   # 2 lost compare-and-sets, then written
    store.lose = 10**6
    try:
        mem.update("n", 5)               # every attempt lost: 1 conflict
    except RememberConflictError:
        pass
    store.lose = 0
    other.accessor(Identity(session_id="s-1")).set("theirs", 1)  # 1 set ok (process-wide)
    mem.get("theirs")                    # another secret's entry: 1 unreadable
    mem.get("theirs")                    # the same key again: still 1
    mem.list()                           # 1 list ok

    def collect(reader):
        points = []
        for rm in reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for p in metric.data.data_points:
                        if hasattr(p, "bucket_counts"):
                            value = {"count": p.count, "sum": p.sum,
                                     "bounds": list(p.explicit_bounds),
                                     "buckets": list(p.bucket_counts)}
                        else:
                            value = p.value
                        points.append([metric.name, dict(p.attributes), value])
        return points

    first = collect(reader)
    tools = RememberPlugin.init(store=MemoryStore(), tools={"enabled": True},
                                encryption={"secrets": ["c" * 32]}, skip_legacy_purge=True)
    caller = Identity(session_id="s-2")
    tools.call_tool("remember_this", {"key": "t", "value": 1}, identity=caller)
    for _ in range(3):
        tools.call_tool("recall", {"key": "t"}, identity=caller)   # 3 get_entry ok
    tools.call_tool("recall", {"key": ""}, identity=caller)        # invalid input
    mem.get("k0")
    server = McpServer(tools, metrics_path="/metrics")
    body = b"".join(server({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics",
                            "REMOTE_ADDR": "127.0.0.1"}, lambda status, headers: None))
    print(json.dumps([first, collect(reader), collect(other_reader), body.decode()]))
"""


def _histograms(points: list[Any], name: str, *keys: str) -> dict[tuple[str, ...], Any]:
    """The histogram points called *name*, by the attribute values *keys* (missing: "")."""
    return {
        tuple(a.get(k, "") for k in keys): v for n, a, v in points if n == name
    }  # fmt: skip


def test_the_library_reports_exact_counts_to_an_otel_in_memory_reader(tmp_path: Path) -> None:
    """``metrics=True`` (recording is process-wide: the second plugin is measured too):
    operations by operation/outcome/code, the latency histogram's counts,
    evictions, CAS retries and conflicts, unreadable entries -- each equal to what was done."""
    first, points, other, _ = _python(_LIBRARY_WORKLOAD, tmp_path)
    ops = {
        (a["operation"], a["outcome"], a["code"]): v
        for name, a, v in first if name == "remember_sync.operations"
    }  # fmt: skip
    assert ops == {
        ("set", "ok", ""): 6,
        ("get", "ok", ""): 7,
        ("set", "error", "REMEMBER_INVALID_INPUT"): 2,
        ("get", "error", "REMEMBER_INVALID_SCOPE"): 1,
        ("increment", "ok", ""): 2,
        ("update", "error", "REMEMBER_CONFLICT"): 1,
        ("list", "ok", ""): 1,
    }
    assert {a["store"] for name, a, _ in first if name == "remember_sync.operations"} == {
        "memory"
    }
    single = {name: v for name, a, v in first if "operation" not in a and "tool" not in a}
    # 5 keys, "n", "theirs" and alice's owner record of session s-1 (3 kept).
    assert single["remember_sync.evictions"] == 2 + 1 + 1 + 1
    assert single["remember_sync.cas.retries"] == 2 + 64
    assert single["remember_sync.cas.conflicts"] == 1
    assert single["remember_sync.unreadable_entries"] == 1


def test_latency_is_an_otel_histogram_with_exact_counts_matching_the_prometheus_scrape(
    tmp_path: Path,
) -> None:
    """Operation and tool-call latency reach the SDK as histogram points named by the
    semantic conventions (``db.client.operation.duration``, ``mcp.server.operation.duration``,
    unit s, this package's bucket bounds): one point per operation/outcome with the exact
    number of calls, cumulative across collections, seen once by each of two readers, and
    equal to the ``_count`` of the Prometheus scrape of the same process."""
    first, points, other, scrape = _python(_LIBRARY_WORKLOAD, tmp_path)
    keys = ("db.operation.name", "error.type")
    assert _histograms(first, "db.client.operation.duration", *keys).keys() == {
        ("set", ""), ("get", ""), ("set", "REMEMBER_INVALID_INPUT"),
        ("get", "REMEMBER_INVALID_SCOPE"), ("increment", ""), ("update", "REMEMBER_CONFLICT"),
        ("list", ""),
    }  # fmt: skip
    expected = {
        ("set", ""): 6, ("get", ""): 7 + 1, ("set", "REMEMBER_INVALID_INPUT"): 2,
        ("get", "REMEMBER_INVALID_SCOPE"): 1, ("increment", ""): 2,
        ("update", "REMEMBER_CONFLICT"): 1, ("list", ""): 1, ("get_entry", ""): 3,
    }  # fmt: skip
    for seen in (points, other):
        operations = _histograms(seen, "db.client.operation.duration", *keys)
        assert {k: v["count"] for k, v in operations.items()} == expected
        for value in operations.values():
            assert value["bounds"] == list(_metrics.BUCKETS_S)
            assert sum(value["buckets"]) == value["count"] and value["sum"] > 0
        systems = {(a["db.system.name"], a["remember_sync.store"])
                   for n, a, _ in seen if n == "db.client.operation.duration"}  # fmt: skip
        assert systems == {("memory", "memory")}
        tools = _histograms(seen, "mcp.server.operation.duration", "gen_ai.tool.name",
                            "error.type", "mcp.method.name")  # fmt: skip
        assert {k: v["count"] for k, v in tools.items()} == {
            ("remember_this", "", "tools/call"): 1, ("recall", "", "tools/call"): 3,
            ("recall", "REMEMBER_INVALID_INPUT", "tools/call"): 1,
        }  # fmt: skip
    names = {n for n, _, _ in points}
    assert not any(n.endswith((".bucket", ".sum")) for n in names)

    scraped: Counter[tuple[str, str]] = Counter()
    cumulative: dict[tuple[str, str], list[int]] = {}
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            key = (sample.labels.get("operation", ""), sample.labels.get("outcome", ""))
            if sample.name == "remember_sync_operation_duration_seconds_count":
                scraped[key] += int(sample.value)
            if sample.name == "remember_sync_operation_duration_seconds_bucket":
                cumulative.setdefault(key, []).append(int(sample.value))
    otel: Counter[tuple[str, str]] = Counter()
    otel_buckets: dict[tuple[str, str], list[int]] = {}
    for (operation, error), value in _histograms(points, "db.client.operation.duration",
                                                 *keys).items():  # fmt: skip
        key = (operation, "error" if error else "ok")
        otel[key] += value["count"]
        into = otel_buckets.setdefault(key, [0] * len(value["buckets"]))
        otel_buckets[key] = [a + b for a, b in zip(into, value["buckets"], strict=True)]
    assert scraped == otel
    # the same observations in the same buckets (the scrape's are cumulative, le order)
    for key, counts in otel_buckets.items():
        assert [sum(counts[: i + 1]) for i in range(len(counts))] == cumulative[key]


def test_a_meter_provider_set_after_init_gets_the_histograms_from_the_start(
    tmp_path: Path,
) -> None:
    """``metrics=True`` before the application sets its SDK provider (the API's proxy meter):
    the first collection still holds every operation since recording started, in histograms
    with this package's bucket bounds."""
    seen = _python(
        """
        import json
        from remember_sync import Identity, RememberPlugin
        plugin = RememberPlugin.init(metrics=True, skip_legacy_purge=True)
        mem = plugin.accessor(Identity(session_id="s"))
        for n in range(3):
            mem.set("k", n)
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        mem.get("k")
        print(json.dumps([
            [m.name, p.attributes["db.operation.name"], p.count, list(p.explicit_bounds)]
            for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics if m.name == "db.client.operation.duration"
            for p in m.data.data_points
        ]))
        """,
        tmp_path,
    )
    bounds = list(_metrics.BUCKETS_S)
    assert sorted(seen) == [
        ["db.client.operation.duration", "get", 1, bounds],
        ["db.client.operation.duration", "set", 3, bounds],
    ]


def test_without_metrics_nothing_is_recorded(tmp_path: Path) -> None:
    """Metrics are opt-in: a plugin without ``metrics=True`` reports nothing to OpenTelemetry,
    and a ``/metrics`` view started afterwards lists every family with no sample in it."""
    names, helps, samples = _python(
        """
        import json
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from remember_sync import Identity, RememberPlugin
        from remember_sync.mcp import McpServer
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        plugin = RememberPlugin.init(skip_legacy_purge=True)
        mem = plugin.accessor(Identity(session_id="s"))
        mem.set("k", 1); mem.get("k"); mem.list()
        data = reader.get_metrics_data()
        names = [m.name for rm in (data.resource_metrics if data else [])
                 for sm in rm.scope_metrics for m in sm.metrics]
        app = McpServer(plugin, metrics_path="/metrics")  # records from now on
        body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics",
                             "REMOTE_ADDR": "127.0.0.1"}, lambda status, headers: None))
        text = body.decode()
        print(json.dumps([names, text.count("\\n# HELP"),
                          [l for l in text.splitlines() if not l.startswith("#")]]))
        """,
        tmp_path,
    )
    assert names == [] and helps >= 9 and samples == []


def test_without_opentelemetry_the_library_runs_and_metrics_true_names_the_extra(
    tmp_path: Path,
) -> None:
    """OpenTelemetry absent: import and use work; ``metrics=True`` is a configuration error
    naming the extra; an McpServer's metrics path still serves its own text view."""
    seen = _python(
        """
        import json, sys
        sys.modules["opentelemetry"] = None  # as if the metrics extra were not installed
        from remember_sync import Identity, RememberConfigurationError, RememberPlugin
        from remember_sync.mcp import McpServer
        plugin = RememberPlugin.init(skip_legacy_purge=True, tools={"enabled": True})
        plugin.accessor(Identity(session_id="s")).set("k", 1)
        try:
            RememberPlugin.init(metrics=True)
            error = ""
        except RememberConfigurationError as exc:
            error = exc.message
        app = McpServer(plugin, metrics_path="/metrics")
        plugin.call_tool("recall", {"key": "k"}, identity=Identity(session_id="s"))
        out = []
        body = app({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics",
                    "REMOTE_ADDR": "127.0.0.1"}, lambda status, headers: out.append(status))
        print(json.dumps([error, out[0], b"".join(body).decode()]))
        """,
        tmp_path,
    )
    error, status, text = seen
    assert "pip install 'remember-sync[metrics]'" in error
    assert status.startswith("200")
    line = 'remember_sync_tool_calls_total{store="memory",tool="recall",outcome="ok",code=""} 1'
    assert line in text.splitlines()


# -- who may read /metrics --------------------------------------------------------------------


def _get(app: McpServer, **environ: str) -> tuple[str, bytes]:
    seen: list[str] = []
    base = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "REMOTE_ADDR": "127.0.0.1"}
    body = app({**base, **environ}, lambda status, headers: seen.append(status))
    return seen[0], b"".join(body)


def test_metrics_are_served_to_loopback_peers_through_no_proxy_with_the_servers_token() -> None:
    """Another host, or a request a proxy forwarded: 403; the server checks tokens: 401
    without one; loopback with a valid token: 200 in the Prometheus text format."""
    token = "metrics-token-0123456789"
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}) as plugin:
        app = McpServer(plugin, metrics_path="/metrics",
                        token_verifier=StaticTokenVerifier({token: "ops"}))  # fmt: skip
        bearer = f"Bearer {token}"
        assert _get(app, REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION=bearer)[0].startswith("403")
        assert _get(app, HTTP_X_FORWARDED_FOR="203.0.113.9",
                    HTTP_AUTHORIZATION=f"Bearer {token}")[0].startswith("403")  # fmt: skip
        assert _get(app, HTTP_FORWARDED="for=203.0.113.9")[0].startswith("403")
        assert _get(app)[0].startswith("401")
        assert _get(app, HTTP_AUTHORIZATION="Bearer wrong-token-0123456789")[0].startswith("401")
        status, body = _get(app, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert status.startswith("200")
        families = {f.name for f in text_string_to_metric_families(body.decode())}
        assert "remember_sync_operations" in families
        assert _get(app, REQUEST_METHOD="POST",
                    HTTP_AUTHORIZATION=f"Bearer {token}")[0].startswith("405")  # fmt: skip
        plain = McpServer(plugin)  # no metrics_path: the MCP endpoint's 404 for other paths
        assert _get(plain)[0].startswith("404")


# -- serve --metrics, scraped ---------------------------------------------------------------------


class Http:
    def __init__(self, base: str) -> None:
        host, port = base.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
        self.host, self.port = host, int(port)

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            data = None if body is None else json.dumps(body)
            sent = {"Content-Type": "application/json", "Accept": "application/json",
                    **(headers or {})}  # fmt: skip
            conn.request(method, path, data, sent)
            reply = conn.getresponse()
            return reply.status, dict(reply.getheaders()), reply.read()
        finally:
            conn.close()


def test_serve_metrics_scrape_equals_the_scripted_workload(tmp_path: Path) -> None:
    """``serve --metrics --no-token``: after a scripted workload over HTTP, the scrape (parsed by
    prometheus_client) counts exactly the tool calls per tool, outcome and code, the
    operations behind them, the latency histogram's observations and the sessions."""
    served = serve(tmp_path, "--no-token", "--metrics",
                   env={"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    served.wait_ready()
    try:
        assert "metrics: /metrics (loopback clients only)" in served.output
        client = Http(served.url)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": VERSION, "capabilities": {},
                           "clientInfo": {"name": "metrics-test", "version": "1"}}}  # fmt: skip
        sessions = []
        for _ in range(3):
            status, headers, _ = client.request("POST", "/mcp", init)
            assert status == 200
            sessions.append({"Mcp-Session-Id": headers["Mcp-Session-Id"],
                             "MCP-Protocol-Version": VERSION})  # fmt: skip
        plan = (
            [("remember_this", {"key": f"k{n}", "value": n, "scope": "user"}) for n in range(7)]
            + [("recall", {"key": f"k{n}", "scope": "user"}) for n in range(10)]  # 3 missing
            + [("forget", {"key": "k0", "scope": "user"})] * 2
            + [("list_memories", {"scope": "user"})] * 3
            + [("remember_this", {"key": "g", "value": 1, "scope": "global"})] * 4  # refused
            + [("recall", {"key": "", "scope": "user"})] * 2  # invalid input
        )
        expected: Counter[tuple[str, str, str]] = Counter()
        for n, (tool, arguments) in enumerate(plan):
            message = {"jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}  # fmt: skip
            status, _, body = client.request("POST", "/mcp", message, sessions[n % 3])
            assert status == 200, body
            result = json.loads(body)["result"]
            code = result["content"][0]["text"].split(":")[0] if result["isError"] else ""
            expected[(tool, "error" if code else "ok", code)] += 1
        assert expected[("remember_this", "error", "REMEMBER_SCOPE_NOT_ALLOWED")] == 4
        assert expected[("recall", "error", "REMEMBER_INVALID_INPUT")] == 2
        assert client.request("DELETE", "/mcp", None, sessions[0])[0] == 204

        status, headers, body = client.request("GET", "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    finally:
        assert served.stop() == 0, served.output
    samples = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]
    tool_calls = {
        (s.labels["tool"], s.labels["outcome"], s.labels["code"]): s.value
        for s in samples if s.name == "remember_sync_tool_calls_total"
    }  # fmt: skip
    assert tool_calls == {k: float(v) for k, v in expected.items()}
    histogram = Counter()
    for s in samples:
        if s.name == "remember_sync_tool_call_duration_seconds_count":
            histogram[(s.labels["tool"], s.labels["outcome"])] += int(s.value)
    by_outcome: Counter[tuple[str, str]] = Counter()
    for (tool, outcome, _), n in expected.items():
        by_outcome[(tool, outcome)] += n
    assert histogram == by_outcome
    operations = {
        (s.labels["operation"], s.labels["outcome"]): s.value
        for s in samples if s.name == "remember_sync_operations_total"
    }  # fmt: skip
    # recall reads through get_entry (the two invalid keys fail schema checks before it);
    # list_memories through list; remember_this and forget write compare-and-set directly.
    assert operations == {("get_entry", "ok"): 10.0, ("list", "ok"): 3.0}
    singles = {s.name: s.value for s in samples if not s.labels}
    assert singles["remember_sync_sessions_opened_total"] == 3
    assert singles["remember_sync_sessions_ended_total"] == 1


@pytest.mark.parametrize("flag", ["--metrics"])
def test_serve_help_names_the_new_flags(flag: str, tmp_path: Path) -> None:
    """``serve --help`` documents --metrics and --rate-limit."""
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--help"], cwd=tmp_path,
        env=child_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and flag in done.stdout and "--rate-limit" in done.stdout


def test_unexpected_attribute_values_cannot_grow_memory(tmp_path: Path) -> None:
    """A stream of distinct error codes (a host raising its own RememberErrors from ``modify``
    functions): at most 1,000 attribute sets are kept, the rest counted under OTHER, none lost."""
    text = _python(
        """
        import json
        from remember_sync import Identity, RememberError, RememberPlugin
        from remember_sync.mcp import McpServer
        plugin = RememberPlugin.init(skip_legacy_purge=True)
        app = McpServer(plugin, metrics_path="/metrics")  # records from now on
        mem = plugin.accessor(Identity(session_id="s"))
        for n in range(1500):
            def refuse(value, n=n):
                raise RememberError("the host says no", code=f"HOST_CODE_{n}")
            try:
                mem.modify("k", refuse)
            except RememberError:
                pass
        body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics",
                             "REMOTE_ADDR": "127.0.0.1"}, lambda status, headers: None))
        print(json.dumps(body.decode()))
        """,
        tmp_path,
    )
    counts = {
        tuple(sample.labels.values()): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "remember_sync_operations"
        for sample in family.samples
        if sample.name == "remember_sync_operations_total"
    }
    hosts = [labels for labels in counts if labels[3].startswith("HOST_CODE_")]
    assert len(hosts) == 1000 and all(counts[labels] == 1 for labels in hosts)
    assert len(counts) == 1000 + 1 and counts[("OTHER",) * 4] == 500
    assert sum(counts.values()) == 1500


def test_the_cost_benchmark_runs_and_reports_both_stores(tmp_path: Path) -> None:
    """``python -m benchmarks --only metrics --quick --json``: a memory and a Redis row, each
    with its ratio and target, the spread of the pair ratios, the OpenTelemetry collection's
    cost per observation, and the server's version (exit 1 only for a missed target, which a
    run this short does not judge)."""
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "metrics", "--quick", "--json", "--quiet"],
        cwd=repo, env=child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["meta"]["redis_server"].count(".") == 2
    rows = {row["store"]: row for row in report["rows"]}
    assert set(rows) == {"memory", "redis"}
    assert {row["group"] for row in report["rows"]} == {"metrics"}
    assert rows["memory"]["target"] == 1.15 and rows["redis"]["target"] == 1.1
    for row in rows.values():
        assert row["ratio"] > 0 and row["ratio_kind"] == "time"
        assert row["extra"]["ratio_q1"] <= row["ratio"] <= row["extra"]["ratio_q3"]
        # the SDK's share, paid when its reader collects
        assert row["extra"]["collect_us"] > 0 and row["extra"]["ratio_with_collection"] > 0
