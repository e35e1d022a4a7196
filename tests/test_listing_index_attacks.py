"""Outside review of the listing index (issue 21): deployments attacking it.

Each test is one way a real deployment meets the index: two apps sharing a
store, an ACL user set up from the pre-index docs, hostile patterns, forked
workers, a reindex racing writers.  See the review report for what held.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from remember_sync import Identity, RememberPlugin
from remember_sync._keys import namespace_index_key, scope_prefix
from remember_sync.errors import RememberConfigurationError, RememberStoreError
from remember_sync.stores.base import Store
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisServer, find_redis_server
from remember_sync.types import Namespace
from tests.conftest import TEST_SECRET, FakeClock

ME = Identity(session_id="s-1", user_id="u-1")


def test_two_prefixes_sharing_one_store_each_list_their_own_writes(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """Two apps (key_prefix a:/b:) on ONE store object: a write made after the second
    app started is still listed by the first, and neither sees the other's keys."""
    first = make_plugin(key_prefix="a:")
    second = make_plugin(key_prefix="b:")
    assert first._core.index_usable() and second._core.index_usable()
    a, b = first.accessor(ME), second.accessor(ME)
    a.set("mine", 1)
    b.set("theirs", 2)
    assert a.list() == ["mine"] and set(a.entries()) == {"mine"}
    assert b.list() == ["theirs"] and set(b.entries()) == {"theirs"}
    assert a.forget_many(pattern="*") == 1
    assert (a.list(), b.list()) == ([], ["theirs"])


# -- ACL -------------------------------------------------------------------------------------

#: The recommended ACL of the releases before the index (docs/redis.rst, 1.x).
PRE_INDEX_ACL = "+get +set +mget +unlink +scan +evalsha +eval +script|load +ping".split()


def _acl_plugin(server: RedisServer, keys: str, acl: list[str]) -> RememberPlugin:
    admin = server.client()
    try:
        admin.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", "mem", "reset", "on", ">pw", keys, "-@all", *acl
        )
        admin.set("remember:__indexed__", "{}")  # the fleet's older entries are indexed
    finally:
        admin.close()
    return RememberPlugin.init(
        store=RedisStore(port=server.port, username="mem", password="pw"),
        skip_legacy_purge=True, background_reindex=False,
        encryption={"secrets": [TEST_SECRET]},
    )


@pytest.fixture
def acl_server() -> Any:
    binary = find_redis_server()
    assert binary is not None
    with RedisServer(binary) as server:
        yield server


def test_acl_user_without_sorted_set_commands_gets_a_configuration_error_naming_them(
    acl_server: RedisServer,
) -> None:
    """An operator who followed the pre-index ACL upgrades: every indexed operation is a
    RememberConfigurationError that says what to grant (or to list by scanning), and
    listing is never an empty "nothing found"."""
    plugin = _acl_plugin(acl_server, "~remember:*", PRE_INDEX_ACL)
    try:
        mem = plugin.accessor(ME)
        for call in (lambda: mem.set("k", 1), lambda: mem.forget("k")):
            with pytest.raises(RememberConfigurationError) as info:
                call()
            text = str(info.value)
            assert "sorted-set" in text and "listing='scan'" in text, text
        entry = scope_prefix("remember:", Namespace("session", session="s-1")) + "raw"
        with pytest.raises(RememberConfigurationError, match="sorted-set"):
            plugin.store.set(entry, "v")
        admin = acl_server.client()
        try:
            assert admin.keys("remember:v2:*") == []  # the failed sets wrote nothing
        finally:
            admin.close()
        with pytest.raises(RememberConfigurationError, match="sorted-set"):
            mem.list()
    finally:
        plugin.store.close()
        plugin.close()


def test_acl_user_whose_key_pattern_leaves_out_the_index_keys_gets_a_configuration_error(
    acl_server: RedisServer,
) -> None:
    """An ACL limited to the entry keys (~remember:v2:* ...) cannot touch the index keys:
    a configuration error, not a store outage."""
    acl = "+@all".split()
    plugin = _acl_plugin(acl_server, "~remember:v2:*", acl)
    try:
        mem = plugin.accessor(ME)
        with pytest.raises(RememberConfigurationError, match="permission"):
            mem.set("k", 1)
    finally:
        plugin.store.close()
        plugin.close()


def index_key_of_me(prefix: str) -> str:
    return namespace_index_key(prefix, scope_prefix(prefix, Namespace("session", session="s-1")))


# -- hostile patterns ------------------------------------------------------------------------


def test_hostile_patterns_on_the_index_stay_fast_and_exact(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """Patterns made to blow up a backtracking glob matcher, over the index."""
    plugin = make_plugin()
    mem = plugin.accessor(ME)
    keys = ["a" * 60, "a" * 59 + "b", "x*y", "x?y", "[ab]", "\\q", "a]b"]
    for key in keys:
        mem.set(key, 1)
    cases = {
        "a*" * 10 + "b": ["a" * 59 + "b"],
        "*a" * 9 + "*c": [],
        "x*y": ["x*y", "x?y"],
        "[ab]": ["[ab]"],
        "\\q": ["\\q"],
        "a]*": ["a]b"],
        "?" * 20: [],
    }
    for pattern, want in cases.items():
        started = time.perf_counter()
        assert mem.list(pattern=pattern) == sorted(want), pattern
        assert time.perf_counter() - started < 2.0, pattern


# -- forked workers ------------------------------------------------------------------------


def test_forked_workers_writing_and_forgetting_one_namespace_keep_the_index_exact(
    redis_url: str, redis_client: redis.Redis, clock: FakeClock
) -> None:
    """Four forked processes race set/forget/update on the same keys through one Redis;
    afterwards list() is exactly the keys with an entry."""
    plugin = RememberPlugin.init(
        store=RedisStore.from_url(redis_url), skip_legacy_purge=True,
        encryption={"secrets": [TEST_SECRET]},
    )
    try:
        assert plugin.index_backfill is not None and plugin.index_backfill.wait(30)
        keys = [f"k{i}" for i in range(6)]
        children = []
        for seed in range(4):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                code = 0
                try:
                    import random

                    rng = random.Random(seed)
                    mem = plugin.accessor(ME)
                    ops: list[Callable[[str], object]] = [
                        lambda k: mem.set(k, seed, ttl=rng.choice([None, 600])),
                        mem.forget,
                        lambda k: mem.update(k, -seed),
                        lambda k: mem.forget_many(pattern="k*" if rng.random() < 0.1 else k),
                    ]
                    for _ in range(150):
                        rng.choice(ops)(rng.choice(keys))
                except BaseException:  # noqa: BLE001 - the exit code reports it
                    code = 1
                os._exit(code)
            children.append(pid)
        for pid in children:
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
        mem = plugin.accessor(ME)
        live = sorted(k for k in keys if mem.get(k) is not None)
        assert mem.list() == live
        raw: list[bytes] = redis_client.zrange(index_key_of_me("remember:"), 0, -1)  # type: ignore[assignment]
        members = {m.decode() for m in raw}
        head = scope_prefix("remember:", Namespace("session", session="s-1"))
        assert {m[len(head) :] for m in members} == set(live)  # standalone: exact
    finally:
        plugin.store.close()
        plugin.close()


# -- writers that keep no index, beside an index-mode reader ---------------------------------


def test_a_writer_keeping_no_index_is_hidden_from_index_readers_until_a_reindex(
    redis_url: str, redis_store: RedisStore, redis_client: redis.Redis, clock: FakeClock
) -> None:
    """The documented limit (docs/redis.rst, "Writers that keep no index"): once the
    fleet record exists, entries written by a writer without the index -- a
    ``listing='scan'``/``frontmcp_compatible`` plugin, 1.8.0, or an older release
    during a rolling upgrade -- are not listed by index-mode plugins, and such a
    writer re-writing an indexed entry without its TTL hides it once the index key
    expires; ``remember-sync reindex`` after those writers are gone repairs both."""
    from remember_sync._ops.reindex import reindex

    common: dict[str, Any] = {
        "store": redis_store, "clock": clock, "skip_legacy_purge": True,
        "encryption": {"secrets": [TEST_SECRET]},
    }
    new = RememberPlugin.init(**common)
    try:
        assert new.index_backfill is not None and new.index_backfill.wait(30)
        assert new._core.index_usable()
        mem = new.accessor(ME)
        mem.set("brief", 1, ttl=1)
        old_store = RedisStore.from_url(redis_url)  # another process: its own store
        old = RememberPlugin.init(**{**common, "store": old_store}, listing="scan")
        try:
            old.accessor(ME).set("late", 2)  # after the fleet record
            old.accessor(ME).set("brief", 3)  # no TTL now, the index still says 1 s
            index = index_key_of_me("remember:")
            deadline = time.monotonic() + 10
            while redis_client.exists(index) and time.monotonic() < deadline:
                time.sleep(0.05)  # a server-side expiry we cannot be told about
            assert redis_client.exists(index) == 0
            assert mem.list() == []  # both hidden: the limit the docs state
            assert old.accessor(ME).list() == ["brief", "late"]  # scanning sees them
            reindex(redis_store, "remember:", clock=clock)
            assert mem.list() == ["brief", "late"]
        finally:
            old.close()
            old_store.close()
    finally:
        new.close()


# -- the background reindex: a pass that died, a pass that takes long ------------------------


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.02)


def test_a_reindex_killed_midway_is_taken_over_by_a_running_instance(
    redis_store: RedisStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instance running the fleet's pass is OOM-killed; its restart (or any running
    instance) meets the dead pass's lease: once the lease expires, one of them runs the
    pass -- the fleet does not scan for ever, waiting for a restart after the lease."""
    import remember_sync._purge as purge

    monkeypatch.setattr(purge, "INDEXING_RETRY_S", 0.05)
    redis_store.set("remember:__indexing__", "{}", ttl_ms=300)  # the dead instance's lease
    plugin = RememberPlugin.init(
        store=redis_store, clock=clock, skip_legacy_purge=True,
        encryption={"secrets": [TEST_SECRET]},
    )
    try:
        backfill = plugin.index_backfill
        assert backfill is not None and backfill.wait(30) and backfill.state == "elsewhere"
        _until(lambda: backfill.state == "indexed")
        assert redis_store.get("remember:__indexed__") is not None
    finally:
        plugin.close()


def test_a_pass_that_lost_its_lease_stops_and_leaves_the_new_holder_s_lease(
    redis_store: RedisStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass slower than its lease (a paused process, a huge Vercel KV): another instance
    took the lease over.  The first stops before its next batch, records nothing, and
    does not delete the new holder's lease (a third instance would start a third pass)."""
    from remember_sync._purge import IndexBackfill

    head = scope_prefix("remember:", Namespace("session", session="s-1"))
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


def test_a_foreign_value_at_an_index_key_fails_writes_before_they_happen(
    redis_store: RedisStore, redis_client: redis.Redis, clock: FakeClock
) -> None:
    """Someone else's string sits where a namespace's index goes: our writes and forgets
    fail without happening (no entry written or deleted behind an error), reads fail
    loudly rather than list nothing, and the foreign value is never touched."""
    plugin = RememberPlugin.init(
        store=redis_store, clock=clock, skip_legacy_purge=True,
        encryption={"secrets": [TEST_SECRET]},
    )
    assert plugin.index_backfill is not None and plugin.index_backfill.wait(30)
    mem = plugin.accessor(ME)
    mem.set("kept", 1)
    client = redis_client
    index = index_key_of_me("remember:")
    client.delete(index)
    client.set(index, "foreign")
    head = scope_prefix("remember:", Namespace("session", session="s-1"))
    with pytest.raises(RememberStoreError, match="WRONGTYPE"):
        mem.set("new", 2)
    assert client.exists(head + "new") == 0
    with pytest.raises(RememberStoreError, match="WRONGTYPE"):
        mem.forget("kept")
    assert client.exists(head + "kept") == 1
    with pytest.raises(RememberStoreError, match="WRONGTYPE"):
        mem.list()
    assert client.get(index) == b"foreign"
    plugin.close()


# -- memory: the groups and the bounds -------------------------------------------------------


@pytest.mark.parametrize("bounds", [{}, {"max_entries": 50}, {"max_bytes": 20_000}])
def test_memory_groups_never_outlive_their_entries(
    clock: FakeClock, bounds: dict[str, int]
) -> None:
    """A long-running server: many short sessions, each a namespace of its own.  Expired
    and evicted keys leave their groups; the groups never hold more keys than the store."""
    from remember_sync._keys import index_key_of
    from remember_sync.stores.memory import MemoryStore

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


# -- a reindex racing writers ----------------------------------------------------------------


def test_a_reindex_racing_writers_neither_resurrects_nor_loses_entries(
    make_plugin: Callable[..., RememberPlugin], store: Store, clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the reindex's SCAN and its batch, a writer forgets one older entry,
    re-writes another and adds a new one: afterwards list() is exactly what exists."""
    from remember_sync._ops.reindex import reindex

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
    import remember_sync._purge as purge
    from remember_sync.errors import RememberStoreError as StoreError

    monkeypatch.setattr(purge, "INDEXING_RETRY_S", 0.02)
    head = scope_prefix("remember:", Namespace("session", session="s-1"))
    redis_store.set(head + "old", "v")
    failures = iter([True, True])
    original = redis_store.add_to_index

    def flaky(keys: Any) -> int:
        if next(failures, False):
            raise StoreError("Redis reindex failed: Connection refused")
        return original(keys)

    monkeypatch.setattr(redis_store, "add_to_index", flaky)
    backfill = purge.IndexBackfill(redis_store, "remember:", clock=clock).start()
    try:
        _until(lambda: backfill.state == "indexed")
        assert redis_store.get("remember:__indexed__") is not None
        assert redis_store.get("remember:__indexing__") is None  # every lease released
    finally:
        backfill.stop()


# -- other applications' keys ----------------------------------------------------------------


def test_another_app_s_keys_are_never_listed_pruned_or_deleted(
    redis_url: str, redis_store: RedisStore, redis_client: redis.Redis, clock: FakeClock
) -> None:
    """A second app under a prefix nested in ours (remember:app2:), and a foreign sorted
    set sitting at one of our index keys naming other apps' keys: our listing, reindex,
    pruning and forget_many never show, drop or delete any of them."""
    other = RememberPlugin.init(
        store=RedisStore.from_url(redis_url), key_prefix="remember:app2:", clock=clock,
        skip_legacy_purge=True, encryption={"secrets": [TEST_SECRET]},
    )
    ours = RememberPlugin.init(
        store=redis_store, clock=clock, skip_legacy_purge=True,
        encryption={"secrets": [TEST_SECRET]},
    )
    try:
        for plugin in (other, ours):
            assert plugin.index_backfill is not None and plugin.index_backfill.wait(30)
        other.accessor(ME).set("theirs", 1)
        mem = ours.accessor(ME)
        mem.set("mine", 2)
        redis_client.set("app3:secret", "s")
        redis_client.zadd(index_key_of_me("remember:"), {"app3:secret": 1, "app3:gone": 1})
        names: list[bytes] = redis_client.keys("*")  # type: ignore[assignment]
        before = {k for k in names if not k.startswith(b"remember:v2:")}
        assert mem.list() == ["mine"] and mem.list(pattern="*secret*") == []
        assert mem.forget_many(pattern="*") == 1
        assert redis_client.get("app3:secret") == b"s"
        assert other.accessor(ME).list() == ["theirs"]
        after: set[bytes] = set(redis_client.keys("*"))  # type: ignore[arg-type]
        assert before - after <= {index_key_of_me("remember:").encode()}  # only our index
    finally:
        other.store.close()
        other.close()
        ours.close()
