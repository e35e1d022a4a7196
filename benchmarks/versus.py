"""``python -m benchmarks.versus OTHER``: this tree's rows next to another checkout's.

Answers "is any row slower than on the previous ``main``?".  *OTHER* is a
checkout of the revision to compare with, for example::

    git worktree add /tmp/base main~3
    python -m benchmarks.versus /tmp/base --runs 3 --only 1,2,3,6

Each run starts ``python -m benchmarks --quick --json`` once in each tree
(each with its own package first on ``PYTHONPATH``), alternating which tree
goes first, so load from elsewhere falls on both.  Per row it prints the
median over runs of the row's own ratio (against the baseline measured in
the same run, which cancels most machine noise) in each tree, their change,
and the spread of this tree's per-run changes.  A row whose ratio moved more
than :data:`LIMIT` the wrong way is marked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: How much worse a row's ratio may get before it is marked (0.10: 10%).
LIMIT = 0.10

HERE = Path(__file__).resolve().parent.parent

RowKey = tuple[str, str, str]


def _one_run(tree: Path, only: str | None) -> tuple[dict[RowKey, dict[str, Any]], str]:
    """One ``--quick --json`` run of *tree*: its rows by (group, operation, store)."""
    argv = [sys.executable, "-m", "benchmarks", "--quick", "--json", "--quiet"]
    if only:
        argv += ["--only", only]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(
            f"{tree}: benchmarks failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
        ) from None
    rows = {(r["group"], r["operation"], r["store"]): r for r in report["rows"]}
    meta = report["meta"]
    return rows, f"redis-server {meta['redis_server']} ({meta['redis_server_path']})"


def _worse(kind: str, ours: float, theirs: float) -> float:
    """How much worse *ours* is than *theirs* (0.1: 10% worse; negative: better)."""
    if kind == "time":
        return ours / theirs - 1
    return theirs / ours - 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.versus", description=__doc__)
    parser.add_argument("other", type=Path, help="a checkout of the revision to compare with")
    parser.add_argument("--runs", type=int, default=3, help="runs per tree (default 3)")
    parser.add_argument("--only", help="row groups, as for python -m benchmarks --only")
    args = parser.parse_args(argv)
    other = args.other.resolve()
    if not (other / "benchmarks" / "run.py").is_file():
        parser.error(f"{other} is not a checkout with benchmarks/")
    ours_runs: list[dict[RowKey, dict[str, Any]]] = []
    theirs_runs: list[dict[RowKey, dict[str, Any]]] = []
    server = ""
    for i in range(args.runs):
        order = [(HERE, ours_runs), (other, theirs_runs)]
        for tree, into in order if i % 2 == 0 else reversed(order):
            print(f"run {i + 1}/{args.runs}: {tree}", file=sys.stderr, flush=True)
            rows, server = _one_run(tree, args.only)
            into.append(rows)
    print(f"{HERE} vs {other}; {args.runs} runs each, interleaved; {server}")
    header = f"{'row':<58} {'this':>8} {'other':>8} {'worse':>7}  spread of per-run worse"
    print(header)
    print("-" * len(header))
    marked = 0
    for key, first in ours_runs[0].items():
        kind = first["ratio_kind"]
        pairs = [
            (o[key]["ratio"], t[key]["ratio"])
            for o, t in zip(ours_runs, theirs_runs, strict=True)
            if key in o and key in t and o[key]["ratio"] and t[key]["ratio"]
        ]
        if not pairs:
            continue
        ours = statistics.median(p[0] for p in pairs)
        theirs = statistics.median(p[1] for p in pairs)
        worse = _worse(kind, ours, theirs)
        per_run = [_worse(kind, o, t) for o, t in pairs]
        flag = "  <-- more than 10% worse" if worse > LIMIT else ""
        marked += worse > LIMIT
        name = f"[{key[0]}] {key[1]} ({key[2]})"[:58]
        print(
            f"{name:<58} {ours:>8.3f} {theirs:>8.3f} {worse:>+7.1%}  "
            f"{min(per_run):+.1%} .. {max(per_run):+.1%}{flag}"
        )
    return 1 if marked else 0


if __name__ == "__main__":
    sys.exit(main())
