"""Erasure of one person, and the cost of the audit trail on ``set``.

Usage::

    python -m benchmarks.audit erase [--sessions 100] [--per-session 100] [--rounds 3]
    python -m benchmarks.audit set [--ops 2000] [--rounds 7]

``erase``: on a throw-away redis-server, one person writes ``sessions x per-session``
entries (half session, half tool scope) plus user-scope entries, another person as
many; each round times ``plugin.erase(user_id=...)`` and checks the other person's
entries all remain.  ``set``: ``set`` with ``audit=True`` against ``set`` without, on
the memory store and on Redis, rounds interleaved (alternating which goes first); medians,
spread (min..max) and the median of each round's own ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from remember_sync import Identity, RememberPlugin
from remember_sync.testing.redis_server import RedisServer

SECRET = "benchmark-secret-0123456789abcdef012"
VALUE = {"text": "x" * 160, "n": 12345, "ok": True}  # about 200 bytes of JSON


def _populate(plugin: RememberPlugin, user: str, sessions: int, per_session: int) -> int:
    written = 0
    for s in range(sessions):
        mem = plugin.accessor(Identity(f"{user}-s{s}", user, "bench-tool"))
        for i in range(per_session):
            mem.set(f"k{i}", VALUE, scope="session" if i % 2 else "tool")
            written += 1
    mem = plugin.accessor(Identity(None, user))
    for i in range(per_session):
        mem.set(f"u{i}", VALUE, scope="user")
        written += 1
    return written


def run_erase(sessions: int = 100, per_session: int = 100, rounds: int = 3) -> dict[str, Any]:
    """Seconds per erasure of ``sessions * per_session`` entries on Redis (medians, spread)."""
    times: list[float] = []
    with RedisServer() as server:
        for _ in range(rounds):
            server.client().flushall()
            plugin = RememberPlugin.init(
                type="redis", config={"url": server.url}, encryption={"secrets": [SECRET]},
                skip_legacy_purge=True, background_reindex=False,
            )
            try:
                mine = _populate(plugin, "alice", sessions, per_session)
                theirs = _populate(plugin, "bob", sessions // 10 or 1, per_session)
                start = time.perf_counter()
                receipt = plugin.erase(user_id="alice")
                times.append(time.perf_counter() - start)
                assert receipt.total == mine, (receipt, mine)
                bob = plugin.accessor(Identity("bob-s0", "bob", "bench-tool"))
                assert len(bob.list()) + len(bob.list(scope="tool")) == per_session
                assert theirs > 0
                version = plugin.store.client.info()["redis_version"]  # type: ignore[attr-defined]
            finally:
                plugin.close()
    return {
        "operation": "erase",
        "store": f"redis {version}",
        "entries": mine,
        "sessions": sessions,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
    }


def _set_loop(plugin: RememberPlugin, ops: int) -> float:
    """Microseconds per ``set``; with the trail on, the final append of its buffer included."""
    mem = plugin.accessor(Identity(session_id="bench-session", user_id="bench"))
    start = time.perf_counter()
    for i in range(ops):
        mem.set(f"k{i % 500}", VALUE)
    if plugin.audit is not None:
        plugin.audit.flush()
    return (time.perf_counter() - start) / ops * 1e6


def run_set(ops: int = 2000, rounds: int = 7) -> list[dict[str, Any]]:
    """Microseconds per ``set`` with and without ``audit=True`` (interleaved rounds)."""
    rows: list[dict[str, Any]] = []
    with RedisServer() as server:
        configs: dict[str, Callable[..., RememberPlugin]] = {
            "memory": lambda **o: RememberPlugin.init(**o),
            "redis": lambda **o: RememberPlugin.init(
                type="redis", config={"url": server.url}, **o
            ),
        }
        version = server.client().info()["redis_version"]
        for store, make in configs.items():
            common: dict[str, Any] = {
                "encryption": {"secrets": [SECRET]}, "skip_legacy_purge": True,
                "background_reindex": False,
            }
            plain, audited = make(**common), make(audit=True, **common)
            try:
                _set_loop(plain, ops // 4)
                _set_loop(audited, ops // 4)  # warm-up
                base: list[float] = []
                subject: list[float] = []
                sides = [(plain, base), (audited, subject)]
                for r in range(rounds):
                    # Alternate which goes first, so a drift in load favours neither.
                    for plugin, into in sides if r % 2 == 0 else sides[::-1]:
                        into.append(_set_loop(plugin, ops))
            finally:
                plain.close()
                audited.close()
            b, s = statistics.median(base), statistics.median(subject)
            rows.append({
                "operation": "set", "store": store if store == "memory" else f"redis {version}",
                "without_us": round(b, 1), "with_audit_us": round(s, 1),
                "ratio": round(s / b, 3),
                # Each round's own ratio (the two ran back to back): less sensitive to load.
                "paired_ratio_median": round(statistics.median(
                    x / y for x, y in zip(subject, base, strict=True)), 3),
                "rounds": rounds, "ops": ops,
                "spread_without": [round(min(base), 1), round(max(base), 1)],
                "spread_with": [round(min(subject), 1), round(max(subject), 1)],
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    e = sub.add_parser("erase")
    e.add_argument("--sessions", type=int, default=100)
    e.add_argument("--per-session", type=int, default=100)
    e.add_argument("--rounds", type=int, default=3)
    s = sub.add_parser("set")
    s.add_argument("--ops", type=int, default=2000)
    s.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.what == "erase":
        print(json.dumps(run_erase(args.sessions, args.per_session, args.rounds)))
    else:
        for row in run_set(args.ops, args.rounds):
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
