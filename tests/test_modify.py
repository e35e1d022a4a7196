"""``modify`` and ``increment``: exact read-modify-write on every store.

Semantics run on every store of the matrix (``store`` / ``make_plugin``);
exactness under contention runs with real concurrent writers: 8 threads on
the memory store, and two separate **processes**, each building its own plugin
on the same Redis, Redis Cluster or Vercel KV (emulator) with the same secret.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin
from remember_sync._core import _CAS_EAGER, _CAS_PAUSE_MAX, CAS_ATTEMPTS
from remember_sync.accessor import RememberAccessor
from remember_sync.errors import (
    RememberConflictError,
    RememberDecryptionError,
    RememberInputError,
    RememberInputTypeError,
    RememberStoreError,
)
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from tests.conftest import TEST_SECRET, FakeClock, run_threads, stored_key
from tests.fixtures_kv import KV_TEST_TOKEN

WHO = Identity(session_id="s-rmw", user_id="u-rmw")
OTHER_SECRET = "another-secret-0123456789abcdef0123456789"


def _mem(plugin: RememberPlugin) -> RememberAccessor:
    return plugin.accessor(WHO)


def _snapshot(store: Store) -> list[tuple[str, str | None]]:
    """Every key of *store* with its raw value: what 'nothing was written' compares."""
    # Bookkeeping keys (the fleet's reindex record, markers) are not entries; the listing
    # indexes (sorted sets) read as None through get_many, as any non-string does.
    keys = [k for k in store.scan("*") if k != "remember:__indexed__"]
    return sorted(zip(keys, store.get_many(keys), strict=True))


@pytest.fixture
def two(make_plugin: Callable[..., RememberPlugin]) -> tuple[RememberAccessor, RememberAccessor]:
    """Two plugins on the same store and secret: two independent writers."""
    return _mem(make_plugin()), _mem(make_plugin())


# -- modify: what an entry keeps ----------------------------------------------------------


def test_modify_keeps_created_at_brand_metadata_and_deadline(
    make_plugin: Callable[..., RememberPlugin], clock: FakeClock
) -> None:
    """modify changes the value and updated_at only: created_at, brand, metadata, deadline kept."""
    mem = _mem(make_plugin())
    mem.set("todo", ["a"], scope="user", ttl=100, brand="state", metadata={"src": "api"})
    before = mem.get_entry("todo", scope="user")
    assert before is not None
    clock.advance(s=5)
    assert mem.modify("todo", lambda xs: [*xs, "b"], scope="user") == ["a", "b"]
    after = mem.get_entry("todo", scope="user")
    assert after is not None
    assert after.value == ["a", "b"]
    assert (after.created_at, after.brand, after.metadata, after.expires_at) == (
        before.created_at,
        "state",
        {"src": "api"},
        before.expires_at,
    )
    assert after.updated_at == clock.now


def test_modify_with_ttl_sets_a_new_deadline(
    make_plugin: Callable[..., RememberPlugin], clock: FakeClock
) -> None:
    """ttl= replaces the deadline with now + ttl; without a deadline default_ttl applies."""
    mem = _mem(make_plugin(default_ttl=60))
    mem.set("n", 1, ttl=100)
    clock.advance(s=5)
    mem.modify("n", lambda v: v + 1, ttl=30)
    entry = mem.get_entry("n")
    assert entry is not None and entry.expires_at == clock.now + 30_000
    # An entry without a deadline (written by a plugin without default_ttl) gets
    # default_ttl from now, as update does.
    _mem(make_plugin()).set("forever", 1)
    mem.increment("forever")
    entry = mem.get_entry("forever")
    assert entry is not None and entry.expires_at == clock.now + 60_000


def test_modify_of_a_missing_key_applies_fn_to_default(
    make_plugin: Callable[..., RememberPlugin], clock: FakeClock
) -> None:
    """A missing key: fn(default) is stored as a plain new entry with ttl or default_ttl."""
    mem = _mem(make_plugin(default_ttl=60))
    assert mem.modify("log", lambda xs: [*xs, "x"], default=[]) == ["x"]
    entry = mem.get_entry("log")
    assert entry is not None
    assert (entry.value, entry.brand, entry.metadata) == (["x"], None, None)
    assert entry.created_at == entry.updated_at == clock.now
    assert entry.expires_at == clock.now + 60_000
    mem.modify("short", lambda v: v, default={"k": 1}, ttl=5)
    short = mem.get_entry("short")
    assert short is not None and short.value == {"k": 1}
    assert short.expires_at == clock.now + 5_000
    assert mem.modify("none", lambda v: v) is None  # default=None, stored as null
    assert mem.knows("none") and mem.get("none", default="absent") is None


def test_modify_treats_an_expired_entry_as_missing(
    make_plugin: Callable[..., RememberPlugin], clock: FakeClock
) -> None:
    """Past its deadline (injected clock; the store still holds it) the entry counts as missing."""
    mem = _mem(make_plugin())
    mem.set("n", 41, ttl=10, brand="state", metadata={"old": True})
    clock.advance(s=11)
    assert mem.increment("n") == 1
    entry = mem.get_entry("n")
    assert entry is not None
    assert (entry.value, entry.brand, entry.metadata) == (1, None, None)
    assert entry.created_at == clock.now and entry.expires_at is None


def test_default_is_copied_for_each_call_of_fn(
    two: tuple[RememberAccessor, RememberAccessor],
) -> None:
    """fn may mutate its argument: a retried call gets a fresh copy of default."""
    a, b = two
    calls = 0

    def append(xs: list[str]) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            b.set("log", ["other"])  # another writer: this attempt must be retried
        xs.append("mine")
        return xs

    default: list[str] = []
    assert a.modify("log", append, default=default) == ["other", "mine"]
    assert default == []  # each call got a copy
    assert a.get("log") == ["other", "mine"] and calls == 2


# -- modify: nothing written on any error ---------------------------------------------------


def test_an_exception_from_fn_propagates_and_nothing_is_written(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """fn raising: the same exception reaches the caller; the store is unchanged."""
    mem = _mem(make_plugin())
    mem.set("n", 1)
    before = _snapshot(store)

    def boom(value: Any) -> Any:
        raise KeyError("from fn")

    with pytest.raises(KeyError, match="from fn"):
        mem.modify("n", boom)
    with pytest.raises(KeyError, match="from fn"):
        mem.modify("missing", boom)
    assert _snapshot(store) == before


def test_an_invalid_result_of_fn_is_refused_and_nothing_is_written(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """fn returning what JSON cannot hold -> TypeError; too large -> ValueError; nothing written."""
    mem = _mem(make_plugin(max_value_bytes=1_000))
    mem.set("n", 1)
    before = _snapshot(store)
    for bad in (object(), float("nan"), {1: "int key"}, {"s": {1, 2}}):
        with pytest.raises(TypeError):
            mem.modify("n", lambda v, bad=bad: bad)
        with pytest.raises(TypeError):
            mem.modify("missing", lambda v, bad=bad: bad)
    with pytest.raises(ValueError, match="max_value_bytes"):
        mem.modify("n", lambda v: "x" * 2_000)
    with pytest.raises(ValueError, match="max_value_bytes"):
        mem.modify("missing", lambda v: "x" * 2_000)
    assert _snapshot(store) == before
    assert mem.get("n") == 1 and not mem.knows("missing")


def test_bad_arguments_are_refused_before_any_io(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """A non-callable fn, bad delta, ttl, key or scope: a clear error, fn never called."""
    mem = _mem(make_plugin())
    called: list[object] = []

    def fn(v: Any) -> Any:
        called.append(v)
        return v

    with pytest.raises(RememberInputTypeError, match="fn must be callable"):
        mem.modify("n", 5)  # type: ignore[arg-type]
    for delta in (True, "1", None, [1]):
        with pytest.raises(RememberInputTypeError, match="delta"):
            mem.increment("n", delta)  # type: ignore[arg-type]
    for delta in (float("nan"), float("inf")):
        with pytest.raises(RememberInputError, match="finite"):
            mem.increment("n", delta)
    for ttl in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="ttl"):
            mem.modify("n", fn, ttl=ttl)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="ttl"):
            mem.increment("n", ttl=ttl)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        mem.modify("", fn)
    with pytest.raises(ValueError):
        mem.increment("n", scope="planet")  # type: ignore[arg-type]
    assert called == [] and _snapshot(store) == []


def test_an_unreadable_entry_is_never_overwritten(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """Another secret's entry: modify/increment raise RememberDecryptionError, leave it intact."""
    owner = _mem(make_plugin())
    owner.set("n", 5, brand="state")
    before = _snapshot(store)
    for options in ({}, {"on_decrypt_error": "raise"}):
        stranger = _mem(make_plugin(encryption={"secrets": [OTHER_SECRET]}, **options))
        called: list[object] = []
        with pytest.raises(RememberDecryptionError, match="cannot be read") as info:
            stranger.modify("n", lambda v: called.append(v) or 0)
        assert "'n'" in str(info.value) and called == []
        with pytest.raises(RememberDecryptionError):
            stranger.increment("n")
        # update keeps its documented behaviour: unreadable = missing, nothing written.
        if not options:
            assert stranger.update("n", 0) is False
    assert _snapshot(store) == before
    assert owner.get("n") == 5


# -- increment --------------------------------------------------------------------------------


def test_increment_counts_from_zero_and_returns_the_new_number(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """missing = 0; int deltas stay exact ints (also past 2**53); floats and negatives add."""
    mem = _mem(make_plugin())
    assert mem.increment("n") == 1
    assert mem.increment("n", 41) == 42
    assert mem.increment("n", -50) == -8
    assert type(mem.get("n")) is int
    mem.set("big", 2**70)
    assert mem.increment("big") == 2**70 + 1 and mem.get("big") == 2**70 + 1
    assert mem.increment("f", 0.25) == 0.25
    assert mem.increment("f", 2) == 2.25
    assert mem.increment("n", 0.5, scope="global") == 0.5


def test_increment_of_a_stored_non_number_is_refused(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """A stored str, bool, null, list or object: RememberInputTypeError, nothing written."""
    mem = _mem(make_plugin())
    for i, value in enumerate(("7", True, None, [1], {"n": 1})):
        mem.set(f"k{i}", value)
    before = _snapshot(store)
    for i, value in enumerate(("7", True, None, [1], {"n": 1})):
        with pytest.raises(RememberInputTypeError, match="not a number") as info:
            mem.increment(f"k{i}")
        assert isinstance(info.value, TypeError)
        assert mem.get(f"k{i}", default="gone") == value
    assert _snapshot(store) == before


def test_modify_moves_a_doubled_prefix_entry_under_its_real_key(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """read_doubled_prefix: a 1.8.0 entry is moved once, then modified; created_at is kept."""
    plain = make_plugin(encryption={"enabled": False})
    _mem(plain).set("n", 0)  # to learn its storage key; the doubled-prefix copy replaces it
    skey = stored_key(plain, "n")
    assert store.delete(skey) == 1
    store.set("remember:" + skey, '{"value":2,"createdAt":1000,"updatedAt":1000}')
    compat = make_plugin(encryption={"enabled": False}, read_doubled_prefix=True)
    assert _mem(compat).increment("n") == 3
    assert store.get("remember:" + skey) is None
    entry = _mem(plain).get_entry("n")
    assert entry is not None and (entry.value, entry.created_at) == (3, 1000)


# -- the race get + update loses, and modify does not ------------------------------------------


def test_get_then_update_loses_a_concurrent_increment(
    two: tuple[RememberAccessor, RememberAccessor],
) -> None:
    """The issue's lost update, made deterministic: both writers see True, one change is gone."""
    a, b = two
    a.set("n", 0)
    seen = a.get("n")
    assert b.update("n", b.get("n") + 1) is True
    assert a.update("n", seen + 1) is True
    assert a.get("n") == 1  # two successful increments, one lost


def test_modify_retries_when_another_writer_changed_the_entry(
    two: tuple[RememberAccessor, RememberAccessor],
) -> None:
    """The same interleaving through modify: the write is refused, fn re-runs on the new value."""
    a, b = two
    a.set("n", 0)
    for key in ("n", "fresh"):  # "fresh" is missing: the other writer creates it first
        seen: list[int] = []

        def add_one(value: int, key: str = key, seen: list[int] = seen) -> int:
            seen.append(value)
            if len(seen) == 1:
                b.increment(key)  # lands between this read and this write
            return value + 1

        assert a.modify(key, add_one, default=0) == 2
        assert seen == [0, 1] and a.get(key) == 2


# -- conflicts ------------------------------------------------------------------------------------


class _AlwaysLosingStore(MemoryStore):
    """A memory store where every conditional write loses its race."""

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        return False

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        if only_if_absent:
            return False
        return super().set(key, value, ttl_ms=ttl_ms)


@pytest.fixture
def losing() -> Iterator[tuple[RememberPlugin, list[float]]]:
    """A plugin on :class:`_AlwaysLosingStore`, recording its retry pauses instead of sleeping."""
    plugin = RememberPlugin.init(
        store=_AlwaysLosingStore(), encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True
    )
    pauses: list[float] = []
    plugin._core.sleep = pauses.append
    yield plugin, pauses
    plugin.close()


def test_too_many_lost_races_raise_a_conflict_and_write_nothing(
    losing: tuple[RememberPlugin, list[float]],
) -> None:
    """After CAS_ATTEMPTS lost races: RememberConflictError (409, REMEMBER_CONFLICT), no write."""
    plugin, pauses = losing
    mem = _mem(plugin)
    mem.set("n", 1)
    before = _snapshot(plugin.store)
    calls: list[object] = []
    with pytest.raises(RememberConflictError) as info:
        mem.modify("n", lambda v: calls.append(v) or v + 1)
    error = info.value
    assert isinstance(error, RememberStoreError)
    assert (error.code, error.http_status) == ("REMEMBER_CONFLICT", 409)
    assert "'n'" in error.message and "nothing was written" in error.message
    assert calls == [1] * CAS_ATTEMPTS
    assert plugin.stats()["cas_retries"] == CAS_ATTEMPTS
    # Immediate retries first, then bounded random pauses.
    assert len(pauses) == CAS_ATTEMPTS - _CAS_EAGER - 1
    assert all(0 <= p <= _CAS_PAUSE_MAX for p in pauses)
    assert _snapshot(plugin.store) == before
    with pytest.raises(RememberConflictError):
        mem.increment("missing")  # the only-if-absent path loses too
    with pytest.raises(RememberConflictError):
        mem.update("n", 2)  # update shares the loop
    assert _snapshot(plugin.store) == before


def test_a_writer_that_always_wins_makes_modify_give_up(
    two: tuple[RememberAccessor, RememberAccessor],
    make_plugin: Callable[..., RememberPlugin],
    store: Store,
) -> None:
    """Every store: a rival write inside each fn call -> RememberConflictError, rival data kept."""
    a, b = two
    a.set("n", 0)
    plugin = make_plugin()
    plugin._core.sleep = lambda seconds: None
    mem = _mem(plugin)
    calls = 0

    def rival_writes_first(value: int) -> int:
        nonlocal calls
        calls += 1
        b.set("n", -calls)
        return value + 1

    with pytest.raises(RememberConflictError):
        mem.modify("n", rival_writes_first)
    assert calls == CAS_ATTEMPTS
    assert a.get("n") == -CAS_ATTEMPTS  # the rival's last write, nothing of modify's


class _LostReplyStore(MemoryStore):
    """Conditional writes that happen but answer "not written" once each.

    What a driver's retry after a lost reply looks like: the first send wrote,
    the resend found the new value and refused.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        done = super().compare_and_set(key, expected, value, ttl_ms=ttl_ms)
        if done and self.lost < 2:
            self.lost += 1
            return False
        return done

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        done = super().set(key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)
        if done and only_if_absent and self.lost < 2:
            self.lost += 1
            return False
        return done


def test_a_write_whose_reply_was_lost_is_not_applied_twice() -> None:
    """The CAS wrote but answered False (a retried send): modify sees its own write, stops."""
    store = _LostReplyStore()
    with RememberPlugin.init(
        store=store, encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True
    ) as plugin:
        mem = _mem(plugin)
        calls: list[int] = []

        def add_one(value: int) -> int:
            calls.append(value)
            return value + 1

        assert mem.modify("new", add_one, default=0) == 1  # the SET NX path
        mem.set("n", 5)
        assert mem.modify("n", add_one) == 6  # the compare-and-set path
        assert store.lost == 2
        assert calls == [0, 5]
        assert (mem.get("new"), mem.get("n")) == (1, 6)


# -- exact under contention: threads and processes -------------------------------------------------


def test_eight_threads_incrementing_one_counter_are_exact() -> None:
    """Memory store: 8 threads x 1,000 increments -> exactly 8,000, every result seen once."""
    threads, per_thread = 8, 1_000
    plugin = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True)
    try:
        mem = _mem(plugin)
        start = threading.Barrier(threads)
        results: list[list[int | float]] = [[] for _ in range(threads)]
        errors: list[BaseException] = []

        def work(index: int) -> None:
            try:
                start.wait()
                out = results[index]
                for _ in range(per_thread):
                    out.append(mem.increment("hits", scope="global"))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        run_threads(work, threads)
        assert errors == []
        assert mem.get("hits", scope="global") == threads * per_thread
        seen = sorted(r for part in results for r in part)
        assert seen == list(range(1, threads * per_thread + 1))
        assert all(part == sorted(part) for part in results)
    finally:
        plugin.close()


#: One writer process: builds its own plugin, says "ready", waits for "go", writes, reports.
_WORKER = r"""
import json, sys
import redis.cluster
from remember_sync import Identity, RememberPlugin

spec = json.loads(sys.argv[1])
common = {"encryption": {"secrets": [spec["secret"]]}, "skip_legacy_purge": True}
if spec["kind"] == "redis":
    plugin = RememberPlugin.init(type="redis", config={"url": spec["url"]}, **common)
elif spec["kind"] == "redis_cluster":
    nodes = [redis.cluster.ClusterNode(h, p) for h, p in spec["nodes"]]
    client = redis.cluster.RedisCluster(startup_nodes=nodes)
    plugin = RememberPlugin.init(type="redis-client", client=client, **common)
else:
    plugin = RememberPlugin.init(
        type="vercel-kv", url=spec["url"], token=spec["token"], environ={}, **common
    )
mem = plugin.accessor(Identity(session_id=None, user_id="u-counter"))
mem.get("warm-up", scope="user")  # connect and derive the key before the start line
print("ready", flush=True)
if sys.stdin.readline().strip() != "go":
    sys.exit(3)
out = []
for _ in range(spec["n"]):
    if spec["op"] == "increment":
        out.append(mem.increment("counter", scope="user"))
    else:  # the issue's reproduction: get, then update
        out.append(mem.update("counter", mem.get("counter", scope="user") + 1, scope="user"))
print(json.dumps({"results": out, "stats": plugin.stats()}), flush=True)
plugin.close()
"""


def _run_writers(spec: dict[str, Any], processes: int = 2) -> list[dict[str, Any]]:
    """Start *processes* writers of *spec*, release them together, return their reports."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(processes)
    ]
    try:
        for proc in procs:  # every writer is connected before any starts writing
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                _, err = proc.communicate(timeout=60)
                raise AssertionError(f"writer failed to start: {line!r} {err}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            reports.append(json.loads(out))
        return reports
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _spec(kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """How a child process reaches the (flushed) test store of *kind*."""
    spec: dict[str, Any] = {"kind": kind, "secret": TEST_SECRET}
    if kind == "redis":
        request.getfixturevalue("redis_client")  # flushes the database
        spec["url"] = request.getfixturevalue("redis_url")
    elif kind == "redis_cluster":
        request.getfixturevalue("redis_cluster_client")  # flushes the cluster
        spec["nodes"] = request.getfixturevalue("redis_cluster").startup_nodes
    else:
        request.getfixturevalue("kv_redis")  # flushes the emulator's database
        spec["url"] = request.getfixturevalue("kv_emulator").url
        spec["token"] = KV_TEST_TOKEN
    return spec


@pytest.mark.parametrize("kind", ["redis", "redis_cluster", "vercel_kv"])
def test_two_processes_incrementing_one_counter_are_exact(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """2 processes x 500 increment() on one counter -> exactly 1,000; each result returned once."""
    reports = _run_writers({**_spec(kind, request), "op": "increment", "n": 500})
    results = sorted(r for report in reports for r in report["results"])
    assert results == list(range(1, 1001))
    for report in reports:
        assert report["results"] == sorted(report["results"])  # each sees its count grow
    store = request.getfixturevalue(f"{kind}_store")
    with RememberPlugin.init(
        store=store, encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True
    ) as reader:
        counter = reader.accessor(Identity(session_id=None, user_id="u-counter"))
        assert counter.get("counter", scope="user") == 1000



def test_an_owner_record_that_loses_every_race_does_not_fail_the_write_it_follows(
    losing: tuple[RememberPlugin, list[float]], caplog: pytest.LogCaptureFixture
) -> None:
    """The entry is written before its session's owner record: losing every race to
    extend the record logs a warning and leaves the write reported as done."""
    plugin, _ = losing
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        _mem(plugin).set("n", 1)
    assert _mem(plugin).get("n") == 1
    assert any("owner record changed" in r.getMessage() for r in caplog.records)
