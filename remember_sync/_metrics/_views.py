"""The views' common ground: Prometheus families, readings, and the text exposition format.

A :class:`Readings` is what a scrape shows, read either from this process's
instruments (:func:`live_readings`) or from every process's files
(:mod:`._shared`); :func:`render` writes it in the Prometheus text format.
:func:`replayed` turns the difference of two histogram series into
observations, for the views that can only be handed single observations.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ._instruments import _INSTRUMENTS, BUCKET_COUNT, BUCKETS_S, Counter, Histogram, _Instrument

_UNITS = {"s": "seconds", "By": "bytes"}


@dataclass(frozen=True)
class Family:
    """One Prometheus metric family of an instrument (a histogram has two: its calls, its
    latencies)."""

    kind: str  # "counter" or "histogram"
    name: str  # a counter's ends in ``_total``
    description: str
    labels: tuple[str, ...]
    instrument: _Instrument

    def counts(self) -> dict[tuple[str, ...], int]:
        """A counter family's live counts by attribute values."""
        made = self.instrument
        if isinstance(made, Histogram):
            return made.counts()
        assert isinstance(made, Counter)
        return made.snapshot()

    def slots(self) -> dict[tuple[str, ...], list[float]]:
        """A histogram family's live series (counts per bucket, then sums per bucket)."""
        assert isinstance(self.instrument, Histogram)
        return self.instrument.merged()


@dataclass
class Readings:
    """What the text view shows: counts per counter family, and per histogram family the
    count in each bucket (not cumulative) and the sum, by attribute values."""

    counts: dict[str, dict[tuple[str, ...], float]] = field(default_factory=dict)
    histograms: dict[str, dict[tuple[str, ...], tuple[list[float], float]]] = field(
        default_factory=dict
    )


def _prometheus_name(name: str, unit: str, kind: str) -> str:
    name = name.replace(".", "_")
    suffix = _UNITS.get(unit)
    if suffix and not name.endswith(suffix):
        name += "_" + suffix
    return name + ("_total" if kind == "counter" else "")


@functools.cache
def families() -> tuple[Family, ...]:
    """Every Prometheus family, in declaration order."""
    out: list[Family] = []
    for made in _INSTRUMENTS:
        if isinstance(made, Histogram):
            if made.counter is not None:
                counter, unit, description = made.counter
                name = _prometheus_name(counter, unit, "counter")
                out.append(Family("counter", name, description, made.labels, made))
            kept = tuple(made.labels[i] for i in made._kept)
            name = _prometheus_name(made.name, made.unit, "histogram")
            out.append(Family("histogram", name, made.description, kept, made))
        else:
            name = _prometheus_name(made.name, made.unit, "counter")
            out.append(Family("counter", name, made.description, made.labels, made))
    return tuple(out)


def live_readings() -> Readings:
    """This process's counts."""
    out = Readings()
    for family in families():
        if family.kind == "counter":
            out.counts[family.name] = dict(family.counts())
        else:
            out.histograms[family.name] = {
                values: (slots[:BUCKET_COUNT], math.fsum(slots[BUCKET_COUNT:]))
                for values, slots in family.slots().items()
            }
    return out


def replayed(slots: list[float], sent: list[float] | None) -> Iterator[tuple[float, int]]:
    """(a value, how many times) to record so that a histogram that saw *sent* sees *slots*:
    per bucket, its new observations at their mean, which lies in the bucket as each does."""
    for index in range(BUCKET_COUNT):
        times = int(slots[index] - (sent[index] if sent else 0))
        if times <= 0:
            continue
        total = slots[index + BUCKET_COUNT] - (sent[index + BUCKET_COUNT] if sent else 0)
        value = total / times
        if index < len(BUCKETS_S):
            value = min(value, BUCKETS_S[index])
        if index > 0 and value <= BUCKETS_S[index - 1]:
            value = math.nextafter(BUCKETS_S[index - 1], math.inf)
        yield value, times


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Mapping[str, str]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _family(lines: list[str], name: str, kind: str, description: str) -> None:
    lines.append(f"# HELP {name} {description}")
    lines.append(f"# TYPE {name} {kind}")


def render(readings: Readings) -> str:
    """*readings* in the Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []
    for family in families():
        name = family.name
        _family(lines, name, family.kind, family.description)
        if family.kind == "counter":
            for values, n in sorted(readings.counts.get(name, {}).items()):
                attributes = dict(zip(family.labels, values, strict=True))
                lines.append(f"{name}{_labels(attributes)} {int(n)}")
            continue
        for values, (counts, total) in sorted(readings.histograms.get(name, {}).items()):
            attributes = dict(zip(family.labels, values, strict=True))
            running = 0
            for le, running in _cumulative(counts):
                lines.append(f"{name}_bucket{_labels({**attributes, 'le': le})} {running}")
            lines.append(f"{name}_sum{_labels(attributes)} {total!r}")
            lines.append(f"{name}_count{_labels(attributes)} {running}")
    return "\n".join(lines) + "\n"


def _cumulative(counts: list[float]) -> Iterator[tuple[str, int]]:
    """(``le``, observations at or below it) for every bucket, ``+Inf`` last."""
    running = 0
    for bound, count in zip((*BUCKETS_S, math.inf), counts, strict=True):
        running += int(count)
        yield ("+Inf" if bound == math.inf else repr(bound)), running
