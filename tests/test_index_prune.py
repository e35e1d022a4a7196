"""Redis Cluster: a namespace's listing index disappears after its last entry, with no reads.

On a cluster an index member is only dropped once its entry is missing *and*
nobody added it for longer than the grace, and an index that once held an
entry without a deadline has no expiry; so a forget inside the grace, or an
entry without TTL deleted, left the index key behind for good unless someone
read the namespace.  The plugin's background worker runs a prune pass every
period (here shortened, with a 1 s grace) that settles every index: these
tests write and forget on the real 3-node Cluster, never read the namespace,
and wait for the index key to go -- or check that a writer racing the pass
keeps its entry listed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis.cluster

from remember_sync import Identity, RememberPlugin, _purge
from remember_sync._keys import namespace_index_key, scope_prefix
from remember_sync.stores import _index_lua
from remember_sync.stores.redis import RedisStore
from remember_sync.types import Namespace

P = "remember:"
ME = Identity(session_id="s-prune", user_id="u-prune")
HEAD = scope_prefix(P, Namespace("session", session="s-prune"))
INDEX = namespace_index_key(P, HEAD)
GRACE_S = 1.0
PERIOD_S = 0.3
#: The documented bound (grace + one period) plus room for a loaded machine.
BOUND_S = GRACE_S + PERIOD_S + 5.0


@pytest.fixture
def store(redis_cluster_store: RedisStore) -> RedisStore:
    """The flushed cluster, for conftest's ``make_plugin`` (index mode, reindex finished)."""
    return redis_cluster_store


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
    return [r for r in reads if HEAD in repr(r) or INDEX in repr(r)]


@pytest.mark.usefixtures("short_periods")
def test_index_of_a_forget_inside_the_grace_disappears_without_reads(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_client: redis.cluster.RedisCluster,
    no_reads: list[Any],
) -> None:
    plugin = make_plugin()
    mem = plugin.accessor(ME)
    mem.set("a", 1)  # no TTL: the index has no expiry
    assert mem.forget("a")  # inside the grace: the member stays
    assert redis_cluster_client.exists(INDEX) and redis_cluster_client.pttl(INDEX) == -1
    _gone_within(redis_cluster_client, INDEX, BOUND_S)
    assert _namespace_reads(no_reads) == []
    assert plugin.index_backfill.prune_passes >= 1


@pytest.mark.usefixtures("short_periods")
def test_index_whose_entry_without_ttl_was_deleted_behind_its_back_disappears(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_client: redis.cluster.RedisCluster,
    no_reads: list[Any],
) -> None:
    plugin = make_plugin()
    plugin.accessor(ME).set("b", 2)
    redis_cluster_client.delete(HEAD + "b")  # not through the store: the index is not told
    assert redis_cluster_client.pttl(INDEX) == -1
    _gone_within(redis_cluster_client, INDEX, BOUND_S)
    assert _namespace_reads(no_reads) == []


@pytest.mark.usefixtures("short_periods")
def test_prune_sets_the_expiry_from_the_live_entries(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_client: redis.cluster.RedisCluster,
) -> None:
    """A no-TTL entry forgotten, a 60 s one left: the index then expires after that one."""
    plugin = make_plugin()
    mem = plugin.accessor(ME)
    mem.set("live", 1, ttl=60)
    mem.set("forever", 2)
    assert mem.forget("forever")
    assert redis_cluster_client.pttl(INDEX) == -1
    began = time.monotonic()
    while redis_cluster_client.pttl(INDEX) == -1:
        assert time.monotonic() - began < BOUND_S, "the index kept no expiry"
        time.sleep(0.05)
    assert 0 < redis_cluster_client.pttl(INDEX) <= 60_000 + GRACE_S * 1000
    assert redis_cluster_client.zrange(INDEX, 0, -1) == [(HEAD + "live").encode()]
    assert mem.list() == ["live"]


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
    mem = plugin.accessor(ME)
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
    assert redis_cluster_client.pttl(INDEX) == -1  # "back" has no TTL: no expiry
    # Without the race, the same pass drops nothing that lives and keeps the index.
    monkeypatch.undo()
    monkeypatch.setattr(_index_lua, "CLUSTER_SLACK_MS", int(GRACE_S * 1000))
    time.sleep(GRACE_S + 0.1)
    assert _purge.prune_indexes(redis_cluster_store, P) == 0
    assert redis_cluster_client.pttl(INDEX) == -1
    assert sorted(mem.list()) == ["back", "late", "short"]


@pytest.mark.usefixtures("short_periods")
def test_concurrent_writers_during_passes_are_never_lost(
    make_plugin: Callable[..., RememberPlugin],
    redis_cluster_store: RedisStore,
    redis_cluster_client: redis.cluster.RedisCluster,
) -> None:
    """Writers set and forget for a few seconds while passes run: every live entry is listed."""
    plugin = make_plugin()
    mem = plugin.accessor(ME)
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
    live = {k for k in redis_cluster_store.scan(HEAD + "*")}
    members = {m.decode() for m in redis_cluster_client.zrange(INDEX, 0, -1)}
    assert live and live <= members
    assert sorted(mem.list()) == sorted(k[len(HEAD) :] for k in live)
