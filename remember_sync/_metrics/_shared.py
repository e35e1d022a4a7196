"""Counts shared by every process of one server, through ``prometheus_client``'s multiprocess
mode (``PROMETHEUS_MULTIPROC_DIR``).

Each process keeps recording into its own memory (the hot path does not
change).  After each request the server calls :func:`~remember_sync._metrics.publish`,
which adds what this process counted since its last publication to its own
files in the directory (``prometheus_client`` metrics: one memory-mapped file
per process and kind, written without a system call per value); a scrape
publishes, then adds up every process's files.  A request's counts are
therefore in the directory before its response leaves, and a scrape answered by
any worker covers every request answered before it.

The files of a worker that exited stay, so its counts keep counting (a counter
never goes back when gunicorn replaces a worker).  Emptying the directory is the
operator's job, before the server starts.
"""

from __future__ import annotations

import bisect
import glob
import importlib
import math
import os
import threading
from typing import Any

from ._instruments import BUCKET_COUNT, BUCKETS_S, MULTIPROCESS_ENV, Counter, Histogram, instruments
from ._views import Readings, families, replayed

_EXTRA = "pip install 'remember-sync[metrics]'"
#: Bytes of a multiprocess file's header (how much of it is used).
_HEADER = 8


def open_directory(path: str) -> Shared | str:
    """A :class:`Shared` over *path*, or why *path* cannot be used."""
    try:
        client: Any = importlib.import_module("prometheus_client")
        multiprocess: Any = importlib.import_module("prometheus_client.multiprocess")
        values: Any = importlib.import_module("prometheus_client.values")
    except ImportError:
        return f"{MULTIPROCESS_ENV} is set: sharing metrics between processes needs {_EXTRA}"
    if not os.path.isdir(path):
        return (
            f"{MULTIPROCESS_ENV}={path!r} is not a directory: create it, empty, before the "
            "server starts"
        )
    if values.ValueClass is values.MutexValue:
        return (
            f"prometheus_client was imported before {MULTIPROCESS_ENV} was set, so it keeps "
            "this process's counts in memory: set it in the server's environment"
        )
    return Shared(path, client, multiprocess.MultiProcessCollector(None, path=path))


class Shared:
    """This process's side of the directory: what it published, and the scrape."""

    def __init__(self, path: str, client: Any, collector: Any) -> None:
        self.path = path
        self._collector = collector
        # instrument -> (its counter family's metric, its histogram family's metric)
        self._metrics: dict[str, tuple[Any, Any]] = {}
        for family in families():
            counter, histogram = self._metrics.get(family.instrument.name, (None, None))
            if family.kind == "counter":
                counter = client.Counter(
                    family.name.removesuffix("_total"), family.description, family.labels,
                    registry=None,
                )  # fmt: skip
            else:
                histogram = client.Histogram(
                    family.name, family.description, family.labels, buckets=BUCKETS_S,
                    registry=None,
                )  # fmt: skip
            self._metrics[family.instrument.name] = (counter, histogram)
        # (instrument, attribute values) -> what was published (a count, a histogram's
        # slots) and the prometheus_client children it went to
        self._sent: dict[tuple[str, tuple[str, ...]], tuple[Any, Any, Any]] = {}
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    def publish(self) -> None:
        """Add what this process counted since the last call to its files."""
        with self._lock:
            for made in instruments():
                counter, histogram = self._metrics[made.name]
                if isinstance(made, Counter):
                    for values, n in made.snapshot().items():
                        self._count(made.name, counter, values, n)
                    continue
                assert isinstance(made, Histogram)
                for values, slots in made.snapshot().items():
                    self._observe(made, counter, histogram, values, slots)

    def _child(self, metric: Any, values: tuple[str, ...]) -> Any:
        return metric.labels(*values) if values else metric

    def _count(self, name: str, counter: Any, values: tuple[str, ...], n: int) -> None:
        key = (name, values)
        sent, child, _ = self._sent.get(key) or (0, None, None)
        if n > sent:
            child = child or self._child(counter, values)
            child.inc(n - sent)
            self._sent[key] = (n, child, None)

    def _observe(self, made: Histogram, counter: Any, histogram: Any, values: tuple[str, ...],
                 slots: list[float]) -> None:  # fmt: skip
        key = (made.name, values)
        sent, calls, child = self._sent.get(key) or (None, None, None)
        if sent == slots:
            return
        if counter is not None:
            calls = calls or self._child(counter, values)
            before = sum(sent[:BUCKET_COUNT]) if sent else 0
            calls.inc(sum(slots[:BUCKET_COUNT]) - before)
        child = child or self._child(histogram, made.histogram_values(values))
        for value, times in replayed(slots, sent):
            for _ in range(times):
                child.observe(value)
        self._sent[key] = (slots, calls, child)

    def readings(self) -> Readings:
        """Every process's counts (this one's published first)."""
        self.publish()
        kinds = {family.name: family for family in families()}
        out = Readings()
        for metric in self._collect():
            for sample in metric.samples:
                _read(out, kinds, sample.name, sample.labels, sample.value)
        for counts, _ in (series for family in out.histograms.values()
                          for series in family.values()):  # fmt: skip
            # cumulative (``le``) to one count per bucket
            for index in range(len(counts) - 1, 0, -1):
                counts[index] -= counts[index - 1]
        return out

    def _collect(self) -> list[Any]:
        """The directory's metrics, as ``MultiProcessCollector.collect`` reads them, without
        the files still empty: a worker starting up creates its file empty and sizes it a
        moment later (it holds no value before), and an empty file has no header to read."""
        files = []
        for name in glob.glob(os.path.join(self.path, "*.db")):
            try:
                if os.path.getsize(name) >= _HEADER:
                    files.append(name)
            except FileNotFoundError:  # removed by the operator meanwhile
                continue
        return list(self._collector.merge(files, accumulate=True))


def _read(out: Readings, kinds: dict[str, Any], name: str, labels: dict[str, str],
          value: float) -> None:  # fmt: skip
    """Put one sample of the collector into *out* (samples of other metrics are left out)."""
    family = kinds.get(name)
    if family is not None and family.kind == "counter":
        values = tuple(labels[label] for label in family.labels)
        out.counts.setdefault(name, {})[values] = value
        return
    base, _, part = name.rpartition("_")
    family = kinds.get(base)
    if family is None or family.kind != "histogram" or part not in ("bucket", "sum"):
        return
    values = tuple(labels[label] for label in family.labels)
    series = out.histograms.setdefault(base, {})
    counts, total = series.get(values) or ([0.0] * BUCKET_COUNT, 0.0)
    if part == "sum":
        total = value
    else:
        bound = float(labels["le"])
        index = len(BUCKETS_S) if bound == math.inf else bisect.bisect_left(BUCKETS_S, bound)
        counts[index] = value
    series[values] = (counts, total)
