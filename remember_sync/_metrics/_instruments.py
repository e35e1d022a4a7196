"""The instruments behind :mod:`remember_sync._metrics`: their kinds, buckets and state.

Kept apart from the views (:mod:`._views`, :mod:`._otel`, :mod:`._shared`) so that
each of them imports the instruments without importing the package that loads them.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

#: Upper bounds (seconds) of the latency buckets; one more bucket, ``+Inf``, holds the rest.
BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip
_FASTEST = BUCKETS_S[0]  # most memory-store operations: one comparison, no search
#: Distinct attribute sets an instrument keeps before folding new ones into ``OTHER``.
MAX_SERIES = 1000

_clock = time.perf_counter
_bucket = bisect.bisect_left
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _State:
    """Whether recording is on (one attribute read per hook when it is off)."""

    on = False
    otel = False
    #: Where the processes of this server share their counts (:func:`share`).
    shared: Any = None


STATE = _State()
_start_lock = threading.Lock()


class _Instrument:
    """What every instrument has: a name, a unit, a description, attribute names."""

    kind = ""

    def __init__(self, name: str, unit: str, description: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self.labels = labels
        self._lock = threading.Lock()

    def _key(
        self, values: tuple[str, ...], series: Mapping[tuple[str, ...], Any]
    ) -> tuple[str, ...]:
        if values in series or len(series) < MAX_SERIES:
            return values
        return tuple("OTHER" for _ in values)

    def attributes(self, values: tuple[str, ...]) -> dict[str, str]:
        """*values* as an attribute mapping."""
        return dict(zip(self.labels, values, strict=True))


class Counter(_Instrument):
    """A monotonic count per attribute set."""

    kind = "counter"

    def __init__(self, name: str, unit: str, description: str, labels: tuple[str, ...]) -> None:
        super().__init__(name, unit, description, labels)
        self._values: dict[tuple[str, ...], int] = {}

    def add(self, *values: str, amount: int = 1) -> None:
        """Count *amount* for the attribute values *values* (in :attr:`labels` order)."""
        if not STATE.on:
            return
        with self._lock:
            key = self._key(values, self._values)
            self._values[key] = self._values.get(key, 0) + amount

    def snapshot(self) -> dict[tuple[str, ...], int]:
        """Every attribute set and its count so far."""
        with self._lock:
            return dict(self._values)


class Histogram(_Instrument):
    """Observations per attribute set in the fixed buckets :data:`BUCKETS_S`, with sum and count.

    :param counter: also publish the count of observations as a counter of this
        name (with every attribute), so one record per operation feeds both.
    :param count_only: attributes the counter has and the histogram leaves out
        (an error code: its latency is the outcome's).
    :param otel: the OpenTelemetry histogram's name, description and attribute
        mapping, when a semantic convention names it differently.
    """

    kind = "histogram"

    def __init__(
        self,
        name: str,
        unit: str,
        description: str,
        labels: tuple[str, ...],
        *,
        counter: tuple[str, str, str] | None = None,
        count_only: tuple[str, ...] = (),
        otel: tuple[str, str, Callable[[tuple[str, ...]], dict[str, str]]] | None = None,
    ) -> None:
        super().__init__(name, unit, description, labels)
        self.counter = counter  # (name, unit, description)
        #: (name, description, attribute values -> attributes) in OpenTelemetry, when they
        #: differ from the Prometheus view's (a semantic convention applies).
        self.otel = otel or (name, description, self.attributes)
        self._kept = tuple(i for i, label in enumerate(labels) if label not in count_only)
        # attribute values -> count per bucket (len(BUCKETS_S) + 1), then the sum per bucket
        self._values: dict[tuple[str, ...], list[float]] = {}

    def record(self, value: float, *values: str) -> None:
        """Record one observation *value* for the attribute values *values*."""
        if STATE.on:
            self.add(self.series(*values), value)

    def series(self, *values: str) -> list[float]:
        """The counts of the attribute values *values* (made on first use), for :meth:`add`."""
        with self._lock:
            found = self._values.get(values)
            if found is None:
                found = self._values.setdefault(self._key(values, self._values), [0] * _SLOTS)
            return found

    def add(self, series: list[float], value: float) -> None:
        """Record one observation *value* in *series* (from :meth:`series`)."""
        index = _bucket(BUCKETS_S, value)
        lock = self._lock
        lock.acquire()
        series[index] += 1
        series[index + BUCKET_COUNT] += value
        lock.release()

    def snapshot(self) -> dict[tuple[str, ...], list[float]]:
        """Every attribute set: the count in each bucket (not cumulative), then the sum of
        each bucket's observations."""
        with self._lock:
            return {k: list(v) for k, v in self._values.items()}

    def counts(self) -> dict[tuple[str, ...], int]:
        """Every attribute set (all of :attr:`labels`) and its number of observations."""
        return {k: int(sum(v[:BUCKET_COUNT])) for k, v in self.snapshot().items()}

    def merged(self) -> dict[tuple[str, ...], list[float]]:
        """:meth:`snapshot` without the count-only attributes (their series added up)."""
        out: dict[tuple[str, ...], list[float]] = {}
        for values, slots in self.snapshot().items():
            key = self.histogram_values(values)
            into = out.setdefault(key, [0] * _SLOTS)
            for i, amount in enumerate(slots):
                into[i] += amount
        return out

    def histogram_values(self, values: tuple[str, ...]) -> tuple[str, ...]:
        """*values* (all of :attr:`labels`) without the count-only attributes."""
        return tuple(values[i] for i in self._kept)



#: Buckets of a latency histogram: one per bound of :data:`BUCKETS_S`, then ``+Inf``.
BUCKET_COUNT = len(BUCKETS_S) + 1
_SLOTS = 2 * BUCKET_COUNT  # the count in each bucket, then the sum of each


_INSTRUMENTS: list[_Instrument] = []


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held a lock at the fork; counts carry over.
    for instrument in _INSTRUMENTS:
        instrument._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _counter(name: str, unit: str, description: str, *labels: str) -> Counter:
    made = Counter(name, unit, description, labels)
    _INSTRUMENTS.append(made)
    return made


def _timed(
    name: str,
    description: str,
    counter: str,
    counter_description: str,
    *labels: str,
    otel: tuple[str, str, Callable[[tuple[str, ...]], dict[str, str]]],
) -> Histogram:
    """A latency histogram (seconds) whose observations are also counted as *counter*,
    with a ``code`` attribute on the counter only; *otel* as :class:`Histogram` takes it."""
    made = Histogram(
        name, "s", description, (*labels, "code"),
        counter=(counter, "{call}", counter_description), count_only=("code",), otel=otel,
    )  # fmt: skip
    _INSTRUMENTS.append(made)
    return made


def instruments() -> list[_Instrument]:
    """Every instrument, in declaration order."""
    return list(_INSTRUMENTS)



#: The directory a server's processes share their counts through (``prometheus_client``'s
#: multiprocess mode; :mod:`._shared`).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
