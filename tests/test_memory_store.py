"""MemoryStore specifics: injected-clock expiry, the deadline heap, max_entries, max_bytes."""

from __future__ import annotations

import random
import threading

import pytest

from remember_sync import Identity, RememberConfigurationError, RememberInputError, RememberPlugin
from remember_sync.stores.memory import ENTRY_OVERHEAD_BYTES, MemoryStore
from remember_sync.tools import error_parts
from tests.conftest import TEST_SECRET, FakeClock, run_threads


def test_expiry_follows_injected_clock(clock: FakeClock) -> None:
    """A key expires exactly when the clock reaches its deadline."""
    store = MemoryStore(clock=clock)
    store.set("k", "v", ttl_ms=1000)
    clock.advance(ms=999)
    assert store.get("k") == "v"
    clock.advance(ms=1)
    assert store.get("k") is None
    assert list(store.scan("*")) == []


def test_sweep_reclaims_expired_without_reads(clock: FakeClock) -> None:
    """Expired keys are reclaimed by the amortised sweep even if never read again."""
    store = MemoryStore(clock=clock)
    for i in range(1000):
        store.set(f"k{i}", "v", ttl_ms=10)
    clock.advance(ms=10)
    store.set("fresh", "v")
    assert len(store._data) == 1


def test_overwrites_do_not_grow_heap_without_bound(clock: FakeClock) -> None:
    """Rewriting one key with TTLs many times keeps the heap small."""
    store = MemoryStore(clock=clock)
    for _ in range(10_000):
        store.set("k", "v", ttl_ms=60_000)
    assert len(store._heap) < 200


def test_max_entries_evicts_earliest_deadline_then_lru(clock: FakeClock) -> None:
    """At capacity the entry expiring first goes, then the least recently used one."""
    store = MemoryStore(max_entries=3, clock=clock)
    store.set("a", "1")
    store.set("b", "2", ttl_ms=50_000)
    store.set("c", "3", ttl_ms=10_000)
    store.set("d", "4")  # evicts c (earliest deadline)
    assert store.get("c") is None
    store.set("e", "5")  # evicts b (the only remaining deadline)
    assert store.get("b") is None
    store.get("a")  # a is now more recently used than d
    store.set("f", "6")  # no deadlines left: evicts least recently used (d)
    assert sorted(store.scan("*")) == ["a", "e", "f"]
    assert store.evictions == 3


def test_max_entries_overwrite_does_not_evict() -> None:
    """Overwriting an existing key at capacity evicts nothing."""
    store = MemoryStore(max_entries=2)
    store.set("a", "1")
    store.set("b", "2")
    store.set("a", "3")
    assert store.get_many(["a", "b"]) == ["3", "2"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_max_entries_validated(bad: object) -> None:
    """max_entries must be a positive int."""
    with pytest.raises(RememberConfigurationError):
        MemoryStore(max_entries=bad)  # type: ignore[arg-type]


def test_plugin_passes_max_entries_and_clock(clock: FakeClock) -> None:
    """RememberPlugin.init(max_entries=..., clock=...) configures its memory store."""
    plugin = RememberPlugin.init(
        max_entries=2, clock=clock, encryption={"secrets": ["s" * 32]}, skip_legacy_purge=True
    )
    mem = plugin.accessor(Identity())
    for i in range(5):
        mem.set(f"k{i}", i, scope="global")
    assert len(mem.list(scope="global")) == 2


# -- max_bytes and fair eviction ---------------------------------------------------------------


def _by_slash(key: str) -> str:
    """Namespace of a test key: what comes before its first ``/``."""
    return key.split("/", 1)[0]


def _charge(key: str, value: str) -> int:
    return len(key.encode()) + len(value.encode()) + ENTRY_OVERHEAD_BYTES


def _check_accounting(store: MemoryStore) -> None:
    """The byte count matches what is held, and both bounds hold."""
    held = list(store._data.items())
    assert store.stored_bytes == sum(_charge(k, v) for k, (v, _) in held)
    assert set(store._space_of) == {k for k, _ in held}
    assert sum(space.nbytes for space in store._spaces.values()) == store.stored_bytes
    assert all(space.lru for space in store._spaces.values())  # no empty namespace kept
    if store.max_bytes is not None:
        assert store.stored_bytes <= store.max_bytes
    if store.max_entries is not None:
        assert len(held) <= store.max_entries


def test_max_bytes_counts_utf8_key_value_and_overhead() -> None:
    """Stored bytes are the UTF-8 lengths of key and value plus the per-entry overhead."""
    store = MemoryStore(max_bytes=10_000)
    store.set("k", "héllo")  # é is two UTF-8 bytes
    assert store.stored_bytes == 1 + 6 + ENTRY_OVERHEAD_BYTES
    store.set("k", "x" * 100)  # an overwrite replaces the old count
    assert store.stored_bytes == 1 + 100 + ENTRY_OVERHEAD_BYTES
    store.delete("k")
    assert store.stored_bytes == 0


def test_max_bytes_bounds_large_and_tiny_entries() -> None:
    """Neither a few large values nor many empty ones take the store past max_bytes."""
    store = MemoryStore(max_bytes=50_000)
    for i in range(100):
        store.set(f"big{i}", "v" * 4_000)
        assert store.stored_bytes <= 50_000
    assert store.get("big99") == "v" * 4_000 and store.get("big0") is None
    for i in range(1_000):
        store.set(f"t{i}", "")
    assert store.stored_bytes <= 50_000
    assert len(store) <= 50_000 // ENTRY_OVERHEAD_BYTES
    _check_accounting(store)


def test_entry_larger_than_max_bytes_is_refused_and_nothing_changes() -> None:
    """One entry over max_bytes raises naming max_bytes; the old value and the others stay."""
    store = MemoryStore(max_bytes=5_000, namespace_of=_by_slash)
    store.set("a/k", "old")
    store.set("b/k", "other")
    with pytest.raises(RememberInputError, match="max_bytes"):
        store.set("a/k", "x" * 5_000)
    assert store.get_many(["a/k", "b/k"]) == ["old", "other"]
    assert store.evictions == 0
    _check_accounting(store)


def test_fair_eviction_takes_from_the_namespace_holding_most(clock: FakeClock) -> None:
    """A namespace filling the store with long-TTL entries evicts its own, not the others'."""
    store = MemoryStore(max_bytes=40_000, namespace_of=_by_slash, clock=clock)
    for i in range(5):  # written first, short TTLs and least recently used: a global
        store.set(f"victim/{i}", "v" * 1_000, ttl_ms=60_000)  # policy would evict these
        store.set(f"quiet/{i}", "q" * 500)
    for i in range(200):
        store.set(f"hog/{i}", "h" * 2_000, ttl_ms=365 * 86_400_000)
        _check_accounting(store)
    assert store.get_many([f"victim/{i}" for i in range(5)]) == ["v" * 1_000] * 5
    assert store.get_many([f"quiet/{i}" for i in range(5)]) == ["q" * 500] * 5
    assert store.get("hog/199") == "h" * 2_000 and store.get("hog/0") is None
    assert store.evictions > 150


def test_without_namespaces_the_store_is_one_namespace(clock: FakeClock) -> None:
    """With no namespace function every key competes: the earliest deadline goes first."""
    store = MemoryStore(max_bytes=40_000, clock=clock)
    for i in range(5):
        store.set(f"victim/{i}", "v" * 1_000, ttl_ms=60_000)
    for i in range(200):
        store.set(f"hog/{i}", "h" * 2_000, ttl_ms=365 * 86_400_000)
    assert store.get_many([f"victim/{i}" for i in range(5)]) == [None] * 5


def test_within_a_namespace_earliest_deadline_then_lru_goes(clock: FakeClock) -> None:
    """Inside the largest namespace: the entry expiring first, then the least recently used."""
    store = MemoryStore(max_bytes=4 * _charge("a/0", "x" * 100), namespace_of=_by_slash,
                        clock=clock)
    store.set("a/0", "x" * 100)
    store.set("a/1", "x" * 100, ttl_ms=50_000)
    store.set("a/2", "x" * 100, ttl_ms=10_000)
    store.set("a/3", "x" * 100)
    store.set("a/4", "x" * 100)  # evicts a/2 (earliest deadline)
    assert store.get("a/2") is None
    store.set("a/5", "x" * 100)  # evicts a/1 (the only deadline left)
    assert store.get("a/1") is None
    store.get("a/0")  # a/0 is now more recently used than a/3
    store.set("a/6", "x" * 100)  # evicts a/3
    assert sorted(store.scan("*")) == ["a/0", "a/4", "a/5", "a/6"]


def test_expired_entries_go_before_any_live_one(clock: FakeClock) -> None:
    """A full store first drops expired entries, wherever they are, then evicts."""
    store = MemoryStore(max_bytes=6 * _charge("a/0", "x" * 100), namespace_of=_by_slash,
                        clock=clock)
    store.set("s/0", "x" * 100, ttl_ms=1_000)
    for i in range(5):
        store.set(f"b/{i}", "x" * 100)
    clock.advance(ms=1_000)
    store.set("b/5", "x" * 100)  # room made by the expired entry alone
    assert store.evictions == 0
    assert len(store) == 6
    _check_accounting(store)


def test_max_entries_is_fair_too(clock: FakeClock) -> None:
    """At max_entries the namespace holding the most bytes loses an entry, not the writer's."""
    store = MemoryStore(max_entries=10, namespace_of=_by_slash, clock=clock)
    for i in range(3):
        store.set(f"b/{i}", "x", ttl_ms=1_000)
    for i in range(50):
        store.set(f"a/{i}", "x" * 10, ttl_ms=10**9)
    assert store.get_many([f"b/{i}" for i in range(3)]) == ["x"] * 3
    assert len(store) == 10


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_max_bytes_validated(bad: object) -> None:
    """max_bytes must be a positive int; the error names it."""
    with pytest.raises(RememberConfigurationError, match="max_bytes"):
        MemoryStore(max_bytes=bad)  # type: ignore[arg-type]
    with pytest.raises(RememberConfigurationError, match="max_bytes"):
        RememberPlugin.init(max_bytes=bad, encryption={"secrets": [TEST_SECRET]})


def test_plugin_refuses_bounds_for_other_stores() -> None:
    """max_bytes and max_entries only apply to the memory store: other types are refused."""
    for option in ("max_bytes", "max_entries"):
        with pytest.raises(RememberConfigurationError, match=option):
            RememberPlugin.init(
                type="redis", config={"url": "redis://127.0.0.1:1/0"}, **{option: 1_000}
            )


def test_plugin_evicts_fairly_between_identities() -> None:
    """Through the plugin, one user filling the store leaves another user's memory alone."""
    plugin = RememberPlugin.init(
        max_bytes=200_000, encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True
    )
    bob = plugin.accessor(Identity(user_id="bob", session_id="s-bob"))
    alice = plugin.accessor(Identity(user_id="alice", session_id="s-alice"))
    for i in range(5):
        bob.set(f"note{i}", "b" * 1_000, scope="user", ttl=3_600)
        bob.set(f"note{i}", "b" * 1_000, scope="session")
    for i in range(300):
        alice.set(f"big{i}", "a" * 5_000, scope="user", ttl=365 * 86_400)
    assert all(bob.get(f"note{i}", scope=s) == "b" * 1_000 for i in range(5)
               for s in ("user", "session"))
    assert alice.get("big299", scope="user") == "a" * 5_000
    assert not alice.knows("big0", scope="user")
    plugin.close()


def test_plugin_tool_reports_an_entry_over_max_bytes() -> None:
    """remember_this of an entry larger than the store's max_bytes is a clear tool error."""
    plugin = RememberPlugin.init(
        max_bytes=8_000, tools={"enabled": True}, encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True,
    )
    ident = Identity(session_id="s1")
    result = plugin.call_tool(
        "remember_this", {"key": "k", "value": "x" * 10_000, "scope": "session"}, identity=ident
    )
    assert result["isError"] is True
    code, message = error_parts(result)
    assert code == "REMEMBER_INVALID_INPUT" and "max_bytes" in message
    assert not plugin.accessor(ident).knows("k", scope="session")
    plugin.close()


def test_random_operations_keep_the_accounting(clock: FakeClock) -> None:
    """Any mix of writes, overwrites, deletes, CAS, reads and expiry keeps counts exact."""
    store = MemoryStore(max_bytes=20_000, max_entries=40, namespace_of=_by_slash, clock=clock)
    rnd = random.Random(7)
    for _ in range(5_000):
        op = rnd.random()
        key = f"n{rnd.randrange(5)}/{rnd.randrange(30)}"
        if op < 0.55:
            store.set(key, "x" * rnd.randrange(2_000), ttl_ms=rnd.choice([None, 5, 100]))
        elif op < 0.65:
            store.delete(key)
        elif op < 0.75:
            store.get(key)
        elif op < 0.85:
            store.compare_and_set(key, "x", "y" * 10, ttl_ms=rnd.choice([None, 50]))
        elif op < 0.9:
            clock.advance(ms=rnd.randrange(10))
        else:
            store.set(key, "v", only_if_absent=True)
        _check_accounting(store)
    assert store.evictions > 0


def test_bounded_store_under_threads_keeps_its_bound() -> None:
    """Threads writing, reading (lock-free) and deleting never break the bound or the counts."""
    store = MemoryStore(max_bytes=60_000, max_entries=100, namespace_of=_by_slash)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            for _ in range(3_000):
                key = f"n{rnd.randrange(4)}/{rnd.randrange(50)}"
                op = rnd.random()
                if op < 0.5:
                    store.set(key, "x" * rnd.randrange(1_500))
                elif op < 0.9:
                    store.get(key)
                else:
                    store.delete(key)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    run_threads(work, 6)
    assert errors == []
    _check_accounting(store)
    # The LRU order of every namespace still names exactly its keys.
    for space in store._spaces.values():
        assert all(store._space_of[k] is space for k in space.lru)


def test_reads_racing_writes_stay_consistent() -> None:
    """Gets racing sets, deletes and scans see whole values and never fail."""
    store = MemoryStore()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            store.set(f"k{i % 50}", f"v{n}-{i}" * 3, ttl_ms=None if i % 3 else 60_000)
            if i % 7 == 0:
                store.delete(f"k{(i + 3) % 50}")
            i += 1

    def reader() -> None:
        try:
            while not stop.is_set():
                for i in range(50):
                    value = store.get(f"k{i}")
                    assert value is None or (value.startswith("v") and len(value) % 3 == 0)
                list(store.scan("k*"))
                store.get_many([f"k{i}" for i in range(50)])
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    stop.wait(0.8)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_deadlines_written_by_many_threads_all_expire(clock: FakeClock) -> None:
    """TTL writes from several threads all expire, and an expired read drops the entry."""
    store = MemoryStore(clock=clock)

    def write(n: int) -> None:
        for i in range(700):
            store.set(f"t{n}-{i % 300}", "v", ttl_ms=10 + i % 5)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 1200
    clock.advance(ms=14)
    store.set("fresh", "v", ttl_ms=10)
    assert len(store) == 1
    assert list(store.scan("*")) == ["fresh"]
    clock.advance(ms=10)
    assert store.get("fresh") is None
    assert len(store) == 0
