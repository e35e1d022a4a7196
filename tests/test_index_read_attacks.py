"""Outside review of the standalone Redis index read (``ZRANGE`` of a small index whole).

An index of at most ``count`` members is read with one ``ZRANGE`` and matched
by the client; a bigger one is walked with ``ZSCAN MATCH`` by the server.  The
two must agree on what a glob matches, whatever the keys hold, and the
per-store cache of last time's members must not outlive the read it serves.
"""

from __future__ import annotations

import pytest
import redis

from remember_sync import Identity, RememberPlugin
from remember_sync.errors import RememberStoreError
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisServer, find_redis_server
from tests.conftest import TEST_SECRET

P = "remember:"
#: Session ``s-1``'s keys and its listing index (SPEC section 3; ``P + "__index__:"`` + head).
HEAD = P + "v2:session:s-1:"
INDEX = P + "__index__:v2:session:s-1:"


def _index_of(key: str) -> str | None:
    """The library's index layout for the keys these tests write: session s-1's entries."""
    return INDEX if key.startswith(HEAD) and len(key) > len(HEAD) else None


def _indexed(store: RedisStore) -> RedisStore:
    store.use_index(_index_of)
    return store


def _walk(store: RedisStore, pattern: str, count: int) -> dict[str, str]:
    """Every pair ``index_pages`` yields for ``HEAD + pattern``, each key once."""
    out: dict[str, str] = {}
    # HEAD holds no glob special: the pattern is HEAD as it is, then the glob.
    for page in store.index_pages(INDEX, HEAD + pattern, count=count):
        for key, value in page:
            assert key not in out, key
            out[key] = value
    return out


@pytest.mark.parametrize("count", [1000, 1])
def test_a_glob_matches_byte_by_byte_whole_or_paged(
    redis_store: RedisStore, redis_client: redis.Redis, count: int
) -> None:
    """``?`` and ``[...]`` match one *byte*, as the server's ZSCAN MATCH does: a whole read
    (client-side match) yields what a paged one (server-side) yields, for keys that are
    not ASCII and keys that are not UTF-8 written by someone else."""
    store = _indexed(redis_store)
    ascii_key, two_bytes, not_utf8 = f"{HEAD}e1", f"{HEAD}\u00e91", HEAD.encode() + b"\xff1"
    store.set(ascii_key, "a")
    store.set(two_bytes, "b")
    redis_client.set(not_utf8, "c")
    assert store.add_to_index([not_utf8.decode("utf-8", "surrogateescape")]) == 1
    foreign = not_utf8.decode("utf-8", "surrogateescape")
    cases = {
        "?1": {ascii_key: "a", foreign: "c"},
        "??1": {two_bytes: "b"},
        "[\u00e9]1": {},
        "[e\u00e9]1": {ascii_key: "a"},
        "*1": {ascii_key: "a", two_bytes: "b", foreign: "c"},
        "\u00e9*": {two_bytes: "b"},
    }
    for pattern, want in cases.items():
        assert _walk(store, pattern, count) == want, pattern


def _lookups(client: redis.Redis) -> int:
    stats = client.info("stats")
    return int(stats["keyspace_hits"]) + int(stats["keyspace_misses"])


def _read_cost(store: RedisStore, client: redis.Redis, count: int) -> int:
    """Keys the server looked up for one read of the whole namespace (after two warm-ups)."""
    _walk(store, "*", count)
    _walk(store, "*", count)
    before = _lookups(client)
    _walk(store, "*", count)
    return _lookups(client) - before


def test_an_index_growing_past_count_and_shrinking_back_reads_exactly_at_the_paged_cost(
    redis_store: RedisStore, redis_client: redis.Redis, redis_url: str
) -> None:
    """An index read whole, then grown past ``count`` (paged), then shrunk back: every read
    is exact, and while it is paged no read still fetches the members the whole read
    remembered (a fresh store's read costs the same)."""
    store, count = _indexed(redis_store), 20
    want = {f"{HEAD}k{i:02d}": f"v{i}" for i in range(10)}
    for key, value in want.items():
        store.set(key, value)
    assert _walk(store, "*", count) == want
    assert _walk(store, "*", count) == want  # from the remembered members
    grown = {f"{HEAD}g{i:02d}": "g" for i in range(15)}
    for key, value in grown.items():
        store.set(key, value)
    assert _walk(store, "*", count) == want | grown
    fresh = _indexed(RedisStore.from_url(redis_url))
    try:
        assert _read_cost(store, redis_client, count) == _read_cost(fresh, redis_client, count)
    finally:
        fresh.close()
    store.delete(*grown, f"{HEAD}k00")
    del want[f"{HEAD}k00"]
    store.set(f"{HEAD}k01", "changed")
    want[f"{HEAD}k01"] = "changed"
    assert _walk(store, "*", count) == want
    assert _walk(store, "*", count) == want


@pytest.mark.parametrize("count", [1000, 1])
def test_a_decoding_client_reads_around_a_member_that_is_not_utf8(
    redis_store: RedisStore, redis_client: redis.Redis, redis_url: str, count: int
) -> None:
    """Someone puts a member that is not UTF-8 into the index.  A client built with
    decode_responses=True cannot read it: a read whose glob covers it fails with an error
    saying so (never "nothing found"); one whose glob does not is not affected, whole or
    paged -- as the server's ZSCAN MATCH leaves such a member out."""
    store = _indexed(redis_store)
    for i in range(3):
        store.set(f"{HEAD}k{i}", f"v{i}")
    junk = HEAD.encode() + b"\xff\xfe"
    redis_client.set(junk, "junk")
    redis_client.zadd(INDEX, {junk: 0})
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        decoding = _indexed(RedisStore(client=client))
        want = {f"{HEAD}k{i}": f"v{i}" for i in range(3)}
        for _ in range(2):  # the second read starts from the remembered members
            assert _walk(decoding, "k*", count) == want
        with pytest.raises(RememberStoreError, match="not UTF-8"):
            _walk(decoding, "*", count)
        assert _walk(decoding, "k*", count) == want  # and the connection is still sound
    finally:
        client.close()


@pytest.mark.parametrize("count", [1000, 1])
def test_a_member_whose_key_now_holds_another_type_is_left_out_and_dropped(
    redis_store: RedisStore, redis_client: redis.Redis, count: int
) -> None:
    """Someone replaces an entry by a hash behind the index's back: it is no entry, so it
    is neither listed nor kept in the index (docs/redis.rst: "not a string" members are
    dropped, as Vercel KV's read does) -- and the hash itself is left alone."""
    store = _indexed(redis_store)
    for i in range(3):
        store.set(f"{HEAD}k{i}", f"v{i}")
    redis_client.delete(f"{HEAD}k1")
    redis_client.hset(f"{HEAD}k1", "field", "theirs")
    want = {f"{HEAD}k0": "v0", f"{HEAD}k2": "v2"}
    assert _walk(store, "*", count) == want
    assert sorted(redis_client.zrange(INDEX, 0, -1)) == [k.encode() for k in want]
    assert redis_client.hgetall(f"{HEAD}k1") == {b"field": b"theirs"}
    assert _walk(store, "*", count) == want


#: The ACL docs/redis.rst recommends ("Recommended ACL").
DOCUMENTED_ACL = (
    "+get +set +mget +unlink +scan +evalsha +eval +script|load +ping "
    "+zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zscan "
    "+pttl +pexpireat +pexpire +persist +time +zscore +exists"
).split()


def test_the_documented_acl_reads_whole_and_paged_and_drops_members_of_another_type() -> None:
    """As the user of the documented ACL: whole and paged reads, and the pruning script
    (EXISTS, then GET for the type), run without a denial in ACL LOG."""
    binary = find_redis_server()
    assert binary is not None
    with RedisServer(binary) as server:
        admin = server.client()
        try:
            admin.execute_command(  # type: ignore[no-untyped-call]
                "ACL", "SETUSER", "mem", "on", ">pw", "~remember:*", "-@all", *DOCUMENTED_ACL
            )
            store = _indexed(RedisStore(port=server.port, username="mem", password="pw"))
            try:
                for i in range(4):
                    store.set(f"{HEAD}k{i}", f"v{i}")
                admin.delete(f"{HEAD}k1", f"{HEAD}k2")
                admin.hset(f"{HEAD}k2", "field", "theirs")
                want = {f"{HEAD}k0": "v0", f"{HEAD}k3": "v3"}
                for count in (1000, 1, 1000):
                    assert _walk(store, "*", count) == want
                assert sorted(admin.zrange(INDEX, 0, -1)) == [k.encode() for k in want]
                # (Redis 6.2 logs redis-py's CLIENT SETINFO at connect, which it ignores;
                # 7.0 rejects the unknown subcommand before the ACL check.)
                log = admin.execute_command("ACL", "LOG")  # type: ignore[no-untyped-call]
                assert [e for e in log if e[b"object"] != b"client"] == [], log
            finally:
                store.close()
        finally:
            admin.close()


@pytest.mark.parametrize("listing", ["index", "scan"])
def test_a_key_that_is_not_utf8_in_the_namespace_is_kept_as_unreadable(
    redis_client: redis.Redis, redis_url: str, listing: str
) -> None:
    """Someone writes ``<namespace head> + b"\\xff..."`` straight into Redis (and into the
    index): list, entries and forget_many of that namespace keep working -- the key is an
    entry they cannot read, so it is skipped and kept, never a raw UnicodeError."""
    redis_client.set(f"{P}__indexed__", "{}")
    plugin = RememberPlugin.init(
        store=RedisStore.from_url(redis_url), listing=listing,
        skip_legacy_purge=True, background_reindex=False,
        encryption={"secrets": [TEST_SECRET]},
    )
    try:
        mem = plugin.accessor(Identity(session_id="s-1", user_id="u-1"))
        mem.set("mine", 1)
        junk = HEAD.encode() + b"\xffjunk"
        redis_client.set(junk, "not an envelope")
        redis_client.zadd(INDEX, {junk: 9e15})
        assert (mem.list(), list(mem.entries())) == (["mine"], ["mine"])
        assert mem.list(pattern="*junk") == []
        assert mem.forget_many(pattern="*") == 1
        assert redis_client.get(junk) == b"not an envelope"
        assert mem.list() == []
    finally:
        plugin.store.close()
        plugin.close()
