"""Verified vs default mode, measured in one run: ``python -m benchmarks.integrity``.

Usage::

    python -m benchmarks.integrity [--seconds 2] [--keys 100] [--json]

Starts its own throw-away ``redis-server`` (two: the second holds the Redis
witness), fills one user namespace with 10 and with ``--keys`` entries in each
mode (separate key prefixes; a write rewrites its namespace's manifest, so the
size matters), then compares, interleaved (:func:`harness.compare`),
verified against default mode for ``get``, ``set`` and ``entries()`` on
Redis and ``set+get`` on the memory store, and verified mode with each kind
of witness against verified mode without one.  Medians of block pairs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remember_sync import Identity, RememberPlugin
from remember_sync.testing.redis_server import RedisServer, find_redis_server

from .harness import Row, compare, render

SECRET = "benchmark-secret-0123456789abcdef012"
VALUE = {"text": "x" * 160, "n": 12345, "ok": True}  # about 200 bytes of JSON
WHO = Identity(user_id="bench")
#: The targets of the integrity issue, as ceilings on the time ratio.
TARGETS = {"get": 1.25, "set": 1.5, "entries()": 1.3, "set+get": 1.1}


def _plugin(url: str | None, prefix: str, **options: Any) -> RememberPlugin:
    store: dict[str, Any] = {} if url is None else {"type": "redis", "config": {"url": url}}
    plugin = RememberPlugin.init(
        **store, key_prefix=prefix, skip_legacy_purge=True,
        encryption={"secrets": [SECRET]}, **options,
    )
    if plugin.index_backfill is not None:
        plugin.index_backfill.wait(60)
    return plugin


def _ops(plugin: RememberPlugin, keys: int) -> dict[str, Callable[[int], object]]:
    mem = plugin.accessor(WHO)
    for i in range(keys):
        mem.set(f"k{i}", VALUE, scope="user")
    return {
        "get": lambda i: mem.get(f"k{i % keys}", scope="user"),
        "set": lambda i: mem.set(f"k{i % keys}", VALUE, scope="user"),
        "entries()": lambda i: mem.entries(scope="user"),
        "set+get": lambda i: (mem.set(f"k{i % keys}", VALUE, scope="user"),
                              mem.get(f"k{i % keys}", scope="user")),
    }


def run(seconds: float = 2.0, keys: int = 100) -> tuple[list[Row], str]:
    """Every row, and the redis-server version."""
    binary = find_redis_server()
    if binary is None:
        raise SystemExit("redis-server not found (set REDIS_SERVER_BIN)")
    rows: list[Row] = []
    note = f"one user namespace of {keys} entries of ~200 B"
    with tempfile.TemporaryDirectory() as tmp:
        main, second = RedisServer(binary).start(), RedisServer(binary).start()
        made: list[RememberPlugin] = []
        try:
            version = str(main.client().info("server")["redis_version"])

            def plugin(url: str | None, prefix: str, **options: Any) -> RememberPlugin:
                made.append(_plugin(url, prefix, **options))
                return made[-1]

            for size in sorted({10, keys}):
                default = _ops(plugin(main.url, f"bd{size}:"), size)
                verified = _ops(plugin(main.url, f"bv{size}:", integrity="verified"), size)
                for op in ("get", "set", "entries()"):
                    c = compare(verified[op], default[op], seconds=seconds)
                    rows.append(Row.from_comparison(
                        c, group="integrity", operation=op, store=f"redis, {size} keys",
                        baseline="default mode", ratio_kind="time", target=TARGETS[op],
                        note=note.replace(str(keys), str(size))))
            mem_default = _ops(plugin(None, "md:"), keys)
            mem_verified = _ops(plugin(None, "mv:", integrity="verified"), keys)
            c = compare(mem_verified["set+get"], mem_default["set+get"], seconds=seconds)
            rows.append(Row.from_comparison(
                c, group="integrity", operation="set+get", store="memory",
                baseline="default mode", ratio_kind="time", target=TARGETS["set+get"],
                note="the memory store is in-process: verified mode adds nothing"))
            witnesses = {
                "file witness": str(Path(tmp) / "witness.db"),
                "redis witness": second.url,
            }
            for name, spec in witnesses.items():
                with_witness = _ops(plugin(main.url, f"bw{len(made)}:", integrity="verified",
                                           witness=spec), keys)
                for op in ("set", "get"):
                    c = compare(with_witness[op], verified[op], seconds=seconds)
                    rows.append(Row.from_comparison(
                        c, group="witness", operation=op, store=f"redis + {name}",
                        baseline="verified, no witness", ratio_kind="time",
                        note="a get reads the witness at most once a second per namespace"
                        if op == "get" else "one witness update per write, after the commit"))
        finally:
            for p in made:
                p.close()
            main.cleanup()
            second.cleanup()
    return rows, version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per row (default: 2)")
    parser.add_argument("--keys", type=int, default=100, help="entries in the namespace")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    rows, version = run(args.seconds, args.keys)
    if args.json:
        json.dump({"redis_server": version, "rows": [r.as_dict() for r in rows]}, sys.stdout,
                  indent=2)
        print()
    else:
        print(render(rows, title=f"verified vs default mode (redis-server {version})"))
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
