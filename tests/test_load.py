"""Load: 16 threads x 5,000 mixed operations, every read checked against a model.

Each thread drives its own identity's keys (an exact model: every ``get``,
``knows``, ``update``, ``forget``, ``list`` and ``entries`` answer is known)
and a set of shared ``global`` keys written by everyone with unique version
stamps (every read is checked against what the operation order allows: no
lost write, no stale read, no resurrected value).  See ``tests/reliability.py``.

The 60-second soak runs the same workload for a fixed time; it is skipped
unless pytest is given ``--soak`` (``REMEMBER_SOAK_SECONDS`` changes the time).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
import redis

from remember_sync import RememberPlugin
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from tests.conftest import TEST_SECRET
from tests.reliability import Counters, Workload

THREADS = 16
OPS_PER_THREAD = 5_000


@pytest.fixture(params=["memory", "redis"])
def load_plugin(request: pytest.FixtureRequest) -> Iterator[RememberPlugin]:
    """An encrypted plugin on a fresh memory store or on the (flushed) real redis-server."""
    if request.param == "memory":
        store: MemoryStore | RedisStore = MemoryStore()
    else:
        client: redis.Redis = request.getfixturevalue("redis_client")  # flushed
        url: str = request.getfixturevalue("redis_url")
        client.close()
        store = RedisStore.from_url(url)
    plugin = RememberPlugin.init(
        store=store, skip_legacy_purge=True, encryption={"secrets": [TEST_SECRET]}
    )
    yield plugin
    plugin.close()
    store.close()


def _report(name: str, c: Counters, seconds: float) -> None:
    # Printed for the reliability docs (run with -s to see the figures).
    print(
        f"\n[{name}] ops={c.ops} reads_checked={c.reads_checked} "
        f"(private={c.private_reads_checked}, shared={c.shared_reads_checked}) "
        f"lists={c.lists_checked} final_keys={c.final_keys_checked} "
        f"{seconds:.1f}s {c.ops / seconds:,.0f} ops/s max_call={c.max_call_seconds * 1000:.0f}ms"
    )


def test_sixteen_threads_by_five_thousand_operations(
    load_plugin: RememberPlugin, request: pytest.FixtureRequest
) -> None:
    """16 threads x 5,000 mixed calls: no error, every read matches the model, nothing lost."""
    workload = Workload(load_plugin, threads=THREADS, ops_per_thread=OPS_PER_THREAD)
    start = time.monotonic()
    counters = workload.run()
    workload.check_shared()
    workload.check_private_final()
    _report(request.node.callspec.id, counters, time.monotonic() - start)
    assert counters.failures == []
    assert counters.ops == THREADS * OPS_PER_THREAD
    assert counters.store_errors == 0
    # The checks really ran: thousands of reads compared, every key read back at the end.
    assert counters.private_reads_checked > THREADS * OPS_PER_THREAD // 5
    assert counters.shared_reads_checked > THREADS * OPS_PER_THREAD // 5
    assert counters.final_keys_checked == THREADS * 12 + 8
    assert load_plugin.stats()["unreadable"] == 0


@pytest.mark.soak
def test_soak(load_plugin: RememberPlugin, request: pytest.FixtureRequest) -> None:
    """The same checked workload for 60 s (REMEMBER_SOAK_SECONDS) without a single failure."""
    seconds = float(os.environ.get("REMEMBER_SOAK_SECONDS", "60"))
    workload = Workload(load_plugin, threads=THREADS, ops_per_thread=None, seconds=seconds)
    start = time.monotonic()
    counters = workload.run()
    workload.check_shared()
    workload.check_private_final()
    _report(f"soak-{request.node.callspec.id}", counters, time.monotonic() - start)
    assert counters.failures == []
    assert counters.store_errors == 0
    assert counters.ops > THREADS * 100
    assert load_plugin.stats()["unreadable"] == 0


# -- the checks can fail: a broken store is caught ---------------------------------------------


class _BrokenStore(MemoryStore):
    """A memory store with one planted fault (only used to prove the checks bite)."""

    def __init__(self, fault: str) -> None:
        super().__init__()
        self.fault = fault
        self.calls = 0
        self.last_seen: dict[str, str] = {}

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        self.calls += 1
        if self.fault == "lose" and self.calls % 97 == 0:
            return True  # acknowledged, never written
        return super().set(key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)

    def get(self, key: str) -> str | None:
        self.calls += 1
        value = super().get(key)
        if self.fault == "stale" and ":global:" in key:
            old = self.last_seen.get(key)
            if value is not None and (old is None or self.calls % 5):
                self.last_seen[key] = value
            elif old is not None:
                return old  # an older value than the latest write
        return value

    def delete(self, *keys: str) -> int:
        self.calls += 1
        if self.fault == "forget" and self.calls % 7 == 0:
            return len(keys)  # says it deleted, deleted nothing
        return super().delete(*keys)


@pytest.mark.parametrize("fault", ["lose", "stale", "forget"])
def test_the_model_catches_a_broken_store(fault: str) -> None:
    """Lost writes, stale reads and fake deletions are all reported by the workload's checks."""
    store = _BrokenStore(fault)
    with RememberPlugin.init(
        store=store, skip_legacy_purge=True, encryption={"enabled": False}
    ) as plugin:
        workload = Workload(plugin, threads=4, ops_per_thread=1500, tag=f"broken-{fault}")
        counters = workload.run()
        workload.check_shared()
        workload.check_private_final()
    assert counters.failures, f"a store that does '{fault}' went unnoticed"
