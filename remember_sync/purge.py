"""The legacy purge (SPEC section 7): a fleet-wide clock in the store and a daemon timer.

Entries written before the ``v2:`` layout (``P + "session:..."``,
``P + "tool:..."``, ``P + "user:..."``) can no longer be read: their key
derivation and namespace encoding changed.  They are deleted once, a window
(``legacy_purge_delay_ms``, one day by default) after the **fleet** first
reached the new layout -- not after this process started.

The fleet's clock is a marker in the store, ``P + "__layout__"`` =
``{"version":2,"firstSeenAt":<epoch ms>}``, written once with only-if-absent
and no TTL, and never overwritten.  Every instance reads it; the first one to
find it missing writes it; one that loses that race adopts the winner's value.
A marker that cannot be trusted -- not JSON, no numeric ``firstSeenAt``, gone
right after a lost race, or any store error -- makes the purge stand down:
a missing clock is never licence to delete.

Three layers, usable separately:

* :func:`read_marker` / :func:`ensure_marker` -- the clock;
* :func:`sweep_legacy` -- one SCAN-and-batched-delete pass (the CLI's
  ``purge-legacy`` uses it directly);
* :class:`LegacyPurge` -- the background worker the plugin arms: a daemon
  :class:`threading.Timer`, once per store object per process, fork-aware and
  stoppable.

Everything is logged on ``logging.getLogger("remember_sync")``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .errors import RememberConfigurationError, RememberError, RememberStoreError
from .keys import layout_marker_key, legacy_patterns
from .stores.base import Store

__all__ = [
    "DEFAULT_DELAY_MS",
    "LEGACY_SCOPES",
    "MARKER_VERSION",
    "MAX_WAIT_MS",
    "LayoutMarkerError",
    "LegacyPurge",
    "Marker",
    "PurgeResult",
    "ensure_marker",
    "purged_message",
    "read_marker",
    "sweep_legacy",
]

log = logging.getLogger("remember_sync")

#: The layout version the marker records.
MARKER_VERSION = 2
#: Default window between the fleet's first ``v2`` sighting and the sweep (one day).
DEFAULT_DELAY_MS = 86_400_000
#: Longest single timer wait.  A monotonic timer does not follow wall-clock jumps or a
#: suspended host, and an operator may reset the marker; re-reading it every few hours
#: costs one GET and keeps the worker honest.
MAX_WAIT_MS = 6 * 3_600_000
#: The pre-``v2`` scopes, in the order they are swept (``global`` never changed).
LEGACY_SCOPES = ("session", "tool", "user")
#: Keys examined per SCAN round trip (SPEC section 6.2).
SCAN_COUNT = 1000


class LayoutMarkerError(RememberError):
    """The layout marker cannot be trusted, so nothing may be purged.

    :attr reason: ``"unreadable"`` (present but not ``{"firstSeenAt": <number>, ...}``)
        or ``"vanished"`` (our only-if-absent write lost a race, then the
        winner's marker was gone).
    :attr key: the marker's storage key.
    :attr raw: the stored text (``None`` when vanished).
    """

    code = "REMEMBER_LAYOUT_MARKER_UNUSABLE"
    http_status = 500

    def __init__(self, message: str, *, key: str, reason: str, raw: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.reason = reason
        self.raw = raw


@dataclass(frozen=True)
class Marker:
    """The fleet clock read from ``P + "__layout__"``.

    :attr version: the marker's ``version`` (``None`` if it is not an int; like
        the reference, the version is recorded but not checked).
    :attr first_seen_at: epoch milliseconds when the fleet first reached ``v2``.
    """

    version: int | None
    first_seen_at: int

    def to_json(self) -> str:
        """The stored form, ``{"version":2,"firstSeenAt":<ms>}`` (compact, this key order)."""
        return json.dumps(
            {"version": self.version, "firstSeenAt": self.first_seen_at}, separators=(",", ":")
        )


@dataclass(frozen=True)
class PurgeResult:
    """What one :func:`sweep_legacy` pass did.

    :attr found: legacy keys listed.
    :attr deleted: keys the store reported deleted (``0`` on a dry run).
    :attr failed_batches: delete batches the store refused (their keys remain).
    :attr failed_listings: patterns whose SCAN failed part-way (the rest of the
        pattern was not swept; the next pattern still was).
    :attr stopped: the pass was interrupted by ``should_stop`` after a batch.
    :attr dry_run: nothing was deleted on purpose.
    """

    found: int = 0
    deleted: int = 0
    failed_batches: int = 0
    failed_listings: int = 0
    stopped: bool = False
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """The pass completed with no failed batch or listing."""
        return not (self.failed_batches or self.failed_listings or self.stopped)


def purged_message(count: int) -> str:
    """The exact warning logged after a sweep that deleted *count* > 0 entries (SPEC section 7)."""
    noun = "entry" if count == 1 else "entries"
    return (
        f"remember: purged {count} {noun} left unreadable by the session/tool key-derivation "
        "change and the namespace encoding. This is a one-time upgrade step; set "
        "skip_legacy_purge to handle the migration yourself."
    )


# -- the marker ----------------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    # json accepts NaN/Infinity by default; a marker holding one is not a clock.
    raise ValueError(f"non-finite number {name}")


def _parse_marker(key: str, raw: str) -> Marker:
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        raise LayoutMarkerError(
            f"layout marker {key!r} is not JSON", key=key, reason="unreadable", raw=raw
        ) from exc
    first = data.get("firstSeenAt") if isinstance(data, dict) else None
    # bool is an int subclass; True is not a timestamp.
    if isinstance(first, bool) or not isinstance(first, (int, float)) or not math.isfinite(first):
        raise LayoutMarkerError(
            f"layout marker {key!r} has no numeric firstSeenAt", key=key, reason="unreadable",
            raw=raw,
        )
    version = data.get("version")
    return Marker(
        version=version if isinstance(version, int) and not isinstance(version, bool) else None,
        first_seen_at=math.floor(first),
    )


def read_marker(store: Store, prefix: str) -> Marker | None:
    """Read the layout marker ``prefix + "__layout__"``.

    :returns: the marker, or ``None`` when there is none.
    :raises LayoutMarkerError: (``reason="unreadable"``) when a value is there
        but is not JSON with a finite numeric ``firstSeenAt``.
    :raises RememberStoreError: when the store fails.
    """
    key = layout_marker_key(prefix)
    raw = store.get(key)
    return None if raw is None else _parse_marker(key, raw)


def ensure_marker(store: Store, prefix: str, now_ms: int) -> Marker:
    """Return the fleet's marker, writing ``{"version":2,"firstSeenAt":now_ms}`` if absent.

    The write is only-if-absent and carries no TTL -- whatever ``default_ttl``
    says -- so a later instance can never reset the clock.  Losing the race to
    another instance means adopting its value.

    :raises LayoutMarkerError: the marker is unreadable, or vanished right after
        a lost race; callers stand down.
    :raises RememberStoreError: when the store fails; callers stand down.
    """
    found = read_marker(store, prefix)
    if found is not None:
        return found
    key = layout_marker_key(prefix)
    mine = Marker(version=MARKER_VERSION, first_seen_at=int(now_ms))
    if store.set(key, mine.to_json(), ttl_ms=None, only_if_absent=True):
        return mine
    winner = read_marker(store, prefix)
    if winner is None:
        raise LayoutMarkerError(
            f"layout marker {key!r} vanished after a lost race", key=key, reason="vanished"
        )
    return winner


# -- the sweep -----------------------------------------------------------------------------


def _never() -> bool:
    return False


def sweep_legacy(
    store: Store,
    prefix: str,
    *,
    dry_run: bool = False,
    batch: int = 500,
    should_stop: Callable[[], bool] | None = None,
) -> PurgeResult:
    """Delete every pre-``v2`` key under *prefix*: one SCAN pass per scope, batched deletes.

    Scans ``P+"session:*"``, ``P+"tool:*"`` and ``P+"user:*"`` (the prefix
    glob-escaped, and every key checked again against the literal prefix, so
    ``v2:`` keys, ``global:`` keys, the marker and keys under any other prefix
    are never touched).  Keys are deleted ``batch`` at a time with one
    ``store.delete(*keys)`` call each (one ``UNLINK`` on Redis, one request on
    Vercel KV).  A batch the store refuses is logged and counted and the sweep
    goes on; a SCAN that fails is logged and counted and the next scope is
    swept.  Nothing is logged at warning level here: :class:`LegacyPurge` (and
    the CLI) report the count.

    :param dry_run: only count what would be deleted.
    :param batch: keys per delete call.
    :param should_stop: polled between keys; once true the sweep finishes the
        batch in flight and returns with ``stopped=True``.
    :raises RememberConfigurationError: for an empty *prefix*, whose patterns
        would match keys that are not ours.
    """
    if not prefix:
        raise RememberConfigurationError(
            "the legacy purge is disabled for an empty key_prefix: 'session:*' would match "
            "keys that are not ours"
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise RememberConfigurationError(f"batch must be a positive int; got {batch!r}")
    stop = should_stop or _never
    found = deleted = failed_batches = failed_listings = 0
    stopped = False

    def flush(keys: list[str]) -> None:
        nonlocal deleted, failed_batches
        try:
            deleted += store.delete(*keys)
        except RememberStoreError as exc:
            failed_batches += 1
            log.debug(
                "remember: legacy purge could not delete a batch of %d keys, continuing (%s)",
                len(keys),
                exc,
            )

    for scope, pattern in zip(LEGACY_SCOPES, legacy_patterns(prefix), strict=True):
        head = f"{prefix}{scope}:"
        pending: list[str] = []
        keys = iter(store.scan(pattern, count=SCAN_COUNT))
        while True:
            if stop():
                stopped = True
                break
            try:
                key = next(keys)
            except StopIteration:
                break
            except RememberStoreError as exc:
                failed_listings += 1
                log.debug(
                    "remember: legacy purge skipped, store could not list keys (pattern=%r, %s)",
                    pattern,
                    exc,
                )
                break
            # Belt and braces: a store whose glob is looser than Redis's must still never
            # hand us a v2:, global:, marker or foreign key.
            if not key.startswith(head):
                continue
            found += 1
            if dry_run:
                continue
            pending.append(key)
            if len(pending) >= batch:
                flush(pending)
                pending = []
        if stopped:
            # The batch in flight has finished; keys not yet sent stay for the next run.
            break
        if pending:
            flush(pending)
    return PurgeResult(
        found=found,
        deleted=deleted,
        failed_batches=failed_batches,
        failed_listings=failed_listings,
        stopped=stopped,
        dry_run=dry_run,
    )


# -- the background worker -----------------------------------------------------------------


class TimerLike(Protocol):
    """What :class:`LegacyPurge` needs from a timer (``threading.Timer`` fits)."""

    daemon: bool

    def start(self) -> None: ...

    def cancel(self) -> None: ...


TimerFactory = Callable[[float, Callable[[], None]], TimerLike]

#: Store objects that already have a worker in this process (by identity: stores
#: need not be hashable).  A claim is dropped when its store is collected, or when
#: its worker is stopped before finishing, so a later plugin on the store can arm.
_claims: dict[int, Callable[[], object | None]] = {}
_claims_lock = threading.Lock()
#: Every worker that may need re-arming in a forked child.
_workers: weakref.WeakSet[LegacyPurge] = weakref.WeakSet()


def _claim(store: Store) -> bool:
    key = id(store)
    with _claims_lock:
        held = _claims.get(key)
        if held is not None and held() is store:
            return False
        try:

            def _drop(ref: object, key: int = key) -> None:
                # No lock: weakref callbacks may run inside a GC triggered while it is held.
                if _claims.get(key) is ref:
                    del _claims[key]

            _claims[key] = weakref.ref(store, _drop)
        except TypeError:
            # Not weak-referenceable: hold it (the plugin holds it anyway).
            _claims[key] = lambda: store
        return True


def _release(store: Store) -> None:
    with _claims_lock:
        held = _claims.get(id(store))
        if held is not None and held() is store:
            del _claims[id(store)]


class LegacyPurge:
    """The background worker the plugin arms (SPEC section 7).

    Nothing happens on the caller's thread: :meth:`start` only schedules the
    first step on a daemon timer (``Timer(0, ...)``).  Each step reads -- or
    writes -- the marker; while the window is open it re-arms a daemon timer for
    the remainder (at most :data:`MAX_WAIT_MS` at a time, re-reading the marker
    on each wake); once it has passed it sweeps once and logs the count.

    Only one worker per store object per process arms; a second one on the
    same store settles in state ``"duplicate"``.  In a forked child, workers
    that were waiting re-arm themselves (the parent's timer thread does not
    exist there).

    :param store: where the marker and legacy keys live.
    :param prefix: the key prefix ``P`` (empty: the worker is disabled).
    :param delay_ms: the window after the marker's ``firstSeenAt``.
    :param clock: epoch milliseconds.
    :param logger: defaults to ``logging.getLogger("remember_sync")``.
    :param timer_factory: ``(seconds, function) -> timer``; tests inject one
        they can fire by hand.
    :param batch: keys per delete call during the sweep.

    States (:attr:`state`): ``"idle"`` (not started), ``"pending"`` (a step is
    due now or running), ``"armed"`` (waiting for the window), ``"swept"``,
    ``"stood-down"``, ``"stopped"``, ``"disabled"``, ``"duplicate"``.
    """

    def __init__(
        self,
        store: Store,
        prefix: str,
        *,
        delay_ms: int = DEFAULT_DELAY_MS,
        clock: Callable[[], int],
        logger: logging.Logger | None = None,
        timer_factory: TimerFactory = threading.Timer,
        batch: int = 500,
    ) -> None:
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
            raise RememberConfigurationError(
                f"legacy_purge_delay_ms must be an int >= 0; got {delay_ms!r}"
            )
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise RememberConfigurationError(f"batch must be a positive int; got {batch!r}")
        self.store = store
        self.prefix = prefix
        self.delay_ms = delay_ms
        self._clock = clock
        self._log = logger or log
        self._timer_factory = timer_factory
        self._batch = batch
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._settled.set()
        self._state = "idle"
        self._stopping = False
        self._running = False
        self._owns_claim = False
        self._timer: TimerLike | None = None
        self._generation = 0
        self.marker: Marker | None = None
        """The marker read by the latest step."""
        self.last_result: PurgeResult | None = None
        """What the sweep did, once it ran."""
        self.next_wake_ms: int | None = None
        """Length of the wait currently armed (ms), ``None`` when none is."""
        self.armed_pid: int | None = None
        """The process that armed the current timer (changes in a forked child)."""

    # -- public ----------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """Where the worker is: see the class docstring."""
        return self._state

    @property
    def due_at_ms(self) -> int | None:
        """Epoch ms when the window passes (``firstSeenAt + delay_ms``), once the marker is read."""
        return None if self.marker is None else self.marker.first_seen_at + self.delay_ms

    def start(self) -> LegacyPurge:
        """Schedule the first step on a daemon timer; never does I/O on this thread."""
        with self._lock:
            if self._state != "idle":
                return self
            if not self.prefix:
                self._state = "disabled"
                self._log.debug("remember: legacy purge disabled for an empty key_prefix")
                return self
            if not _claim(self.store):
                self._state = "duplicate"
                self._log.debug("remember: legacy purge already armed for this store")
                return self
            self._owns_claim = True
            _workers.add(self)
            self._schedule_locked(0)
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        """Cancel the timer; a running sweep finishes its batch and stops.

        Waits up to *timeout* seconds for the worker thread to end (never when
        called from that thread), so a closed plugin leaves no thread behind.
        """
        with self._lock:
            if self._state in ("stopped", "idle", "disabled", "duplicate"):
                if self._state == "idle":
                    self._state = "stopped"
                return
            self._stopping = True
            timer, self._timer = self._timer, None
            finished = self._state in ("swept", "stood-down")
            self._state = "stopped"
            self.next_wake_ms = None
            if timer is not None:
                timer.cancel()
            if not self._running:
                # A cancelled timer never runs its step, so nothing else would settle us.
                self._settled.set()
        if self._owns_claim and not finished:
            # Stopped before its job was done: let a later plugin on this store take over.
            _release(self.store)
            self._owns_claim = False
        thread = timer if isinstance(timer, threading.Thread) else None
        on_worker = thread is threading.current_thread()
        if thread is not None and thread.ident is not None and not on_worker:
            thread.join(timeout)
        if not on_worker:
            self._settled.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no step is due or running; return ``False`` on timeout.

        For tests and operators' tools: after :meth:`start`, ``wait()`` returns
        once the first step has read the marker and either armed a wait, swept,
        or stood down.
        """
        return self._settled.wait(timeout)

    def __repr__(self) -> str:
        return f"LegacyPurge(prefix={self.prefix!r}, state={self._state!r})"

    # -- the worker ------------------------------------------------------------------------

    def _schedule_locked(self, delay_ms: int) -> None:
        """Arm a daemon timer to run a step after *delay_ms* (lock held)."""
        self._generation += 1
        generation = self._generation
        timer = self._timer_factory(delay_ms / 1000.0, lambda: self._step(generation))
        timer.daemon = True
        if isinstance(timer, threading.Thread):
            timer.name = "remember-legacy-purge"
        self._timer = timer
        self.armed_pid = os.getpid()
        # Started before the state is published, so a waiter that sees "armed" sees a live
        # thread; the step itself cannot run before we release the lock.
        timer.start()
        if delay_ms == 0:
            self._state = "pending"
            self.next_wake_ms = None
            self._settled.clear()
        else:
            self._state = "armed"
            self.next_wake_ms = delay_ms
            self._settled.set()

    def _step(self, generation: int) -> None:
        with self._lock:
            if self._stopping or generation != self._generation:
                return  # cancelled, or superseded (a forked child re-armed)
            self._state = "pending"
            self._running = True
            self._settled.clear()
        try:
            self._run()
        except Exception:  # noqa: BLE001 - a background thread must never die silently
            self._log.warning(
                "remember: legacy purge failed unexpectedly and stood down; nothing more will "
                "be deleted by this process",
                exc_info=True,
            )
            self._finish("stood-down")
        finally:
            with self._lock:
                self._running = False
                self._settled.set()

    def _finish(self, state: str) -> None:
        with self._lock:
            if not self._stopping:
                self._state = state
                self._timer = None
                self.next_wake_ms = None

    def _run(self) -> None:
        key = layout_marker_key(self.prefix)
        try:
            marker = ensure_marker(self.store, self.prefix, self._clock())
        except LayoutMarkerError as exc:
            if exc.reason == "vanished":
                text = "remember: layout marker vanished after a lost race, legacy purge stood down"
            else:
                text = "remember: layout marker is unreadable, legacy purge stood down"
            self._log.debug("%s (key=%r)", text, key)
            self._finish("stood-down")
            return
        except RememberError as exc:
            self._log.debug(
                "remember: could not establish the layout marker, legacy purge stood down "
                "(key=%r, error=%s)",
                key,
                exc,
            )
            self._finish("stood-down")
            return
        self.marker = marker
        remaining = marker.first_seen_at + self.delay_ms - self._clock()
        with self._lock:
            if self._stopping:
                return
            if remaining > 0:
                self._schedule_locked(min(remaining, MAX_WAIT_MS))
                self._log.debug(
                    "remember: legacy purge armed, %d ms until the window from firstSeenAt=%d "
                    "has passed",
                    remaining,
                    marker.first_seen_at,
                )
                return
        result = sweep_legacy(
            self.store, self.prefix, batch=self._batch, should_stop=lambda: self._stopping
        )
        self.last_result = result
        if result.deleted > 0:
            self._log.warning(purged_message(result.deleted))
        self._log.debug(
            "remember: legacy purge swept (found=%d, deleted=%d, failed_batches=%d, "
            "failed_listings=%d, stopped=%s)",
            result.found,
            result.deleted,
            result.failed_batches,
            result.failed_listings,
            result.stopped,
        )
        self._finish("swept")

    # -- fork ------------------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        # The parent's lock and event may have been held by a thread that does not exist
        # here; start from fresh ones.
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._settled.set()
        self._running = False
        if self._stopping or self._state not in ("pending", "armed"):
            return
        with self._lock:
            # The old timer object's thread is gone; its generation is retired.
            self._timer = None
            self._schedule_locked(0)


def _after_fork_in_child() -> None:
    global _claims_lock
    _claims_lock = threading.Lock()
    for worker in list(_workers):
        try:
            worker._after_fork_in_child()
        except Exception:  # noqa: BLE001 - never break the child over a background job
            log.debug("remember: legacy purge could not re-arm after fork", exc_info=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
