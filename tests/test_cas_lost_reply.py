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

import contextlib
import functools
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
    with _then_closed(proxies, plugin, other):
        mem = plugin.accessor(WHO)
        in_gap = (lambda: other.accessor(WHO).increment("n")) if encrypted else None
        expected = arm(mem, other, proxies, in_gap)
        mem.increment("n")
        assert any(p.dropped.is_set() for p in proxies), "no reply was dropped"
        assert other.accessor(WHO).get("n") == expected
        assert mem.get("n") == expected


@contextlib.contextmanager
def _then_closed(proxies: list[ReplyDroppingProxy], *plugins: RememberPlugin) -> Iterator[None]:
    """Disarm *proxies* and close *plugins* when the block ends."""
    try:
        yield
    finally:
        for proxy in proxies:
            proxy.arm(b"\x00never\x00")
        for plugin in plugins:
            plugin.close()


CASES = [
    pytest.param(False, "index", id="plain-indexed"),
    pytest.param(False, "scan", id="plain-unindexed"),
    pytest.param(True, "index", id="sealed-indexed-other-writer"),
    pytest.param(True, "scan", id="sealed-unindexed-other-writer"),
]


# -- the memory tools write through the same compare-and-set -----------------------------


def _tool(plugin: RememberPlugin, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = plugin.call_tool(name, args, identity=WHO)
    assert not result.get("isError"), result
    return result["structuredContent"]  # type: ignore[no-any-return]


def _one_lost_tool_write(
    make_store: Callable[[], RedisStore],
    direct_store: Callable[[], RedisStore],
    proxies: list[ReplyDroppingProxy],
    *,
    existing: bool,
) -> None:
    """``remember_this`` through the proxies, the reply of its write lost while the host
    records an approval under the key: the tool's write landed first, so it succeeded
    and the approval written after it is kept (the tool never writes twice)."""
    tools = {"enabled": True}
    plugin = RememberPlugin.init(
        store=make_store(), encryption={"secrets": [TEST_SECRET]}, tools=tools,
        skip_legacy_purge=True,
    )  # fmt: skip
    host = RememberPlugin.init(
        store=direct_store(), encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True
    )
    with _then_closed(proxies, plugin, host):
        _tool(plugin, "remember_this", {"key": "warm", "value": 0})  # scripts cached
        key = stored_key(host, "warm")[: -len("warm")] + "k"
        if existing:
            _tool(plugin, "remember_this", {"key": "k", "value": "old"})
            marker = host.store.get(key)  # the compare-and-set carries the stored value
            assert marker is not None
            unless: tuple[bytes, ...] = ()
        else:
            # The create: the request naming the key that is neither its read (GET) nor,
            # on a cluster, the index step (a request naming the namespace's listing
            # index; standalone, the create itself updates the index).
            marker = key
            unless = (b"\r\nGET\r\n",)
            if isinstance(host.store, RedisStore) and host.store.is_cluster:
                unless += (f"{host.key_prefix}__index__:".encode(),)

        def approve() -> None:
            host.accessor(WHO).set("k", "approved", brand="approval")

        for proxy in proxies:
            proxy.arm(marker.encode(), approve, unless=unless)
        out = _tool(plugin, "remember_this", {"key": "k", "value": "new"})
        assert any(p.dropped.is_set() for p in proxies), "no reply was dropped"
        assert out == {"success": True, "key": "k", "scope": "session"}
        entry = host.accessor(WHO).get_entry("k")
        assert entry is not None and (entry.value, entry.brand) == ("approved", "approval")
        # The approval is the tool's to leave alone from now on.
        refused = plugin.call_tool("forget", {"key": "k"}, identity=WHO)
        assert refused.get("isError") and "approval" in refused["content"][0]["text"]


#: Every lost-reply case, on every topology: ``run(make_store, direct_store, proxies)``.
RUNS = [
    *(
        pytest.param(
            functools.partial(_one_lost_increment, arm=arm, encrypted=case.values[0],
                              listing=case.values[1]),
            id=f"{arm_id}-{case.id}",
        )  # fmt: skip
        for arm, arm_id in ((_arm_cas, "cas"), (_arm_create, "create"))
        for case in CASES
    ),
    pytest.param(functools.partial(_one_lost_tool_write, existing=True), id="tool-cas"),
    pytest.param(functools.partial(_one_lost_tool_write, existing=False), id="tool-create"),
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


@pytest.mark.parametrize("run", RUNS)
def test_standalone_lost_reply_counts_once(
    proxied_server: ReplyDroppingProxy, redis_url: str, run: Callable[..., None]
) -> None:
    run(
        lambda: RedisStore.from_url(_via(redis_url, proxied_server.port)),
        lambda: RedisStore.from_url(redis_url),
        [proxied_server],
    )


@pytest.mark.parametrize("run", RUNS)
def test_cluster_lost_reply_counts_once(
    redis_cluster: RedisCluster,
    redis_cluster_client: redis.cluster.RedisCluster,
    run: Callable[..., None],
) -> None:
    with proxied_cluster(redis_cluster.startup_nodes, redis_cluster.client) as (client, proxies):
        run(
            lambda: RedisStore(client=client),
            lambda: RedisStore(client=redis_cluster.client()),
            proxies,
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
