"""RedisStore against real redis-server processes: standalone, 3-primary Cluster, own clients.

The store protocol itself is pinned by tests/test_store_conformance.py (which
runs on "redis" and "redis_cluster" too); this file pins what only Redis has:
the raw keys and values a plain redis-py client sees, PTTL, atomicity of
``update`` under real concurrency, cluster slot handling, outages and
restarts, URLs, client ownership, the plugin's Redis types and 1.8.0 interop.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis
import redis.cluster
import redis.exceptions
import redis.sentinel
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from remember_sync import RememberPlugin
from remember_sync.errors import (
    RememberConfigurationError,
    RememberIdentityError,
    RememberInputError,
    RememberStoreError,
)
from remember_sync.stores.base import Store
from remember_sync.stores.redis import EXCEPTION_MAP, RedisStore
from remember_sync.testing.redis_server import RedisCluster, RedisServer, find_redis_server
from remember_sync.types import BRANDS, Identity
from tests.conftest import TEST_SECRET, FakeClock, require_component, scan_items
from tests.vectors import VECTORS, vector_identity

IDENT = Identity(session_id="s-1", user_id="alice@example.com", tool_name="search:web")

Client = redis.Redis | redis.cluster.RedisCluster


@pytest.fixture
def redis_binary() -> str:
    """The redis-server executable, for private servers a test stops, freezes or locks."""
    binary = find_redis_server()
    require_component("redis-server", binary is not None, "needed for private test servers")
    assert binary is not None
    return binary


@pytest.fixture(params=["redis", "redis_cluster"])
def redis_pair(request: pytest.FixtureRequest) -> tuple[RedisStore, Client]:
    """(a RedisStore, a plain redis-py client on the same flushed server or cluster)."""
    if request.param == "redis":
        store: RedisStore = request.getfixturevalue("redis_store")
        plain: Client = request.getfixturevalue("redis_client")
    else:
        store = request.getfixturevalue("redis_cluster_store")
        plain = request.getfixturevalue("redis_cluster_client")
    return store, plain


def all_keys(client: Client) -> set[str]:
    """Every key but the bookkeeping ones (``remember:__``: listing indexes, records)."""
    keys = {k.decode() for k in client.scan_iter(match="*", count=1000)}
    return {k for k in keys if not k.startswith("remember:__")}


# -- raw keys, values and TTLs ---------------------------------------------------------


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _decrypt(stored: str, ikm: str, info: str, aad: str | None) -> dict[str, Any]:
    """Open an envelope with SPEC section 4's HKDF rules, independently of our crypto module."""
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"remember-plugin-v1", info=info.encode()
    ).derive(ikm.encode())
    env = json.loads(stored)
    iv, tag, data = _b64(env["iv"]), _b64(env["tag"]), _b64(env["data"])
    assert (len(iv), len(tag)) == (12, 16)
    plain = AESGCM(key).decrypt(iv, data + tag, None if aad is None else aad.encode())
    out: dict[str, Any] = json.loads(plain)
    return out


def test_raw_keys_are_spec_storage_keys_and_values_are_envelopes(
    redis_pair: tuple[RedisStore, Client], plugins: Callable[..., RememberPlugin]
) -> None:
    """A plain redis-py client sees SPEC section 3 keys and section 4 envelopes, nothing else."""
    store, plain = redis_pair
    mem = plugins(store=store).accessor(IDENT)
    mem.set("theme", "dark", scope="session")
    mem.set("theme", {"n": 1}, scope="user", brand="preference", metadata={"src": "api"})
    mem.set("x:y/\u00fc *", [1, 2], scope="tool")
    mem.set("theme", True, scope="global")
    s, u, t = "s-1", "alice@example.com", "search:web"
    expected = {
        "remember:v2:session:s-1:theme": (s, "remember:session:s-1", "dark"),
        "remember:v2:user:alice%40example.com:theme": (u, f"remember:user:{u}", {"n": 1}),
        "remember:v2:tool:search%3Aweb:s-1:x:y/\u00fc *": (s, f"remember:tool:{t}:{s}", [1, 2]),
        "remember:global:theme": ("", "remember:global", True),
    }
    assert all_keys(plain) == set(expected)
    for key, (ident_part, info, value) in expected.items():
        raw = plain.get(key)
        assert raw is not None
        env = json.loads(raw)
        assert list(env) == ["alg", "kid", "aad", "iv", "tag", "data"]
        assert env["alg"] == "A256GCM" and env["aad"] == "key"
        entry = _decrypt(raw.decode(), TEST_SECRET + ident_part, info, key[len("remember:") :])
        assert entry["value"] == value
        assert list(entry)[:1] == ["value"] and "expiresAt" not in entry
    user_entry = _decrypt(
        plain.get("remember:v2:user:alice%40example.com:theme").decode(),  # type: ignore[union-attr]
        TEST_SECRET + u,
        f"remember:user:{u}",
        "v2:user:alice%40example.com:theme",
    )
    assert list(user_entry) == ["value", "brand", "createdAt", "updatedAt", "metadata"]
    assert user_entry["brand"] == "preference" and user_entry["metadata"] == {"src": "api"}


def test_compatible_and_plaintext_modes_store_reference_forms(
    redis_store: RedisStore, redis_client: redis.Redis, plugins: Callable[..., RememberPlugin]
) -> None:
    """frontmcp_compatible writes the bare reference envelope; no encryption, the entry JSON."""
    compat = plugins(
        store=redis_store, encryption={"secrets": [TEST_SECRET], "frontmcp_compatible": True}
    ).accessor(IDENT)
    compat.set("c", "v", scope="session", ttl=60)
    raw = redis_client.get("remember:v2:session:s-1:c")
    assert raw is not None
    assert list(json.loads(raw)) == ["alg", "iv", "tag", "data"]
    entry = _decrypt(raw.decode(), TEST_SECRET + "s-1", "remember:session:s-1", None)
    assert entry["value"] == "v" and entry["expiresAt"] - entry["createdAt"] == 60_000

    plain = plugins(store=redis_store, encryption={"enabled": False}, key_prefix="app:")
    plain.accessor(IDENT).set("p", {"x": "\u00e9"}, scope="global", brand="cache")
    text = redis_client.get("app:global:p")
    assert text is not None
    created = json.loads(text)["createdAt"]
    assert text.decode() == (
        f'{{"value":{{"x":"\u00e9"}},"brand":"cache","createdAt":{created},"updatedAt":{created}}}'
    )


def test_pttl_equals_remaining_time(
    redis_pair: tuple[RedisStore, Client],
    plugins: Callable[..., RememberPlugin],
    clock: FakeClock,
) -> None:
    """PTTL is the entry's remaining time (+-50 ms) after set, update and default_ttl."""
    store, plain = redis_pair
    mem = plugins(store=store, default_ttl=300, clock=clock).accessor(IDENT)
    key = "remember:v2:session:s-1:k"

    def check() -> None:
        entry = mem.get_entry("k")
        assert entry is not None and entry.expires_at is not None
        pttl = plain.pttl(key)
        assert abs(pttl - (entry.expires_at - clock())) <= 50, (pttl, entry)

    mem.set("k", "v", ttl=60)
    check()
    assert plain.pttl(key) > 59_000
    clock.advance(ms=200)  # so "keeps the deadline" differs measurably from "restarts the TTL"
    assert mem.update("k", "w") is True
    check()
    assert plain.pttl(key) < 59_900
    assert mem.update("k", "x", ttl=120) is True
    check()
    mem.set("k", "y")  # default_ttl
    check()
    assert plain.pttl(key) > 299_000
    no_ttl = plugins(store=store).accessor(IDENT)
    no_ttl.set("k", "z")
    assert plain.pttl(key) == -1


# -- update is atomic on real Redis ----------------------------------------------------

_BASE = 10**12  # the mutator's clock: created_at = _BASE + generation


def _brand(gen: int) -> str:
    return BRANDS[gen % len(BRANDS)]


def _update_race(store: Store, *, seconds: float = 1.0) -> tuple[list[str], dict[str, int]]:
    """8 threads update while one thread forgets/sets the same keys; return the violations.

    The mutator is the only thread that sets or forgets, and stamps every entry
    it creates (metadata gen g, brand for g, created_at = _BASE + g through its
    own clock).  Updates must keep those and must never write a forgotten key.
    """
    gen_clock = [_BASE]
    opts: dict[str, Any] = {
        "store": store,
        "skip_legacy_purge": True,
        "encryption": {"secrets": [TEST_SECRET]},
    }
    mutator = RememberPlugin.init(clock=lambda: gen_clock[0], **opts)
    updaters = RememberPlugin.init(**opts)
    ident = Identity(session_id="race")
    mut, upd = mutator.accessor(ident), updaters.accessor(ident)
    names = [f"k{i}" for i in range(4)]
    violations: list[str] = []
    outcomes: list[tuple[str, int, int, bool]] = []
    windows: dict[str, list[tuple[int, int]]] = {k: [] for k in names}
    stop = threading.Event()
    progressed = threading.Condition()  # notified by an updater after each update
    errors: list[BaseException] = []

    def consistent(where: str, key: str, entry: Any) -> None:
        gen = (entry.metadata or {}).get("gen")
        if (
            not isinstance(gen, int)
            or entry.brand != _brand(gen)
            or entry.created_at != _BASE + gen
        ):
            violations.append(f"{where}: {key} lost its set's fields: {entry}")

    def updater(tid: int) -> None:
        rnd = random.Random(tid)
        n = 0
        try:
            while not stop.is_set():
                key = rnd.choice(names)
                n += 1
                t0 = time.monotonic_ns()
                ok = upd.update(key, {"by": tid, "n": n})
                with progressed:
                    outcomes.append((key, t0, time.monotonic_ns(), ok))
                    progressed.notify_all()
                if ok:
                    entry = upd.get_entry(key)
                    if entry is not None:
                        consistent("updater", key, entry)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=updater, args=(i,)) for i in range(8)]
    state: dict[str, int | None] = {}
    opened: dict[str, int] = {}
    gen = 0

    def create(key: str) -> None:
        nonlocal gen
        gen += 1
        gen_clock[0] = _BASE + gen
        if key in opened:
            windows[key].append((opened.pop(key), time.monotonic_ns()))
        mut.set(key, {"gen": gen}, brand=_brand(gen), metadata={"gen": gen})
        state[key] = gen

    counts = {"forgets": 0, "sets": 0}
    try:
        for key in names:
            create(key)
        for t in threads:
            t.start()
        rnd = random.Random(0)
        began = time.monotonic()
        deadline = began + seconds
        # At least 25 forgets, however slowly the machine runs the mutator among the
        # updaters (bounded at five times the planned duration).
        while not errors and (
            time.monotonic() < deadline
            or (counts["forgets"] < 25 and time.monotonic() < began + 5 * seconds)
        ):
            key = rnd.choice(names)
            entry = mut.get_entry(key)
            current = state[key]
            if current is None:
                if entry is not None:
                    violations.append(f"mutator: {key} came back after forget: {entry}")
            elif entry is None:
                violations.append(f"mutator: {key} (gen {current}) vanished without a forget")
            else:
                consistent("mutator", key, entry)
                if (entry.metadata or {}).get("gen") != current:
                    violations.append(f"mutator: {key} holds {entry}, expected gen {current}")
            if current is not None and rnd.random() < 0.5:
                if not mut.forget(key):
                    violations.append(f"mutator: forget({key}) found nothing")
                opened[key] = time.monotonic_ns()
                state[key] = None
                counts["forgets"] += 1
            else:
                create(key)
                counts["sets"] += 1
            # Let at least one update run against this state before the next mutation.
            seen = len(outcomes)
            with progressed:
                progressed.wait_for(lambda: len(outcomes) > seen or bool(errors), timeout=5)
    finally:
        stop.set()
        for t in threads:
            t.join()
        mutator.close()
        updaters.close()
    if errors:
        raise errors[0]
    end = time.monotonic_ns() + 1
    for key, start in opened.items():
        windows[key].append((start, end))
    # An update that began after a forget finished and ended before the next set began ran
    # entirely while the key was absent: it must have returned False.
    for key, t0, t1, ok in outcomes:
        if ok and any(a < t0 and t1 < b for a, b in windows[key]):
            violations.append(f"update({key}) returned True while the key was forgotten")
    counts["updated"] = sum(1 for o in outcomes if o[3])
    counts["missed"] = sum(1 for o in outcomes if not o[3])
    return violations, counts


def test_update_is_atomic_against_forget_and_set(
    redis_pair: tuple[RedisStore, Client],
) -> None:
    """8 updaters vs a forget/set thread: no resurrection, created_at/brand/metadata kept."""
    store, _ = redis_pair
    violations, counts = _update_race(store)
    assert violations == []
    # The race really happened: updates both succeeded and found keys forgotten.
    assert counts["updated"] > 50 and counts["missed"] > 10 and counts["forgets"] > 20, counts


class _NonAtomicCAS:
    """A RedisStore whose compare-and-set is GET, compare, SET: the bug the Lua script prevents."""

    def __init__(self, inner: RedisStore) -> None:
        self.inner = inner

    def get(self, key: str) -> str | None:
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        return self.inner.get_many(keys)

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        return self.inner.set(key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        if self.inner.get(key) != expected:
            return False
        time.sleep(0.002)
        return self.inner.set(key, value, ttl_ms=ttl_ms)

    def delete(self, *keys: str) -> int:
        return self.inner.delete(*keys)

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        return self.inner.scan(pattern, count=count)

    def close(self) -> None:
        self.inner.close()


def test_atomicity_check_catches_a_non_atomic_compare_and_set(redis_store: RedisStore) -> None:
    """The race harness above does detect resurrection/lost sets when CAS is not atomic."""
    violations, _ = _update_race(_NonAtomicCAS(redis_store), seconds=1.0)
    assert violations, "a GET-then-SET compare-and-set went unnoticed"


# -- list across 20,000 foreign keys ---------------------------------------------------


def test_list_returns_only_this_namespace_among_20000_foreign_keys(
    redis_pair: tuple[RedisStore, Client], plugins: Callable[..., RememberPlugin]
) -> None:
    """list() sees exactly this namespace's keys, each once, among 20,000 look-alikes."""
    store, plain = redis_pair
    ident = Identity(session_id="a*b[1]", user_id="u")  # glob specials in the identity
    head = "remember:v2:session:a*b%5B1%5D:"
    decoys = [
        "remember:v2:session:aXb%5B1%5D:k{i}",  # would match an unescaped '*'
        "remember:v2:session:a*b%5B1%5D2:k{i}",  # longer session id
        "remember:v2:session:other-{i}:k{i}",
        "remember:v2:user:a*b%5B1%5D:k{i}",
        "remember:v2:tool:t:a*b%5B1%5D:k{i}",
        "remember:global:k{i}",
        "remember:remember:v2:session:a*b%5B1%5D:k{i}",  # 1.8.0 doubled prefix: not read
        "other:v2:session:a*b%5B1%5D:k{i}",
    ]
    pipe = plain.pipeline(transaction=False)
    for i in range(20_000):
        pipe.set(decoys[i % len(decoys)].format(i=i), "x")
    pipe.execute()
    mem = plugins(store=store).accessor(ident)
    own = [f"note-{i}" for i in range(1_100)] + ["a*[b]?", "\u2713 x:y"]
    for key in own:
        mem.set(key, key)
    assert len(all_keys(plain)) == 20_000 + len(own)
    assert all(plain.exists(head + k) for k in own[-2:])
    found = mem.list()
    assert found == sorted(own)
    assert mem.list(pattern="note-10??") == sorted(f"note-{i}" for i in range(1000, 1100))
    assert mem.list(pattern="a*[b]?") == ["a*[b]?"]
    entries = mem.entries()
    assert len(entries) == len(own) and all(e.value == k for k, e in entries.items())


# -- cluster specifics -------------------------------------------------------------------


def _cmdstat_calls(cluster: RedisCluster, command: str) -> int:
    total = 0
    for server in cluster.servers:
        c = server.client()
        try:
            stats = c.info("commandstats")
            total += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
        finally:
            c.close()
    return total


def _reset_stats(cluster: RedisCluster) -> None:
    for server in cluster.servers:
        c = server.client()
        try:
            c.config_resetstat()
        finally:
            c.close()


def test_cluster_get_many_sends_one_mget_per_slot_in_order(
    redis_cluster_store: RedisStore,
    redis_cluster_client: redis.cluster.RedisCluster,
    redis_cluster: RedisCluster,
) -> None:
    """On a cluster, get_many groups keys by hash slot (one MGET each) and keeps the order."""
    keys = [f"{{a}}:{i}" for i in range(20)] + [f"{{b}}:{i}" for i in range(10)] + ["solo"]
    random.Random(3).shuffle(keys)
    for key in keys[::2]:
        redis_cluster_store.set(key, "v:" + key)
    slots = {redis_cluster_client.keyslot(k) for k in keys}
    assert len(slots) == 3
    _reset_stats(redis_cluster)
    got = redis_cluster_store.get_many(keys)
    assert got == [("v:" + k) if i % 2 == 0 else None for i, k in enumerate(keys)]
    assert _cmdstat_calls(redis_cluster, "mget") == len(slots)


def test_cluster_delete_mixes_slots_and_counts_all(
    redis_cluster_store: RedisStore, redis_cluster_client: redis.cluster.RedisCluster
) -> None:
    """delete() takes keys of any slots in one call and returns the total removed."""
    keys = [f"del:{i}" for i in range(300)]
    for key in keys:
        redis_cluster_store.set(key, "v")
    assert len({redis_cluster_client.keyslot(k) for k in keys}) > 200
    assert redis_cluster_store.delete(*keys, "del:absent", "{x}absent") == 300
    assert all_keys(redis_cluster_client) == set()


def test_cluster_scan_covers_every_primary(
    redis_cluster_store: RedisStore,
    redis_cluster_client: redis.cluster.RedisCluster,
    redis_cluster: RedisCluster,
) -> None:
    """scan() finds keys on all three primaries, each once."""
    keys = {f"sc:{i}" for i in range(600)}
    for key in keys:
        redis_cluster_store.set(key, "v")
    per_node = []
    for server in redis_cluster.servers:
        c = server.client()
        try:
            per_node.append(c.dbsize())
        finally:
            c.close()
    assert len(per_node) == 3 and all(n > 100 for n in per_node), per_node
    found = list(redis_cluster_store.scan("sc:*", count=50))
    assert len(found) == len(keys) and set(found) == keys
    assert redis_cluster_store.is_cluster and redis_cluster_store.ping()


def test_compare_and_set_survives_an_empty_script_cache(
    redis_pair: tuple[RedisStore, Client],
) -> None:
    """After SCRIPT FLUSH (a restart, a failover) the CAS script is reloaded transparently."""
    store, plain = redis_pair
    store.set("cas", "a")
    assert store.compare_and_set("cas", "a", "b") is True
    plain.script_flush()
    assert store.compare_and_set("cas", "b", "c", ttl_ms=60_000) is True
    assert store.get("cas") == "c"
    assert 0 < plain.pttl("cas") <= 60_000


# -- text in, text out; error mapping ----------------------------------------------------


def test_decoding_client_and_any_text(redis_url: str, redis_client: redis.Redis) -> None:
    """A passed-in client with decode_responses=True works the same: str in, str out."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        store = RedisStore(client=client)
        value = '\x00\x01\t\n \u00e9 \U0001f389 "\\ \x7f'
        key = "k:\u2713:\U0001f389 [x]"
        assert store.set(key, value) is True
        assert store.get(key) == value
        assert store.get_many([key, "k:none"]) == [value, None]
        assert list(store.scan("k:\u2713:*")) == [key]
        assert store.compare_and_set(key, value, "new") is True
        assert redis_client.get(key) == b"new"
        assert store.delete(key) == 1
    finally:
        client.close()


def test_server_errors_become_store_errors(
    redis_store: RedisStore, redis_client: redis.Redis
) -> None:
    """A Redis error reply (WRONGTYPE) is a RememberStoreError caused by the redis-py error."""
    redis_client.rpush("list", "x")
    calls: list[Callable[[], object]] = [
        lambda: redis_store.get("list"),
        lambda: redis_store.compare_and_set("list", "a", "b"),
    ]
    for call in calls:
        with pytest.raises(RememberStoreError, match="WRONGTYPE") as info:
            call()
        assert isinstance(info.value.__cause__, redis.ResponseError)
    assert redis_store.get_many(["list"]) == [None]  # MGET reports non-strings as nil
    with pytest.raises(RememberInputError):
        redis_store.set("k", "v", ttl_ms=0)


def test_wrong_password_is_a_configuration_error(
    redis_binary: str, plugins: Callable[..., RememberPlugin]
) -> None:
    """Rejected credentials raise RememberConfigurationError naming the password."""
    with RedisServer(redis_binary) as server:
        admin = server.client()
        admin.config_set("requirepass", "right-pw")
        admin.close()
        for password in ("wrong-pw", None):
            store = RedisStore(port=server.port, password=password)
            with pytest.raises(RememberConfigurationError, match="password") as info:
                store.get("k")
            assert "wrong-pw" not in str(info.value)
            store.close()
        plugin = plugins(type="redis", config={"port": server.port, "password": "right-pw"})
        with pytest.raises(RememberConfigurationError, match="password"):
            plugins(type="redis", config={"port": server.port, "password": 5})
        plugin.accessor(IDENT).set("k", "v")
        assert plugin.accessor(IDENT).get("k") == "v"


def test_documented_acl_suffices_and_a_missing_permission_is_a_configuration_error(
    redis_binary: str,
) -> None:
    """The ACL in docs/redis.rst runs every operation; removing one is a configuration error."""
    with RedisServer(redis_binary) as server:
        admin = server.client()
        acl = "+get +set +mget +unlink +scan +evalsha +eval +script|load +ping".split()
        acl += "+zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zscan".split()
        acl += "+pttl +pexpireat +pexpire +persist +time +zscore +exists".split()
        admin.execute_command("ACL", "SETUSER", "mem", "on", ">pw", "~remember:*", "-@all", *acl)
        plugin = RememberPlugin.init(
            store=RedisStore(port=server.port, username="mem", password="pw"),
            skip_legacy_purge=True,
            encryption={"secrets": [TEST_SECRET]},
        )
        try:
            mem = plugin.accessor(IDENT)
            mem.set("k", 1, ttl=60)
            assert mem.update("k", 2) is True
            assert (mem.get("k"), mem.list(), mem.forget("k")) == (2, ["k"], True)
            mem.set("k", 1)
            admin.execute_command("ACL", "SETUSER", "mem", "-evalsha")
            with pytest.raises(RememberConfigurationError, match="permission"):
                mem.update("k", 3)
        finally:
            plugin.store.close()
            plugin.close()
            admin.close()


# -- outages -------------------------------------------------------------------------------


def _assert_store_error(call: Callable[[], object], *, within: float) -> None:
    started = time.monotonic()
    with pytest.raises(RememberStoreError) as info:
        call()
    elapsed = time.monotonic() - started
    assert elapsed < within, f"took {elapsed:.2f} s"
    assert not isinstance(info.value, redis.RedisError)
    assert isinstance(info.value.__cause__, redis.RedisError)
    assert str(info.value).startswith("Redis ")


def test_stopped_server_raises_store_errors_and_restart_recovers(
    redis_binary: str, plugins: Callable[..., RememberPlugin]
) -> None:
    """Every operation on a stopped server raises RememberStoreError fast; a restart heals."""
    server = RedisServer(redis_binary, persistence=True).start()
    try:
        plugin = plugins(type="redis", config={"port": server.port, "socket_timeout": 0.5})
        mem = plugin.accessor(IDENT)
        mem.set("kept", "before")
        for i in range(200):
            plugin.store.set(f"scan:{i}", "v")
        pages = plugin.store.scan("scan:*", count=5)
        first = next(pages)
        server.stop()
        _assert_store_error(lambda: list(pages), within=3)  # scan raises mid-iteration too
        calls: list[Callable[[], object]] = [
            lambda: mem.get("kept", default="DEFAULT"),
            lambda: mem.set("kept", "x"),
            lambda: mem.update("kept", "x"),
            lambda: mem.knows("kept"),
            lambda: mem.forget("kept"),
            lambda: mem.list(),
            lambda: mem.entries(),
        ]
        for call in calls:
            _assert_store_error(call, within=3)
        server.start()  # same port, same data directory
        assert mem.get("kept") == "before"
        assert mem.update("kept", "after") is True
        assert mem.get("kept") == "after"
        assert first.startswith("scan:")
    finally:
        server.cleanup()


def test_unresponsive_server_times_out_instead_of_hanging(
    redis_binary: str, plugins: Callable[..., RememberPlugin]
) -> None:
    """A frozen server (SIGSTOP) turns into RememberStoreError after socket_timeout x retries."""
    server = RedisServer(redis_binary).start()
    assert server.process is not None
    pid = server.process.pid
    try:
        plugin = plugins(type="redis", config={"port": server.port, "socket_timeout": 0.2})
        mem = plugin.accessor(IDENT)
        mem.set("k", "v")
        os.kill(pid, signal.SIGSTOP)
        try:
            _assert_store_error(lambda: mem.get("k"), within=3)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert mem.get("k") == "v"
    finally:
        server.cleanup()


# -- construction, URLs, ownership ---------------------------------------------------------


def test_from_url_uses_redis_py_parser(redis_binary: str) -> None:
    """from_url honours the URL's db and keeps passwords out of error messages."""
    with RedisServer(redis_binary) as server:
        store = RedisStore.from_url(f"redis://127.0.0.1:{server.port}/3")
        plain0, plain3 = server.client(), server.client(db=3)
        try:
            store.set("in-db-3", "v")
            assert plain3.get("in-db-3") == b"v"
            assert plain0.get("in-db-3") is None
        finally:
            plain0.close()
            plain3.close()
            store.close()
    with pytest.raises(RememberConfigurationError) as info:
        RedisStore.from_url("http://user:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in str(info.value) and "***" in str(info.value)
    with pytest.raises(RememberConfigurationError):
        RedisStore.from_url("")
    with pytest.raises(RememberConfigurationError, match="socket_timeout"):
        RedisStore(socket_timeout=0)
    with pytest.raises(RememberConfigurationError, match="retries"):
        RedisStore(retries=-1)
    with pytest.raises(RememberConfigurationError, match="client"):
        RedisStore(client=object())  # type: ignore[arg-type]
    with pytest.raises(RememberConfigurationError, match="port, password"):
        RedisStore(port=1, password="x", client=redis.Redis())


def _connection_names(checker: redis.Redis) -> list[str]:
    return [c.get("name", "") for c in checker.client_list()]


def test_passed_in_client_is_never_closed_and_own_client_is(
    redis_url: str, redis_client: redis.Redis, plugins: Callable[..., RememberPlugin]
) -> None:
    """plugin.close() leaves a passed-in client connected; an own client is disconnected."""
    mine = redis.Redis.from_url(redis_url, client_name="users-client")
    try:
        connection_id = mine.client_id()
        plugin = plugins(type="redis-client", client=mine)
        plugin.accessor(IDENT).set("k", "v")
        plugin.close()
        plugin.store.close()  # even closing the store directly leaves it alone
        # The first connection is still open (the plugin's background key-id check may
        # have added a second one to the client's pool; neither was closed).
        ids = {int(c["id"]) for c in redis_client.client_list() if c["name"] == "users-client"}
        assert connection_id in ids
        assert mine.ping()
        assert "users-client" in _connection_names(redis_client)
    finally:
        mine.close()

    owned = RedisStore.from_url(redis_url, client_name="store-owned")
    owned.set("k", "v")
    assert "store-owned" in _connection_names(redis_client)
    owned.close()
    # The server drops the connection asynchronously after the client closes it.
    deadline = time.monotonic() + 5
    while "store-owned" in _connection_names(redis_client) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "store-owned" not in _connection_names(redis_client)


def test_plugin_redis_types(
    redis_server: RedisServer | None,
    redis_url: str,
    redis_client: redis.Redis,
    redis_cluster_client: redis.cluster.RedisCluster,
    plugins: Callable[..., RememberPlugin],
) -> None:
    """type=redis (host/port and url), redis-client (plain and cluster) and global-store work."""
    users_client = redis.Redis.from_url(redis_url)
    built = [
        plugins(type="redis", config={"url": redis_url}),
        plugins(type="global-store", environ={"REDIS_URL": redis_url}),
        plugins(type="redis-client", client=users_client),
    ]
    if redis_server is not None:
        built.append(plugins(type="redis", config={"host": "127.0.0.1", "port": redis_server.port}))
    try:
        for i, plugin in enumerate(built):
            store = plugin.store
            assert isinstance(store, RedisStore) and not store.is_cluster
            plugin.accessor(IDENT).set(f"via-{i}", i, scope="user")
        stored = {k.decode() for k in redis_client.keys("remember:v2:user:*")}
        expected = {f"remember:v2:user:alice%40example.com:via-{i}" for i in range(len(built))}
        assert stored == expected
        assert built[0].accessor(IDENT).list(scope="user") == sorted(
            f"via-{i}" for i in range(len(built))
        )
    finally:
        users_client.close()

    cluster = plugins(type="redis-client", client=redis_cluster_client)
    assert isinstance(cluster.store, RedisStore) and cluster.store.is_cluster
    cluster.accessor(IDENT).set("c", "v", scope="tool")
    assert redis_cluster_client.get("remember:v2:tool:search%3Aweb:s-1:c") is not None


@pytest.mark.parametrize(
    ("config", "option"),
    [
        ({"port": "6380"}, "config.port"),
        ({"port": 0}, "config.port"),
        ({"db": -1}, "config.db"),
        ({"ssl": "yes"}, "config.ssl"),
        ({"socket_timeout": 0}, "config.socket_timeout"),
        ({"url": "redis://127.0.0.1:1/0", "host": "h"}, "config.url"),
        ({"url": 5}, "config.url"),
        ({"hostname": "h"}, "config"),
    ],
)
def test_plugin_redis_config_is_validated(config: dict[str, Any], option: str) -> None:
    """A bad Redis config raises RememberConfigurationError naming the option, before any I/O."""
    with pytest.raises(RememberConfigurationError, match=f"'{option}"):
        RememberPlugin.init(type="redis", config=config, skip_legacy_purge=True)


def test_plugin_global_store_without_configuration_fails() -> None:
    """global-store with neither REDIS_URL nor Vercel KV variables is a configuration error."""
    with pytest.raises(RememberConfigurationError) as info:
        RememberPlugin.init(type="global-store", environ={"X": "1"}, skip_legacy_purge=True)
    assert info.value.code == "GLOBAL_CONFIG_NOT_FOUND"


# -- 1.8.0 interop ---------------------------------------------------------------------------


def _refused(vector: dict[str, Any]) -> bool:
    """The vectors the SPEC refuses: an anon: user, and tool scope without a running tool."""
    ident = vector_identity(vector)
    anon_user = vector["scope"] == "user" and (ident.user_id or "anon:").startswith("anon:")
    return anon_user or (vector["scope"] == "tool" and ident.tool_name is None)


_REDIS_VECTORS = [
    v for v in VECTORS if v["store"] == "redis" or v["store"].startswith("vercel-kv")
]


@pytest.mark.parametrize("vector", _REDIS_VECTORS, ids=[v["name"] for v in _REDIS_VECTORS])
def test_reads_what_frontmcp_1_8_0_wrote_to_redis(
    vector: dict[str, Any], redis_client: redis.Redis, plugins: Callable[..., RememberPlugin]
) -> None:
    """Every 1.8.0 Redis (and Vercel KV) vector, stored raw under its doubled key, reads back."""
    redis_client.set(vector["rawRedisKey"], vector["rawStoredValue"])
    written_at = json.loads(vector["plaintext"])["createdAt"]
    plugin = plugins(
        type="redis-client",
        client=redis_client,
        key_prefix=vector["keyPrefix"],
        read_doubled_prefix=True,
        encryption={"secrets": [vector["secret"]]} if vector["encrypted"] else {"enabled": False},
        clock=lambda: written_at + 1000,  # read as of just after 1.8.0 wrote it
    )
    mem = plugin.accessor(vector_identity(vector))
    if _refused(vector):
        with pytest.raises(RememberIdentityError):
            mem.get(vector["key"], scope=vector["scope"])
        return
    assert mem.get(vector["key"], scope=vector["scope"], default="MISSING") == vector["value"]
    assert mem.list(scope=vector["scope"]) == [vector["key"]]
    assert plugin.stats()["unreadable"] == 0


def test_interop_vectors_cover_both_refusals() -> None:
    """Two of the Redis vectors are ones the SPEC refuses (anon: user, tool without a tool)."""
    assert sum(map(_refused, _REDIS_VECTORS)) == 2
    assert len(_REDIS_VECTORS) == len(VECTORS) == 16


# -- reply parsers -----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_store_works_with_redis_py_pure_python_parsers(
    redis_url: str, redis_client: redis.Redis, protocol: int
) -> None:
    """hiredis is optional: with redis-py's own RESP2/RESP3 parsers every operation agrees."""
    from redis._parsers import _RESP2Parser, _RESP3Parser

    parser = _RESP2Parser if protocol == 2 else _RESP3Parser
    pool = redis.ConnectionPool.from_url(redis_url, parser_class=parser, protocol=protocol)
    client = redis.Redis(connection_pool=pool)
    try:
        assert isinstance(client.connection_pool.get_connection()._parser, parser)
        store = RedisStore(client=client)
        values = {f"pp:{i}": f"v{i} \u2713" for i in range(150)}
        for key, value in values.items():
            assert store.set(key, value) is True
        assert store.get("pp:7") == "v7 \u2713"
        assert store.get_many(["pp:1", "pp:missing"]) == ["v1 \u2713", None]
        assert store.compare_and_set("pp:1", "v1 \u2713", "new") is True
        values["pp:1"] = "new"
        assert sorted(store.scan("pp:*")) == sorted(values)
        assert dict(scan_items(store, "pp:*", count=20)) == values
        assert store.delete("pp:1", "pp:missing") == 1
    finally:
        client.close()


# -- scan_pages: the remembered page keys --------------------------------------------------------


class _CountingClient:
    """Counts the round trips a RedisStore makes through its client."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name in ("scan", "mget", "pipeline", "execute_command"):
            self.calls.append(name)
        return attr


@pytest.mark.parametrize("count", [1000, 7])
def test_scan_pages_pipelines_the_values_of_remembered_pages(
    redis_store: RedisStore, count: int
) -> None:
    """A repeated walk reads each page in one round trip; changes in between are all seen."""
    for i in range(40):
        redis_store.set(f"g:{i}", f"v{i}")
    first = dict(scan_items(redis_store, "g:*", count=count))
    assert first == {f"g:{i}": f"v{i}" for i in range(40)}

    spy = _CountingClient(redis_store.client)  # type: ignore[arg-type]
    redis_store._client = spy
    # Unchanged: one pipeline (SCAN + MGET together) per page, nothing else.
    assert dict(scan_items(redis_store, "g:*", count=count)) == first
    if count == 1000:
        assert spy.calls == ["pipeline"]

    # Changed: a new key, a deleted key, a new value and an expired key.
    redis_store.set("g:new", "fresh")
    redis_store.delete("g:3")
    redis_store.set("g:4", "changed")
    redis_store.set("g:5", "short", ttl_ms=1)
    deadline = time.monotonic() + 5
    while redis_store.get("g:5") is not None:  # an explicit wait: 1 ms on the server's clock
        assert time.monotonic() < deadline
    expected = {f"g:{i}": f"v{i}" for i in range(40) if i not in (3, 4, 5)}
    expected.update({"g:new": "fresh", "g:4": "changed"})
    spy.calls.clear()
    assert dict(scan_items(redis_store, "g:*", count=count)) == expected
    # The new key was not remembered: its value took one more MGET.
    assert spy.calls.count("mget") >= 1
    spy.calls.clear()
    assert dict(scan_items(redis_store, "g:*", count=count)) == expected
    if count == 1000:
        # One page from cursor 0 holds every key.  (Small pages may move between walks
        # while Redis resizes its table: then correct, but not all guessed.)
        assert spy.calls == ["pipeline"]


def test_remembered_pages_are_bounded(redis_store: RedisStore) -> None:
    """The store remembers at most 512 pages of at most 500 keys."""
    for i in range(600):
        redis_store.set(f"big:{i}", "v")
    for i in range(300):
        redis_store.set(f"ns{i}:k", "v")
    assert len(dict(scan_items(redis_store, "big:*"))) == 600
    assert redis_store._guesses.get((b"big:*", 1000, 0)) is None  # > 500 keys
    for i in range(300):
        assert dict(scan_items(redis_store, f"ns{i}:*")) == {f"ns{i}:k": "v"}
    assert 0 < len(redis_store._guesses) <= 512


# -- every driver exception is mapped (STYLE 13) -----------------------------------------------


def test_every_redis_exception_is_mapped() -> None:
    """Each exception class redis-py defines has its own row in the store's map."""
    modules = (redis.exceptions, redis.sentinel, redis.cluster, redis.client)
    defined = {
        cls
        for module in modules
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__.startswith("redis.")
    }
    assert defined, "redis-py's exceptions were not found"
    assert sorted(c.__name__ for c in defined - set(EXCEPTION_MAP)) == []


class _Raising(redis.Redis):
    """A client whose every command raises *exc* (no server involved)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(port=1)
        self.exc = exc

    def execute_command(self, *args: Any, **options: Any) -> Any:
        raise self.exc


def _example(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, redis.exceptions.AskError):
        return cls("3999 127.0.0.1:6381")  # the reply redis-py parses
    if issubclass(cls, redis.sentinel.MasterNotFoundError):  # the store's "no primary" error
        return cls("No master found for 'mymaster': sentinel x failed")
    return cls("boom")


@pytest.mark.parametrize(
    ("driver_error", "remember_error"),
    [(cls, kind) for cls, (kind, _) in EXCEPTION_MAP.items()],
    ids=[cls.__name__ for cls in EXCEPTION_MAP],
)
def test_each_mapped_exception_becomes_its_remember_error(
    driver_error: type[BaseException], remember_error: type[Exception]
) -> None:
    """The store raises the mapped remember error, with the driver's exception as cause."""
    exc = _example(driver_error)
    store = RedisStore(client=_Raising(exc))
    with pytest.raises(remember_error, match="^Redis GET failed: ") as info:
        store.get("k")
    assert type(info.value) is remember_error
    assert info.value.__cause__ is exc
