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
from remember_sync.cli import main
from remember_sync.errors import RememberConfigurationError, RememberStoreError
from remember_sync.stores.base import Store
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisServer, find_redis_server
from tests.conftest import TEST_SECRET, FakeClock

ME = Identity(session_id="s-1", user_id="u-1")


def test_two_prefixes_sharing_one_store_each_list_their_own_writes(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """Two apps (key_prefix a:/b:) on ONE store object: a write made after the second
    app started is still listed by the first, and neither sees the other's keys."""
    first = make_plugin(key_prefix="a:")
    second = make_plugin(key_prefix="b:")
    for plugin in (first, second):  # each lists by its index: complete at once (memory),
        assert plugin.listing == "index"  # or the fleet's reindex recorded (docs/redis.rst)
        assert plugin.index_backfill is None or store.get(
            plugin.key_prefix + "__indexed__") is not None
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
        entry = "remember:v2:session:s-1:" + "raw"
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
    """The listing index of session ``s-1`` (SPEC section 3's head after ``P + "__index__:"``)."""
    return f"{prefix}__index__:v2:session:s-1:"


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
        head = "remember:v2:session:s-1:"
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

    common: dict[str, Any] = {
        "store": redis_store, "clock": clock, "skip_legacy_purge": True,
        "encryption": {"secrets": [TEST_SECRET]},
    }
    new = RememberPlugin.init(**common)
    try:
        assert new.index_backfill is not None and new.index_backfill.wait(30)
        assert new.listing == "index" and redis_store.get("remember:__indexed__") is not None
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
            assert main(["reindex", "--redis-url", redis_url]) == 0
            assert mem.list() == ["brief", "late"]
        finally:
            old.close()
            old_store.close()
    finally:
        new.close()


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
    head = "remember:v2:session:s-1:"
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
