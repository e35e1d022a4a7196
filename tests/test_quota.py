"""Quotas per principal, on every store: counted across all of a principal's namespaces,
enforced atomically with the write, never by evicting anyone else; usage shrinks when
entries are forgotten, overwritten smaller or expire."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin, RememberQuotaError
from remember_sync.errors import RememberConfigurationError
from remember_sync.stores.base import OwnedWrite, OwnedWrites, Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from tests.conftest import run_threads
from tests.fixtures_redis import SENTINEL_SERVICE

ALICE = Identity(session_id="s-alice", user_id="alice")
BOB = Identity(session_id="s-bob", user_id="bob")
ALICE_TOOL = Identity(session_id="s-alice", user_id="alice", tool_name="notes")


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_entries_counted_across_every_namespace_of_a_principal(make_plugin: Any) -> None:
    """User, session and tool scopes of one principal share one entry quota; others are apart."""
    plugin = make_plugin(quota={"entries": 3})
    alice = plugin.accessor(ALICE)
    alice.set("a", 1, scope="user")
    alice.set("b", 2, scope="session")
    plugin.accessor(ALICE_TOOL).set("c", 3, scope="tool")
    with pytest.raises(RememberQuotaError) as caught:
        alice.set("d", 4, scope="user")
    assert caught.value.code == "REMEMBER_QUOTA_EXCEEDED"
    assert caught.value.http_status == 429
    assert not alice.knows("d", scope="user")  # nothing written
    # Another session of the same signed-in user is the same principal.
    other_session = plugin.accessor(Identity(session_id="s-alice-2", user_id="alice"))
    with pytest.raises(RememberQuotaError):
        other_session.set("e", 5, scope="session")
    # Overwriting a held key is no new entry; other principals and global are unaffected.
    alice.set("a", 10, scope="user")
    assert alice.get("a", scope="user") == 10
    plugin.accessor(BOB).set("d", 4, scope="user")
    alice.set("shared", 1, scope="global")


def test_charged_writes_keep_the_listing_index(make_plugin: Any) -> None:
    """Writes charged to a principal (set, update, a tool's remember_this) are listed
    from their namespace's index, keys with colons included, and nowhere else."""
    plugin = make_plugin(quota={"entries": 100}, tools={"enabled": True})
    assert plugin.listing == "index"
    alice, bob = plugin.accessor(ALICE), plugin.accessor(BOB)
    alice.set("a:b", 1, scope="user")
    alice.set("c", 2, scope="session")
    alice.update("c", 3, scope="session")
    bob.set("d", 4, scope="user")
    result = plugin.call_tool("remember_this", {"key": "e:f", "value": 5, "scope": "user"},
                              identity=ALICE)  # fmt: skip
    assert not result.get("isError"), result
    assert sorted(alice.list(scope="user")) == ["a:b", "e:f"]
    assert alice.list(scope="session") == ["c"]
    assert bob.list(scope="user") == ["d"]


def test_forget_and_forget_many_give_the_quota_back(make_plugin: Any) -> None:
    """Forgotten entries stop counting at once."""
    plugin = make_plugin(quota={"entries": 2})
    alice = plugin.accessor(ALICE)
    alice.set("a", 1, scope="user")
    alice.set("b", 1, scope="session")
    with pytest.raises(RememberQuotaError):
        alice.set("c", 1, scope="user")
    assert alice.forget("a", scope="user")
    alice.set("c", 1, scope="user")
    assert alice.forget_many(scope="session", pattern="*") == 1
    alice.set("d", 1, scope="user")
    with pytest.raises(RememberQuotaError):
        alice.set("e", 1, scope="user")


def test_bytes_quota_and_smaller_overwrite(make_plugin: Any) -> None:
    """The byte quota counts keys and stored values; an overwrite with less frees the difference."""
    plugin = make_plugin(quota={"bytes": 3000})
    alice = plugin.accessor(ALICE)
    alice.set("big", "x" * 2000, scope="user")
    with pytest.raises(RememberQuotaError) as caught:
        alice.set("more", "y" * 1000, scope="user")
    assert "bytes" in caught.value.message
    assert not alice.knows("more", scope="user")
    alice.set("big", "x", scope="user")  # overwritten smaller
    alice.set("more", "y" * 1000, scope="user")
    with pytest.raises(RememberQuotaError):
        alice.set("big", "x" * 2000, scope="user")  # an overwrite may not grow past it
    assert alice.get("big", scope="user") == "x"


def test_update_modify_increment_are_charged(make_plugin: Any) -> None:
    """Every write path counts: a modify that creates is refused over the quota, an update
    that grows past the byte quota too."""
    plugin = make_plugin(quota={"entries": 1, "bytes": 1500})
    alice = plugin.accessor(ALICE)
    assert alice.increment("n", scope="user") == 1
    with pytest.raises(RememberQuotaError):
        alice.increment("m", scope="user")
    with pytest.raises(RememberQuotaError):
        alice.modify("m", lambda v: [v], scope="user", default=0)
    assert alice.increment("n", scope="user") == 2  # the held entry still changes
    with pytest.raises(RememberQuotaError):
        alice.update("n", "z" * 2000, scope="user")
    assert alice.get("n", scope="user") == 2


def test_expired_entries_stop_counting(make_plugin: Any) -> None:
    """An entry past its deadline no longer counts, without anyone forgetting it."""
    plugin = make_plugin(quota={"entries": 2})
    alice = plugin.accessor(ALICE)
    alice.set("short", 1, scope="user", ttl=1)
    alice.set("long", 1, scope="user")
    with pytest.raises(RememberQuotaError):
        alice.set("c", 1, scope="user")
    store = plugin.store
    _wait_for(lambda: store.get(_skey(plugin, ALICE, "short")) is None)
    alice.set("c", 1, scope="user")
    with pytest.raises(RememberQuotaError):
        alice.set("d", 1, scope="user")


def _skey(plugin: RememberPlugin, ident: Identity, key: str, scope: str = "user") -> str:
    """The storage key of *key* (SPEC section 3), built as the reference does."""
    part = ident.user_id if scope == "user" else ident.session_id
    return f"{plugin.key_prefix}v2:{scope}:{part}:{key}"


def test_anonymous_callers_each_have_their_session_quota(make_plugin: Any) -> None:
    """An anonymous caller's principal is its session: two sessions, two quotas."""
    plugin = make_plugin(quota={"entries": 1})
    one = plugin.accessor(Identity(session_id="anon-1"))
    two = plugin.accessor(Identity(session_id="anon-2"))
    one.set("a", 1)
    with pytest.raises(RememberQuotaError):
        one.set("b", 1)
    two.set("a", 1)


def test_memory_tools_report_the_quota_as_a_tool_error(make_plugin: Any) -> None:
    """remember_this over the quota is an isError result with the code; forget gives room."""
    plugin = make_plugin(quota={"entries": 1}, tools={"enabled": True})
    args = {"key": "a", "value": 1, "scope": "user"}
    assert not plugin.call_tool("remember_this", args, identity=ALICE).get("isError")
    refused = plugin.call_tool("remember_this", {**args, "key": "b"}, identity=ALICE)
    assert refused["isError"] is True
    assert "REMEMBER_QUOTA_EXCEEDED" in refused["content"][0]["text"]
    assert plugin.call_tool("recall", {"key": "b", "scope": "user"}, identity=ALICE)[
        "structuredContent"
    ]["found"] is False
    forgot = plugin.call_tool("forget", {"key": "a", "scope": "user"}, identity=ALICE)
    assert forgot["structuredContent"]["existed"] is True
    # The tool forgets by swapping in an entry that expires a millisecond later.
    _wait_for(lambda: plugin.store.get(_skey(plugin, ALICE, "a")) is None)
    assert not plugin.call_tool("remember_this", {**args, "key": "b"}, identity=ALICE).get(
        "isError"
    )


def test_concurrent_threads_never_exceed_the_quota(make_plugin: Any) -> None:
    """Eight threads racing to add entries for one principal: exactly N land."""
    plugin = make_plugin(quota={"entries": 20})
    written: list[str] = []
    refused: list[str] = []
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        mem = plugin.accessor(ALICE)
        start.wait()
        for i in range(10):
            key = f"t{n}-{i}"
            try:
                mem.set(key, i, scope="user")
                written.append(key)
            except RememberQuotaError:
                refused.append(key)

    run_threads(writer, 8)
    assert len(written) == 20
    assert len(refused) == 60
    assert sorted(plugin.accessor(ALICE).list(scope="user")) == sorted(written)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["redis", "redis_cluster", "vercel_kv"])
def test_concurrent_processes_never_exceed_the_quota(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Four forked processes share the store's quota ledger: exactly N entries land.

    (The memory store belongs to one process: the thread test covers it.)
    """
    store = request.getfixturevalue(f"{kind}_store")
    plugin = RememberPlugin.init(
        store=store, quota={"entries": 15}, encryption={"secrets": ["p" * 32]},
        skip_legacy_purge=True, background_reindex=False,
    )
    ctx = multiprocessing.get_context("fork")
    results: Any = ctx.Queue()
    start = ctx.Barrier(4)

    def writer(n: int) -> None:
        mem = plugin.accessor(ALICE)
        start.wait()
        ok = 0
        for i in range(10):
            try:
                mem.set(f"p{n}-{i}", i, scope="user")
                ok += 1
            except RememberQuotaError:
                pass
        results.put(ok)

    procs = [ctx.Process(target=writer, args=(n,)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sum(results.get(timeout=10) for _ in procs) == 15
    assert len(plugin.accessor(ALICE).list(scope="user")) == 15
    plugin.close()


def test_usage_is_reported_by_the_store(make_plugin: Any) -> None:
    """The store's ledger holds what the principal holds (entries, key+value bytes)."""
    plugin = make_plugin(quota={"entries": 10})
    store = plugin.store
    assert isinstance(store, OwnedWrites)
    alice = plugin.accessor(ALICE)
    alice.set("a", 1, scope="user")
    alice.set("b", 1, scope="session")
    owner = _owner_of(store, _skey(plugin, ALICE, "a"), _skey(plugin, ALICE, "b", "session"))
    entries, nbytes = store.owner_usage(owner)
    assert entries == 2
    expected = sum(
        len(k.encode()) + len(store.get(k).encode())  # type: ignore[union-attr]
        for k in (_skey(plugin, ALICE, "a"), _skey(plugin, ALICE, "b", "session"))
    )
    assert nbytes == expected
    alice.forget("a", scope="user")
    assert store.owner_usage(owner)[0] == 1


def _owner_of(store: Store, *keys: str) -> str:
    """The owner tag the writes of *keys* were charged to (found in the store's bookkeeping)."""
    if isinstance(store, MemoryStore):
        owners = {store._owner_of[k][0] for k in keys}  # noqa: SLF001 - white-box lookup
    else:
        owners = {
            k for k in store.scan("*__quota__:*") if not k.endswith("#sizes")
        }
    assert len(owners) == 1, owners
    owner = owners.pop()
    assert "alice" not in owner  # the tag never names the principal
    return owner


def test_quota_option_is_checked() -> None:
    """A bad quota is a configuration error naming the part; an empty one is no quota."""
    for bad, named in (
        ({"entries": 0}, "quota.entries"),
        ({"bytes": -1}, "quota.bytes"),
        ({"entries": True}, "quota.entries"),
        ({"entries": 1.5}, "quota.entries"),
        ({"count": 3}, "'count'"),
        (5, "quota must be a dict"),
    ):
        with pytest.raises(RememberConfigurationError, match=named.replace(".", r"\.")):
            RememberPlugin.init(quota=bad, encryption={"enabled": False})
    with RememberPlugin.init(quota={"entries": None}, encryption={"enabled": False}) as plugin:
        mem = plugin.accessor(ALICE)
        for i in range(5):
            mem.set(f"k{i}", i, scope="user")


def test_memory_store_evicts_by_principal_not_by_session() -> None:
    """Mallory opening 150 sessions with one note each cannot evict Alice's 10 notes."""
    for bound in ({"max_entries": 150}, {"max_bytes": 100_000}):
        plugin = RememberPlugin.init(encryption={"secrets": ["s" * 32]}, **bound)
        alice = plugin.accessor(Identity(session_id="a-1", user_id="alice"))
        for i in range(10):
            alice.set(f"note-{i}", "x" * 100, scope="user")
        for n in range(150):
            mallory = plugin.accessor(Identity(session_id=f"m-{n}", user_id="mallory"))
            mallory.set("junk", "y" * 100)
        assert len(alice.list(scope="user")) == 10, bound
        assert plugin.store.evictions > 0  # type: ignore[attr-defined]
        plugin.close()


def test_anonymous_sessions_cannot_evict_signed_in_users() -> None:
    """Anonymous sessions are one eviction group: their flood evicts their own entries."""
    plugin = RememberPlugin.init(encryption={"secrets": ["s" * 32]}, max_entries=100)
    alice = plugin.accessor(Identity(session_id="a-1", user_id="alice"))
    for i in range(10):
        alice.set(f"note-{i}", i, scope="user")
    for n in range(300):
        plugin.accessor(Identity(session_id=f"anon-{n}")).set("junk", n)
    assert len(alice.list(scope="user")) == 10
    plugin.close()


# -- the store capability, on every store -------------------------------------------------------

OWNER = "test:__quota__:{owner-a}"


def test_owned_writes_that_do_not_happen_charge_nothing(store: Store) -> None:
    """An NX write that loses, a compare-and-set that misses and a refused write leave the
    owner's usage as it was (on a cluster: the reservation is restored)."""
    assert isinstance(store, OwnedWrites)
    key = "test:v2:user:a:k"
    assert store.write_owned(OwnedWrite(key, "v1", owner=OWNER, quota=(2, None)))
    held = store.owner_usage(OWNER)
    assert held == (1, len(key) + 2)
    longer = OwnedWrite(key, "longer", owner=OWNER, quota=(2, None), only_if_absent=True)
    assert not store.write_owned(longer)
    missed = OwnedWrite(key, "longer", owner=OWNER, quota=(2, None), expected="nope")
    assert not store.write_owned(missed)
    assert store.owner_usage(OWNER) == held
    assert store.write_owned(OwnedWrite(key, "v2!", owner=OWNER, quota=(2, None), expected="v1"))
    assert store.owner_usage(OWNER) == (1, len(key) + 3)
    store.write_owned(OwnedWrite("test:v2:user:a:k2", "x", owner=OWNER, quota=(2, None)))
    with pytest.raises(RememberQuotaError):
        store.write_owned(OwnedWrite("test:v2:user:a:k3", "x", owner=OWNER, quota=(2, None)))
    assert store.get("test:v2:user:a:k3") is None
    assert store.owner_usage(OWNER)[0] == 2
    assert store.delete_owned(OWNER, key, "test:v2:user:a:k2", "test:v2:user:a:gone") == 2
    assert store.owner_usage(OWNER) == (0, 0)


def test_owned_write_bad_owner_is_refused(store: Store) -> None:
    """The owner tag is checked like a key: not a str, nothing written."""
    assert isinstance(store, OwnedWrites)
    with pytest.raises(TypeError):
        store.write_owned(OwnedWrite("test:k", "v", owner=5))  # type: ignore[arg-type]
    assert store.get("test:k") is None


def test_a_ledger_expires_with_its_owners_entries(redis_store: Any) -> None:
    """Redis: the ledger's two keys live until the latest deadline plus a minute, and
    persist while an entry without a deadline is charged."""
    client = redis_store.client
    sizes = OWNER + "#sizes"  # the ledger's second key (docs/many-users.rst)
    slack = 60_000  # a ledger outlives its latest deadline by a minute
    redis_store.write_owned(OwnedWrite("test:a", "v", owner=OWNER, ttl_ms=5_000))
    for name in (OWNER, sizes):
        assert 5_000 < client.pttl(name) <= 5_000 + slack
    redis_store.write_owned(OwnedWrite("test:b", "v", owner=OWNER))
    assert client.pttl(OWNER) == -1 and client.pttl(sizes) == -1
    redis_store.delete_owned(OWNER, "test:b")
    assert 0 < client.pttl(OWNER) <= 5_000 + slack
    redis_store.delete_owned(OWNER, "test:a")
    assert client.exists(OWNER, sizes) == 0


def test_quota_through_sentinel_with_wait(sentinel_set_factory: Any) -> None:
    """Sentinel (with WAIT for a replica): the same one-script quota; a refused write is
    not written on the primary nor reported as unreplicated."""
    sentinels = sentinel_set_factory()
    store = RedisStore(
        sentinels=sentinels.addresses, service_name=SENTINEL_SERVICE, wait_replicas=1
    )
    plugin = RememberPlugin.init(
        store=store, quota={"entries": 2}, encryption={"secrets": ["q" * 32]},
        skip_legacy_purge=True, background_reindex=False,
    )  # fmt: skip
    try:
        alice = plugin.accessor(ALICE)
        alice.set("a", 1, scope="user")
        alice.set("b", 2, scope="session")
        with pytest.raises(RememberQuotaError):
            alice.set("c", 3, scope="user")
        assert alice.forget("a", scope="user")
        alice.set("c", 3, scope="user")
        assert alice.get("c", scope="user") == 3
    finally:
        plugin.close()
        store.close()


def test_entries_deleted_outside_the_library_stop_counting(
    make_plugin: Any, store_kind: str
) -> None:
    """An entry deleted by another program (no ledger kept) no longer counts once a write
    would be refused: the memory store always knows; Redis and Vercel KV check the
    ledger's entries then (at most once a minute per principal).  On a cluster the
    ledger cannot see the entries: the charge stays until the principal forgets the key."""
    plugin = make_plugin(quota={"entries": 2})
    alice = plugin.accessor(ALICE)
    alice.set("a", 1, scope="user")
    alice.set("b", 2, scope="user")
    assert plugin.store.delete(_skey(plugin, ALICE, "a")) == 1  # behind the ledger's back
    if store_kind == "redis_cluster":
        with pytest.raises(RememberQuotaError):
            alice.set("c", 3, scope="user")
        assert not alice.forget("a", scope="user")  # nothing there, but the charge goes
    alice.set("c", 3, scope="user")
    with pytest.raises(RememberQuotaError):
        alice.set("d", 4, scope="user")
