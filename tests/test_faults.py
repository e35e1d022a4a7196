"""Faults: a Redis crash and freeze under load, a misbehaving Vercel KV, full stores, big values.

What is pinned, for every fault:

* calls fail with :class:`RememberStoreError` (never a driver exception, never
  a silent "not found": every read that succeeds is checked against a model);
* no call hangs beyond its configured timeout;
* what is written after the fault clears is readable;
* nothing acknowledged before a crash is lost when Redis persists
  (``appendonly yes``, ``appendfsync always``).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from remember_sync import Identity, RememberPlugin
from remember_sync.errors import (
    RememberError,
    RememberInputError,
    RememberStoreError,
)
from remember_sync.stores.base import Store
from remember_sync.stores.redis import RedisStore
from remember_sync.stores.vercel_kv import VercelKVStore
from remember_sync.testing.kv_emulator import KVEmulator
from remember_sync.testing.redis_server import RedisServer
from tests.conftest import TEST_SECRET, FakeClock
from tests.fixtures_kv import KV_TEST_TOKEN
from tests.fixtures_redis import redis_binary
from tests.reliability import Workload

SOCKET_TIMEOUT = 0.5
RETRIES = 2
#: The longest a call may take against a dead or frozen Redis: every attempt may spend a
#: connect/handshake timeout and a reply timeout, plus redis-py's backoff, plus slack.
REDIS_CALL_LIMIT = (RETRIES + 1) * 2 * SOCKET_TIMEOUT + 0.5 + 0.5


def _server(**kwargs: Any) -> RedisServer:
    binary = redis_binary()
    return RedisServer(binary, **kwargs)


@pytest.fixture
def persistent_redis() -> Iterator[RedisServer]:
    """A private redis-server with appendonly + appendfsync always (this test may kill it)."""
    server = _server(persistence=True).start()
    yield server
    if server.process is not None:
        with _suppress():
            os.kill(server.process.pid, signal.SIGCONT)
    server.cleanup()


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True


def _plugin(store: Store, **options: Any) -> RememberPlugin:
    return RememberPlugin.init(
        store=store, skip_legacy_purge=True, encryption={"secrets": [TEST_SECRET]}, **options
    )


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# -- Redis killed and restarted during a load run -----------------------------------------------


def test_redis_killed_and_restarted_during_load_loses_nothing_acknowledged(
    persistent_redis: RedisServer,
) -> None:
    """SIGKILL mid-load: calls fail with RememberStoreError, quickly; after restart all is there."""
    store = RedisStore(port=persistent_redis.port, socket_timeout=SOCKET_TIMEOUT, retries=RETRIES)
    plugin = _plugin(store)
    ops = [0]
    lock = threading.Lock()

    def progress() -> None:
        with lock:
            ops[0] += 1

    workload = Workload(
        plugin,
        threads=8,
        ops_per_thread=None,
        tolerate=(RememberStoreError,),
        call_limit=REDIS_CALL_LIMIT,
        tag="kill",
    )
    workload.on_progress = progress
    runner = threading.Thread(target=workload.run, daemon=True)
    # Entries acknowledged before the crash and never touched by the workload afterwards.
    witness = plugin.accessor(Identity(user_id="witness"))
    try:
        runner.start()
        _wait_for(lambda: ops[0] >= 3000, 60, "3,000 operations before the crash")
        for i in range(200):
            witness.set(f"acked-{i}", {"i": i}, scope="user")
        persistent_redis.kill()  # SIGKILL: no shutdown save, only the fsynced AOF survives
        killed_at = ops[0]
        down_started = time.monotonic()
        # While it is down every call fails: wait until many have, then bring it back.
        _wait_for(lambda: ops[0] >= killed_at + 120, 30, "calls failing while Redis is down")
        with pytest.raises(RememberStoreError):
            witness.get("acked-0", scope="user")
        down_seconds = time.monotonic() - down_started
        persistent_redis.start()  # same port, same directory: replays the append-only file
        restarted_at = ops[0]
        _wait_for(lambda: ops[0] >= restarted_at + 3000, 60, "3,000 operations after restart")
    finally:
        workload.stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive()
    counters = workload.counters
    workload.check_shared()
    workload.check_private_final()
    lost = [i for i in range(200) if witness.get(f"acked-{i}", scope="user") != {"i": i}]
    print(
        f"\n[redis kill] ops={counters.ops} store_errors={counters.store_errors} "
        f"down={down_seconds:.2f}s reads_checked={counters.reads_checked} "
        f"final_keys={counters.final_keys_checked} witnesses=200 "
        f"max_call={counters.max_call_seconds:.2f}s (limit {REDIS_CALL_LIMIT:.2f}s)"
    )
    assert counters.failures == []
    assert lost == []
    assert counters.store_errors >= 100  # the outage was really seen by the workload
    assert counters.max_call_seconds <= REDIS_CALL_LIMIT
    plugin.close()
    store.close()


def test_without_persistence_a_crash_loses_writes_so_the_check_bites() -> None:
    """Control: the same crash on a server without the append-only file loses the witnesses."""
    server = _server(persistence=False).start()
    try:
        store = RedisStore(port=server.port, socket_timeout=SOCKET_TIMEOUT, retries=RETRIES)
        plugin = _plugin(store)
        witness = plugin.accessor(Identity(user_id="witness"))
        for i in range(20):
            witness.set(f"acked-{i}", i, scope="user")
        server.kill()
        server.start()
        assert [witness.get(f"acked-{i}", scope="user") for i in range(20)] == [None] * 20
        plugin.close()
        store.close()
    finally:
        server.cleanup()


def test_frozen_redis_fails_calls_within_the_socket_timeout(
    persistent_redis: RedisServer,
) -> None:
    """A hung server (SIGSTOP) makes every call fail with RememberStoreError, never hang."""
    store = RedisStore(port=persistent_redis.port, socket_timeout=SOCKET_TIMEOUT, retries=RETRIES)
    plugin = _plugin(store)
    mem = plugin.accessor(Identity("s-freeze", "u-freeze", "t"))
    mem.set("before", 1, scope="user")
    assert persistent_redis.process is not None
    pid = persistent_redis.process.pid
    outcomes: list[tuple[str, str, float]] = []
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("get", lambda: mem.get("before", scope="user")),
        ("set", lambda: mem.set("during", 2, scope="user")),
        ("update", lambda: mem.update("before", 3, scope="user")),
        ("forget", lambda: mem.forget("before", scope="user")),
        ("list", lambda: mem.list(scope="user")),
        ("entries", lambda: mem.entries(scope="session")),
    ]

    def run(name: str, call: Callable[[], Any]) -> None:
        start = time.monotonic()
        try:
            call()
            outcome = "returned"
        except RememberStoreError:
            outcome = "RememberStoreError"
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome = f"{type(exc).__name__}: {exc}"
        outcomes.append((name, outcome, time.monotonic() - start))

    os.kill(pid, signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=run, args=c, daemon=True) for c in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=REDIS_CALL_LIMIT + 5)
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"\n[redis freeze] {[(n, o, round(s, 2)) for n, o, s in outcomes]}")
    assert sorted(n for n, _, _ in outcomes) == sorted(n for n, _ in calls)
    for name, outcome, seconds in outcomes:
        assert outcome == "RememberStoreError", (name, outcome)
        assert seconds <= REDIS_CALL_LIMIT, (name, seconds)
    # Thawed: a new write is readable (whatever the frozen calls did or did not do).
    mem.set("after", {"ok": True}, scope="user")
    assert mem.get("after", scope="user") == {"ok": True}
    plugin.close()
    store.close()


# -- Vercel KV: 500s, timeouts, dropped connections, malformed JSON

#: (name, call, idempotent) for every store operation.
_KV_OPS: list[tuple[str, Callable[[Store], Any], bool]] = [
    ("get", lambda s: s.get("k"), True),
    ("get_many", lambda s: s.get_many(["k", "x"]), True),
    ("set", lambda s: s.set("k", "v2"), True),
    ("set_nx", lambda s: s.set("new", "v", only_if_absent=True), False),
    ("compare_and_set", lambda s: s.compare_and_set("k", "v", "v3"), False),
    ("delete", lambda s: s.delete("x"), True),
    ("scan", lambda s: list(s.scan("*")), True),
]
_KV_FAULTS: dict[str, dict[str, Any]] = {
    "http_500": {"status": 500},
    "http_503": {"status": 503},
    "dropped_connection": {"close_connection": True},
    "malformed_json": {"malformed": True},
}


@pytest.fixture
def kv_store(kv_emulator: KVEmulator, kv_redis: redis.Redis) -> Iterator[VercelKVStore]:
    """A VercelKVStore with a short timeout and fast backoff, on the emulator's flushed database."""
    store = VercelKVStore(
        kv_emulator.url, KV_TEST_TOKEN, environ={}, timeout=2.0, retries=3, backoff=0.01
    )
    store.set("k", "v")
    kv_emulator.reset_log()
    yield store
    store.close()


@pytest.mark.parametrize("fault", list(_KV_FAULTS))
@pytest.mark.parametrize("op", [o[0] for o in _KV_OPS])
def test_kv_transient_fault_is_retried_or_reported(
    kv_store: VercelKVStore, kv_emulator: KVEmulator, op: str, fault: str
) -> None:
    """Two faulty answers: idempotent calls retry and succeed; others raise RememberStoreError."""
    name, call, idempotent = next(o for o in _KV_OPS if o[0] == op)
    kv_emulator.inject(times=2, **_KV_FAULTS[fault])
    if idempotent:
        call(kv_store)
        assert [r.fault is not None for r in kv_emulator.requests] == [True, True, False]
    else:
        with pytest.raises(RememberStoreError):
            call(kv_store)
        # Never resent blindly: a lost reply to a write that happened would read as "not written".
        assert len(kv_emulator.requests) == 1
    kv_emulator.clear_faults()
    assert kv_store.get("k") in ("v", "v2", "v3")


@pytest.mark.parametrize("fault", list(_KV_FAULTS))
@pytest.mark.parametrize("op", [o[0] for o in _KV_OPS])
def test_kv_persistent_fault_is_a_store_error(
    kv_store: VercelKVStore, kv_emulator: KVEmulator, op: str, fault: str
) -> None:
    """A lasting fault ends in RememberStoreError after the retries, never another type."""
    name, call, idempotent = next(o for o in _KV_OPS if o[0] == op)
    kv_emulator.inject(times=None, **_KV_FAULTS[fault])
    start = time.monotonic()
    with pytest.raises(RememberStoreError) as info:
        call(kv_store)
    assert time.monotonic() - start < 2.0 + 0.5
    assert len(kv_emulator.requests) == (4 if idempotent else 1)  # 1 + retries=3
    assert KV_TEST_TOKEN not in str(info.value)
    kv_emulator.clear_faults()
    kv_store.set("after", "ok")
    assert kv_store.get("after") == "ok"


@pytest.mark.parametrize("op", [o[0] for o in _KV_OPS])
def test_kv_server_that_stops_answering_fails_within_the_timeout(
    kv_emulator: KVEmulator, kv_redis: redis.Redis, op: str
) -> None:
    """A KV answering 10 s late fails each call with RememberStoreError within its 1 s budget."""
    name, call, _ = next(o for o in _KV_OPS if o[0] == op)
    store = VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, environ={}, timeout=1.0, backoff=0.01)
    try:
        kv_emulator.inject(delay=10, times=None)
        start = time.monotonic()
        with pytest.raises(RememberStoreError):
            call(store)
        took = time.monotonic() - start
        kv_emulator.clear_faults()  # also cuts the pending delays short
        assert took < 1.0 + 0.5
        store.set("after", "ok")
        assert store.get("after") == "ok"
    finally:
        kv_emulator.clear_faults()
        store.close()


def test_kv_faults_under_load_never_lose_acknowledged_writes(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """8 threads through the accessor while 500s, drops and malformed replies rain: model holds."""
    store = VercelKVStore(
        kv_emulator.url, KV_TEST_TOKEN, environ={}, timeout=5.0, retries=2, backoff=0.005
    )
    plugin = _plugin(store)
    workload = Workload(
        plugin,
        threads=8,
        ops_per_thread=400,
        tolerate=(RememberStoreError,),
        call_limit=5.5,
        tag="kvfault",
    )
    injected = [0]
    stop = threading.Event()

    def chaos() -> None:
        rng = random.Random(42)
        kinds = list(_KV_FAULTS.values())
        while not stop.wait(0.01):
            times = rng.randint(1, 4)
            kv_emulator.inject(times=times, **rng.choice(kinds))
            injected[0] += times

    monkey = threading.Thread(target=chaos, daemon=True)
    monkey.start()
    try:
        counters = workload.run()
    finally:
        stop.set()
        monkey.join()
        kv_emulator.clear_faults()
    faulty = sum(1 for r in kv_emulator.requests if r.fault is not None)
    workload.check_shared()
    workload.check_private_final()
    print(
        f"\n[kv faults] ops={counters.ops} faults_injected={injected[0]} faulty_requests={faulty} "
        f"store_errors={counters.store_errors} reads_checked={counters.reads_checked} "
        f"final_keys={counters.final_keys_checked} max_call={counters.max_call_seconds:.2f}s"
    )
    assert counters.failures == []
    assert faulty > 100
    assert (
        counters.store_errors > 0
    )  # some faults outlasted the retries or hit non-idempotent calls
    plugin.close()
    store.close()


# -- full stores


def test_memory_store_at_max_entries_evicts_soonest_to_expire_then_keeps_writing(
    clock: FakeClock,
) -> None:
    """At max_entries a write never fails: the entry expiring first goes, then the least recent."""
    plugin = RememberPlugin.init(
        max_entries=50, clock=clock, skip_legacy_purge=True, encryption={"secrets": [TEST_SECRET]}
    )
    mem = plugin.accessor(Identity(user_id="full"))
    for i in range(30):
        mem.set(f"ttl-{i}", i, scope="user", ttl=1000 + i)
    for i in range(40):
        mem.set(f"keep-{i}", i, scope="user")
    store: Any = plugin.store
    assert len(store) == 50
    assert store.evictions == 20
    # The 20 TTL entries with the earliest deadlines went; every entry without a TTL stayed.
    assert mem.list(scope="user", pattern="ttl-*") == sorted(f"ttl-{i}" for i in range(20, 30))
    assert all(mem.get(f"keep-{i}", scope="user") == i for i in range(40))
    # With no deadlines left to evict, the least recently used goes.
    for i in range(20, 30):
        mem.forget(f"ttl-{i}", scope="user")
    mem.get("keep-0", scope="user")  # recently used now
    for i in range(11):
        mem.set(f"more-{i}", i, scope="user")
    assert len(store) == 50
    assert mem.get("keep-0", scope="user") == 0
    assert not mem.knows("keep-1", scope="user")
    assert mem.get("more-10", scope="user") == 10
    plugin.close()


@pytest.fixture(params=["redis", "vercel_kv"])
def full_store(request: pytest.FixtureRequest) -> Iterator[tuple[Store, redis.Redis]]:
    """A store over a private redis-server limited to 3 MB with ``noeviction``."""
    server = _server(extra_args=["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]).start()
    client = server.client()
    emulator: KVEmulator | None = None
    store: Store
    if request.param == "redis":
        store = RedisStore(port=server.port, socket_timeout=2.0)
    else:
        emulator = KVEmulator(server.url, KV_TEST_TOKEN).start()
        store = VercelKVStore(emulator.url, KV_TEST_TOKEN, environ={}, backoff=0.01)
    yield store, client
    store.close()
    if emulator is not None:
        emulator.stop()
    client.close()
    server.cleanup()


def test_full_redis_refuses_writes_with_store_error_and_keeps_serving(
    full_store: tuple[Store, redis.Redis],
) -> None:
    """Out of memory: writes fail with RememberStoreError; reads and forgets work; space returns."""
    store, client = full_store
    plugin = _plugin(store)
    mem = plugin.accessor(Identity(user_id="oom"))
    written: list[int] = []
    error: RememberError | None = None
    for i in range(5000):
        try:
            mem.set(f"k{i}", "x" * 4096, scope="user")
        except RememberError as exc:
            error = exc
            break
        written.append(i)
    assert isinstance(error, RememberStoreError), error
    assert "maxmemory" in error.message  # the server's own reason, not a bare driver error
    assert len(written) > 10
    # The refused write wrote nothing; everything acknowledged is readable.
    assert not mem.knows(f"k{len(written)}", scope="user")
    assert all(mem.get(f"k{i}", scope="user") == "x" * 4096 for i in written)
    # update (a Lua compare-and-set) is refused too, and leaves the value alone.  The
    # value is far larger than the few KB the server's usage may drop by meanwhile
    # (freed client buffers), so the refusal does not depend on that slack.
    with pytest.raises(RememberStoreError):
        mem.update("k0", "y" * 262_144, scope="user")
    assert mem.get("k0", scope="user") == "x" * 4096
    # Forgetting works under OOM and frees room for new writes.
    assert mem.forget_many(scope="user", pattern="k*") == len(written)
    mem.set("after", "ok", scope="user")
    assert mem.get("after", scope="user") == "ok"
    plugin.close()


# -- values over max_value_bytes


def test_value_over_max_value_bytes_is_refused_and_writes_nothing(
    make_plugin: Callable[..., RememberPlugin], clock: FakeClock
) -> None:
    """An entry one byte over max_value_bytes raises ValueError and leaves the store untouched."""
    limit = 1000
    plugin = make_plugin(max_value_bytes=limit)
    mem = plugin.accessor(Identity(user_id="big"))
    # The plaintext entry of an empty string value (SPEC section 4).
    empty = len(f'{{"value":"","createdAt":{clock.now},"updatedAt":{clock.now}}}')
    at_limit = "x" * (limit - empty)
    mem.set("k", at_limit, scope="user")  # exactly max_value_bytes: accepted
    assert mem.get("k", scope="user") == at_limit
    with pytest.raises(RememberInputError, match="max_value_bytes") as info:
        mem.set("k", at_limit + "x", scope="user")
    assert isinstance(info.value, ValueError)
    with pytest.raises(RememberInputError):
        mem.set("other", at_limit + "é", scope="user")  # counted in UTF-8 bytes
    with pytest.raises(RememberInputError):
        mem.update("k", at_limit + "x", scope="user")
    with pytest.raises(RememberInputError):
        mem.set("k", "small", scope="user", metadata={"pad": "m" * limit})
    assert mem.get("k", scope="user") == at_limit  # never replaced
    assert not mem.knows("other", scope="user")
    assert mem.list(scope="user") == ["k"]
