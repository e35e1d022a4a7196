"""Request-path timeouts: a frozen or unreachable Redis is a RememberStoreError within 2.5 s.

With the default settings (no ``socket_timeout``/``retries`` given) every call
against a SIGSTOPped server, a port whose accept queue is full (connects hang)
and a closed port fails with ``RememberStoreError`` inside the bound; after
SIGCONT the same plugin works again, without being rebuilt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from remember_sync import RememberPlugin
from remember_sync.errors import RememberStoreError
from remember_sync.stores.redis import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RETRIES,
    DEFAULT_SOCKET_TIMEOUT,
    RedisStore,
    worst_case_seconds,
)
from remember_sync.testing.redis_server import RedisServer
from remember_sync.types import Identity
from tests.conftest import TEST_SECRET
from tests.fixtures_redis import redis_binary
from tests.test_cli import child_env, run_cli

IDENT = Identity(session_id="s-1", user_id="alice@example.com", tool_name="search:web")
BOUND = 2.5  # the acceptance bound, seconds


def _plugin(port: int) -> RememberPlugin:
    """A plugin on 127.0.0.1:*port* with the default timeouts."""
    return RememberPlugin.init(
        type="redis",
        config={"port": port},
        encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True,
    )


def _calls(plugin: RememberPlugin) -> dict[str, Callable[[], object]]:
    mem = plugin.accessor(IDENT)
    return {
        "get": lambda: mem.get("k"),
        "set": lambda: mem.set("k", "v2"),
        "list": lambda: mem.list(),
        "modify": lambda: mem.modify("n", lambda v: (v or 0) + 1, default=0),
        "update": lambda: mem.update("k", "v3"),
    }


def _timed_store_error(name: str, call: Callable[[], object]) -> float:
    started = time.monotonic()
    with pytest.raises(RememberStoreError) as info:
        call()
    elapsed = time.monotonic() - started
    assert elapsed < BOUND, f"{name} took {elapsed:.2f} s"
    assert str(info.value).startswith("Redis "), info.value
    return elapsed


@pytest.fixture
def server() -> Iterator[RedisServer]:
    binary = redis_binary()
    with RedisServer(binary) as running:
        yield running


def test_defaults_fit_the_documented_bound() -> None:
    """The documented worst case of the defaults is under the 2.5 s acceptance bound."""
    assert (DEFAULT_SOCKET_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RETRIES) == (1.0, 0.5, 2)
    worst = worst_case_seconds(DEFAULT_SOCKET_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RETRIES)
    assert worst == pytest.approx(2.25)
    assert worst <= BOUND


def test_frozen_server_fails_fast_and_recovers_after_sigcont(server: RedisServer) -> None:
    """SIGSTOP: every call is RememberStoreError in < 2.5 s; SIGCONT: the same plugin works."""
    assert server.process is not None
    plugin = _plugin(server.port)
    try:
        mem = plugin.accessor(IDENT)
        mem.set("k", "v")
        mem.set("n", 1)
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            # Twice: first on the pooled connections, then on fresh connections
            # (the first round closed the timed-out ones).
            timings = {
                f"{name}#{round_}": _timed_store_error(name, call)
                for round_ in (1, 2)
                for name, call in _calls(plugin).items()
            }
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        print("frozen server, seconds per call:", {k: round(v, 2) for k, v in timings.items()})
        assert mem.get("k") == "v"
        assert mem.update("k", "after") is True
        assert mem.modify("n", lambda v: v + 1) == 2
        assert mem.list() == ["k", "n"]
    finally:
        plugin.close()


@contextlib.contextmanager
def _full_accept_queue() -> Iterator[int]:
    """A port that listens but never accepts, its queue filled: a connect there hangs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(16):  # until a connect no longer completes at once
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            fillers.append(filler)
            filler.settimeout(0.2)
            try:
                filler.connect(("127.0.0.1", port))
            except (TimeoutError, OSError):
                break
        else:
            pytest.fail("could not fill the accept queue of a loopback listener")
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_unreachable_server_fails_fast() -> None:
    """A connect that hangs (full accept queue) and a refused one: RememberStoreError < 2.5 s."""
    with _full_accept_queue() as port:
        plugin = _plugin(port)
        try:
            calls = _calls(plugin).items()
            timings = {name: _timed_store_error(name, call) for name, call in calls}
        finally:
            plugin.close()
    print("hanging connect, seconds per call:", {k: round(v, 2) for k, v in timings.items()})
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        closed = int(probe.getsockname()[1])
    plugin = _plugin(closed)
    try:
        for name, call in _calls(plugin).items():
            _timed_store_error(name, call)
    finally:
        plugin.close()


def test_timeouts_are_configurable_and_the_cli_waits_longer(server: RedisServer) -> None:
    """socket_timeout/socket_connect_timeout/retries reach redis-py; the CLI uses 5 s."""
    plugin = RememberPlugin.init(
        type="redis",
        config={
            "port": server.port,
            "socket_timeout": 0.3,
            "socket_connect_timeout": 0.2,
            "retries": 0,
        },
        encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True,
    )
    try:
        store = plugin.store
        assert isinstance(store, RedisStore)
        kwargs = store.client.connection_pool.connection_kwargs
        assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.3, 0.2)
        assert kwargs["retry"].get_retries() == 0
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            elapsed = _timed_store_error("get", lambda: plugin.accessor(IDENT).get("k"))
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert elapsed < 1.0
    finally:
        plugin.close()
    # A command-line run is not a request: against the same server frozen, the CLI's
    # ``get`` gives up only after its 5 s reply timeout (the library's default is 1 s).
    get = ("get", "k", "--scope", "user", "--user", "alice", "--redis-url", server.url)
    env = child_env(REMEMBER_SECRET=TEST_SECRET)
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        done = run_cli(*get, env=env)
        elapsed = time.monotonic() - started
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert done.returncode != 0 and "Redis GET failed: Timeout" in done.stderr, done.stderr
    assert 5.0 <= elapsed < 30.0, f"took {elapsed:.2f} s"
    thawed = run_cli(*get, env=env)  # answered: the key is missing, the server is fine
    assert "no entry 'k'" in thawed.stderr, thawed.stderr
