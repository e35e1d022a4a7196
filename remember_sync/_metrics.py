"""Operational metrics: instruments named ``remember_sync.*``, cheap on the hot path.

Every instrument is declared once, at the bottom of this module, in one line
(name, kind, unit, description, attribute names).  Measurements are kept here,
in process memory, as exact cumulative counts (and fixed-bucket latency
histograms), and read by two views:

* OpenTelemetry (the ``metrics`` extra, ``opentelemetry-api``): :func:`start`
  registers observable instruments on the global meter provider, so any SDK
  reader or exporter the application configures sees them.  Counters become
  ``ObservableCounter``; a histogram becomes two of them, ``<name>.sum`` and
  ``<name>.bucket`` (attribute ``le``, cumulative, as Prometheus' classic
  layout).  The API has no way to report a histogram aggregated beforehand,
  and recording every operation through the SDK costs about as much as a
  memory-store ``set`` itself (``docs/limits-and-metrics.rst``).
* Prometheus text (:func:`prometheus_text`), which ``remember-sync serve
  --metrics`` serves; histograms are real Prometheus histograms there.

Recording is off until :func:`start` turns it on; off, each hook is one test
of a module-level flag.  Attribute values are bounded (stores, operation
names, outcomes, error codes); an instrument keeps at most
:data:`MAX_SERIES` attribute sets and counts any further one under
``code="OTHER"`` so a stream of unexpected codes cannot grow memory.

This module imports nothing from the package (hooks live in every layer).
"""

from __future__ import annotations

import bisect
import functools
import importlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
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
    ) -> None:
        super().__init__(name, unit, description, labels)
        self.counter = counter  # (name, unit, description)
        self._kept = tuple(i for i, label in enumerate(labels) if label not in count_only)
        # attribute values -> count per bucket (len(BUCKETS_S) + 1), then the sum
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
        series[-1] += value
        lock.release()

    def snapshot(self) -> dict[tuple[str, ...], list[float]]:
        """Every attribute set: the count in each bucket (not cumulative), then the sum."""
        with self._lock:
            return {k: list(v) for k, v in self._values.items()}

    def counts(self) -> dict[tuple[str, ...], int]:
        """Every attribute set (all of :attr:`labels`) and its number of observations."""
        return {k: int(sum(v[:-1])) for k, v in self.snapshot().items()}

    def merged(self) -> dict[tuple[str, ...], list[float]]:
        """:meth:`snapshot` without the count-only attributes (their series added up)."""
        out: dict[tuple[str, ...], list[float]] = {}
        for values, slots in self.snapshot().items():
            key = tuple(values[i] for i in self._kept)
            into = out.setdefault(key, [0] * _SLOTS)
            for i, amount in enumerate(slots):
                into[i] += amount
        return out

    def histogram_attributes(self, values: tuple[str, ...]) -> dict[str, str]:
        """*values* of :meth:`merged` as an attribute mapping."""
        return dict(zip((self.labels[i] for i in self._kept), values, strict=True))


_SLOTS = len(BUCKETS_S) + 2  # the buckets, +Inf, the sum


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
    name: str, description: str, counter: str, counter_description: str, *labels: str
) -> Histogram:
    """A latency histogram (seconds) whose observations are also counted as *counter*,
    with a ``code`` attribute on the counter only."""
    made = Histogram(
        name, "s", description, (*labels, "code"),
        counter=(counter, "{call}", counter_description), count_only=("code",),
    )  # fmt: skip
    _INSTRUMENTS.append(made)
    return made


def instruments() -> list[_Instrument]:
    """Every instrument, in declaration order."""
    return list(_INSTRUMENTS)


# -- turning recording on -------------------------------------------------------------------


def active() -> bool:
    """Whether measurements are being recorded."""
    return STATE.on


def start(*, require_otel: bool = True) -> bool:
    """Turn recording on (idempotent) and report to OpenTelemetry when its API is installed.

    :param require_otel: without the OpenTelemetry API (the ``metrics`` extra),
        leave recording off and return ``False``; ``serve --metrics`` passes
        ``False``, as it serves the Prometheus view itself.
    :returns: whether recording is on.
    """
    with _start_lock:
        if not STATE.otel:
            STATE.otel = _register_otel()
        if require_otel and not STATE.otel:
            return False
        STATE.on = True
        return True


def stop() -> None:
    """Stop recording (what was counted stays; the OpenTelemetry view stays registered)."""
    STATE.on = False


def _register_otel() -> bool:
    try:
        # The optional ``metrics`` extra, imported by name: nothing of it is in the types here.
        metrics: Any = importlib.import_module("opentelemetry.metrics")
    except ImportError:
        return False
    meter = metrics.get_meter("remember_sync")
    make = metrics.Observation

    def observable(name: str, unit: str, description: str, read: Callable[[], Any]) -> None:
        def callback(options: Any) -> list[Any]:
            return [make(value, attributes) for value, attributes in read()]

        meter.create_observable_counter(
            name, callbacks=[callback], unit=unit, description=description
        )

    for instrument in _INSTRUMENTS:
        if isinstance(instrument, Counter):
            observable(
                instrument.name, instrument.unit, instrument.description,
                functools.partial(_counter_points, instrument),
            )  # fmt: skip
            continue
        assert isinstance(instrument, Histogram)
        if instrument.counter is not None:
            observable(*instrument.counter, functools.partial(_count_points, instrument))
        observable(
            instrument.name + ".sum", instrument.unit,
            f"{instrument.description} (sum of the observations)",
            functools.partial(_sum_points, instrument),
        )  # fmt: skip
        observable(
            instrument.name + ".bucket", "{observation}",
            f"{instrument.description} (observations <= le, cumulative)",
            functools.partial(_bucket_points, instrument),
        )  # fmt: skip
    return True


_Points = list[tuple[float, dict[str, str]]]


def _counter_points(instrument: Counter) -> _Points:
    return [(n, instrument.attributes(v)) for v, n in instrument.snapshot().items()]


def _count_points(instrument: Histogram) -> _Points:
    return [(n, instrument.attributes(v)) for v, n in instrument.counts().items()]


def _sum_points(instrument: Histogram) -> _Points:
    return [(s[-1], instrument.histogram_attributes(v)) for v, s in instrument.merged().items()]


def _bucket_points(instrument: Histogram) -> _Points:
    points: _Points = []
    for values, slots in instrument.merged().items():
        attributes = instrument.histogram_attributes(values)
        points.extend((n, {**attributes, "le": le}) for le, n in _cumulative(slots))
    return points


def _cumulative(slots: list[float]) -> Iterator[tuple[str, int]]:
    """(``le``, observations at or below it) for every bucket, ``+Inf`` last."""
    running = 0
    for bound, count in zip((*BUCKETS_S, math.inf), slots, strict=False):
        running += int(count)
        yield ("+Inf" if bound == math.inf else repr(bound)), running


# -- the Prometheus text view ---------------------------------------------------------------

_UNITS = {"s": "seconds", "By": "bytes"}


def _prometheus_name(name: str, unit: str, kind: str) -> str:
    name = name.replace(".", "_")
    suffix = _UNITS.get(unit)
    if suffix and not name.endswith(suffix):
        name += "_" + suffix
    return name + ("_total" if kind == "counter" else "")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Mapping[str, str]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _family(lines: list[str], name: str, kind: str, description: str) -> None:
    lines.append(f"# HELP {name} {description}")
    lines.append(f"# TYPE {name} {kind}")


def prometheus_text() -> str:
    """Every instrument in the Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []
    for instrument in _INSTRUMENTS:
        if isinstance(instrument, Counter):
            name = _prometheus_name(instrument.name, instrument.unit, "counter")
            _family(lines, name, "counter", instrument.description)
            for n, attributes in sorted(_counter_points(instrument), key=_by_attributes):
                lines.append(f"{name}{_labels(attributes)} {n}")
            continue
        assert isinstance(instrument, Histogram)
        if instrument.counter is not None:
            counter, unit, description = instrument.counter
            name = _prometheus_name(counter, unit, "counter")
            _family(lines, name, "counter", description)
            for n, attributes in sorted(_count_points(instrument), key=_by_attributes):
                lines.append(f"{name}{_labels(attributes)} {n}")
        name = _prometheus_name(instrument.name, instrument.unit, "histogram")
        _family(lines, name, "histogram", instrument.description)
        for values, slots in sorted(instrument.merged().items()):
            attributes = instrument.histogram_attributes(values)
            running = 0
            for le, running in _cumulative(slots):
                lines.append(f"{name}_bucket{_labels({**attributes, 'le': le})} {running}")
            lines.append(f"{name}_sum{_labels(attributes)} {slots[-1]!r}")
            lines.append(f"{name}_count{_labels(attributes)} {running}")
    return "\n".join(lines) + "\n"


def _by_attributes(point: tuple[float, dict[str, str]]) -> list[str]:
    return list(point[1].values())


# -- hooks --------------------------------------------------------------------------------


_STORE_KINDS = {"MemoryStore": "memory", "RedisStore": "redis", "VercelKVStore": "vercel-kv"}


def store_kind(store: object) -> str:
    """The ``store`` attribute of a store's measurements: ``memory``, ``redis``,
    ``redis-cluster``, ``vercel-kv`` or ``custom``."""
    for cls in type(store).__mro__:
        kind = _STORE_KINDS.get(cls.__name__)
        if kind is not None:
            if kind == "redis" and getattr(store, "is_cluster", False):
                return "redis-cluster"
            return kind
    return "custom"


def error_code(exc: BaseException) -> str:
    """The ``code`` attribute of a failed operation: the error's code, else ``OTHER``."""
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else "OTHER"


def measured(operation: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Count and time a method of an object whose ``_store_kind`` names its store.

    Each call is one observation of ``remember_sync.operation.duration``, counted
    as ``remember_sync.operations`` (outcome ``ok``, or ``error`` with the
    error's code).  Off, the only cost is the test of :data:`STATE`.
    """

    def decorate(method: Callable[_P, _R]) -> Callable[_P, _R]:
        done: dict[str, list[float]] = {}  # store -> its series of successful calls

        @functools.wraps(method)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if not STATE.on:
                return method(*args, **kwargs)
            began = _clock()
            try:
                result = method(*args, **kwargs)
            except BaseException as exc:
                store: str = args[0]._store_kind  # type: ignore[attr-defined]
                OPERATIONS.record(_clock() - began, store, operation, "error", error_code(exc))
                raise
            elapsed = _clock() - began
            # Histogram.add, inlined: this runs on every operation.
            store = args[0]._store_kind  # type: ignore[attr-defined]
            series = done.get(store)
            if series is None:
                series = done[store] = OPERATIONS.series(store, operation, "ok", "")
            index = 0 if elapsed <= _FASTEST else _bucket(BUCKETS_S, elapsed)
            lock = OPERATIONS._lock
            lock.acquire()
            series[index] += 1
            series[-1] += elapsed
            lock.release()
            return result

        return wrapper

    return decorate


# -- the instruments (one line each) ----------------------------------------------------------

OPERATIONS = _timed(
    "remember_sync.operation.duration", "how long memory operations took",
    "remember_sync.operations",
    "memory operations by store, operation, outcome (ok, error) and error code",
    "store", "operation", "outcome",
)  # fmt: skip
TOOL_CALLS = _timed(
    "remember_sync.tool_call.duration", "how long memory tool calls took",
    "remember_sync.tool_calls",
    "memory tool calls by store, tool, outcome (ok, error) and error code",
    "store", "tool", "outcome",
)  # fmt: skip
# Per-store counters: (name below remember_sync., unit, description).
UNREADABLE, CAS_RETRIES, CAS_CONFLICTS, EVICTIONS = (
    _counter(f"remember_sync.{name}", unit, description, "store")
    for name, unit, description in (
        ("unreadable_entries", "{entry}",
         "entries that could not be decrypted or parsed (each distinct key once)"),
        ("cas.retries", "{retry}", "compare-and-set attempts lost to another writer"),
        ("cas.conflicts", "{conflict}",
         "updates given up after every compare-and-set attempt was lost (REMEMBER_CONFLICT)"),
        ("evictions", "{entry}", "entries evicted by a bounded memory store"),
    )
)  # fmt: skip
RATE_LIMITED = _counter(
    "remember_sync.rate_limit.refusals", "{request}", "MCP requests refused by the rate limit"
)
SESSIONS_OPENED = _counter(
    "remember_sync.sessions.opened", "{session}", "MCP sessions opened (initialize)"
)
SESSIONS_ENDED = _counter(
    "remember_sync.sessions.ended", "{session}", "MCP sessions ended (DELETE)"
)
OAUTH_KEY_FETCHES = _counter(
    "remember_sync.oauth.key_fetches", "{fetch}",
    "fetches of the OAuth issuer's signing keys by outcome (ok, error)", "outcome",
)  # fmt: skip
