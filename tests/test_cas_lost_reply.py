"""A compare-and-set whose reply is lost is applied once, never twice.

A real TCP proxy (:mod:`tests.reply_dropping_proxy`) sits between the store and
a real redis-server (standalone, the Sentinel-managed primary, every node of the
real 3-node Cluster): it lets the compare-and-set script run, then drops its
reply and closes the connection, so redis-py's connection retry sends the
script again.  ``increment`` must count once: with encryption off (every
attempt writes the same text) and with encryption on while another writer
changes the entry between the lost reply and the resend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import redis.cluster

from remember_sync import Identity, RememberPlugin
from remember_sync.accessor import RememberAccessor
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisCluster
from tests.conftest import TEST_SECRET, stored_key
from tests.fixtures_redis import SentinelSet
from tests.reply_dropping_proxy import ReplyDroppingProxy, proxied_cluster

WHO = Identity(session_id="s-lost", user_id="u-lost")


def _plugin(store: RedisStore, *, encrypted: bool, listing: str) -> RememberPlugin:
    encryption: dict[str, Any] = {"secrets": [TEST_SECRET]} if encrypted else {"enabled": False}
    return RememberPlugin.init(
        store=store, encryption=encryption, listing=listing, skip_legacy_purge=True
    )


def _arm_cas(
    mem: RememberAccessor, other: RememberPlugin, proxies: list[ReplyDroppingProxy], in_gap: Any
) -> int:
    """Counter at 2, the compare-and-set's reply to be lost; the count expected after."""
    mem.set("n", 1)
    assert mem.increment("n") == 2  # the script is cached: the armed call runs it
    # The compare-and-set is the one request that carries the stored value.
    raw = other.store.get(stored_key(other, "n"))
    assert raw is not None
    for proxy in proxies:
        proxy.arm(raw.encode(), in_gap)
    return 3 if in_gap is None else 4  # 2 + ours (+ the other writer's)


def _arm_create(
    mem: RememberAccessor, other: RememberPlugin, proxies: list[ReplyDroppingProxy], in_gap: Any
) -> int:
    """A missing counter, the create's reply to be lost; the count expected after."""
    assert mem.increment("warm") == 1  # the create's script is cached on the server
    key = stored_key(other, "warm")[: -len("warm")] + "n"
    # The create is the one request naming the key that is neither its read (GET)
    # nor, on a cluster, the index step: a request of its own naming the namespace's
    # listing index (P + "__index__:" + head), where the key is a member.  (Standalone,
    # the create itself updates the index.)
    unless = [b"\r\nGET\r\n"]
    if isinstance(other.store, RedisStore) and other.store.is_cluster:
        unless.append(f"{other.key_prefix}__index__:".encode())
    for proxy in proxies:
        proxy.arm(key.encode(), in_gap, unless=tuple(unless))
    return 1 if in_gap is None else 2  # ours (+ the other writer's)


def _one_lost_increment(
    make_store: Callable[[], RedisStore],
    direct_store: Callable[[], RedisStore],
    proxies: list[ReplyDroppingProxy],
    *,
    arm: Callable[..., int],
    encrypted: bool,
    listing: str,
) -> None:
    """One ``increment("n")`` through the proxies, whose reply *arm* set them to drop;
    encrypted, the other plugin (on the server directly) increments in the gap."""
    plugin = _plugin(make_store(), encrypted=encrypted, listing=listing)
    other = _plugin(direct_store(), encrypted=encrypted, listing=listing)
    try:
        mem = plugin.accessor(WHO)
        in_gap = (lambda: other.accessor(WHO).increment("n")) if encrypted else None
        expected = arm(mem, other, proxies, in_gap)
        mem.increment("n")
        assert any(p.dropped.is_set() for p in proxies), "no reply was dropped"
        assert other.accessor(WHO).get("n") == expected
        assert mem.get("n") == expected
    finally:
        for proxy in proxies:
            proxy.arm(b"\x00never\x00")
        plugin.close()
        other.close()


CASES = [
    pytest.param(False, "index", id="plain-indexed"),
    pytest.param(False, "scan", id="plain-unindexed"),
    pytest.param(True, "index", id="sealed-indexed-other-writer"),
    pytest.param(True, "scan", id="sealed-unindexed-other-writer"),
]


def _via(url: str, port: int) -> str:
    """*url* with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    where = f"127.0.0.1:{port}"
    return parts._replace(netloc=f"{userinfo}@{where}" if userinfo else where).geturl()


@pytest.fixture
def proxied_server(redis_url: str, redis_client: redis.Redis) -> Iterator[ReplyDroppingProxy]:
    """A proxy in front of the (flushed) standalone server."""
    where = urlsplit(redis_url)
    proxy = ReplyDroppingProxy(where.hostname or "127.0.0.1", where.port or 6379)
    yield proxy
    proxy.close()


@pytest.mark.parametrize("arm", [_arm_cas, _arm_create], ids=["cas", "create"])
@pytest.mark.parametrize(("encrypted", "listing"), CASES)
def test_standalone_lost_reply_counts_once(
    proxied_server: ReplyDroppingProxy, redis_url: str, encrypted: bool, listing: str,
    arm: Callable[..., int],
) -> None:
    _one_lost_increment(
        lambda: RedisStore.from_url(_via(redis_url, proxied_server.port)),
        lambda: RedisStore.from_url(redis_url),
        [proxied_server],
        arm=arm,
        encrypted=encrypted,
        listing=listing,
    )


@pytest.mark.parametrize("arm", [_arm_cas, _arm_create], ids=["cas", "create"])
@pytest.mark.parametrize(("encrypted", "listing"), CASES)
def test_cluster_lost_reply_counts_once(
    redis_cluster: RedisCluster,
    redis_cluster_client: redis.cluster.RedisCluster,
    encrypted: bool,
    listing: str,
    arm: Callable[..., int],
) -> None:
    with proxied_cluster(redis_cluster.startup_nodes, redis_cluster.client) as (client, proxies):
        _one_lost_increment(
            lambda: RedisStore(client=client),
            lambda: RedisStore(client=redis_cluster.client()),
            proxies,
            arm=arm,
            encrypted=encrypted,
            listing=listing,
        )


@pytest.mark.parametrize(("encrypted", "listing"), CASES[::3])
def test_sentinel_lost_reply_counts_once(
    sentinel_set_factory: Callable[..., SentinelSet],
    monkeypatch: pytest.MonkeyPatch,
    encrypted: bool,
    listing: str,
) -> None:
    sentinels = sentinel_set_factory()
    proxy = ReplyDroppingProxy("127.0.0.1", sentinels.primary_port())

    def through_proxy() -> RedisStore:
        store = RedisStore(sentinels=sentinels.addresses, service_name="mymaster")
        manager = store.client.connection_pool.sentinel_manager  # type: ignore[attr-defined]
        # The sentinels name the primary; the store reaches it through the proxy.
        monkeypatch.setattr(manager, "discover_master", lambda name: ("127.0.0.1", proxy.port))
        return store

    try:
        _one_lost_increment(
            through_proxy,
            lambda: RedisStore(sentinels=sentinels.addresses, service_name="mymaster"),
            [proxy],
            arm=_arm_cas,
            encrypted=encrypted,
            listing=listing,
        )
    finally:
        proxy.close()
