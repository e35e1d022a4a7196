"""The OpenTelemetry view of :mod:`remember_sync._metrics`.

Counters are observable counters read at each collection.  Each latency
histogram is a real ``Histogram`` instrument (named by the semantic conventions
where one applies, with this package's buckets as its advisory boundaries), fed
*at collection*: the first callback of a collection records, for every attribute
set, each observation made since the previous collection, at its bucket's mean.
The SDK runs every observable callback before it aggregates, so the collection
that triggered the replay already sees it, and every reader of the provider
sees each observation once.  An operation therefore never calls the SDK (a
record there costs about as much as a memory-store ``set``); the SDK's work is
done in the thread that collects, once per observation.

Counts and bucket placement are exact; a histogram's sum is exact up to float
rounding, its min and max are those of the bucket means.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from ._instruments import BUCKETS_S, Counter, Histogram, instruments
from ._views import replayed

_Points = list[tuple[float, dict[str, str]]]


class _Replay:
    """One latency histogram's OpenTelemetry instrument and what it was given so far."""

    def __init__(self, meter: Any, source: Histogram) -> None:
        name, description, self._attributes = source.otel
        self._sink = meter.create_histogram(
            name, unit=source.unit, description=description,
            explicit_bucket_boundaries_advisory=list(BUCKETS_S),
        )  # fmt: skip
        self._source = source
        self._sent: dict[tuple[str, ...], list[float]] = {}

    def flush(self) -> None:
        """Record every observation the source made since the previous flush."""
        record = self._sink.record
        for values, slots in self._source.snapshot().items():
            attributes: dict[str, str] | None = None
            for value, times in replayed(slots, self._sent.get(values)):
                if attributes is None:
                    attributes = self._attributes(values)
                for _ in range(times):
                    record(value, attributes)
            self._sent[values] = slots


class _Flush:
    """Every histogram's replay, one at a time."""

    def __init__(self, replays: list[_Replay]) -> None:
        self.replays = replays
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            for replay in self.replays:
                replay.flush()


_FLUSHES: list[_Flush] = []


def _after_fork_in_child() -> None:
    for flush in _FLUSHES:
        flush.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def register(api: Any) -> None:
    """Register every instrument on *api*'s (``opentelemetry.metrics``) global meter provider."""
    meter = api.get_meter("remember_sync")
    flush = _Flush([_Replay(meter, made) for made in instruments() if isinstance(made, Histogram)])
    _FLUSHES.append(flush)
    make = api.Observation

    def observable(name: str, unit: str, description: str, read: Callable[[], _Points]) -> None:
        def callback(options: Any) -> list[Any]:
            flush()  # before the SDK aggregates this collection's synchronous measurements
            return [make(value, attributes) for value, attributes in read()]

        meter.create_observable_counter(
            name, callbacks=[callback], unit=unit, description=description
        )

    for made in instruments():
        if isinstance(made, Counter):
            observable(made.name, made.unit, made.description,
                       functools.partial(_counter_points, made))  # fmt: skip
        elif isinstance(made, Histogram) and made.counter is not None:
            observable(*made.counter, functools.partial(_count_points, made))


def _counter_points(instrument: Counter) -> _Points:
    return [(n, instrument.attributes(v)) for v, n in instrument.snapshot().items()]


def _count_points(instrument: Histogram) -> _Points:
    return [(n, instrument.attributes(v)) for v, n in instrument.counts().items()]
