"""The legacy purge (SPEC section 7): the fleet clock in the store, the sweep, the daemon timer.

Store-level behaviour runs on every kind in ``STORE_KINDS`` through the
``store`` fixture; the fleet tests (several processes, PTTL, UNLINK counts) run
on a real redis-server.  Time is a FakeClock and timers are fired by hand, so
"23 h into the window" needs no sleeping.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis

from remember_sync import RememberPlugin
from remember_sync._clock import FakeClock
from remember_sync._crypto import seal
from remember_sync._keys import glob_escape, layout_marker_key
from remember_sync._purge import (
    MAX_WAIT_MS,
    LayoutMarkerError,
    LegacyPurge,
    Marker,
    ensure_marker,
    purged_message,
    read_marker,
    sweep_legacy,
)
from remember_sync.errors import RememberConfigurationError, RememberStoreError
from remember_sync.identity import identity
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET

P = "remember:"
HOUR = 3_600_000
DAY = 24 * HOUR
LOGGER = "remember_sync"

LEGACY = [
    f"{P}session:s1:theme",
    f"{P}session:stateless-user:bob:k",
    f"{P}tool:search:s1:cache",
    f"{P}user:alice:pref",
    f"{P}user:a:b/c d?:x",
]
SURVIVORS = [
    f"{P}v2:session:s1:theme",
    f"{P}v2:tool:search:s1:cache",
    f"{P}v2:user:alice:pref",
    f"{P}global:session:looks-legacy",
    f"{P}global:flag",
    f"{P}sessionx:not-a-scope",
    "other:session:s1:theme",
    "other:user:alice:pref",
    f"x{P}session:s1:theme",
    "session:s1:theme",
]


# -- helpers ---------------------------------------------------------------------------------


class FakeTimer:
    """A timer that records its interval and runs only when the test fires it."""

    def __init__(self, interval: float, function: Callable[[], None]) -> None:
        self.interval = interval
        self.function = function
        self.daemon = False
        self.started = self.cancelled = self.fired = False

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """A timer factory for LegacyPurge; ``fire()`` runs the latest timer on this thread."""

    def __init__(self) -> None:
        self.made: list[FakeTimer] = []

    def __call__(self, interval: float, function: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(interval, function)
        self.made.append(timer)
        return timer

    @property
    def last(self) -> FakeTimer:
        return self.made[-1]

    def fire(self) -> None:
        timer = self.last
        assert timer.started and timer.daemon and not timer.cancelled and not timer.fired
        timer.fired = True
        timer.function()


class ProxyStore:
    """Wraps a store, records every call with its thread, and can inject faults."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int, tuple[Any, ...], dict[str, Any]]] = []
        self.fail_deletes: set[int] = set()  # 1-based delete call numbers that fail
        self.fail_scan: Callable[[str], bool] = lambda pattern: False
        self.hide_marker = False
        self.hide_marker_once = False
        self.on_get: Callable[[str], None] | None = None
        self.on_scan: Callable[[str], None] | None = None
        self.raise_on_get: BaseException | None = None

    def _record(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, threading.get_ident(), args, kwargs))

    def count(self, name: str, thread: int | None = None) -> int:
        return sum(1 for c in self.calls if c[0] == name and (thread is None or c[1] == thread))

    def get(self, key: str) -> str | None:
        self._record("get", key)
        if self.on_get is not None:
            self.on_get(key)
        if self.raise_on_get is not None:
            raise self.raise_on_get
        if key.endswith("__layout__") and (self.hide_marker or self.hide_marker_once):
            self.hide_marker_once = False
            return None
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        self._record("get_many", *keys)
        return self.inner.get_many(keys)

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        self._record("set", key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)
        return self.inner.set(key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        self._record("compare_and_set", key)
        return self.inner.compare_and_set(key, expected, value, ttl_ms=ttl_ms)

    def delete(self, *keys: str) -> int:
        self._record("delete", *keys)
        if self.count("delete") in self.fail_deletes:
            raise RememberStoreError("injected delete failure")
        return self.inner.delete(*keys)

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        self._record("scan", pattern, count=count)
        if self.on_scan is not None:
            self.on_scan(pattern)
        inner = self.inner.scan(pattern, count=count)
        if not self.fail_scan(pattern):
            return inner

        def failing() -> Iterator[str]:
            yield from list(inner)[:1]
            raise RememberStoreError("injected scan failure")

        return failing()

    def close(self) -> None:
        self._record("close")


#: A legacy entry as the reference wrote it: its envelope, no kid, no aad.
LEGACY_VALUE = seal(b'{"value":"old","createdAt":1,"updatedAt":1}', bytes(32))
#: A legacy entry of a deployment with encryption disabled.
LEGACY_PLAIN = '{"value":{"x":1},"createdAt":1796217901332,"updatedAt":1796217901332}'


def populate(store: Store, keys: Sequence[str], value: str = LEGACY_VALUE) -> None:
    for key in keys:
        store.set(key, value)


def present(store: Store, keys: Sequence[str]) -> list[str]:
    values = store.get_many(list(keys))
    return [k for k, v in zip(keys, values, strict=True) if v is not None]


def make_purge(
    store: Store, clock: FakeClock, timers: FakeTimers, *, prefix: str = P, delay_ms: int = DAY,
    **kwargs: Any,
) -> LegacyPurge:
    return LegacyPurge(
        store, prefix, delay_ms=delay_ms, clock=clock, timer_factory=timers, **kwargs
    ).start()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING
    ]


def debugs_of(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == LOGGER)


@pytest.fixture
def purge_plugin(
    make_plugin: Callable[..., RememberPlugin],
) -> Callable[..., RememberPlugin]:
    """make_plugin with the purge enabled (conftest disables it by default)."""

    def factory(**options: Any) -> RememberPlugin:
        options.setdefault("skip_legacy_purge", False)
        return make_plugin(**options)

    return factory


# -- the marker ------------------------------------------------------------------------------


def test_marker_written_once_without_ttl_and_never_overwritten(
    store: Store, clock: FakeClock
) -> None:
    """The first ensure writes {"version":2,"firstSeenAt":now} (NX, no TTL); later ones adopt it."""
    proxy = ProxyStore(store)
    first = ensure_marker(proxy, P, clock.now)
    assert first == Marker(version=2, first_seen_at=clock.now)
    assert store.get(layout_marker_key(P)) == f'{{"version":2,"firstSeenAt":{clock.now}}}'
    sets = [c for c in proxy.calls if c[0] == "set"]
    assert len(sets) == 1 and sets[0][3] == {"ttl_ms": None, "only_if_absent": True}
    assert ensure_marker(proxy, P, clock.now + DAY) == first
    assert read_marker(store, P) == first
    assert proxy.count("set") == 1


def test_read_marker_absent_is_none(store: Store) -> None:
    """No marker reads as None (absent), distinct from an unreadable one."""
    assert read_marker(store, P) is None


def test_lost_race_adopts_the_winners_marker(store: Store, clock: FakeClock) -> None:
    """A writer whose NX lost the race returns the winner's firstSeenAt, not its own clock."""
    store.set(layout_marker_key(P), '{"version":2,"firstSeenAt":1000}')
    proxy = ProxyStore(store)
    proxy.hide_marker_once = True  # our first read misses; the winner wrote in between
    assert ensure_marker(proxy, P, clock.now) == Marker(version=2, first_seen_at=1000)
    assert store.get(layout_marker_key(P)) == '{"version":2,"firstSeenAt":1000}'


def test_marker_vanished_after_lost_race_raises(store: Store, clock: FakeClock) -> None:
    """NX refused but the marker then reads as absent: a LayoutMarkerError(reason='vanished')."""
    store.set(layout_marker_key(P), '{"version":2,"firstSeenAt":1000}')
    proxy = ProxyStore(store)
    proxy.hide_marker = True
    with pytest.raises(LayoutMarkerError) as info:
        ensure_marker(proxy, P, clock.now)
    assert info.value.reason == "vanished"


UNREADABLE = [
    "not json",
    '{"version":2}',
    '{"version":2,"firstSeenAt":"1700000000000"}',
    '{"version":2,"firstSeenAt":true}',
    '{"version":2,"firstSeenAt":null}',
    '{"version":2,"firstSeenAt":NaN}',
    '{"version":2,"firstSeenAt":Infinity}',
    "[1700000000000]",
    "1700000000000",
]


@pytest.mark.parametrize("raw", UNREADABLE)
def test_unreadable_marker_stands_down_and_deletes_nothing(
    store: Store, clock: FakeClock, raw: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A marker not JSON or without a finite numeric firstSeenAt: stand down, delete nothing."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    store.set(layout_marker_key(P), raw)
    populate(store, LEGACY)
    with pytest.raises(LayoutMarkerError) as info:
        read_marker(store, P)
    assert info.value.reason == "unreadable" and info.value.raw == raw
    timers = FakeTimers()
    purge = make_purge(store, clock, timers, delay_ms=0)
    timers.fire()
    assert purge.state == "stood-down"
    assert len(timers.made) == 1  # not re-armed
    assert present(store, LEGACY) == LEGACY
    assert store.get(layout_marker_key(P)) == raw  # never overwritten
    assert "layout marker is unreadable, legacy purge stood down" in debugs_of(caplog)
    assert warnings_of(caplog) == []


def test_marker_with_float_and_extra_fields_is_read(store: Store) -> None:
    """JS numbers may be floats and the version is not checked (as in the reference)."""
    store.set(layout_marker_key(P), '{"firstSeenAt":1700000000000.7,"version":"x","by":"node"}')
    assert read_marker(store, P) == Marker(version=None, first_seen_at=1700000000000)


# -- the sweep -------------------------------------------------------------------------------


def test_sweep_deletes_only_legacy_keys(store: Store) -> None:
    """session:/tool:/user: keys go; v2:, global:, the marker and other prefixes survive."""
    populate(store, LEGACY + SURVIVORS)
    store.set(layout_marker_key(P), '{"version":2,"firstSeenAt":1}')
    result = sweep_legacy(store, P)
    assert (result.found, result.deleted, result.failed_batches, result.failed_listings) == (
        len(LEGACY), len(LEGACY), 0, 0
    )
    assert result.ok
    assert present(store, LEGACY) == []
    assert present(store, SURVIVORS) == SURVIVORS
    assert store.get(layout_marker_key(P)) == '{"version":2,"firstSeenAt":1}'
    assert sweep_legacy(store, P).found == 0


def test_sweep_escapes_glob_specials_in_the_prefix(store: Store) -> None:
    """A prefix like 'a[1]*:' matches only itself: 'a1x:session:k' is another app's key."""
    prefix = "a[1]*:"
    mine = [f"{prefix}session:s:k", f"{prefix}tool:t:s:k", f"{prefix}user:u:k"]
    theirs = ["a1x:session:s:k", "a1:user:u:k", "a[1]zz:session:s:k", "a\\[1]*:session:s:k"]
    populate(store, mine + theirs)
    assert sweep_legacy(store, prefix).deleted == 3
    assert present(store, mine) == []
    assert present(store, theirs) == theirs


def test_sweep_dry_run_counts_without_deleting(store: Store) -> None:
    """dry_run lists what would go and deletes nothing."""
    populate(store, LEGACY)
    proxy = ProxyStore(store)
    result = sweep_legacy(proxy, P, dry_run=True)
    assert (result.found, result.deleted, result.dry_run) == (len(LEGACY), 0, True)
    assert proxy.count("delete") == 0
    assert present(store, LEGACY) == LEGACY


def test_sweep_deletes_in_batches_and_survives_a_failed_batch(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Keys go batch keys per delete call; a refused batch is logged, counted, and skipped."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    keys = [f"{P}session:s{i}:k" for i in range(7)]
    populate(store, keys)
    proxy = ProxyStore(store)
    proxy.fail_deletes = {2}
    result = sweep_legacy(proxy, P, batch=3)
    deletes = [c[2] for c in proxy.calls if c[0] == "delete"]
    assert [len(d) for d in deletes] == [3, 3, 1]
    assert (result.found, result.deleted, result.failed_batches) == (7, 4, 1)
    assert not result.ok
    assert sorted(present(store, keys)) == sorted(deletes[1])
    assert "could not delete a batch of 3 keys" in debugs_of(caplog)


def test_sweep_listing_failure_moves_on_to_the_next_pattern(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A SCAN failing for session:* is logged and counted; tool:* and user:* are still swept."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    populate(store, LEGACY)
    proxy = ProxyStore(store)
    proxy.fail_scan = lambda pattern: pattern.endswith("session:*")
    result = sweep_legacy(proxy, P)
    assert result.failed_listings == 1
    assert present(store, [k for k in LEGACY if ":tool:" in k or ":user:" in k]) == []
    assert len(present(store, [k for k in LEGACY if ":session:" in k])) == 1
    assert "legacy purge skipped, store could not list keys" in debugs_of(caplog)


def test_sweep_stops_after_the_batch_in_flight(store: Store) -> None:
    """should_stop turning true mid-sweep: the current batch completes, nothing more is deleted."""
    keys = [f"{P}user:u{i}:k" for i in range(6)]
    populate(store, keys)
    proxy = ProxyStore(store)
    result = sweep_legacy(proxy, P, batch=2, should_stop=lambda: proxy.count("delete") >= 1)
    assert result.stopped and result.deleted == 2
    assert len(present(store, keys)) == 4


def test_sweep_refuses_an_empty_prefix(store: Store) -> None:
    """An empty prefix would match foreign 'session:*' keys: a configuration error, no I/O."""
    populate(store, ["session:s:k"])
    with pytest.raises(RememberConfigurationError):
        sweep_legacy(store, "")
    assert present(store, ["session:s:k"]) == ["session:s:k"]


# -- the worker and its clock ----------------------------------------------------------------


def test_first_step_runs_on_a_daemon_timer_not_the_caller(store: Store, clock: FakeClock) -> None:
    """start() does no store I/O: it schedules Timer(0) as a daemon; the step does the work."""
    proxy = ProxyStore(store)
    timers = FakeTimers()
    purge = make_purge(proxy, clock, timers)
    assert proxy.calls == []
    assert timers.last.interval == 0 and timers.last.daemon
    assert purge.state == "pending" and not purge.wait(0)
    timers.fire()
    assert purge.wait(0) and purge.state == "armed"
    assert purge.marker == Marker(2, clock.now)


def test_window_runs_from_the_markers_first_seen_at_not_process_start(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker started 23 h into the window waits ~1 h, then sweeps; survivors stay."""
    populate(store, LEGACY + SURVIVORS)
    marker = {"version": 2, "firstSeenAt": clock.now - 23 * HOUR}
    store.set(layout_marker_key(P), json.dumps(marker))
    timers = FakeTimers()
    purge = make_purge(store, clock, timers)
    timers.fire()
    assert purge.state == "armed"
    assert timers.last.interval * 1000 == pytest.approx(HOUR)
    assert purge.next_wake_ms == HOUR
    assert present(store, LEGACY) == LEGACY
    clock.advance(ms=HOUR - 1)
    timers.fire()  # woke a millisecond early (timers are not exact): re-arms for the rest
    assert purge.state == "armed" and timers.last.interval * 1000 == pytest.approx(1)
    assert present(store, LEGACY) == LEGACY
    clock.advance(ms=1)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        timers.fire()
    assert purge.state == "swept"
    assert purge.last_result is not None and purge.last_result.deleted == len(LEGACY)
    assert present(store, LEGACY) == []
    assert present(store, SURVIVORS) == SURVIVORS
    assert store.get(layout_marker_key(P)) is not None
    assert warnings_of(caplog) == [purged_message(len(LEGACY))]


def test_restart_and_second_instance_do_not_reset_the_clock(
    store: Store, clock: FakeClock
) -> None:
    """Later or restarted instances adopt the stored firstSeenAt and wait only the rest."""
    t0 = clock.now
    first_timers = FakeTimers()
    first = make_purge(ProxyStore(store), clock, first_timers)
    first_timers.fire()
    assert first.marker == Marker(2, t0) and first.next_wake_ms == MAX_WAIT_MS
    assert first.due_at_ms == t0 + DAY
    first.stop()  # the process "crashes"
    clock.advance(ms=19 * HOUR)
    for remaining in (5 * HOUR, 4 * HOUR):  # a restart, then another instance of the fleet
        timers = FakeTimers()
        later = make_purge(ProxyStore(store), clock, timers)
        timers.fire()
        assert later.marker == Marker(2, t0) and later.due_at_ms == t0 + DAY
        assert later.next_wake_ms == remaining
        later.stop()
        clock.advance(ms=HOUR)
    assert read_marker(store, P) == Marker(2, t0)


def test_long_windows_rearm_in_capped_steps_rereading_the_marker(
    store: Store, clock: FakeClock
) -> None:
    """A 30-day window waits at most MAX_WAIT_MS at a time and re-reads the marker on each wake."""
    populate(store, LEGACY)
    proxy = ProxyStore(store)
    timers = FakeTimers()
    purge = make_purge(proxy, clock, timers, delay_ms=30 * DAY)
    timers.fire()
    waits = 0
    while purge.state == "armed":
        assert timers.last.interval * 1000 <= MAX_WAIT_MS
        clock.advance(ms=round(timers.last.interval * 1000))
        timers.fire()
        waits += 1
    assert purge.state == "swept" and waits == 30 * DAY // MAX_WAIT_MS
    assert proxy.count("get") == waits + 1  # one marker read per wake
    assert proxy.count("set") == 1
    assert present(store, LEGACY) == []


def test_window_of_zero_sweeps_on_the_first_step(store: Store, clock: FakeClock) -> None:
    """legacy_purge_delay_ms=0: the first step writes the marker and sweeps at once."""
    populate(store, LEGACY)
    timers = FakeTimers()
    purge = make_purge(store, clock, timers, delay_ms=0)
    timers.fire()
    assert purge.state == "swept" and len(timers.made) == 1
    assert present(store, LEGACY) == []


def test_store_error_stands_down_with_a_debug_log(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A store failure while establishing the marker: stand down, delete nothing, debug only."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    populate(store, LEGACY)
    proxy = ProxyStore(store)
    proxy.raise_on_get = RememberStoreError("store down")
    timers = FakeTimers()
    purge = make_purge(proxy, clock, timers, delay_ms=0)
    timers.fire()
    assert purge.state == "stood-down" and len(timers.made) == 1
    assert proxy.count("scan") == proxy.count("delete") == 0
    assert "could not establish the layout marker, legacy purge stood down" in debugs_of(caplog)
    assert warnings_of(caplog) == []
    assert present(store, LEGACY) == LEGACY


def test_vanished_marker_stands_down(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker stands down (debug log) when the marker vanished after a lost race."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    store.set(layout_marker_key(P), '{"version":2,"firstSeenAt":1}')
    populate(store, LEGACY)
    proxy = ProxyStore(store)
    proxy.hide_marker = True
    timers = FakeTimers()
    purge = make_purge(proxy, clock, timers, delay_ms=0)
    timers.fire()
    assert purge.state == "stood-down"
    assert "layout marker vanished after a lost race" in debugs_of(caplog)
    assert present(store, LEGACY) == LEGACY


def test_unexpected_error_is_logged_loudly_not_swallowed(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug or foreign exception in the worker is a warning with a traceback, then stand down."""
    proxy = ProxyStore(store)
    proxy.raise_on_get = RuntimeError("boom")
    timers = FakeTimers()
    purge = make_purge(proxy, clock, timers)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        timers.fire()
    assert purge.state == "stood-down"
    records = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(records) == 1 and records[0].exc_info is not None
    assert "legacy purge failed unexpectedly" in records[0].getMessage()


def test_stop_cancels_the_armed_timer(store: Store, clock: FakeClock) -> None:
    """stop() cancels the pending timer; firing it afterwards does nothing."""
    proxy = ProxyStore(store)
    timers = FakeTimers()
    purge = make_purge(proxy, clock, timers)
    timers.fire()
    purge.stop()
    assert purge.state == "stopped" and timers.last.cancelled
    calls = len(proxy.calls)
    timers.last.function()
    assert len(proxy.calls) == calls and purge.state == "stopped"


def test_empty_prefix_disables_the_worker(store: Store, clock: FakeClock) -> None:
    """prefix '' never arms a timer nor touches the store."""
    proxy = ProxyStore(store)
    timers = FakeTimers()
    purge = make_purge(proxy, clock, timers, prefix="")
    assert purge.state == "disabled" and timers.made == [] and proxy.calls == []


# -- the plugin ------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 3])
def test_warning_text_for_purged_entries(
    store: Store,
    purge_plugin: Callable[..., RememberPlugin],
    caplog: pytest.LogCaptureFixture,
    count: int,
) -> None:
    """One warning in SPEC section 7's exact words ('entry' for 1, 'entries' else); none for 0."""
    populate(store, LEGACY[:count] + SURVIVORS)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plugin = purge_plugin(legacy_purge_delay_ms=0)
        assert plugin.legacy_purge.wait(10)
    assert plugin.legacy_purge.state == "swept"
    noun = "entry" if count == 1 else "entries"
    expected = (
        f"remember: purged {count} {noun} left unreadable by the session/tool key-derivation "
        "change and the namespace encoding. This is a one-time upgrade step; set "
        "skip_legacy_purge to handle the migration yourself."
    )
    assert warnings_of(caplog) == ([expected] if count else [])
    assert present(store, SURVIVORS) == SURVIVORS


def test_plugin_construction_never_blocks_on_store_io(
    store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """init() returns while the store is stuck; the marker read happens on a daemon thread."""
    proxy = ProxyStore(store)
    release = threading.Event()
    readers: list[threading.Thread] = []

    def stuck(key: str) -> None:
        if key.endswith("__layout__"):
            readers.append(threading.current_thread())
            release.wait(10)

    proxy.on_get = stuck
    started = time.monotonic()
    plugin = purge_plugin(store=proxy)
    assert time.monotonic() - started < 1.0
    deadline = time.monotonic() + 5
    while not readers and time.monotonic() < deadline:
        time.sleep(0.005)
    assert readers and readers[0] is not threading.current_thread() and readers[0].daemon
    assert proxy.count("get", threading.get_ident()) == 0
    release.set()
    assert plugin.legacy_purge.wait(10) and plugin.legacy_purge.state == "armed"


def test_get_and_set_never_wait_for_or_trigger_a_scan(
    store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """With the sweep stuck inside SCAN, get/set still complete and never call scan themselves."""
    proxy = ProxyStore(store)
    populate(store, LEGACY)
    in_scan, release = threading.Event(), threading.Event()

    def stuck(pattern: str) -> None:
        in_scan.set()
        release.wait(10)

    proxy.on_scan = stuck
    plugin = purge_plugin(store=proxy, legacy_purge_delay_ms=0)
    assert in_scan.wait(5)
    me = threading.get_ident()
    started = time.monotonic()
    with identity(session_id="s-1", user_id="alice"):
        for i in range(20):
            plugin.remember.set(f"k{i}", i, scope="session")
            plugin.remember.set(f"k{i}", i, scope="user")
            assert plugin.remember.get(f"k{i}", scope="session") == i
            assert plugin.remember.get(f"k{i}", scope="user") == i
    assert time.monotonic() - started < 5
    assert proxy.count("scan", me) == 0
    # Only background scans, still stuck: the purge's (and the doubled-prefix check's).
    assert proxy.count("scan") >= 1
    release.set()
    assert plugin.legacy_purge.wait(10) and plugin.legacy_purge.state == "swept"
    with identity(session_id="s-1", user_id="alice"):
        assert plugin.remember.get("k3", scope="user") == 3  # v2 data untouched
    assert proxy.count("scan", me) == 0


def test_once_per_store_object_per_process(
    store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """A second plugin on one store arms no second worker; after an early close a new one can."""
    proxy = ProxyStore(store)
    first = purge_plugin(store=proxy)
    second = purge_plugin(store=proxy)
    assert first.legacy_purge.wait(10) and first.legacy_purge.state == "armed"
    assert second.legacy_purge.state == "duplicate"
    marker_sets = [c for c in proxy.calls if c[0] == "set" and c[2][0].endswith("__layout__")]
    assert len(marker_sets) == 1
    first.close()  # closed before its window passed: releases the store
    third = purge_plugin(store=proxy)
    assert third.legacy_purge.wait(10) and third.legacy_purge.state == "armed"
    other = purge_plugin(store=ProxyStore(store))  # another store object arms its own
    assert other.legacy_purge.wait(10) and other.legacy_purge.state == "armed"


def test_skip_legacy_purge_and_empty_prefix_arm_nothing(
    store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """skip_legacy_purge=True or key_prefix='' build no worker and write nothing.

    (skip_legacy_purge still reads the key id record once, and counts 1.8.0's
    doubled-prefix keys once, read-only.)
    """
    proxy = ProxyStore(store)
    populate(store, ["session:s:k", *LEGACY])
    skipped = purge_plugin(store=proxy, skip_legacy_purge=True, legacy_purge_delay_ms=0)
    assert skipped.legacy_purge is None
    assert purge_plugin(store=proxy, key_prefix="", legacy_purge_delay_ms=0).legacy_purge is None
    assert skipped.key_id_check is not None and skipped.key_id_check.wait(10)
    assert skipped._doubled_check is not None and skipped._doubled_check.wait(10)
    assert sorted((c[0], c[2]) for c in proxy.calls) == [
        ("get", (f"{P}__keyid__",)),
        ("scan", (glob_escape(P + P) + "*",)),
    ]
    assert present(store, ["session:s:k", *LEGACY]) == ["session:s:k", *LEGACY]


def test_marker_has_no_ttl_with_default_ttl(
    store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """default_ttl=60 applies to entries, never to the marker (written without ttl_ms)."""
    proxy = ProxyStore(store)
    plugin = purge_plugin(store=proxy, default_ttl=60)
    assert plugin.legacy_purge.wait(10)
    marker_sets = [c for c in proxy.calls if c[0] == "set" and c[2][0] == layout_marker_key(P)]
    assert len(marker_sets) == 1 and marker_sets[0][3]["ttl_ms"] is None


def purge_threads() -> set[threading.Thread]:
    """The live legacy-purge timer threads of this process (the worker names its timers)."""
    return {t for t in threading.enumerate() if t.name == "remember-legacy-purge" and t.is_alive()}


def marker_reads(proxy: ProxyStore, since: int) -> list[int]:
    """The threads that read the layout marker through *proxy* after call number *since*."""
    return [c[1] for c in proxy.calls[since:] if c[0] == "get" and c[2][0].endswith("__layout__")]


def test_close_stops_the_timer_thread(
    store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """plugin.close() cancels the armed daemon timer: no purge thread is left alive."""
    before = purge_threads()  # another test's unclosed plugin may still wait: not ours
    plugin = purge_plugin()
    purge = plugin.legacy_purge
    assert purge.wait(10) and purge.state == "armed"
    ours = purge_threads() - before
    assert len(ours) == 1 and all(timer.daemon for timer in ours)
    plugin.close()
    assert purge.state == "stopped"
    assert not any(timer.is_alive() for timer in ours)
    assert purge_threads() - before == set()


def test_close_during_a_sweep_stops_after_the_batch(store: Store, clock: FakeClock) -> None:
    """stop() while a sweep runs: the batch in flight finishes, no further batch is sent."""
    keys = [f"{P}tool:t{i}:s:k" for i in range(10)]
    populate(store, keys)
    proxy = ProxyStore(store)
    in_delete, release = threading.Event(), threading.Event()
    inner_delete = proxy.delete

    def slow_delete(*batch: str) -> int:
        in_delete.set()
        release.wait(10)
        return inner_delete(*batch)

    proxy.delete = slow_delete  # type: ignore[method-assign]
    purge = LegacyPurge(proxy, P, delay_ms=0, clock=clock, batch=3).start()
    assert in_delete.wait(5)
    stopper = threading.Thread(target=purge.stop)
    stopper.start()
    deadline = time.monotonic() + 5
    while purge.state != "stopped" and time.monotonic() < deadline:
        time.sleep(0.005)
    release.set()
    stopper.join(10)
    assert purge.state == "stopped"
    assert len(present(store, keys)) == 7
    assert purge.last_result is not None and purge.last_result.stopped


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running
def test_forked_child_rearms_its_own_timer(
    memory_store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """A child process re-arms the waiting worker on a timer thread of its own."""
    proxy = ProxyStore(memory_store)
    before = purge_threads()
    plugin = purge_plugin(store=proxy)
    purge = plugin.legacy_purge
    assert purge.wait(10) and purge.state == "armed"
    parent_timers, calls = purge_threads() - before, len(proxy.calls)
    assert len(parent_timers) == 1
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            # The child's threads are the forking one and those started since the fork.
            ok = purge.wait(10) and purge.state == "armed"
            readers = marker_reads(proxy, calls)
            ok = ok and len(readers) == 1 and readers[0] != threading.get_ident()
            ok = ok and any(t.daemon for t in purge_threads())
            code = 0 if ok else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert purge_threads() - before == parent_timers and len(proxy.calls) == calls


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forked_child_does_not_rearm_a_finished_or_stopped_worker(
    memory_store: Store, purge_plugin: Callable[..., RememberPlugin]
) -> None:
    """A worker that already swept (or was closed) stays idle in a child."""
    proxy = ProxyStore(memory_store)
    swept = purge_plugin(store=proxy, legacy_purge_delay_ms=0)
    assert swept.legacy_purge.wait(10) and swept.legacy_purge.state == "swept"
    calls = len(proxy.calls)
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        code = 1
        try:
            # A re-armed step would be due at once: wait() would return after its marker read.
            ok = swept.legacy_purge.wait(10) and swept.legacy_purge.state == "swept"
            code = 0 if ok and marker_reads(proxy, calls) == [] else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# -- real Redis: the fleet -------------------------------------------------------------------

_FLEET_SCRIPT = """
import json, sys
from remember_sync import RememberPlugin
url, now = sys.argv[1], int(sys.argv[2])
plugin = RememberPlugin.init(
    type="redis", config={"url": url}, clock=lambda: now, default_ttl=60,
    legacy_purge_delay_ms=86_400_000, encryption={"secrets": [sys.argv[3]]},
)
purge = plugin.legacy_purge
assert purge.wait(10), "worker did not settle"
print(json.dumps({"state": purge.state, "first": purge.marker.first_seen_at,
                  "wake": purge.next_wake_ms}))
plugin.close()
"""


def _instance(redis_url: str, now: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        os.environ.get("PYTHONPATH"),
    ])))
    return subprocess.Popen(
        [sys.executable, "-c", _FLEET_SCRIPT, redis_url, str(now), TEST_SECRET],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def _report(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_fleet_processes_agree_on_one_first_seen_at(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """Processes started at different times (some racing) share one firstSeenAt; restarts too."""
    t0 = 1_800_000_000_000
    racing = [_instance(redis_url, t0 + i * 1000) for i in range(3)]
    reports = [_report(p) for p in racing]
    winner = reports[0]["first"]
    assert winner in {t0, t0 + 1000, t0 + 2000}
    assert all(r["first"] == winner and r["state"] == "armed" for r in reports)
    later = _report(_instance(redis_url, winner + 10 * HOUR))  # a restart, 10 h on
    assert later["first"] == winner
    assert later["wake"] == min(14 * HOUR, MAX_WAIT_MS)
    raw = redis_client.get(layout_marker_key(P))
    assert raw == f'{{"version":2,"firstSeenAt":{winner}}}'.encode()
    assert redis_client.pttl(layout_marker_key(P)) == -1  # default_ttl=60 did not touch it


def test_real_redis_marker_has_no_ttl_and_sweep_uses_batched_unlink(
    redis_client: redis.Redis, redis_url: str, clock: FakeClock
) -> None:
    """On Redis: PTTL(marker) == -1 with default_ttl=60; the sweep is batched UNLINK, no DEL."""
    pipe = redis_client.pipeline(transaction=False)
    legacy = [f"{P}session:s{i}:k" for i in range(1200)]
    for key in legacy + SURVIVORS:
        pipe.set(key, LEGACY_VALUE)
    pipe.execute()
    redis_client.config_resetstat()
    plugin = RememberPlugin.init(
        type="redis", config={"url": redis_url}, clock=clock, default_ttl=60,
        legacy_purge_delay_ms=0, encryption={"secrets": [TEST_SECRET]},
    )
    try:
        assert plugin.legacy_purge.wait(30) and plugin.legacy_purge.state == "swept"
        assert plugin.index_backfill.wait(30)
        # The one-time background reindex releases its lease with one UNLINK.
        lease = 1 if plugin.index_backfill.result is not None else 0
    finally:
        plugin.close()
    assert redis_client.pttl(layout_marker_key(P)) == -1
    stats = redis_client.info("commandstats")
    assert stats["cmdstat_unlink"]["calls"] == 3 + lease  # 1200 keys, 500 per batch
    assert "cmdstat_del" not in stats
    assert redis_client.exists(*legacy) == 0
    assert redis_client.exists(*SURVIVORS) == len(SURVIVORS)


def test_real_redis_non_json_marker_stands_down(
    redis_client: redis.Redis, redis_url: str, clock: FakeClock
) -> None:
    """A marker another tool left as non-JSON on Redis: nothing is deleted, the marker is kept."""
    redis_client.set(layout_marker_key(P), "2024-01-01")
    redis_client.set(f"{P}user:alice:k", "x")
    plugin = RememberPlugin.init(
        type="redis", config={"url": redis_url}, clock=clock, legacy_purge_delay_ms=0,
        encryption={"secrets": [TEST_SECRET]},
    )
    try:
        assert plugin.legacy_purge.wait(10) and plugin.legacy_purge.state == "stood-down"
    finally:
        plugin.close()
    assert redis_client.get(layout_marker_key(P)) == b"2024-01-01"
    assert redis_client.exists(f"{P}user:alice:k") == 1


def test_benchmark_runs_at_a_tiny_size(redis_server: object) -> None:
    """benchmarks/purge.py's run() purges correctly with both methods and reports a ratio."""
    from benchmarks import purge as module
    rows = module.run(30, batch=7)
    assert [r["deleted"] for r in rows] == [30, 30]
    assert rows[0]["commands"] >= 30 and rows[1]["commands"] < rows[0]["commands"]
    assert rows[1]["ratio"] > 0 and "sweep_legacy" in module.render(rows)
