"""Benchmark: the legacy purge on a real redis-server against a one-DEL-per-key baseline.

Usage::

    python -m benchmarks.purge [--keys 100000] [--batch 500] [--rounds 1]

Starts a throw-away ``redis-server`` on a free loopback port, fills it with
*keys* pre-``v2`` keys (split over ``session:``, ``tool:`` and ``user:``) plus
some ``v2:``/``global:`` keys that must survive, and times two ways of
deleting the legacy ones, each on a freshly filled keyspace in the same run:

* **baseline** -- what 1.8.0 does: ``SCAN ... COUNT 100`` per scope to list the
  keys, then one ``DEL`` per key, one round trip each;
* **sweep_legacy** -- :func:`remember_sync._purge.sweep_legacy` over a
  :class:`~remember_sync.stores.redis.RedisStore`: ``SCAN ... COUNT 1000``, then
  per batch one ``MGET`` (only values that are legacy entries are deleted) and
  one ``UNLINK``.

Every legacy key holds a real legacy entry (the reference's envelope of a
small entry), so the sweep's value check does its full work.

Both runs are checked (every legacy key gone, every survivor kept) and the
table shows the time, the rate, the commands the server counted
(``INFO commandstats``) and the ratio.  :func:`run` is importable so a smoke
test can run it with tiny sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import redis

from remember_sync._crypto import seal
from remember_sync._purge import sweep_legacy
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisServer

from .harness import server_line

PREFIX = "remember:"
SCOPES = ("session", "tool", "user")
SURVIVORS = 1000


def _legacy_key(i: int) -> str:
    scope = SCOPES[i % 3]
    if scope == "tool":
        return f"{PREFIX}tool:search:sess-{i}:cache"
    return f"{PREFIX}{scope}:id-{i}:key"


def _fill(client: redis.Redis, keys: int) -> list[str]:
    """Flush, then write *keys* legacy keys and the survivors; return the survivors."""
    client.flushdb()
    survivors = [f"{PREFIX}v2:session:s{i}:k" for i in range(SURVIVORS // 2)]
    survivors += [f"{PREFIX}global:k{i}" for i in range(SURVIVORS - len(survivors))]
    survivors.append(f"{PREFIX}__layout__")
    # The reference's envelope (no kid, no aad): what a pre-v2 plugin left behind.
    value = seal(b'{"value":"dark","createdAt":1,"updatedAt":1}', bytes(32)).encode()
    pipe = client.pipeline(transaction=False)
    for i in range(keys):
        pipe.set(_legacy_key(i), value)
        if i % 10_000 == 9_999:
            pipe.execute()
    for key in survivors:
        pipe.set(key, value)
    pipe.execute()
    return survivors


def _commands(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    names = ("scan", "mget", "del", "unlink")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


def _check(client: redis.Redis, survivors: list[str]) -> None:
    left = sum(1 for s in SCOPES for _ in client.scan_iter(match=f"{PREFIX}{s}:*", count=1000))
    kept = int(client.exists(*survivors))
    if left or kept != len(survivors):
        raise RuntimeError(f"purge was wrong: {left} legacy keys left, {kept} survivors kept")


def _baseline(client: redis.Redis) -> int:
    """1.8.0's purge: list each scope with SCAN COUNT 100, then one DEL per key."""
    deleted = 0
    for scope in SCOPES:
        listed = list(client.scan_iter(match=f"{PREFIX}{scope}:*", count=100))
        for key in listed:
            deleted += int(client.delete(key))
    return deleted


def run(keys: int = 100_000, *, batch: int = 500, rounds: int = 1) -> list[dict[str, Any]]:
    """Time both purges of *keys* legacy keys on a throw-away redis-server, *rounds* times.

    Each round fills the keyspace afresh for each method, alternating which
    method goes first.

    :returns: one row per method: ``method``, ``keys``, ``deleted``,
        ``seconds`` (the median round), ``keys_per_s``, ``commands`` (of the
        last round), ``round_seconds`` and ``ratio`` / ``ratios`` (baseline
        seconds / this method's seconds: the median and every round's).
    """
    labels = {
        "baseline": "1.8.0-style: SCAN COUNT 100 + one DEL per key",
        "sweep_legacy": f"sweep_legacy: SCAN 1000 + MGET/UNLINK x{batch}",
    }
    times: dict[str, list[float]] = {method: [] for method in labels}
    deleted: dict[str, int] = {}
    commands: dict[str, int] = {}
    with RedisServer() as server:
        client = server.client()
        store = RedisStore.from_url(server.url)
        try:
            version = str(client.info("server")["redis_version"])
            path = server.binary
            for rnd in range(rounds):
                order = list(labels) if rnd % 2 == 0 else list(reversed(labels))
                for method in order:
                    survivors = _fill(client, keys)
                    client.config_resetstat()
                    started = time.perf_counter()
                    if method == "baseline":
                        deleted[method] = _baseline(client)
                    else:
                        deleted[method] = sweep_legacy(store, PREFIX, batch=batch).deleted
                    times[method].append(time.perf_counter() - started)
                    commands[method] = _commands(client)
                    _check(client, survivors)
        finally:
            store.close()
            client.close()
    base = times["baseline"]
    rows: list[dict[str, Any]] = []
    for method, label in labels.items():
        ratios = [b / t if t else float("inf") for b, t in zip(base, times[method], strict=True)]
        seconds = statistics.median(times[method])
        rows.append(
            {
                "method": label,
                "keys": keys,
                "deleted": deleted[method],
                "seconds": seconds,
                "keys_per_s": deleted[method] / seconds if seconds else float("inf"),
                "commands": commands[method],
                "redis": version,
                "redis_path": path,
                "round_seconds": times[method],
                "ratios": ratios,
                "ratio": statistics.median(ratios),
            }
        )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as a plain-text table."""
    head = f"legacy purge of {rows[0]['keys']:,} keys (loopback)"
    lines = [
        server_line(rows[0]["redis"], rows[0]["redis_path"]),
        head,
        f"{'method':<48} {'seconds':>9} {'keys/s':>12} {'commands':>10} {'ratio':>7}",
    ]
    for row in rows:
        lines.append(
            f"{row['method']:<48} {row['seconds']:>9.3f} {row['keys_per_s']:>12,.0f} "
            f"{row['commands']:>10,} {row['ratio']:>6.1f}x"
        )
    lines.append(
        f"sweep_legacy is {rows[-1]['ratio']:.1f}x faster than one DEL per key "
        "(ratio = baseline seconds / method seconds)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=100_000, help="legacy keys (default 100000)")
    parser.add_argument("--batch", type=int, default=500, help="keys per UNLINK (default 500)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each (default 1)")
    args = parser.parse_args(argv)
    if args.keys < 1 or args.batch < 1 or args.rounds < 1:
        parser.error("--keys, --batch and --rounds must be positive")
    print(render(run(args.keys, batch=args.batch, rounds=args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
