"""Real redis-server fixtures: one standalone server and one 3-primary cluster per session.

Set ``REMEMBER_TEST_REDIS_URL`` to run against your own Redis instead of a
throw-away server (it is flushed between tests: never point it at data you
want to keep).  Under ``CI`` a missing ``redis-server`` fails the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import RememberPlugin
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import (
    RedisCluster,
    RedisServer,
    _die_with_parent,
    find_redis_server,
    free_port,
)
from tests.conftest import TEST_SECRET, require_component


def redis_binary() -> str:
    """The redis-server to start: skips the test when there is none (fails it under CI)."""
    binary = find_redis_server()
    require_component("redis-server", binary is not None, "not on PATH, REDIS_SERVER_BIN unset")
    assert binary is not None
    return binary


def redis_plugin(url: str, secret: str = TEST_SECRET) -> RememberPlugin:
    """A plugin on the Redis at *url* that writes nothing behind the test's back (no legacy
    purge, no background reindex); the caller closes it."""
    return RememberPlugin.init(
        type="redis",
        config={"url": url},
        encryption={"secrets": [secret]},
        skip_legacy_purge=True,
        background_reindex=False,
    )


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | None]:
    """A throw-away standalone server (``None`` when REMEMBER_TEST_REDIS_URL is used)."""
    if os.environ.get("REMEMBER_TEST_REDIS_URL"):
        yield None
        return
    binary = redis_binary()
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
    binary = redis_binary()
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


# -- Sentinel (issue 22) ------------------------------------------------------------------------

SENTINEL_SERVICE = "mymaster"


class SentinelSet:
    """A primary, one replica (``--replicaof``) and three sentinels on loopback, all throw-away.

    Sentinels run ``redis-server <conf> --sentinel`` with a short
    ``down-after-milliseconds`` / ``failover-timeout`` (1000 / 3000) so a
    failover takes a few seconds.  Every process is killed by :meth:`cleanup`
    (and with the test process, through ``PR_SET_PDEATHSIG``/``atexit``).

    :param server_args: more ``redis-server`` arguments for both data nodes.
    :param sentinel_conf: more lines for each sentinel's configuration file.
    :param connect: ``connect(port) -> redis.Redis`` for the admin checks (e.g. TLS).
    """

    def __init__(
        self,
        binary: str,
        *,
        server_args: Sequence[str] = (),
        sentinel_conf: Sequence[str] = (),
        connect: Callable[[int], redis.Redis] | None = None,
    ) -> None:
        self.binary = binary
        self.connect = connect or (
            lambda port: redis.Redis(
                host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2
            )
        )
        self.primary = RedisServer(binary, extra_args=list(server_args))
        self.replica = RedisServer(
            binary,
            extra_args=[*server_args, "--replicaof", "127.0.0.1", str(self.primary.port)],
        )
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinel_conf = list(sentinel_conf)
        self.dir = Path(tempfile.mkdtemp(prefix="remember-sentinel-"))
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """``[(host, port)]`` of the sentinels, for ``config["sentinels"]``."""
        return [("127.0.0.1", port) for port in self.sentinel_ports]

    @property
    def url(self) -> str:
        """``redis+sentinel://`` URL of the service."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SENTINEL_SERVICE}/0"

    def start(self, timeout: float = 60.0) -> SentinelSet:
        """Start everything; return once the replica is in sync and every sentinel knows all."""
        deadline = time.monotonic() + timeout
        self.primary.start()
        self.replica.start()
        self._wait(deadline, "replica in sync", lambda: self._link_up(self.replica.port))
        for i, port in enumerate(self.sentinel_ports):
            conf = self.dir / f"sentinel-{i}.conf"
            lines = [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {self.dir}",
                f"logfile {self.dir / f'sentinel-{i}.log'}",
                f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {self.primary.port} 2",
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000",
                f"sentinel failover-timeout {SENTINEL_SERVICE} 3000",
                *self.sentinel_conf,
            ]
            conf.write_text("\n".join(lines) + "\n")
            self.sentinels.append(
                subprocess.Popen(  # noqa: S603 - our own argument list
                    [self.binary, str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,  # noqa: PLW1509
                )
            )
        self._wait(deadline, "sentinels to know each other and the replica", self._converged)
        return self

    def _link_up(self, port: int) -> bool:
        client = self.connect(port)
        try:
            return bool(client.info("replication").get("master_link_status") == "up")
        finally:
            client.close()

    def _master_state(self, port: int) -> dict[str, Any]:
        client = self.connect(port)
        try:
            state: dict[str, Any] = client.sentinel_master(SENTINEL_SERVICE)
            return state
        finally:
            client.close()

    def _converged(self) -> bool:
        # Each sentinel knows the replica and THIS set's other sentinels, by port: a count
        # (num-other-sentinels == 2) never converges when a sentinel of an earlier set, still
        # shutting down, announced itself on a primary port that was reused.
        for port in self.sentinel_ports:
            if int(self._master_state(port)["num-slaves"]) < 1:
                return False
            client = self.connect(port)
            try:
                known = {int(s["port"]) for s in client.sentinel_sentinels(SENTINEL_SERVICE)}
            finally:
                client.close()
            if not set(self.sentinel_ports) - {port} <= known:
                return False
        return True

    def primary_port(self) -> int:
        """The port the first answering sentinel names as the primary now."""
        for port in self.sentinel_ports:
            try:
                return int(self._master_state(port)["port"])
            except redis.RedisError:
                continue
        raise RuntimeError("no sentinel answers")

    def kill_primary(self) -> None:
        """SIGKILL the primary, as a crash would."""
        self.primary.kill()

    def wait_for_failover(self, timeout: float = 30.0) -> None:
        """Wait until the sentinels name the replica as primary, and it accepts writes."""
        deadline = time.monotonic() + timeout
        self._wait(deadline, "replica promoted", lambda: self._promoted())

    def _promoted(self) -> bool:
        if self.primary_port() != self.replica.port:
            return False
        client = self.connect(self.replica.port)
        try:
            return bool(client.info("replication").get("role") == "master")
        finally:
            client.close()

    def rejoin_old_primary(self, timeout: float = 30.0) -> None:
        """Restart the killed primary as the new primary's replica (as an operator would).

        Restarted as it was, the sentinels would convert it too, but only after
        their next ``INFO`` of it (up to 10 s).
        """
        self.primary.extra_args += ["--replicaof", "127.0.0.1", str(self.replica.port)]
        self.primary.start()
        deadline = time.monotonic() + timeout
        try:
            self._wait(deadline, "old primary re-joined", lambda: self._link_up(self.primary.port))
        except RuntimeError as exc:
            logs = {s.port: (s.dir / "redis.log").read_text(errors="replace")[-3000:]
                    for s in (self.primary, self.replica)}
            raise RuntimeError(f"{exc}; server logs: {logs}") from None

    @staticmethod
    def _wait(deadline: float, what: str, ready: Callable[[], bool]) -> None:
        while True:
            try:
                if ready():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def cleanup(self) -> None:
        for proc in self.sentinels:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)
        self.sentinels.clear()
        self.primary.cleanup()
        self.replica.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def sentinel_set_factory() -> Iterator[Callable[..., SentinelSet]]:
    """Start :class:`SentinelSet` s (``factory(**options)``); all are killed after the test."""
    binary = redis_binary()
    made: list[SentinelSet] = []

    def factory(**options: Any) -> SentinelSet:
        sentinels = SentinelSet(binary, **options)
        made.append(sentinels)
        return sentinels.start()

    try:
        yield factory
    finally:
        for sentinels in made:
            sentinels.cleanup()
