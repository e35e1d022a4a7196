"""What the ``remember_sync.*`` metrics cost a ``set``: recording on vs off.

Usage::

    python -m benchmarks --only metrics [--quick] [--json]
    python -m benchmarks.metrics [--seconds 3] [--json]

Two rows, each an interleaved comparison in one process
(:func:`benchmarks.harness.compare`: alternating blocks, medians of the
per-pair ratios, p50/p99 from separately timed blocks), with the OpenTelemetry
SDK configured (a ``MeterProvider`` with an ``InMemoryMetricReader``, set up
here unless the process already has a provider):

1. memory store, ``set`` with recording on vs off (target <= 1.15x);
2. Redis, the same (target <= 1.1x), on a throw-away ``redis-server`` whose
   version is printed.

"On" is the accessor a plugin hands out while recording (its methods
measured); "off" the plain one it hands out otherwise, the same code as
without metrics.  Recording is process-wide (:mod:`remember_sync._metrics`),
so each operation sets the switch before it runs, on both sides alike.

The SDK's share is paid when a reader collects (each observation since the
previous collection is recorded into its histogram then): each row also
reports that cost per observation (``collect_us``, a timed collection after a
known number of ``set``) and the ratio with it added to the "on" side
(``ratio_with_collection``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from remember_sync import Identity, RememberPlugin, _metrics
from remember_sync.accessor import RememberAccessor
from remember_sync.testing.redis_server import RedisServer

from .harness import Row, compare, percentile, render

if TYPE_CHECKING:
    from .rows import Environment, Sizes

SECRET = "benchmark-secret-0123456789abcdef012"
VALUE = {"text": "x" * 160, "n": 12345, "ok": True}  # about 200 bytes of JSON
KEYS = 1000


def _plugin(**options: Any) -> RememberPlugin:
    return RememberPlugin.init(encryption={"secrets": [SECRET]}, skip_legacy_purge=True,
                               **options)  # fmt: skip


def _sdk_reader() -> Any:
    """The reader of the global OpenTelemetry ``MeterProvider``, configured here with an
    ``InMemoryMetricReader`` unless the process has an SDK provider already (then ``None``)."""
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    if isinstance(metrics.get_meter_provider(), MeterProvider):
        return None
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


def _collect_us(reader: Any, mem: RememberAccessor, sets: int = 5000) -> float:
    """Microseconds the reader's collection spends per ``set`` recorded since the last one."""
    reader.get_metrics_data()
    state = _metrics.STATE
    state.on = True
    try:
        for i in range(sets):
            mem.set(f"k{i % KEYS}", VALUE)
    finally:
        state.on = False
    began = time.perf_counter()
    reader.get_metrics_data()
    return (time.perf_counter() - began) / sets * 1e6


def _on_off(
    plugin: RememberPlugin, store: str, seconds: float, target: float, reader: Any
) -> Row:
    state = _metrics.STATE
    who = Identity(session_id="bench-session", user_id="bench")
    state.on = True
    measured = plugin.accessor(who)
    state.on = False
    plain = plugin.accessor(who)
    assert type(measured) is not RememberAccessor and type(plain) is RememberAccessor

    def on(i: int) -> None:
        state.on = True
        measured.set(f"k{i % KEYS}", VALUE)

    def off(i: int) -> None:
        state.on = False
        plain.set(f"k{i % KEYS}", VALUE)

    try:
        result = compare(on, off, seconds=seconds)
    finally:
        state.on = False
    row = Row.from_comparison(
        result, group="metrics", operation="set, metrics on",
        store=store, baseline="set, metrics off", ratio_kind="time", target=target,
    )  # fmt: skip
    ratios = sorted(o / b for o, b in zip(result.ours, result.base, strict=True))
    row.extra["ratio_q1"] = percentile(ratios, 0.25)
    row.extra["ratio_q3"] = percentile(ratios, 0.75)
    if reader is not None and row.ops_per_s and row.baseline_ops_per_s:
        collect = _collect_us(reader, measured)
        row.extra["collect_us"] = collect
        row.extra["ratio_with_collection"] = (1e6 / row.ops_per_s + collect) / (
            1e6 / row.baseline_ops_per_s
        )
    return row


def run(seconds: float = 3.0, redis_url: str | None = None) -> tuple[list[Row], str]:
    """The two rows and the Redis server's version (a throw-away one unless *redis_url*)."""
    reader = _sdk_reader()
    was_on = _metrics.active()
    if not _metrics.start():
        raise SystemExit("the metrics benchmark needs opentelemetry-sdk (the test extra)")
    rows: list[Row] = []
    try:
        with _plugin() as plugin:
            rows.append(_on_off(plugin, "memory", seconds, 1.15, reader))
        with RedisServer() if redis_url is None else _Given(redis_url) as server:
            client = server.client()
            version = str(client.info("server")["redis_version"])
            client.close()
            with _plugin(type="redis", config={"url": server.url}) as plugin:
                rows.append(_on_off(plugin, "redis", seconds, 1.1, reader))
    finally:
        _metrics.STATE.on = was_on  # recording is process-wide: leave it as it was
    return rows, version


class _Given:
    """A Redis the caller runs, shaped as :class:`RedisServer` for :func:`run`."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> _Given:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)


def rows_metrics(env: Environment, sizes: Sizes) -> list[Row]:
    """The ``metrics`` group of ``python -m benchmarks`` (on the run's redis-server)."""
    assert env.redis is not None
    # Database 3: 0 belongs to the numbered rows, 1 to the KV emulator, 2 to gunicorn's.
    rows, _ = run(sizes.seconds, f"redis://127.0.0.1:{env.redis.port}/3")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per row (default 3)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows, version = run(args.seconds)
    if args.json:
        print(json.dumps({"redis_version": version, "rows": [r.as_dict() for r in rows]}))
    else:
        print(render(rows, title=f"metrics cost (redis-server {version})"))
        for row in rows:
            print(
                f"  [{row.group}] spread of the pair ratios: interquartile "
                f"{row.extra['ratio_q1']:.2f}x .. {row.extra['ratio_q3']:.2f}x "
                f"over {row.extra['pairs']} pairs"
            )
            if "collect_us" in row.extra:
                print(
                    f"  [{row.group}] OpenTelemetry collection: {row.extra['collect_us']:.1f} us "
                    f"per observation; with it: {row.extra['ratio_with_collection']:.2f}x"
                )
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
