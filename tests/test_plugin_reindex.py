"""``plugin.reindex()``: the public rebuild-and-prune of every namespace's listing index.

On every store that keeps an index (memory, Redis, the 3-node Cluster, the Vercel KV
emulator): after a namespace's index key is deleted behind the plugin's back, listing
that namespace through the index shows nothing; ``plugin.reindex()`` brings its entries
back, drops the members of a deleted entry, and reports what it did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from remember_sync import Identity, RememberConfigurationError, RememberPlugin, RememberStoreError
from remember_sync._keys import index_key_of
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from tests.conftest import TEST_SECRET
from tests.test_cli import child_env, run_cli

P = "remember:"
ALICE = Identity(session_id="s-alice", user_id="alice")
BOB = Identity(session_id="s-bob", user_id="bob")


def _plugin(store: Store) -> RememberPlugin:
    return RememberPlugin.init(
        store=store, encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True,
        background_reindex=False,
    )  # fmt: skip


def _index_of(store: Store, who: Identity) -> str:
    """The index key of *who*'s user namespace (the one holding their notes)."""
    found = {index_key_of(P, k) for k in store.scan(P + "v2:*") if f":{who.user_id}" in k}
    found.discard(None)
    assert len(found) == 1, found
    return str(found.pop())


@pytest.mark.parametrize("kind", ["redis", "redis_cluster", "vercel_kv"])
def test_reindex_restores_a_namespace_whose_index_key_was_deleted(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The index key of Alice's user namespace deleted: her listing is empty until
    ``plugin.reindex()``, which lists her notes again and leaves Bob's as they were."""
    store: Store = request.getfixturevalue(f"{kind}_store")
    plugin = _plugin(store)
    try:
        alice, bob = plugin.accessor(ALICE), plugin.accessor(BOB)
        for i in range(5):
            alice.set(f"note-{i}", i, scope="user")
        bob.set("mine", 1, scope="user")
        first = plugin.reindex()  # records that the fleet is indexed: listing uses the index
        assert (first.entries, first.indexed, first.pruned) == (6, 6, 0)
        assert plugin.listing == "index"
        assert store.delete(_index_of(store, ALICE)) == 1
        assert alice.list(scope="user") == []  # what the index says
        report = plugin.reindex()
        assert (report.entries, report.indexed) == (6, 6) and report.seconds >= 0
        assert alice.list(scope="user") == [f"note-{i}" for i in range(5)]
        assert bob.list(scope="user") == ["mine"]
    finally:
        plugin.close()


def test_reindex_on_the_memory_store_reports_its_entries() -> None:
    """The memory store keeps its index as it writes: reindex finds it complete."""
    plugin = _plugin(MemoryStore())
    try:
        for i in range(3):
            plugin.accessor(ALICE).set(f"k{i}", i, scope="session")
        report = plugin.reindex()
        assert (report.entries, report.indexed, report.pruned) == (3, 3, 0)
        assert plugin.accessor(ALICE).list() == ["k0", "k1", "k2"]
    finally:
        plugin.close()


class _PlainStore:
    """A store of one's own with the base operations only (no listing index)."""

    def __init__(self) -> None:
        inner = MemoryStore()
        for name in ("get", "get_many", "set", "compare_and_set", "delete", "scan", "close"):
            setattr(self, name, getattr(inner, name))


def test_reindex_on_a_store_without_an_index_says_so() -> None:
    """A store of one's own that keeps no index: a configuration error naming it."""
    plugin = _plugin(cast(Store, _PlainStore()))
    try:
        assert plugin.listing == "scan"
        with pytest.raises(RememberConfigurationError, match="_PlainStore keeps no listing index"):
            plugin.reindex()
    finally:
        plugin.close()


def _cluster_url(cluster: Any, user_info: str = "") -> str:
    nodes = ",".join(f"{host}:{port}" for host, port in cluster.startup_nodes)
    return f"redis+cluster://{user_info}{nodes}"


def test_the_cli_reindexes_a_cluster_named_by_a_url(
    redis_cluster: Any, redis_cluster_store: Store, tmp_path: Path
) -> None:
    """``remember-sync reindex --redis-url redis+cluster://node,node,node`` (no secret, a
    real process) restores the listing of a namespace whose index key was deleted."""
    plugin = _plugin(redis_cluster_store)
    try:
        alice = plugin.accessor(ALICE)
        for i in range(4):
            alice.set(f"note-{i}", i, scope="user")
        plugin.reindex()
        assert redis_cluster_store.delete(_index_of(redis_cluster_store, ALICE)) == 1
        assert alice.list(scope="user") == []
        done = run_cli("reindex", "--redis-url", _cluster_url(redis_cluster), "--json",
                       env=child_env(), cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["indexed"] == 4
        assert alice.list(scope="user") == [f"note-{i}" for i in range(4)]
    finally:
        plugin.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+cluster://", "names no cluster node"),
        ("redis+cluster://127.0.0.1:7000/1", "database 0 only"),
        ("redis+cluster://127.0.0.1:99999", "bad port"),
        ("redis+cluster://u:hunter2-secret@127.0.0.1:7000?x=1", "query strings"),
    ],
)
def test_a_bad_cluster_url_is_named_without_its_password(url: str, says: str) -> None:
    """A malformed cluster URL: a configuration error saying what is wrong, never the
    password."""
    from remember_sync.stores.redis import RedisStore

    with pytest.raises(RememberConfigurationError, match=says) as info:
        RedisStore.from_url(url)
    assert "hunter2" not in str(info.value)


def test_an_unreachable_cluster_is_a_store_error(tmp_path: Path) -> None:
    """No node answers: a store error naming the cluster URL (redacted), not a hang."""
    from remember_sync.stores.redis import RedisStore

    with pytest.raises(RememberStoreError, match="cannot reach the Redis Cluster") as info:
        RedisStore.from_url("redis+cluster://u:hunter2-secret@127.0.0.1:1", socket_timeout=0.5)
    assert "hunter2" not in str(info.value)
