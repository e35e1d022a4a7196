"""What the ``remember_sync.*`` metrics cost a ``set``: recording on vs off.

Usage::

    python -m benchmarks.metrics [--seconds 3] [--json]

Two rows, each an interleaved comparison in one process
(:func:`benchmarks.harness.compare`: alternating blocks, medians of the
per-pair ratios, p50/p99 from separately timed blocks):

1. memory store, ``set`` with recording on vs off (target <= 1.1x);
2. Redis, the same (target <= 1.1x), on a throw-away ``redis-server`` whose
   version is printed.

"On" is the accessor a plugin hands out while recording (its methods
measured); "off" the plain one it hands out otherwise, the same code as
without metrics.  Recording is process-wide (:mod:`remember_sync._metrics`),
so each operation sets the switch before it runs, on both sides alike.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from remember_sync import Identity, RememberPlugin, _metrics
from remember_sync.accessor import RememberAccessor
from remember_sync.testing.redis_server import RedisServer

from .harness import Row, compare, percentile, render

SECRET = "benchmark-secret-0123456789abcdef012"
VALUE = {"text": "x" * 160, "n": 12345, "ok": True}  # about 200 bytes of JSON
KEYS = 1000


def _plugin(**options: Any) -> RememberPlugin:
    return RememberPlugin.init(encryption={"secrets": [SECRET]}, skip_legacy_purge=True,
                               **options)  # fmt: skip


def _on_off(plugin: RememberPlugin, store: str, seconds: float, target: float) -> Row:
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
        result, group="1" if store == "memory" else "2", operation="set, metrics on",
        store=store, baseline="set, metrics off", ratio_kind="time", target=target,
    )  # fmt: skip
    ratios = sorted(o / b for o, b in zip(result.ours, result.base, strict=True))
    row.extra["ratio_q1"] = percentile(ratios, 0.25)
    row.extra["ratio_q3"] = percentile(ratios, 0.75)
    return row


def run(seconds: float = 3.0) -> tuple[list[Row], str]:
    """The two rows and the Redis server's version."""
    _metrics.start(require_otel=False)
    rows: list[Row] = []
    with _plugin() as plugin:
        rows.append(_on_off(plugin, "memory", seconds, 1.1))
    with RedisServer() as server:
        client = server.client()
        version = str(client.info("server")["redis_version"])
        client.close()
        with _plugin(type="redis", config={"url": server.url}) as plugin:
            rows.append(_on_off(plugin, "redis", seconds, 1.1))
    return rows, version


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
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
