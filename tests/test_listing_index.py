"""The per-namespace listing index (issue 21): model-based, expiry, Cluster crashes, reindex.

Every store kind runs the same hypothesis state machine: set / forget /
update / increment / forget_many / clock steps against a dict model, with
``list`` and ``entries`` compared to the model after every step, and the index
itself checked to hold (at least) every live entry.  Then the Redis-specific
promises: the index key lives under the prefix and expires with its entries,
expired and deleted members are pruned on read, a Cluster writer that dies
between its two steps leaves nothing wrong visible, and older entries come in
through the background reindex and ``remember-sync reindex``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from remember_sync import Identity, RememberPlugin, _purge
from remember_sync._keys import (
    glob_escape,
    index_key_of,
    index_record_key,
    is_index_key,
    namespace_index_key,
    parse_storage_key,
    scope_prefix,
)
from remember_sync._ops.reindex import reindex
from remember_sync._ops.walk import classify
from remember_sync._purge import IndexBackfill, sweep_legacy
from remember_sync.errors import RememberConfigurationError, RememberStoreError
from remember_sync.stores import _index_lua
from remember_sync.stores._index_lua import INDEX_ADD
from remember_sync.stores.base import NamespaceIndex, Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from remember_sync.types import Namespace
from tests.conftest import TEST_SECRET, FakeClock, run_threads
from tests.reply_dropping_proxy import proxied_cluster

P = "remember:"
KEYS = ["a", "b", "ab", "note-1", "note-2", "x:y"]
PATTERNS = ["*", "a*", "note-?", "*b", "x:*"]
ME = Identity(session_id="s-1", user_id="u-1")
HEAD = scope_prefix(P, Namespace("session", session="s-1"))


def _clear(store: Store) -> None:
    keys = list(store.scan("*"))
    if keys:
        store.delete(*keys)


def _index_members(store: Store) -> set[str]:
    """The keys the session namespace's index yields (live members only)."""
    assert isinstance(store, NamespaceIndex)
    index = namespace_index_key(P, HEAD)
    return {k for page in store.index_pages(index, "*") for k, _ in page}


# -- the model-based property test --------------------------------------------------------------


def _machine(plugin: RememberPlugin, store: Store, clock: FakeClock) -> type[RuleBasedStateMachine]:
    class IndexMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            _clear(store)
            self.mem = plugin.accessor(ME)
            # key -> (value, deadline ms or None) by the plugin's clock
            self.model: dict[str, tuple[Any, int | None]] = {}

        def _live(self) -> dict[str, Any]:
            now = clock()
            return {k: v for k, (v, d) in self.model.items() if d is None or now < d}

        @rule(
            key=st.sampled_from(KEYS),
            value=st.integers(0, 9),
            ttl=st.sampled_from([None, 60, 600]),
        )
        def set(self, key: str, value: int, ttl: int | None) -> None:
            self.mem.set(key, value, ttl=ttl)
            self.model[key] = (value, None if ttl is None else clock() + ttl * 1000)

        @rule(key=st.sampled_from(KEYS))
        def forget(self, key: str) -> None:
            self.mem.forget(key)
            self.model.pop(key, None)

        @rule(key=st.sampled_from(KEYS), value=st.integers(10, 19))
        def update(self, key: str, value: int) -> None:
            live = key in self._live()
            assert self.mem.update(key, value) is live
            if live:
                self.model[key] = (value, self.model[key][1])

        @rule(key=st.sampled_from(KEYS))
        def increment(self, key: str) -> None:
            current = self._live().get(key)
            if current is None:
                assert self.mem.increment(key) == 1
                self.model[key] = (1, None)
            else:
                assert self.mem.increment(key) == current + 1
                self.model[key] = (current + 1, self.model[key][1])

        @rule(pattern=st.sampled_from(PATTERNS))
        def forget_many(self, pattern: str) -> None:
            from remember_sync._keys import match_user_pattern

            doomed = [k for k in self._live() if match_user_pattern(pattern, k)]
            assert self.mem.forget_many(pattern=pattern) == len(doomed)
            for key in list(self.model):
                if match_user_pattern(pattern, key):
                    del self.model[key]

        @rule(seconds=st.sampled_from([30, 61, 700]))
        def tick(self, seconds: int) -> None:
            clock.advance(s=seconds)

        @rule(pattern=st.sampled_from(PATTERNS))
        def listed(self, pattern: str) -> None:
            from remember_sync._keys import match_user_pattern

            want = sorted(k for k in self._live() if match_user_pattern(pattern, k))
            assert self.mem.list(pattern=pattern) == want

        @invariant()
        def entries_match_the_model(self) -> None:
            live = self._live()
            assert {k: e.value for k, e in self.mem.entries().items()} == live
            # The index holds every live entry (a superset: expired ones by the
            # plugin's clock are still stored until the server expires them).
            members = {k[len(HEAD) :] for k in _index_members(store)}
            assert set(live) <= members

    return IndexMachine


MODEL = settings(
    max_examples=int(os.environ.get("REMEMBER_INDEX_EXAMPLES", "20")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def test_index_keeps_step_with_a_dict_model(
    make_plugin: Callable[..., RememberPlugin], store: Store, clock: FakeClock
) -> None:
    """set/forget/update/increment/forget_many/expiry vs a dict: list and entries agree."""
    plugin = make_plugin()
    assert plugin.listing == "index" and plugin._core.index_usable()
    run_state_machine_as_test(_machine(plugin, store, clock), settings=MODEL)


# -- modes -------------------------------------------------------------------------------------


def test_frontmcp_compatible_and_read_doubled_prefix_default_to_scanning(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """A 1.8.0 writer keeps no index: beside one, listing scans (and can be forced either way)."""
    assert make_plugin().listing == "index"
    compatible = make_plugin(encryption={"frontmcp_compatible": True, "secrets": [TEST_SECRET]})
    assert compatible.listing == "scan"
    assert make_plugin(read_doubled_prefix=True).listing == "scan"
    assert make_plugin(read_doubled_prefix=True, listing="index").listing == "index"
    assert make_plugin(listing="scan").listing == "scan"
    with pytest.raises(RememberConfigurationError, match="listing"):
        make_plugin(listing="btree")


def test_index_keys_live_under_the_prefix_and_are_no_entries() -> None:
    """Index keys: under P, never parsed as entries, never matched by a scope or legacy glob."""
    for ns in (
        Namespace("session", session="s:1"),
        Namespace("user", user="ü"),
        Namespace("tool", tool="t", session="s"),
        Namespace("global"),
    ):
        head = scope_prefix(P, ns)
        index = namespace_index_key(P, head)
        assert index.startswith(P + "__index__:") and is_index_key(P, index)
        assert index_key_of(P, head + "k") == index
        assert parse_storage_key(P, index) is None
        assert index_key_of(P, index) is None  # an index is in no index
        assert classify(P, index) == ("other", None)
        for legacy in ("session:", "tool:", "user:", "v2:", "global:"):
            assert not index.startswith(P + legacy)
    bookkeeping_keys = (P + "__layout__", P + "__keyid__", index_record_key(P), P + P + "v2:u:k")
    for bookkeeping in bookkeeping_keys:
        assert index_key_of(P, bookkeeping) is None


# -- memory ------------------------------------------------------------------------------------


def test_memory_index_follows_eviction_and_expiry(clock: FakeClock) -> None:
    """Evicted and expired keys leave their namespace's group; list reads only the group."""
    store = MemoryStore(max_entries=3, clock=clock)
    store.use_index(lambda k: index_key_of(P, k))
    index = namespace_index_key(P, HEAD)
    for i in range(5):
        store.set(f"{HEAD}k{i}", "v", ttl_ms=10_000 if i == 4 else None)
    assert store.evictions == 2
    assert sorted(k for page in store.index_pages(index, "*") for k, _ in page) == [
        f"{HEAD}k2", f"{HEAD}k3", f"{HEAD}k4"
    ]
    clock.advance(ms=10_000)
    assert [k for page in store.index_pages(index, "*") for k, _ in page] == [
        f"{HEAD}k2", f"{HEAD}k3"
    ]
    store.delete(f"{HEAD}k2", f"{HEAD}k3")
    assert list(store.index_pages(index, "*")) == []
    assert store._groups == {} and store._group_of == {}


def test_memory_use_index_groups_what_is_already_there(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    store.set(f"{HEAD}old", "v")
    store.set(P + "__layout__", "{}")
    assert store.use_index(lambda k: index_key_of(P, k)) is True
    pages = list(store.index_pages(namespace_index_key(P, HEAD), "*"))
    assert pages == [[(f"{HEAD}old", "v")]]


# -- index_pages on every store: read whole or walked in pages -------------------------------


def _index_walk(store: Store, index: str, pattern: str, count: int) -> dict[str, str]:
    """Every pair ``index_pages`` yields, checking that no key comes twice."""
    assert isinstance(store, NamespaceIndex)
    out: dict[str, str] = {}
    for page in store.index_pages(index, pattern, count=count):
        for key, value in page:
            assert key not in out, key
            out[key] = value
    return out


@pytest.mark.parametrize("count", [1000, 7, 1])
def test_index_pages_yield_each_live_match_once_whole_or_paged(store: Store, count: int) -> None:
    """Standalone Redis reads an index of at most ``count`` members whole (ZRANGE) and
    walks a bigger one (ZSCAN); every store yields the same pairs either way, follows
    writes and deletes between reads, and leaves another namespace's members out."""
    assert isinstance(store, NamespaceIndex)
    store.use_index(lambda k: index_key_of(P, k))
    index = namespace_index_key(P, HEAD)
    other = scope_prefix(P, Namespace("session", session="s-2"))
    want: dict[str, str] = {}
    for i in range(40):
        key = f"{HEAD}note-{i:02d}" if i % 3 else f"{HEAD}misc-{i:02d}"
        store.set(key, f"v{i}")
        store.set(f"{other}note-{i:02d}", "another namespace")
        want[key] = f"v{i}"
    every, notes = glob_escape(HEAD) + "*", glob_escape(HEAD) + "note-?1"
    for _ in range(2):  # the second read starts from what the first remembered
        assert _index_walk(store, index, every, count) == want
        assert _index_walk(store, index, notes, count) == {
            k: v for k, v in want.items() if k[len(HEAD):] in ("note-01", "note-11", "note-31")
        }
    store.delete(f"{HEAD}note-01", f"{HEAD}misc-00")
    store.set(f"{HEAD}note-21", "new")
    store.set(f"{HEAD}note-11", "changed")
    del want[f"{HEAD}note-01"], want[f"{HEAD}misc-00"]
    want[f"{HEAD}note-11"], want[f"{HEAD}note-21"] = "changed", "new"  # 21 was misc-21
    assert _index_walk(store, index, every, count) == want
    assert _index_walk(store, index, notes, count) == {
        f"{HEAD}note-11": "changed", f"{HEAD}note-21": "new", f"{HEAD}note-31": "v31"
    }
    assert _index_walk(store, index, glob_escape(HEAD) + "none-*", count) == {}


@pytest.mark.parametrize("count", [1000, 3])
def test_redis_index_read_prunes_members_deleted_behind_its_back_and_decodes_any_client(
    redis_store: RedisStore, redis_client: redis.Redis, redis_url: str, count: int
) -> None:
    """A member whose entry was deleted without the index is left out and pruned, whole
    read or paged; a client built with decode_responses=True reads the same pairs."""
    redis_store.use_index(lambda k: index_key_of(P, k))
    index = namespace_index_key(P, HEAD)
    for i in range(6):
        redis_store.set(f"{HEAD}k{i}\u00e9", f"v{i} \u2713")
    redis_client.delete(f"{HEAD}k0\u00e9", f"{HEAD}k4\u00e9")  # behind the index's back
    want = {f"{HEAD}k{i}\u00e9": f"v{i} \u2713" for i in (1, 2, 3, 5)}
    assert _index_walk(redis_store, index, glob_escape(HEAD) + "*", count) == want
    assert sorted(redis_client.zrange(index, 0, -1)) == sorted(k.encode() for k in want)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        decoding = RedisStore(client=client)
        decoding.use_index(lambda k: index_key_of(P, k))
        assert _index_walk(decoding, index, glob_escape(HEAD) + "k?\u00e9", count) == want
    finally:
        client.close()


# -- Redis: the index key itself ---------------------------------------------------------------


def _wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll *condition* (a server-side expiry we cannot be told about) until it holds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def test_redis_index_is_a_sorted_set_scored_by_deadline_that_expires_with_its_entries(
    redis_store: RedisStore, redis_client: redis.Redis
) -> None:
    """Scores are server deadlines; the index expires with its latest entry; reads prune."""
    store = redis_store
    store.use_index(lambda k: index_key_of(P, k))
    index = namespace_index_key(P, HEAD)
    store.set(HEAD + "short", "1", ttl_ms=200)
    store.set(HEAD + "long", "2", ttl_ms=60_000)
    assert redis_client.type(index) == b"zset"
    assert 59_000 < redis_client.pttl(index) <= 61_000  # the latest deadline (+ 1 s slack)
    store.set(HEAD + "forever", "3")
    assert redis_client.pttl(index) == -1  # a member without a deadline: no expiry
    assert store.delete(HEAD + "forever") == 1
    assert 0 < redis_client.pttl(index) <= 61_000  # back to the latest deadline
    _wait_until(lambda: redis_client.exists(HEAD + "short") == 0)
    assert redis_client.zscore(index, HEAD + "short") is not None  # not yet pruned
    assert _index_members(store) == {HEAD + "long"}
    assert redis_client.zscore(index, HEAD + "short") is None  # pruned by that read
    # A member whose entry was deleted behind the index's back is dropped on read.
    redis_client.delete(HEAD + "long")
    assert _index_members(store) == set()
    assert redis_client.exists(index) == 0  # the last member gone: the set is gone
    # An index with only deadline members expires on its own.
    store.set(HEAD + "brief", "1", ttl_ms=100)
    _wait_until(lambda: redis_client.exists(index) == 0)


def test_redis_index_memory_cost_per_entry(
    redis_store: RedisStore, redis_client: redis.Redis
) -> None:
    """MEMORY USAGE of an index of 1,000 members: what docs/redis.rst quotes (< 200 B each)."""
    store = redis_store
    store.use_index(lambda k: index_key_of(P, k))
    for i in range(1000):
        store.set(f"{HEAD}note-{i:04d}", "v", ttl_ms=3_600_000)
    usage = redis_client.memory_usage(namespace_index_key(P, HEAD), samples=0)
    assert usage is not None and usage / 1000 < 200


def test_walkers_skip_index_keys(
    make_plugin: Callable[..., RememberPlugin], redis_store: RedisStore
) -> None:
    """The legacy purge, stats and export walkers never take an index key for an entry."""
    plugin = make_plugin(store=redis_store)
    mem = plugin.accessor(ME)
    mem.set("k", 1)
    mem.set("u", 2, scope="user")
    keys = list(redis_store.scan("*"))
    assert any(is_index_key(P, k) for k in keys)
    result = sweep_legacy(redis_store, P)
    assert (result.found, result.deleted) == (0, 0)
    from remember_sync._ops.inspect import collect_stats

    stats = collect_stats(redis_store, P, plugin._core.codec, now=plugin._core.clock())
    assert stats.entries == 2 and stats.unreadable == 0
    assert mem.list() == ["k"] and mem.list(scope="user") == ["u"]


# -- Redis Cluster: a writer killed between its two steps -----------------------------------


class _Killed(Exception):
    pass


def test_cluster_writer_killed_between_steps_leaves_nothing_wrong_visible(
    make_plugin: Callable[..., RememberPlugin], redis_cluster_store: RedisStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Index first, entry second; entry first, index second: readers never see a wrong key."""
    store = redis_cluster_store
    plugin = make_plugin(store=store)
    mem = plugin.accessor(ME)
    mem.set("kept", 1)
    # A set that dies after sending the index step (the index node's send goes first):
    # a member without an entry, hidden from readers.
    send_pair = store._send_pair

    def die_after_the_index_step(*commands: Any) -> Any:
        send_pair(commands[0])
        raise _Killed

    monkeypatch.setattr(store, "_send_pair", die_after_the_index_step)
    with pytest.raises(_Killed):
        mem.set("ghost", 2)
    monkeypatch.undo()
    members = store._client.zrange(namespace_index_key(P, HEAD), 0, -1)
    assert HEAD + "ghost" in {m.decode() for m in members}
    assert mem.list() == ["kept"] and set(mem.entries()) == {"kept"}
    assert mem.get("ghost") is None
    # The ghost does not stop a later write of that key from being listed.
    mem.set("ghost", 3)
    assert mem.list() == ["ghost", "kept"]

    # A forget that dies after the entry step: the index still names it; readers do not.
    def die_on_remove(index: str, keys: Any) -> None:
        raise _Killed

    monkeypatch.setattr(store, "_index_remove", die_on_remove)
    with pytest.raises(_Killed):
        mem.forget("kept")
    monkeypatch.undo()
    assert mem.list() == ["ghost"] and set(mem.entries()) == {"ghost"}
    assert mem.forget_many(pattern="*") == 1
    assert mem.list() == []


# -- Redis Cluster: both steps of a write in one round trip ----------------------------------------


@pytest.mark.parametrize("lost", ["index step", "entry step"])
def test_cluster_write_whose_step_reply_is_lost_is_done_again_and_listed(
    redis_cluster: Any, redis_cluster_client: redis.cluster.RedisCluster, lost: str
) -> None:
    """The index step and the SET go out together; the step whose reply a proxy drops is
    done again on its own, so the write returns with its entry written and listed."""
    with proxied_cluster(redis_cluster.startup_nodes, redis_cluster.client) as (client, proxies):
        store = RedisStore(client=client)
        store.use_index(lambda k: index_key_of(P, k))
        assert store.set(HEAD + "warm", "0")  # the index script is in every node's cache
        index_add = hashlib.sha1(INDEX_ADD.encode()).hexdigest().encode()
        for proxy in proxies:
            proxy.arm(index_add if lost == "index step" else b"value-whose-reply-is-lost")
        assert store.set(HEAD + "k", "value-whose-reply-is-lost", ttl_ms=60_000)
        assert sum(p.dropped.is_set() for p in proxies) == 1
        index = namespace_index_key(P, HEAD)
        assert redis_cluster_client.zscore(index, HEAD + "k") is not None
        assert redis_cluster_client.get(HEAD + "k") == b"value-whose-reply-is-lost"
        assert dict(p for page in store.index_pages(index, "*") for p in page) == {
            HEAD + "warm": "0", HEAD + "k": "value-whose-reply-is-lost"
        }


def test_cluster_write_whose_index_step_fails_says_the_entry_was_written(
    redis_cluster_store: RedisStore, redis_cluster_client: redis.cluster.RedisCluster
) -> None:
    """Both steps run at once, so an index that refuses the add (here: another type) no
    longer stops the entry: the error says it was written and how it gets listed."""
    store = redis_cluster_store
    store.use_index(lambda k: index_key_of(P, k))
    redis_cluster_client.set(namespace_index_key(P, HEAD), "not a sorted set")
    with pytest.raises(RememberStoreError, match="WRONGTYPE.*the entry was written, but is not "
                       "listed until it is written again or a reindex runs"):
        store.set(HEAD + "k", "v")
    assert redis_cluster_client.get(HEAD + "k") == b"v"


# -- compatibility: older entries and the reindex ----------------------------------------------


def _older_entries(plugin: RememberPlugin, n: int) -> None:
    """Entries written by a plugin that keeps no index (as 1.8.0 or an earlier release)."""
    old = plugin.accessor(ME)
    for i in range(n):
        old.set(f"old-{i}", i)


@pytest.mark.parametrize("kind", ["redis", "redis_cluster", "vercel_kv"])
def test_older_entries_are_listed_by_scanning_then_through_the_reindexed_index(
    kind: str, request: pytest.FixtureRequest, clock: FakeClock
) -> None:
    store: Store = request.getfixturevalue(f"{kind}_store")
    common: dict[str, Any] = {
        "store": store, "clock": clock, "skip_legacy_purge": True,
        "encryption": {"secrets": [TEST_SECRET]},
    }
    legacy = RememberPlugin.init(listing="scan", **common)
    _older_entries(legacy, 5)
    legacy.close()
    plugin = RememberPlugin.init(**common)
    try:
        backfill = plugin.index_backfill
        assert backfill is not None and backfill.wait(30) and backfill.state == "indexed"
        assert backfill.result is not None and backfill.result.entries == 5
        assert plugin._core.index_usable()
        mem = plugin.accessor(ME)
        assert mem.list() == [f"old-{i}" for i in range(5)]
        assert len(_index_members(store)) == 5
        # A second plugin finds the record and runs nothing.
        again = RememberPlugin.init(**common)
        try:
            assert again.index_backfill is not None and again.index_backfill.wait(30)
            assert again.index_backfill.state in ("indexed", "duplicate")
            assert again.index_backfill.result is None
        finally:
            again.close()
    finally:
        plugin.close()


def test_listing_scans_until_the_fleet_record_appears(
    redis_store: RedisStore, clock: FakeClock
) -> None:
    """Another instance holds the reindex lease: this one scans (and sees older entries)."""
    common: dict[str, Any] = {
        "store": redis_store, "clock": clock, "skip_legacy_purge": True,
        "encryption": {"secrets": [TEST_SECRET]},
    }
    legacy = RememberPlugin.init(listing="scan", **common)
    _older_entries(legacy, 3)
    redis_store.set(P + "__indexing__", "{}", ttl_ms=60_000)  # someone else's pass
    plugin = RememberPlugin.init(**common)
    try:
        assert plugin.index_backfill.wait(30) and plugin.index_backfill.state == "elsewhere"
        assert not plugin._core.index_usable()
        mem = plugin.accessor(ME)
        assert mem.list() == ["old-0", "old-1", "old-2"]  # by scanning
        mem.set("new", 1)
        reindex(redis_store, P, clock=clock)  # the other instance finishes
        clock.advance(s=6)  # the record is re-read at most every 5 s
        assert plugin._core.index_usable()
        assert mem.list() == ["new", "old-0", "old-1", "old-2"]
    finally:
        plugin.close()
        legacy.close()


def test_background_reindex_stands_down_for_a_nested_prefix(redis_store: RedisStore) -> None:
    assert IndexBackfill(redis_store, "remember:v2:", clock=lambda: 0).start().state == "stood-down"
    assert IndexBackfill(redis_store, "", clock=lambda: 0).start().state == "stood-down"


def test_reindex_cli_with_progress(
    redis_url: str, redis_client: redis.Redis, redis_store: RedisStore, clock: FakeClock
) -> None:
    """``remember-sync reindex`` indexes older entries and reports what it did."""
    legacy = RememberPlugin.init(
        store=redis_store, clock=clock, skip_legacy_purge=True, listing="scan",
        encryption={"secrets": [TEST_SECRET]},
    )
    _older_entries(legacy, 4)
    legacy.close()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": repo, "REMEMBER_SECRET": TEST_SECRET}
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "reindex", "--redis-url", redis_url, "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["entries"] == 4 and report["indexed"] == 4
    assert report["pruned"] == 0  # a standalone server keeps its indexes exact
    assert redis_client.exists(index_record_key(P)) == 1
    redis_store.use_index(lambda k: index_key_of(P, k))
    assert len(_index_members(redis_store)) == 4


def test_cluster_index_keeps_recent_members_and_follows_entries_without_expiry(
    redis_cluster_store: RedisStore,
) -> None:
    """Cluster scores are add times: a failed NX write keeps the member; a delete drops
    only members not added within the grace (a writer may be between its steps)."""
    store = redis_cluster_store
    store.use_index(lambda k: index_key_of(P, k))
    index = namespace_index_key(P, HEAD)
    assert store.set(HEAD + "k", "forever") is True
    assert store._client.pttl(index) == -1  # an entry without expiry: no expiry
    assert store.set(HEAD + "k", "brief", ttl_ms=1_000, only_if_absent=True) is False
    assert store._client.pttl(index) == -1
    assert _index_members(store) == {HEAD + "k"}
    assert store.delete(HEAD + "k") == 1
    assert store._client.zscore(index, HEAD + "k") is not None  # added just now: kept
    assert _index_members(store) == set()  # and hidden from readers
    store.set(HEAD + "t", "v", ttl_ms=5_000)
    store._client.delete(index)
    store.set(HEAD + "t", "v", ttl_ms=5_000)
    assert 60_000 < store._client.pttl(index) <= 65_000  # its TTL + the grace


def test_concurrent_writers_keep_index_and_entries_in_step(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """Threads racing set/forget/update/increment on the same keys: afterwards the
    listing shows exactly the keys that hold an entry, and the index holds them all."""
    import random

    plugin = make_plugin()
    keys = ["k0", "k1", "k2", "k3"]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        mem = plugin.accessor(ME)
        try:
            for _ in range(60):
                key, op = rng.choice(keys), rng.randrange(4)
                if op == 0:
                    mem.set(key, seed, ttl=rng.choice([None, 600]))
                elif op == 1:
                    mem.forget(key)
                elif op == 2:
                    mem.update(key, -seed)
                else:
                    mem.modify(key, lambda v: 0 if not isinstance(v, int) else v + 1, default=0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(work, 4, 60)
    assert not errors
    mem = plugin.accessor(ME)
    live = sorted(k for k in keys if mem.get(k) is not None)
    assert mem.list() == live
    assert {k[len(HEAD) :] for k in _index_members(store)} >= set(live)


# -- the background reindex and the memory groups under attack ------------------------------


def test_a_reindex_killed_midway_is_taken_over_by_a_running_instance(
    redis_store: RedisStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instance running the fleet's pass is OOM-killed; its restart (or any running
    instance) meets the dead pass's lease: once the lease expires, one of them runs the
    pass -- the fleet does not scan for ever, waiting for a restart after the lease."""
    monkeypatch.setattr(_purge, "INDEXING_RETRY_S", 0.05)
    redis_store.set("remember:__indexing__", "{}", ttl_ms=300)  # the dead instance's lease
    plugin = RememberPlugin.init(
        store=redis_store, clock=clock, skip_legacy_purge=True,
        encryption={"secrets": [TEST_SECRET]},
    )
    try:
        backfill = plugin.index_backfill
        assert backfill is not None and backfill.wait(30) and backfill.state == "elsewhere"
        _wait_until(lambda: backfill.state == "indexed")
        assert redis_store.get("remember:__indexed__") is not None
    finally:
        plugin.close()


def test_a_pass_that_lost_its_lease_stops_and_leaves_the_new_holder_s_lease(
    redis_store: RedisStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass slower than its lease (a paused process, a huge Vercel KV): another instance
    took the lease over.  The first stops before its next batch, records nothing, and
    does not delete the new holder's lease (a third instance would start a third pass)."""
    head = HEAD
    pipe = redis_client.pipeline(transaction=False)
    for i in range(1500):  # two batches of the pass
        pipe.set(f"{head}k{i}", "v")
    pipe.execute()
    backfill = IndexBackfill(redis_store, "remember:", clock=lambda: 0)
    original = redis_store.add_to_index

    def taken_over(keys: Any) -> int:
        redis_client.set("remember:__indexing__", "theirs", px=600_000)
        return original(keys)

    monkeypatch.setattr(redis_store, "add_to_index", taken_over)
    backfill.start()
    try:
        assert backfill.wait(30) and backfill.state == "stopped"
        assert redis_client.get("remember:__indexing__") == b"theirs"
        assert redis_client.exists("remember:__indexed__") == 0
    finally:
        backfill.stop()


@pytest.mark.parametrize("bounds", [{}, {"max_entries": 50}, {"max_bytes": 20_000}])
def test_memory_groups_never_outlive_their_entries(
    clock: FakeClock, bounds: dict[str, int]
) -> None:
    """A long-running server: many short sessions, each a namespace of its own.  Expired
    and evicted keys leave their groups; the groups never hold more keys than the store."""
    store = MemoryStore(clock=clock, **bounds)  # type: ignore[arg-type]
    store.use_index(lambda k: index_key_of("remember:", k))
    for i in range(2000):
        head = scope_prefix("remember:", Namespace("session", session=f"s-{i}"))
        store.set(head + "note", "x" * 100, ttl_ms=1_000 if i % 2 else None)
        if i % 200 == 199:
            clock.advance(s=2)
        grouped = sum(len(g) for g in store._groups.values())
        assert grouped == len(store._group_of) <= len(store._data)
    clock.advance(s=2)
    store.set("remember:v2:session:last:note", "x")
    assert len(store._group_of) == len(store) == sum(len(g) for g in store._groups.values())
    if "max_bytes" in bounds:
        assert store.stored_bytes <= bounds["max_bytes"]


def test_a_reindex_racing_writers_neither_resurrects_nor_loses_entries(
    make_plugin: Callable[..., RememberPlugin], store: Store, clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the reindex's SCAN and its batch, a writer forgets one older entry,
    re-writes another and adds a new one: afterwards list() is exactly what exists."""
    legacy = make_plugin(listing="scan")
    for i in range(4):
        legacy.accessor(ME).set(f"old-{i}", i)
    plugin = make_plugin(background_reindex=False)
    mem = plugin.accessor(ME)
    original = store.add_to_index  # type: ignore[attr-defined]

    def racing(keys: Any) -> int:
        mem.forget("old-0")
        mem.set("old-1", "rewritten", ttl=600)
        mem.set("brand-new", 1)
        return int(original(keys))

    monkeypatch.setattr(store, "add_to_index", racing)
    reindex(store, "remember:", clock=clock)
    monkeypatch.undo()
    clock.advance(s=6)
    assert plugin._core.index_usable()
    assert mem.list() == ["brand-new", "old-1", "old-2", "old-3"]
    assert mem.get("old-1") == "rewritten" and mem.get("old-0") is None
    assert mem.forget_many(pattern="old-*") == 3
    assert mem.list() == ["brand-new"]


def test_a_pass_that_failed_at_boot_is_retried_until_it_succeeds(
    redis_store: RedisStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole fleet boots while Redis is briefly failing: the pass is tried again
    (backing off) instead of leaving every instance scanning until its next restart."""
    monkeypatch.setattr(_purge, "INDEXING_RETRY_S", 0.02)
    head = HEAD
    redis_store.set(head + "old", "v")
    failures = iter([True, True])
    original = redis_store.add_to_index

    def flaky(keys: Any) -> int:
        if next(failures, False):
            raise RememberStoreError("Redis reindex failed: Connection refused")
        return original(keys)

    monkeypatch.setattr(redis_store, "add_to_index", flaky)
    backfill = IndexBackfill(redis_store, "remember:", clock=clock).start()
    try:
        _wait_until(lambda: backfill.state == "indexed")
        assert redis_store.get("remember:__indexed__") is not None
        assert redis_store.get("remember:__indexing__") is None  # every lease released
    finally:
        backfill.stop()


# -- Redis Cluster: a namespace's listing index disappears after its last entry, no reads --
#
# On a cluster an index member is only dropped once its entry is missing *and*
# nobody added it for longer than the grace, and an index that once held an
# entry without a deadline has no expiry; so a forget inside the grace, or an
# entry without TTL deleted, left the index key behind for good unless someone
# read the namespace.  The plugin's background worker runs a prune pass every
# period (here shortened, with a 1 s grace) that settles every index: these
# tests write and forget on the real 3-node Cluster, never read the namespace,
# and wait for the index key to go -- or check that a writer racing the pass
# keeps its entry listed.

PRUNE_ME = Identity(session_id="s-prune", user_id="u-prune")
PRUNE_HEAD = scope_prefix(P, Namespace("session", session="s-prune"))
PRUNE_INDEX = namespace_index_key(P, PRUNE_HEAD)
GRACE_S = 1.0
PERIOD_S = 0.3
#: The documented bound (grace + one period) plus room for a loaded machine.
BOUND_S = GRACE_S + PERIOD_S + 5.0


#: conftest's ``make_plugin`` over the flushed cluster (index mode, reindex finished).
ON_THE_CLUSTER = pytest.mark.parametrize("store_kind", ["redis_cluster"])


@pytest.fixture
def short_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_index_lua, "CLUSTER_SLACK_MS", int(GRACE_S * 1000))
    monkeypatch.setattr(_purge, "INDEX_PRUNE_PERIOD_S", PERIOD_S, raising=False)


@pytest.fixture
def no_reads(
    redis_cluster_store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[Any]]:
    """Record every read of an entry value or an index page the store is asked for."""
    reads: list[Any] = []
    for name in ("get", "get_many", "index_pages", "scan_pages"):
        original = getattr(redis_cluster_store, name)

        def record(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            reads.append(args)
            return _original(*args, **kwargs)

        monkeypatch.setattr(redis_cluster_store, name, record)
    yield reads


def _gone_within(client: redis.cluster.RedisCluster, key: str, seconds: float) -> float:
    """Seconds until *key* no longer exists; fails after *seconds*."""
    began = time.monotonic()
    while client.exists(key):
        if time.monotonic() - began > seconds:
            pytest.fail(f"{key} still exists after {seconds} s")
        time.sleep(0.05)
    return time.monotonic() - began


def _namespace_reads(reads: list[Any]) -> list[Any]:
    return [r for r in reads if PRUNE_HEAD in repr(r) or PRUNE_INDEX in repr(r)]


@ON_THE_CLUSTER
@pytest.mark.usefixtures("short_periods")
def test_index_of_a_forget_inside_the_grace_disappears_without_reads(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_client: redis.cluster.RedisCluster,
    no_reads: list[Any],
) -> None:
    plugin = make_plugin()
    mem = plugin.accessor(PRUNE_ME)
    mem.set("a", 1)  # no TTL: the index has no expiry
    assert mem.forget("a")  # inside the grace: the member stays
    assert redis_cluster_client.exists(PRUNE_INDEX) and redis_cluster_client.pttl(PRUNE_INDEX) == -1
    _gone_within(redis_cluster_client, PRUNE_INDEX, BOUND_S)
    assert _namespace_reads(no_reads) == []
    assert plugin.index_backfill.prune_passes >= 1


@ON_THE_CLUSTER
@pytest.mark.usefixtures("short_periods")
def test_index_whose_entry_without_ttl_was_deleted_behind_its_back_disappears(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_client: redis.cluster.RedisCluster,
    no_reads: list[Any],
) -> None:
    plugin = make_plugin()
    plugin.accessor(PRUNE_ME).set("b", 2)
    redis_cluster_client.delete(PRUNE_HEAD + "b")  # not through the store: the index is not told
    assert redis_cluster_client.pttl(PRUNE_INDEX) == -1
    _gone_within(redis_cluster_client, PRUNE_INDEX, BOUND_S)
    assert _namespace_reads(no_reads) == []


@ON_THE_CLUSTER
@pytest.mark.usefixtures("short_periods")
def test_prune_sets_the_expiry_from_the_live_entries(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_client: redis.cluster.RedisCluster,
) -> None:
    """A no-TTL entry forgotten, a 60 s one left: the index then expires after that one."""
    plugin = make_plugin()
    mem = plugin.accessor(PRUNE_ME)
    mem.set("live", 1, ttl=60)
    mem.set("forever", 2)
    assert mem.forget("forever")
    assert redis_cluster_client.pttl(PRUNE_INDEX) == -1
    began = time.monotonic()
    while redis_cluster_client.pttl(PRUNE_INDEX) == -1:
        assert time.monotonic() - began < BOUND_S, "the index kept no expiry"
        time.sleep(0.05)
    assert 0 < redis_cluster_client.pttl(PRUNE_INDEX) <= 60_000 + GRACE_S * 1000
    assert redis_cluster_client.zrange(PRUNE_INDEX, 0, -1) == [(PRUNE_HEAD + "live").encode()]
    assert mem.list() == ["live"]


@ON_THE_CLUSTER
def test_a_writer_racing_the_pass_keeps_its_entry_listed(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_store: RedisStore,
    redis_cluster_client: redis.cluster.RedisCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the pass's look at the entries and its changes, a writer re-writes a gone
    entry and adds a long-lived one: both stay listed and the index outlives them."""
    monkeypatch.setattr(_index_lua, "CLUSTER_SLACK_MS", int(GRACE_S * 1000))
    plugin = make_plugin(background_reindex=False)
    mem = plugin.accessor(PRUNE_ME)
    mem.set("short", 1, ttl=5)
    mem.set("back", 2)
    assert mem.forget("back")
    time.sleep(GRACE_S + 0.1)  # "back" is now a gone member older than the grace
    pttls = redis_cluster_store._pttls
    raced: list[str] = []

    def writer_in_the_gap(scored: Any) -> list[int]:
        found = pttls(scored)
        if not raced:
            raced.append("yes")
            mem.set("back", 3)
            mem.set("late", 4, ttl=3600)
        return found

    monkeypatch.setattr(redis_cluster_store, "_pttls", writer_in_the_gap)
    _purge.prune_indexes(redis_cluster_store, P)
    assert raced
    assert sorted(mem.list()) == ["back", "late", "short"]
    assert redis_cluster_client.pttl(PRUNE_INDEX) == -1  # "back" has no TTL: no expiry
    # Without the race, the same pass drops nothing that lives and keeps the index.
    monkeypatch.undo()
    monkeypatch.setattr(_index_lua, "CLUSTER_SLACK_MS", int(GRACE_S * 1000))
    time.sleep(GRACE_S + 0.1)
    assert _purge.prune_indexes(redis_cluster_store, P) == 0
    assert redis_cluster_client.pttl(PRUNE_INDEX) == -1
    assert sorted(mem.list()) == ["back", "late", "short"]


@ON_THE_CLUSTER
@pytest.mark.usefixtures("short_periods")
def test_concurrent_writers_during_passes_are_never_lost(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_store: RedisStore,
    redis_cluster_client: redis.cluster.RedisCluster,
) -> None:
    """Writers set and forget for a few seconds while passes run: every live entry is listed."""
    plugin = make_plugin()
    mem = plugin.accessor(PRUNE_ME)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        i = 0
        try:
            while not stop.is_set():
                key = f"w{n}-{i % 7}"
                if i % 3 == 2:
                    mem.forget(key)
                else:
                    mem.set(key, i, ttl=None if i % 2 else 30)
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    while plugin.index_backfill.prune_passes < 4 and time.monotonic() - began < 30:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert plugin.index_backfill.prune_passes >= 4
    live = {k for k in redis_cluster_store.scan(PRUNE_HEAD + "*")}
    members = {m.decode() for m in redis_cluster_client.zrange(PRUNE_INDEX, 0, -1)}
    assert live and live <= members
    assert sorted(mem.list()) == sorted(k[len(PRUNE_HEAD) :] for k in live)
