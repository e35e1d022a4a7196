"""Redis Sentinel: a real primary, replica and three sentinels; the primary is SIGKILLed under load.

Acceptance of issue 22: the load resumes against the promoted replica within
15 s without rebuilding the plugin, callers only ever see
``RememberStoreError`` in the gap, and with ``wait_replicas=1`` no
acknowledged write is lost (the test reports how many are lost without it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from remember_sync import RememberPlugin
from remember_sync.errors import RememberConfigurationError, RememberStoreError
from remember_sync.stores.redis import RedisStore
from remember_sync.types import Identity
from tests.conftest import TEST_SECRET
from tests.fixtures_redis import SENTINEL_SERVICE, SentinelSet

IDENT = Identity(session_id="s-1", user_id="alice@example.com", tool_name="search:web")
THREADS = 4
RESUME_WITHIN = 15.0


@dataclass
class Worker:
    """One load thread's record: what was acknowledged, and what failed how."""

    index: int
    acked: dict[str, tuple[int, float]] = field(default_factory=dict)  # key -> (value, when)
    modifies_acked: int = 0
    store_errors: list[float] = field(default_factory=list)
    other_errors: list[BaseException] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)
    writes_ok: list[float] = field(default_factory=list)


def _load(plugin: RememberPlugin, worker: Worker, stop: threading.Event) -> None:
    mem = plugin.accessor(IDENT)
    n = 0
    while not stop.is_set():
        n += 1
        key = f"w{worker.index}-{n}"
        step = n % 4
        try:
            if step == 0:
                mem.set(key, n)
                worker.acked[key] = (n, time.monotonic())
                worker.writes_ok.append(time.monotonic())
            elif step == 1:
                mem.get(f"w{worker.index}-{max(1, n - 5)}")
            elif step == 2:
                mem.set(f"u{worker.index}", 0) if n < 4 else mem.update(f"u{worker.index}", n)
            else:
                mem.modify(f"m{worker.index}", lambda v: (v or 0) + 1, default=0)
                worker.modifies_acked += 1
                worker.writes_ok.append(time.monotonic())
            worker.successes.append(time.monotonic())
        except RememberStoreError:
            worker.store_errors.append(time.monotonic())
            time.sleep(0.01)  # a caller backing off a little, not a spin
        except BaseException as exc:  # noqa: BLE001 - recorded: the test fails on any
            worker.other_errors.append(exc)
            time.sleep(0.01)


def _first_after(times: list[float], moment: float) -> float | None:
    return next((t for t in times if t > moment), None)


def _run_failover(sentinels: SentinelSet, *, wait_replicas: int) -> dict[str, Any]:
    """Load, kill the primary, wait for recovery; the measurements."""
    config: dict[str, Any] = {"sentinels": sentinels.addresses, "service_name": SENTINEL_SERVICE}
    if wait_replicas:
        config |= {"wait_replicas": wait_replicas, "wait_timeout_ms": 500}
    plugin = RememberPlugin.init(
        type="redis",
        config=config,
        encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True,
    )
    workers = [Worker(i) for i in range(THREADS)]
    stop = threading.Event()
    threads = [threading.Thread(target=_load, args=(plugin, w, stop), daemon=True) for w in workers]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while sum(len(w.acked) for w in workers) < 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        sentinels.kill_primary()  # returns once the process is gone
        killed_at = time.monotonic()
        sentinels.wait_for_failover()
        # The only replica is now the primary: bring the old one back as its replica,
        # or no write could ever be confirmed by WAIT again.
        sentinels.rejoin_old_primary()
        resume_deadline = killed_at + RESUME_WITHIN + 5
        while time.monotonic() < resume_deadline:
            if all(_first_after(w.writes_ok, killed_at) for w in workers):
                break
            time.sleep(0.05)
        time.sleep(0.5)  # a little load on the new primary too
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
    resumed = [_first_after(w.writes_ok, killed_at) for w in workers]
    calls_resumed = [_first_after(w.successes, killed_at) for w in workers]
    mem = plugin.accessor(IDENT)
    before_kill = {k: v for w in workers for k, (v, when) in w.acked.items() if when < killed_at}
    all_acked = {k: v for w in workers for k, (v, _) in w.acked.items()}
    lost_before = sorted(k for k, v in before_kill.items() if mem.get(k) != v)
    lost_any = sorted(k for k, v in all_acked.items() if mem.get(k) != v)
    counters = [(mem.get(f"m{w.index}") or 0, w.modifies_acked) for w in workers]
    plugin.close()
    return {
        "resumed_after": [None if r is None else round(r - killed_at, 2) for r in resumed],
        "calls_resumed_after": [
            None if r is None else round(r - killed_at, 2) for r in calls_resumed
        ],
        "other_errors": [repr(e) for w in workers for e in w.other_errors],
        "store_errors": sum(len(w.store_errors) for w in workers),
        "acked_before_kill": len(before_kill),
        "acked": len(all_acked),
        "lost_before_kill": lost_before,
        "lost": lost_any,
        "modify_counters": counters,
    }


@pytest.mark.parametrize("wait_replicas", [1, 0], ids=["wait_replicas=1", "no-wait"])
def test_failover_under_load(
    sentinel_set_factory: Callable[..., SentinelSet], wait_replicas: int
) -> None:
    """SIGKILL the primary under 4 threads of load: resume in 15 s, only RememberStoreError."""
    result = _run_failover(sentinel_set_factory(), wait_replicas=wait_replicas)
    report = (
        f"wait_replicas={wait_replicas}: {len(result['lost_before_kill'])} of "
        f"{result['acked_before_kill']} writes acknowledged before the kill lost, "
        f"{len(result['lost'])} of {result['acked']} overall; first call ok after "
        f"{result['calls_resumed_after']} s, first write after {result['resumed_after']} s; "
        f"{result['store_errors']} RememberStoreErrors in the gap; "
        f"modify counters (stored, acknowledged) {result['modify_counters']}"
    )
    print(report)  # the number lost without WAIT is the point of the no-wait run
    assert result["other_errors"] == [], report
    assert all(r is not None and r < RESUME_WITHIN for r in result["resumed_after"]), report
    assert result["acked_before_kill"] >= 50, report
    if wait_replicas:
        assert result["lost"] == [], report
        assert all(stored >= acked for stored, acked in result["modify_counters"]), report


def test_sentinel_url_and_config_reach_the_same_primary(
    sentinel_set_factory: Callable[..., SentinelSet],
) -> None:
    """redis+sentinel:// URLs (plugin, env-style) and config dicts all talk to the primary.

    A service the sentinels do not know is a store error saying they answered.
    """
    sentinels = sentinel_set_factory()
    by_url = RedisStore.from_url(sentinels.url)
    by_config = RedisStore(sentinels=sentinels.addresses, service_name=SENTINEL_SERVICE)
    plugin = RememberPlugin.init(
        type="redis",
        config={"url": sentinels.url},
        encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True,
    )
    primary = sentinels.connect(sentinels.primary.port)
    try:
        assert repr(by_url) == "RedisStore(sentinel, own client)"
        by_url.set("remember:x", "1")
        assert by_config.get("remember:x") == "1"
        assert primary.get("remember:x") == b"1"
        plugin.accessor(IDENT).set("k", "v")
        assert plugin.accessor(IDENT).get("k") == "v"
        assert by_config.ping()
        unknown = RedisStore(sentinels=sentinels.addresses, service_name="nosuch")
        with pytest.raises(RememberStoreError, match="the sentinels answer, but none reports"):
            unknown.get("remember:x")  # every sentinel answered: nothing to probe
        unknown.close()
    finally:
        primary.close()
        plugin.close()
        by_url.close()
        by_config.close()


def test_wait_reports_missing_replicas(sentinel_set_factory: Callable[..., SentinelSet]) -> None:
    """wait_replicas more than exist: written on the primary, reported as not confirmed."""
    sentinels = sentinel_set_factory()
    store = RedisStore(
        sentinels=sentinels.addresses,
        service_name=SENTINEL_SERVICE,
        wait_replicas=2,
        wait_timeout_ms=50,
    )
    confirmed = RedisStore(
        sentinels=sentinels.addresses, service_name=SENTINEL_SERVICE, wait_replicas=1
    )
    try:
        for write in (
            lambda: store.set("remember:a", "1"),
            lambda: store.compare_and_set("remember:a", "1", "2"),
            lambda: store.delete("remember:a"),
        ):
            with pytest.raises(RememberStoreError, match="written on the primary") as info:
                write()
            assert info.value.code == "REMEMBER_REPLICATION_INCOMPLETE"
        assert store.get("remember:a") is None  # the delete happened on the primary
        assert confirmed.set("remember:b", "1") is True
        assert confirmed.compare_and_set("remember:b", "1", "2") is True
        assert confirmed.compare_and_set("remember:b", "1", "3") is False
        assert confirmed.set("remember:b", "x", only_if_absent=True) is False
        assert confirmed.delete("remember:b", "remember:none") == 1
        replica = sentinels.connect(sentinels.replica.port)
        try:
            confirmed.set("remember:c", "on-replica")
            assert replica.get("remember:c") == b"on-replica"  # WAIT returned: it is there
        finally:
            replica.close()
    finally:
        store.close()
        confirmed.close()


def test_no_sentinel_reachable_is_a_store_error_without_the_password() -> None:
    """Sentinels that do not answer: RememberStoreError naming why, fast, never the password."""
    store = RedisStore.from_url("redis+sentinel://:hunter2@127.0.0.1:1,127.0.0.1:2/mymaster")
    try:
        started = time.monotonic()
        with pytest.raises(RememberStoreError) as info:
            store.get("remember:k")
        assert time.monotonic() - started < 2.5
        assert "hunter2" not in str(info.value)
        # redis-py keeps only "network:ConnectionError"; the store asked again to say why.
        assert "No master found for 'mymaster': sentinel 127.0.0.1:1 failed" in str(info.value)
        assert "Connection refused" in str(info.value)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("config", "option"),
    [
        ({"sentinels": [("127.0.0.1", "26379")], "service_name": "m"}, "config.sentinels"),
        ({"sentinels": "127.0.0.1:26379", "service_name": "m"}, "config.sentinels"),
        ({"sentinels": [("127.0.0.1", 26379)]}, "config.service_name"),
        ({"service_name": "m"}, "config.sentinels"),
        ({"sentinels": [("h", 1)], "service_name": "m", "host": "h"}, "config.host"),
        ({"sentinels": [("h", 1)], "service_name": ""}, "config.service_name"),
        ({"sentinel_kwargs": {"password": "x"}}, "config.sentinel_kwargs"),
        ({"url": "redis+sentinel://h:1/m", "sentinels": [("h", 1)]}, "config.url"),
        ({"url": "redis://h:1/0", "sentinel_kwargs": {}}, "config.sentinel_kwargs"),
        ({"ssl_ca_certs": "/ca.pem"}, "config.ssl_ca_certs"),
        ({"ssl": True, "ssl_certfile": 5}, "config.ssl_certfile"),
        ({"ssl_check_hostname": "no"}, "config.ssl_check_hostname"),
        ({"username": 5}, "config.username"),
        ({"socket_connect_timeout": -1}, "config.socket_connect_timeout"),
        ({"retries": True}, "config.retries"),
        ({"wait_replicas": -1}, "config.wait_replicas"),
        ({"wait_replicas": 1, "wait_timeout_ms": 0}, "config.wait_timeout_ms"),
        ({"wait_timeout_ms": 10}, "config.wait_timeout_ms"),
        ({"wait_replicas": 1, "wait_timeout_ms": 5000}, "config.wait_timeout_ms"),
    ],
)
def test_config_is_validated_naming_the_key(config: dict[str, Any], option: str) -> None:
    """Each bad Sentinel/TLS/timeout/WAIT key: RememberConfigurationError naming it, no I/O."""
    with pytest.raises(RememberConfigurationError, match=f"'{option}'"):
        RememberPlugin.init(type="redis", config=config, skip_legacy_purge=True)


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://:pw@/m",
        "redis+sentinel://h:1",
        "redis+sentinel://h:1/m/x",
        "redis+sentinel://h:99999/m",
        "redis+sentinel://h:1/m?ssl=1",
    ],
)
def test_bad_sentinel_urls_are_configuration_errors(url: str) -> None:
    """A malformed redis+sentinel:// URL names the URL (password hidden)."""
    with pytest.raises(RememberConfigurationError, match="invalid Redis url") as info:
        RedisStore.from_url(url)
    assert ":pw@" not in str(info.value)
