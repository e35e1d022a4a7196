"""What per-principal quota upkeep costs: ``set`` with a quota vs ``set`` without one.

Usage::

    python -m benchmarks.quota [--seconds 6] [--stores memory,redis,memory-bounded]

For each store, two plugins over the same store kind (one with
``quota={"entries": ..., "bytes": ...}`` large enough never to refuse, one
without) run ``accessor.set`` of a ~200-byte value with a TTL in user scope,
interleaved in short blocks by :func:`benchmarks.harness.compare`.  The ratio
is the median over block pairs of (time with quota / time without); the
spread is the 10th-90th percentile of those per-pair ratios.  Redis is a
throw-away local ``redis-server`` (its version is printed); both plugins write
to it with the listing index on, as a deployment does.  ``memory-bounded``
compares against a bounded memory store, which already charges every write
to its owner for fair eviction.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from benchmarks.harness import compare, percentile
from remember_sync import Identity, RememberPlugin
from remember_sync.testing.redis_server import RedisServer

__all__ = ["main", "run"]

SECRET = "benchmark-secret-0123456789abcdef012"
VALUE = {"text": "x" * 160, "n": 12345, "ok": True}  # about 200 bytes of JSON
#: A quota no benchmark write reaches.
QUOTA = {"entries": 10_000_000, "bytes": 10_000_000_000}
#: The ceiling the quota's upkeep must stay under (time with / time without).
TARGET = 1.15
STORES = ("memory", "redis", "memory-bounded")


def _plugins(kind: str, stack: ExitStack, versions: dict[str, str]) -> tuple[Any, Any]:
    common: dict[str, Any] = {"encryption": {"secrets": [SECRET]}, "skip_legacy_purge": True}
    if kind == "redis":
        server = stack.enter_context(RedisServer())
        client = server.client()
        versions["redis"] = str(client.info("server")["redis_version"])
        client.close()
        common.update(type="redis", config={"url": server.url}, background_reindex=False)
    elif kind == "memory-bounded":
        common.update(max_entries=1_000_000)
    with_quota = stack.enter_context(RememberPlugin.init(quota=QUOTA, **common))
    without = stack.enter_context(RememberPlugin.init(**common))
    return with_quota, without


def run(stores: Sequence[str] = STORES, *, seconds: float = 6.0) -> dict[str, Any]:
    """Measure every store in *stores*; the rows and the Redis version."""
    versions: dict[str, str] = {}
    rows = []
    for kind in stores:
        with ExitStack() as stack:
            with_quota, without = _plugins(kind, stack, versions)
            ours = with_quota.accessor(Identity(session_id="s-bench", user_id="bench"))
            base = without.accessor(Identity(session_id="s-bench", user_id="bench"))

            def op_ours(i: int, mem: Any = ours) -> None:
                mem.set(f"k{i % 1000}", VALUE, scope="user", ttl=3600)

            def op_base(i: int, mem: Any = base) -> None:
                mem.set(f"k{i % 1000}", VALUE, scope="user", ttl=3600)

            result = compare(op_ours, op_base, seconds=seconds)
            ratios = [o / b for o, b in zip(result.ours, result.base, strict=True)]
            rows.append({
                "operation": "set (user scope, TTL)",
                "store": kind,
                "with_quota_us": statistics.median(result.ours) * 1e6,
                "without_us": statistics.median(result.base) * 1e6,
                "ratio": statistics.median(ratios),
                "spread": [percentile(ratios, 0.1), percentile(ratios, 0.9)],
                "pairs": result.pairs,
                "target": TARGET,
                "met": statistics.median(ratios) <= TARGET,
            })  # fmt: skip
    return {"rows": rows, "redis_server": versions.get("redis")}


def render(report: dict[str, Any]) -> str:
    """The report as a table."""
    lines = [
        f"quota upkeep (redis-server {report['redis_server'] or 'not used'}); "
        f"ratio = median over interleaved block pairs of time with quota / without",
        f"{'store':<16}{'with quota':>12}{'without':>10}{'ratio':>8}{'p10-p90':>14}"
        f"{'pairs':>7}  target",
    ]
    for row in report["rows"]:
        low, high = row["spread"]
        lines.append(
            f"{row['store']:<16}{row['with_quota_us']:>10.1f}us{row['without_us']:>8.1f}us"
            f"{row['ratio']:>8.3f}{low:>7.3f}-{high:<6.3f}{row['pairs']:>7}  "
            f"<= {row['target']} {'met' if row['met'] else 'NOT MET'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per store (default 6)")
    parser.add_argument("--stores", default=",".join(STORES), help="comma-separated")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    unknown = sorted(set(stores) - set(STORES))
    if unknown:
        parser.error(f"unknown store(s) {', '.join(unknown)}; choose from {', '.join(STORES)}")
    report = run(stores, seconds=args.seconds)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
