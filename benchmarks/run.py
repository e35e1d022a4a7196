"""One command for every benchmark: ``python -m benchmarks [--json] [--quick]``.

Starts its own ``redis-server``, a 3-primary Redis Cluster and a Vercel KV
(Upstash REST) emulator, all on 127.0.0.1 and free ports; runs every row of
:mod:`benchmarks.rows` next to its baseline; prints one table (or, with
``--json``, one JSON document); and stops every server it started -- also on
Ctrl-C or SIGTERM.  The exit status is 0 when every target holds, 1 when one
does not, 130 when interrupted.

See ``docs/benchmarks.rst`` for what each row means.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from .harness import Row, render, server_line
from .rows import FULL, GROUPS, QUICK, Environment, Sizes, all_rows

__all__ = ["main", "run"]


def run(sizes: Sizes = FULL, *, progress: bool = False) -> dict[str, Any]:
    """Start the servers, run the rows, stop the servers; return the report.

    :returns: ``{"rows": [Row, ...], "meta": {...}}``.
    """
    began = time.perf_counter()

    def say(message: str) -> None:
        if progress:
            print(f"{time.perf_counter() - began:6.1f} s  {message}", file=sys.stderr, flush=True)

    say("starting redis-server, a 3-node Redis Cluster and the Vercel KV emulator")
    with Environment() as env:
        rows = all_rows(env, sizes, say)
        meta: dict[str, Any] = {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "redis_server": env.redis_version,
            "redis_server_path": env.redis_binary,
            "hiredis": _hiredis(),
            "sizes": dataclasses.asdict(sizes),
        }
    meta["seconds"] = time.perf_counter() - began
    say(f"done in {meta['seconds']:.0f} s")
    return {"rows": rows, "meta": meta}


def _hiredis() -> str | None:
    try:
        import hiredis  # noqa: PLC0415 - optional

        return str(hiredis.__version__)
    except ImportError:
        return None


def title(meta: dict[str, Any]) -> str:
    """The table's first lines: the server every Redis row ran on, then the rest of the setup."""
    return (
        f"{server_line(meta['redis_server'], meta['redis_server_path'])}\n"
        f"remember_sync benchmarks -- Python {meta['python']} on {meta['cpus']} CPU(s), "
        f"hiredis {meta['hiredis'] or 'not installed'}, {meta['seconds']:.0f} s"
    )


def to_json(report: dict[str, Any]) -> str:
    rows: list[Row] = report["rows"]
    meta = dict(report["meta"])
    if meta.get("sizes", {}).get("only") is not None:
        meta["sizes"]["only"] = sorted(meta["sizes"]["only"])
    return json.dumps({"meta": meta, "rows": [r.as_dict() for r in rows]}, indent=2)


def _terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM unwinds like Ctrl-C, so every server is stopped on the way out.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure remember_sync next to its baselines (ratios, same run).",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    parser.add_argument("--quick", action="store_true", help="shorter runs (a few minutes)")
    parser.add_argument(
        "--only",
        metavar="GROUPS",
        help=f"comma-separated row groups to run ({', '.join(GROUPS)}); default all",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.only:
        chosen = frozenset(g.strip() for g in args.only.split(",") if g.strip())
        known = set(GROUPS) | {g[0] for g in GROUPS}
        if not chosen or not chosen <= known:
            parser.error(f"--only takes groups among {', '.join(sorted(known))}")
        sizes = dataclasses.replace(sizes, only=chosen)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        report = run(sizes, progress=not args.quiet)
    except KeyboardInterrupt:
        print("interrupted; every server was stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    rows: list[Row] = report["rows"]
    if args.json:
        print(to_json(report))
    else:
        print(render(rows, title=title(report["meta"])))
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
