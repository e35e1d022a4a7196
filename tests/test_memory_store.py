"""MemoryStore specifics: injected-clock expiry, the deadline heap, max_entries."""

from __future__ import annotations

import pytest

from remember_sync import RememberConfigurationError
from remember_sync.stores.memory import MemoryStore
from tests.conftest import FakeClock


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
    from remember_sync import Identity, RememberPlugin

    plugin = RememberPlugin.init(
        max_entries=2, clock=clock, encryption={"secrets": ["s" * 32]}, skip_legacy_purge=True
    )
    mem = plugin.accessor(Identity())
    for i in range(5):
        mem.set(f"k{i}", i, scope="global")
    assert len(mem.list(scope="global")) == 2
