"""Timing and reporting shared by every row of ``python -m benchmarks``.

Every figure is a ratio against a baseline measured in the same process, on
the same data, in the same run.  :func:`compare` runs the two sides in short
*blocks*, alternating which one goes first, and reports medians:

* **throughput blocks** run the operation in a bare loop; their times give
  ops/s and the ratio (the median of the per-pair ratios, so a burst of load
  from another process hits one pair, not the result);
* **latency blocks** (every other pair) time each operation separately for
  p50/p99.  Keeping the per-operation timer out of the throughput blocks
  keeps its constant cost out of the ratio, where it would flatter the slower
  side.

Every row decides its target on the median of its per-round ratios (at least
:data:`MIN_ROUNDS` rounds) and shows their spread, the lowest and highest.
"""

from __future__ import annotations

import gc
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "MIN_ROUNDS",
    "Comparison",
    "Op",
    "RatioKind",
    "Row",
    "compare",
    "percentile",
    "render",
    "server_line",
    "spread_of",
]

#: The fewest interleaved rounds (pairs of subject and baseline) behind any row's ratio.
MIN_ROUNDS = 5

#: One operation; receives the iteration number (to pick a key).
Op = Callable[[int], object]

#: How a row's ratio reads:
#: ``time`` -- our time / baseline time (lower is better; a target is a ceiling);
#: ``speedup`` -- baseline time / our time (higher is better; a target is a floor);
#: ``throughput`` -- our ops/s / baseline ops/s (higher is better; a target is a floor).
RatioKind = Literal["time", "speedup", "throughput"]


def percentile(samples: list[float], q: float) -> float:
    """The *q*-quantile (0..1) of *samples*, nearest rank; ``nan`` when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class Comparison:
    """Raw results of :func:`compare` (seconds per operation, per block)."""

    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    ours_latency: list[float] = field(default_factory=list)
    base_latency: list[float] = field(default_factory=list)
    ops_per_block: int = 1

    @property
    def ours_ops_per_s(self) -> float:
        return 1.0 / statistics.median(self.ours)

    @property
    def base_ops_per_s(self) -> float:
        return 1.0 / statistics.median(self.base)

    def ratios(self, kind: RatioKind) -> list[float]:
        """This row's ratio in every block pair, in the order measured."""
        pairs = zip(self.ours, self.base, strict=True)
        if kind == "time":
            return [o / b for o, b in pairs]
        return [b / o for o, b in pairs]  # speedup; throughput: (1/o) / (1/b)

    def ratio(self, kind: RatioKind) -> float:
        """The median over block pairs of this row's ratio."""
        return statistics.median(self.ratios(kind))

    @property
    def pairs(self) -> int:
        return len(self.ours)


def _plain(op: Op, start: int, n: int) -> float:
    clock = time.perf_counter
    began = clock()
    for i in range(start, start + n):
        op(i)
    return (clock() - began) / n


def _timed(op: Op, start: int, n: int, into: list[float]) -> None:
    clock = time.perf_counter
    append = into.append
    for i in range(start, start + n):
        began = clock()
        op(i)
        append(clock() - began)


def compare(
    ours: Op,
    base: Op,
    *,
    seconds: float,
    block_seconds: float = 0.025,
    min_pairs: int = 6,
    max_ops: int | None = None,
) -> Comparison:
    """Measure *ours* against *base*, interleaved, for about *seconds* in all.

    The block size is calibrated so the slower side's block takes about
    *block_seconds*; *max_ops* caps it.  At least *min_pairs* throughput pairs
    (and as many latency pairs) run even if that overruns *seconds*.
    """
    # Warm both sides up (connections, caches, derived keys) before anything counts.
    for i in range(3):
        base(i)
        ours(i)
    n = 1
    while True:
        slowest = max(_plain(base, 0, n), _plain(ours, 0, n)) * n
        if slowest >= block_seconds or (max_ops is not None and n >= max_ops):
            break
        n = min(n * 2, max_ops) if max_ops is not None else n * 2
    result = Comparison(ops_per_block=n)
    deadline = time.perf_counter() + seconds
    pair = 0
    gc.collect()
    while pair < 2 * min_pairs or time.perf_counter() < deadline:
        start = pair * n
        sides = [(base, result.base, result.base_latency), (ours, result.ours, result.ours_latency)]
        if (pair // 2) % 2:
            sides.reverse()
        for op, times, latencies in sides:
            if pair % 2 == 0:
                times.append(_plain(op, start, n))
            else:
                _timed(op, start, n, latencies)
        pair += 1
    return result


@dataclass
class Row:
    """One line of the table (and one object of ``--json``)."""

    group: str
    operation: str
    store: str
    ops_per_s: float | None
    p50_us: float | None
    p99_us: float | None
    baseline: str
    baseline_ops_per_s: float | None
    ratio: float | None
    ratio_kind: RatioKind
    target: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: The lowest and highest per-round ratio (``None``: one run, no rounds).
    spread: tuple[float, float] | None = None
    #: How many interleaved rounds the median is over.
    rounds: int | None = None

    @property
    def met(self) -> bool | None:
        """Whether the target holds (``None`` when the row has no target)."""
        if self.target is None or self.ratio is None:
            return None
        if self.ratio_kind == "time":
            return self.ratio <= self.target
        return self.ratio >= self.target

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["met"] = self.met
        return out

    @classmethod
    def from_comparison(
        cls,
        c: Comparison,
        *,
        group: str,
        operation: str,
        store: str,
        baseline: str,
        ratio_kind: RatioKind,
        target: float | None = None,
        note: str = "",
    ) -> Row:
        return cls(
            group=group,
            operation=operation,
            store=store,
            ops_per_s=c.ours_ops_per_s,
            p50_us=percentile(c.ours_latency, 0.50) * 1e6,
            p99_us=percentile(c.ours_latency, 0.99) * 1e6,
            baseline=baseline,
            baseline_ops_per_s=c.base_ops_per_s,
            ratio=c.ratio(ratio_kind),
            ratio_kind=ratio_kind,
            target=target,
            note=note,
            spread=spread_of(c.ratios(ratio_kind)),
            rounds=c.pairs,
            extra={
                "pairs": c.pairs,
                "ops_per_block": c.ops_per_block,
                "baseline_p50_us": percentile(c.base_latency, 0.50) * 1e6,
                "baseline_p99_us": percentile(c.base_latency, 0.99) * 1e6,
            },
        )


def server_line(version: str, path: str) -> str:
    """The first line of every benchmark table: the ``redis-server`` its Redis figures come from."""
    return f"redis-server {version} ({path})"


def spread_of(ratios: list[float]) -> tuple[float, float]:
    """The lowest and highest of *ratios*."""
    return (min(ratios), max(ratios))


_KIND_WORD = {"time": "time", "speedup": "faster", "throughput": "thru"}


def _num(value: float | None, fmt: str) -> str:
    if value is None or value != value:
        return "-"
    return format(value, fmt)


def _target(row: Row) -> str:
    if row.target is None:
        return "-"
    sign = "<=" if row.ratio_kind == "time" else ">="
    return f"{sign} {row.target:g}x"


def render(rows: list[Row], *, title: str = "") -> str:
    """The rows as one plain-text table, with a legend."""
    header = (
        "#",
        "operation",
        "store",
        "ops/s",
        "p50 us",
        "p99 us",
        "baseline",
        "base ops/s",
        "ratio",
        "spread",
        "n",
        "target",
        "met?",
    )
    cells = [header]
    for row in rows:
        met = row.met
        cells.append(
            (
                row.group,
                row.operation,
                row.store,
                _num(row.ops_per_s, ",.0f"),
                _num(row.p50_us, ",.1f"),
                _num(row.p99_us, ",.1f"),
                row.baseline,
                _num(row.baseline_ops_per_s, ",.0f"),
                "-" if row.ratio is None else f"{row.ratio:.2f}x {_KIND_WORD[row.ratio_kind]}",
                "-" if row.spread is None else f"{row.spread[0]:.2f}-{row.spread[1]:.2f}",
                "-" if row.rounds is None else str(row.rounds),
                _target(row),
                "-" if met is None else ("yes" if met else "NO"),
            )
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    numeric = {3, 4, 5, 7, 8, 9, 10}
    lines = [title] if title else []
    for n, line in enumerate(cells):
        lines.append(
            "  ".join(
                cell.rjust(w) if i in numeric else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        "ratio: 'time' = our time / baseline time (lower is better); 'faster' = baseline time /"
        " our time; 'thru' = our ops/s / baseline ops/s.  ratio: the median over n interleaved"
        " rounds (subject and baseline alternating), which decides the target; spread: the"
        " lowest and highest round's ratio."
    )
    notes = [f"  [{r.group}] {r.operation} ({r.store}): {r.note}" for r in rows if r.note]
    if notes:
        lines.append("notes:")
        lines.extend(notes)
    return "\n".join(lines)


#: A load client: ``(index, start barrier, stop_at, errors)``; it waits on the barrier,
#: works until ``time.perf_counter() >= stop_at[0]``, and on failure appends to *errors*
#: and aborts the barrier.
LoadClient = Callable[[int, threading.Barrier, list[float], list[BaseException]], None]


def run_clients(
    client: LoadClient, clients: int, seconds: float, *, start_timeout: float = 60
) -> float:
    """Run *clients* threads of *client* for *seconds* together; return the elapsed seconds.

    :raises RuntimeError: a client failed (its exception is the cause).
    """
    errors: list[BaseException] = []
    stop_at = [float("inf")]
    start = threading.Barrier(clients + 1)
    threads = [
        threading.Thread(target=client, args=(i, start, stop_at, errors), daemon=True)
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    try:
        start.wait(start_timeout)
    except threading.BrokenBarrierError:
        pass
    began = time.perf_counter()
    stop_at[0] = began + seconds
    for t in threads:
        t.join(seconds + 60)
    elapsed = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]!r}") from errors[0]
    return elapsed
