"""Redis CPU per indexed write, by mechanism: what chose ``SET_INDEXED``'s shape.

Usage::

    python -m benchmarks.write_cpu [--writes 2000] [--rounds 7] [--binary PATH]

Starts a throw-away ``redis-server`` (:func:`~remember_sync.testing.redis_server.find_redis_server`,
or ``--binary``) and writes the same entries (100 keys cycling, a 330-byte
value, ``PX`` one hour) into one namespace's listing index with each
mechanism, in interleaved rounds; each round's window starts with ``CONFIG
RESETSTAT`` and ends with ``INFO commandstats`` (the usec of the top-level
commands: see :func:`benchmarks.rows._server_usec`).  Mechanisms:

* ``script`` -- the store's ``SET_INDEXED`` by ``EVALSHA`` (what ``set`` sends);
* ``function`` -- the same Lua body as a Redis 7 function, by ``FCALL``;
* ``script, client clock`` -- ``ZADD`` + ``SET`` + ``PEXPIREAT ... GT`` in a
  script, the deadline computed by the client (no ``TIME``: breaks the rule
  that scores are the server's deadlines; shown for what ``TIME`` costs);
* ``MULTI`` -- the same three commands in one transaction (the row's floor;
  breaks the same rule, and cannot tell a new index from one a member without
  deadline keeps: see ``docs/benchmarks.rst``).

Prints the median microseconds per write and the median ratio to ``MULTI``
with its spread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import redis

from remember_sync.stores._index_lua import SET_INDEXED, STANDALONE_SLACK_MS
from remember_sync.testing.redis_server import RedisServer

from .harness import server_line
from .rows import _server_usec

TTL_MS = 3_600_000
_CLIENT_CLOCK = """\
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PEXPIREAT', KEYS[2], ARGV[3] + 1000, 'GT')
return 1
"""


def _mechanisms(client: redis.Redis, major: int) -> dict[str, Callable[[bytes, bytes], object]]:
    index = b"remember:__index__:v2:session:bench-session-1:"
    ttl = str(TTL_MS).encode()
    script = client.script_load(SET_INDEXED)
    out: dict[str, Callable[[bytes, bytes], object]] = {
        "script": lambda key, value: client.evalsha(script, 2, key, index, value, ttl, b""),
    }
    if major >= 7:
        body = "#!lua name=bench_write\nredis.register_function('w', function(KEYS, ARGV)\n"
        body += SET_INDEXED + "\nend)\n"
        client.function_load(body, replace=True)
        out["function"] = lambda key, value: client.fcall("w", 2, key, index, value, ttl, b"")
        fast = client.script_load(_CLIENT_CLOCK)

        def client_clock(key: bytes, value: bytes) -> object:
            deadline = time.time_ns() // 1_000_000 + TTL_MS
            return client.evalsha(fast, 2, key, index, value, ttl, deadline)

        out["script, client clock"] = client_clock

    def multi(key: bytes, value: bytes) -> object:
        deadline = time.time_ns() // 1_000_000 + TTL_MS
        pipe = client.pipeline(transaction=True)
        pipe.set(key, value, px=TTL_MS)
        pipe.zadd(index, {key: deadline})
        pipe.pexpireat(index, deadline + STANDALONE_SLACK_MS, gt=major >= 7)
        return pipe.execute()

    out["MULTI"] = multi
    return out


def run(
    writes: int = 2000, rounds: int = 7, binary: str | None = None
) -> tuple[str, dict[str, list[float]]]:
    """Measure every mechanism; return the server's table line and usec per write."""
    with RedisServer(binary) as server:
        client = server.client()
        try:
            version = str(client.info("server")["redis_version"])
            mechanisms = _mechanisms(client, int(version.split(".")[0]))
            head = "remember:v2:session:bench-session-1:"
            keys = [f"{head}note-{i:04d}".encode() for i in range(100)]
            value = b"x" * 330
            usec: dict[str, list[float]] = {name: [] for name in mechanisms}
            names = list(mechanisms)
            for rnd in range(rounds):
                for name in names if rnd % 2 == 0 else reversed(names):
                    client.flushall()
                    for i in range(len(keys)):  # a full index with its expiry, as in steady use
                        mechanisms[name](keys[i], value)
                    client.config_resetstat()
                    for i in range(writes):
                        mechanisms[name](keys[i % len(keys)], value)
                    usec[name].append(_server_usec(client, writes))
        finally:
            client.close()
        return server_line(version, server.binary), usec


def render(server: str, usec: dict[str, list[float]]) -> str:
    """One line per mechanism: median usec per write, ratio to MULTI and its spread."""
    lines = [
        server,
        "Redis CPU per indexed write (INFO commandstats)",
        f"{'mechanism':<22} {'usec':>6} {'vs MULTI':>9} {'spread':>11}",
    ]
    base = usec["MULTI"]
    for name, values in usec.items():
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        lines.append(
            f"{name:<22} {statistics.median(values):>6.1f} {statistics.median(ratios):>8.2f}x "
            f"{min(ratios):>5.2f}-{max(ratios):.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--writes", type=int, default=2000, help="per mechanism and round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--binary", help="the redis-server to start (default: as the tests)")
    args = parser.parse_args(argv)
    if args.writes < 1 or args.rounds < 1:
        parser.error("--writes and --rounds must be positive")
    print(render(*run(args.writes, args.rounds, args.binary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
