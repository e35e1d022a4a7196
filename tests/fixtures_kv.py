"""Vercel KV fixtures: an Upstash-REST emulator on its own throw-away redis-server.

The emulator is session-scoped; each test gets a flushed database, no pending
faults and an empty request log.  Under ``CI`` a missing ``redis-server``
fails the run instead of skipping the Vercel KV tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from remember_sync.stores.vercel_kv import VercelKVStore
from remember_sync.testing.kv_emulator import KVEmulator
from remember_sync.testing.redis_server import RedisServer
from tests.fixtures_redis import redis_binary

#: The emulator's bearer token (a test credential, never a real one).
KV_TEST_TOKEN = "kv-test-token-AbC123xyz"


@pytest.fixture(scope="session")
def kv_redis_server() -> Iterator[RedisServer]:
    """The redis-server behind the emulator (separate from the Redis store's server)."""
    binary = redis_binary()
    server = RedisServer(binary).start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def kv_emulator(kv_redis_server: RedisServer) -> Iterator[KVEmulator]:
    """An Upstash-REST emulator on 127.0.0.1, accepting ``KV_TEST_TOKEN``."""
    with KVEmulator(kv_redis_server.url, KV_TEST_TOKEN) as emulator:
        yield emulator


@pytest.fixture
def kv_redis(kv_redis_server: RedisServer, kv_emulator: KVEmulator) -> Iterator[redis.Redis]:
    """A plain redis-py client on the emulator's flushed backing database."""
    kv_emulator.clear_faults()
    # A request a previous test gave up on (injected delay) still runs: let it
    # finish before flushing and resetting, or it lands in this test's data/log.
    assert kv_emulator.wait_idle(), "a KV emulator request is still running after 5 s"
    client = kv_redis_server.client()
    client.flushdb()
    kv_emulator.reset_log()
    yield client
    kv_emulator.clear_faults()
    assert kv_emulator.wait_idle(), "a KV emulator request is still running after 5 s"
    client.close()


@pytest.fixture
def vercel_kv_store(kv_emulator: KVEmulator, kv_redis: redis.Redis) -> Iterator[VercelKVStore]:
    """A VercelKVStore pointed at the emulator, on an empty database."""
    store = VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, environ={})
    yield store
    store.close()
