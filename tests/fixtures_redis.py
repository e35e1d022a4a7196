"""Real redis-server fixtures: one standalone server and one 3-primary cluster per session.

Set ``REMEMBER_TEST_REDIS_URL`` to run against your own Redis instead of a
throw-away server (it is flushed between tests: never point it at data you
want to keep).  Under ``CI`` a missing ``redis-server`` fails the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisCluster, RedisServer, find_redis_server
from tests.conftest import require_component


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | None]:
    """A throw-away standalone server (``None`` when REMEMBER_TEST_REDIS_URL is used)."""
    if os.environ.get("REMEMBER_TEST_REDIS_URL"):
        yield None
        return
    binary = find_redis_server()
    require_component("redis-server", binary is not None, "not on PATH, REDIS_SERVER_BIN unset")
    server = RedisServer(binary).start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer | None) -> str:
    """URL of the standalone Redis used by the tests."""
    return os.environ.get("REMEMBER_TEST_REDIS_URL") or (redis_server.url if redis_server else "")


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A plain redis-py client on a flushed database (for checking raw keys)."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A throw-away 3-primary Redis Cluster on loopback."""
    binary = find_redis_server()
    require_component("redis-server", binary is not None, "not on PATH, REDIS_SERVER_BIN unset")
    cluster = RedisCluster(binary).start()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def redis_cluster_client(redis_cluster: RedisCluster) -> Iterator[redis.cluster.RedisCluster]:
    """A plain redis-py cluster client on a flushed cluster."""
    redis_cluster.flushall()
    client = redis_cluster.client()
    yield client
    client.close()


@pytest.fixture
def redis_store(redis_client: redis.Redis, redis_url: str) -> Iterator[RedisStore]:
    """A RedisStore that owns its client, on the flushed standalone server."""
    store = RedisStore.from_url(redis_url)
    yield store
    store.close()


@pytest.fixture
def redis_cluster_store(
    redis_cluster_client: redis.cluster.RedisCluster,
) -> Iterator[RedisStore]:
    """A RedisStore over a passed-in RedisCluster client, on the flushed cluster."""
    store = RedisStore(client=redis_cluster_client)
    yield store
    store.close()
