"""Appends that are replayed or resent: every write has exactly one event, the trail verifies.

A block claim (``SET ... NX``) answered "not written" whose block holds our own
text was ours: it counts as written, and the events are never appended again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from remember_sync import Identity, RememberPlugin, RememberStoreError
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from remember_sync.stores.vercel_kv import VercelKVStore
from remember_sync.testing.kv_emulator import KVEmulator
from tests.conftest import TEST_SECRET
from tests.fixtures_kv import KV_TEST_TOKEN
from tests.replaying_proxy import ReplayingProxy
from tests.reply_dropping_proxy import ReplyDroppingProxy

WHO = Identity("s-1", "alice", "notes")


def _plugin(store: Store, **audit: Any) -> RememberPlugin:
    return RememberPlugin.init(
        store=store, encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True,
        audit={"flush_ms": 600_000, **audit},
    )


def _one_event_per_write(plugin: RememberPlugin, writes: int) -> None:
    trail = plugin.audit
    assert trail is not None
    events = trail.events()
    assert [(e.op, e.key_hash) for e in events] == [
        ("set", trail.hash_text("key", f"k{i}")) for i in range(writes)
    ]
    result = trail.verify()
    assert result.ok, result.problems


@pytest.fixture
def replayed_kv(kv_emulator: KVEmulator, kv_redis: Any) -> Iterator[ReplayingProxy]:
    proxy = ReplayingProxy(kv_emulator.url)
    yield proxy
    proxy.close()


@pytest.mark.parametrize("batch", [1, 3])
def test_every_request_replayed_to_vercel_kv(replayed_kv: ReplayingProxy, batch: int) -> None:
    """Each claim and each head swap runs twice and reports what the repeat answered."""
    plugin = _plugin(VercelKVStore(replayed_kv.url, KV_TEST_TOKEN, environ={}), batch=batch)
    try:
        mem = plugin.accessor(WHO)
        for i in range(7):
            mem.set(f"k{i}", i)
        assert replayed_kv.replayed > 0
        _one_event_per_write(plugin, 7)
    finally:
        plugin.close()


@pytest.fixture
def dropping(redis_url: str, redis_client: Any) -> Iterator[tuple[ReplyDroppingProxy, str]]:
    where = urlsplit(redis_url)
    proxy = ReplyDroppingProxy(where.hostname or "127.0.0.1", where.port or 6379)
    yield proxy, f"redis://127.0.0.1:{proxy.port}"
    proxy.close()


@pytest.mark.parametrize("marker", [b"__audit__:b:", b"__audit__:head"])
def test_a_lost_reply_to_redis_is_resent_and_counted_once(
    dropping: tuple[ReplyDroppingProxy, str], marker: bytes
) -> None:
    """The reply to a block claim (or to the head's swap) is dropped after Redis ran it;
    the driver sends it again, which now answers "not written" (or "no swap")."""
    proxy, url = dropping
    plugin = _plugin(RedisStore.from_url(url), batch=1)
    try:
        mem = plugin.accessor(WHO)
        for i in range(5):
            proxy.arm(marker, unless=(b"\r\nGET\r\n",))
            mem.set(f"k{i}", i)
            assert proxy.dropped.is_set(), "no reply was dropped"
        proxy.arm(b"\x00never\x00")
        _one_event_per_write(plugin, 5)
    finally:
        plugin.close()


class _Flaky(MemoryStore):
    """Writes the block, then reports a store failure (the reply lost, no resend)."""

    fail_next = False

    def set(self, key: str, value: str, **kw: Any) -> bool:
        done = super().set(key, value, **kw)
        if self.fail_next and "__audit__:b:" in key:
            self.fail_next = False
            raise RememberStoreError("connection lost after the write")
        return done


def test_an_append_that_raised_after_writing_is_not_appended_again() -> None:
    """The next flush finds the block holds our text: the events are not written twice."""
    store = _Flaky()
    plugin = _plugin(store, batch=2)
    try:
        mem = plugin.accessor(WHO)
        mem.set("k0", 0)
        store.fail_next = True
        with pytest.raises(RememberStoreError):
            mem.set("k1", 1)
        for i in range(2, 5):
            mem.set(f"k{i}", i)
        _one_event_per_write(plugin, 5)
    finally:
        plugin.close()


def test_verify_reports_a_duplicated_event(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """A block's events copied into a new block, chained on and MAC'd anew by a holder of
    the secret: every MAC checks out, and verify still names the repeated events."""
    plugin = make_plugin(audit={"batch": 2, "flush_ms": 600_000})
    mem = plugin.accessor(WHO)
    for i in range(4):
        mem.set(f"k{i}", i)
    trail = plugin.audit
    assert trail is not None
    trail.flush()
    first = json.loads(store.get(trail._block_key(1)) or "{}")
    copied = [{k: v for k, v in e.items() if k not in ("seq", "mac", "w")}
              for e in first["events"]]
    # Re-chain the copies as events 5 and 6 (what a replayed append used to do).
    last = json.loads(store.get(trail._block_key(2)) or "{}")["events"][-1]["mac"]
    events = []
    for seq, event in enumerate(copied, start=5):
        body = json.dumps({"seq": seq, **event}, separators=(",", ":"))
        last = trail._mac(last, body)
        events.append({**json.loads(body), "mac": last})
    store.set(trail._block_key(3), json.dumps({"block": 3, "events": events}))
    store.set(trail._head_key, trail._signed_text(
        "head", {"block": 3, "seq": 6, "last": last, "at": 0}))
    result = trail.verify()
    assert not result.ok
    assert sum("appended twice" in p for p in result.problems) == 2, result.problems


# -- retention holds: checked on every append ---------------------------------------------


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
def test_max_events_bounds_the_trail_within_one_block(
    make_plugin: Callable[..., RememberPlugin], store_kind: str
) -> None:
    plugin = make_plugin(audit={"max_events": 50})
    mem = plugin.accessor(WHO)
    trail = plugin.audit
    assert trail is not None
    for i in range(300):
        mem.set(f"k{i % 9}", i)
        if i % 37 == 0:
            trail.flush()
            assert trail.verify().events <= 100
    result = trail.verify()
    assert result.ok, result.problems
    assert 0 < result.events <= 100 and result.last_seq == 300


def test_retention_days_bounds_the_trail_with_a_test_clock(
    make_plugin: Callable[..., RememberPlugin], clock: Any
) -> None:
    """Each day's writes: the trail never holds more than the last two days' events."""
    plugin = make_plugin(audit={"retention_days": 1, "batch": 10, "flush_ms": 600_000})
    mem = plugin.accessor(WHO)
    trail = plugin.audit
    assert trail is not None
    for day in range(6):
        for i in range(30):
            mem.set(f"k{i}", day)
        clock.advance(86_400_000)
    trail.flush()
    events = trail.events()
    result = trail.verify()
    assert result.ok, result.problems
    assert result.last_seq == 180 and len(events) <= 60
    assert min(e.at for e in events) >= clock() - 3 * 86_400_000
