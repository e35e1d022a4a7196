"""Operational metrics: instruments named ``remember_sync.*``, cheap on the hot path.

Every instrument is declared once, at the bottom of this module, in one line
(name, kind, unit, description, attribute names).  Measurements are kept here,
in process memory, as exact cumulative counts (and fixed-bucket latency
histograms: a count and a sum per bucket), and read by three views:

* OpenTelemetry (the ``metrics`` extra, ``opentelemetry-api``): :func:`start`
  registers instruments on the global meter provider (:mod:`._otel`).  Counters
  are observable counters; each latency histogram is a real ``Histogram``
  named by the semantic conventions, fed at each collection with what was
  recorded since the last one, so the operation itself never calls the SDK.
* Prometheus text (:func:`prometheus_text`), which ``remember-sync serve
  --metrics`` serves; histograms are real Prometheus histograms there.
* Several processes (:mod:`._shared`): with ``PROMETHEUS_MULTIPROC_DIR`` set,
  a server publishes its counts there after every request and a scrape adds up
  every process's, so one scrape of any gunicorn worker covers them all.

Recording is off until :func:`start` turns it on; off, each hook is one test
of a module-level flag.  Attribute values are bounded (stores, operation
names, outcomes, error codes); an instrument keeps at most
:data:`MAX_SERIES` attribute sets and counts any further one under
``code="OTHER"`` so a stream of unexpected codes cannot grow memory.

This package imports nothing else from the package (hooks live in every layer).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ._instruments import (
    _FASTEST,
    _P,
    _R,
    BUCKET_COUNT,
    MULTIPROCESS_ENV,
    _bucket,
    _clock,
    _counter,
    _start_lock,
    _timed,
)
from ._instruments import BUCKETS_S as BUCKETS_S  # read from here by the views' users
from ._instruments import STATE as STATE

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
        api: Any = importlib.import_module("opentelemetry.metrics")
    except ImportError:
        return False
    from . import _otel

    _otel.register(api)
    return True


def share(environ: Mapping[str, str]) -> str | None:
    """Share counts with the other processes of this server when *environ* names
    :data:`MULTIPROCESS_ENV`: from now on :func:`publish` writes this process's counts
    there and :func:`prometheus_text` reads every process's.

    :returns: why the directory cannot be used (``None``: it can, or none is named).
    """
    path = environ.get(MULTIPROCESS_ENV)
    if not path:
        return None
    with _start_lock:
        if STATE.shared is None or STATE.shared.path != path:
            from . import _shared

            opened = _shared.open_directory(path)
            if isinstance(opened, str):
                return opened
            STATE.shared = opened
    return None


def publish() -> None:
    """Hand what this process counted to the shared directory (after each request), if any."""
    shared = STATE.shared
    if shared is not None and STATE.on:
        shared.publish()


def prometheus_text() -> str:
    """Every instrument in the Prometheus text exposition format (version 0.0.4): every
    process's counts when :func:`share` named a directory, else this process's."""
    from ._views import live_readings, render

    shared = STATE.shared
    return render(live_readings() if shared is None else shared.readings())


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
            series[index + BUCKET_COUNT] += elapsed
            lock.release()
            return result

        return wrapper

    return decorate


# -- the instruments (one line each) ----------------------------------------------------------

#: ``db.system.name`` of each ``store`` attribute value (Vercel KV is Upstash's Redis).
_DB_SYSTEMS = {"redis": "redis", "redis-cluster": "redis", "vercel-kv": "redis"}


def _failure(outcome: str, code: str) -> dict[str, str]:
    """The semantic conventions' ``error.type``: set on a failure only."""
    return {} if outcome == "ok" else {"error.type": code or "OTHER"}


def _db_attributes(values: tuple[str, ...]) -> dict[str, str]:
    """``remember_sync.operation.duration``'s attribute values as
    ``db.client.operation.duration``'s attributes."""
    store, operation, outcome, code = values
    return {
        "db.system.name": _DB_SYSTEMS.get(store, store), "db.operation.name": operation,
        "remember_sync.store": store, **_failure(outcome, code),
    }  # fmt: skip


def _mcp_attributes(values: tuple[str, ...]) -> dict[str, str]:
    """``remember_sync.tool_call.duration``'s attribute values as
    ``mcp.server.operation.duration``'s attributes."""
    store, tool, outcome, code = values
    return {
        "mcp.method.name": "tools/call", "gen_ai.tool.name": tool,
        "remember_sync.store": store, **_failure(outcome, code),
    }  # fmt: skip


# Latencies: (name below remember_sync., what is timed, its attribute, the OpenTelemetry
# histogram's name and attributes); each also counts its calls as remember_sync.<name>s.
OPERATIONS, TOOL_CALLS = (
    _timed(
        f"remember_sync.{name}.duration", f"how long memory {what} took",
        f"remember_sync.{name}s",
        f"memory {what} by store, {label}, outcome (ok, error) and error code",
        "store", label, "outcome",
        otel=(otel_name, f"Duration of remember_sync memory {what}.", attributes),
    )
    for name, what, label, otel_name, attributes in (
        ("operation", "operations", "operation", "db.client.operation.duration", _db_attributes),
        ("tool_call", "tool calls", "tool", "mcp.server.operation.duration", _mcp_attributes),
    )
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
