"""Rate limits per caller: ``serve --rate-limit``, ``REMEMBER_RATE_LIMIT``, ``rate_limit=``.

Real servers only: an in-process :class:`~remember_sync.mcp.McpServer` on the stdlib threaded
server over HTTP (memory store, a throw-away redis-server, a real 3-node Cluster), and gunicorn
with 4 workers over one Redis (as ``tests/test_gunicorn_workers.py`` runs it), where the
accepted rate must be within 10% of the limit.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import Identity, RememberConfigurationError, RememberPlugin
from remember_sync.errors import RateLimitOptionError
from remember_sync.mcp import McpServer, create_app
from remember_sync.mcp.auth import StaticTokenVerifier
from remember_sync.mcp.httpd import make_server
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET, require_component
from tests.test_gunicorn_workers import (
    START_SECONDS,
    Gunicorn,
    initialize,
    tool_call,
    worker_pids,
)
from tests.test_memory_bounds import start_serve  # noqa: F401 - the fixture, by name

VERSION = "2025-11-25"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {},
               "clientInfo": {"name": "rate-test", "version": "1"}},
}  # fmt: skip


class Running:
    """An McpServer on 127.0.0.1 over HTTP; stopped by the fixture."""

    def __init__(self, app: McpServer) -> None:
        self.app = app
        self.httpd = make_server("127.0.0.1", 0, app)
        self.port = self.httpd.server_port
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def post(
        self, body: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", "/mcp", json.dumps(body), {**HEADERS, **(headers or {})})
            reply = conn.getresponse()
            return reply.status, dict(reply.getheaders()), json.loads(reply.read() or b"null")
        finally:
            conn.close()

    def session(self, token: str | None = None) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        status, headers, _ = self.post(INIT, auth)
        assert status == 200, status
        return {**auth, "Mcp-Session-Id": headers["Mcp-Session-Id"],
                "MCP-Protocol-Version": VERSION}  # fmt: skip

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def call(n: int, name: str = "recall", **arguments: Any) -> dict[str, Any]:
    arguments = arguments or {"key": "k"}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}  # fmt: skip


@pytest.fixture
def serve_app() -> Iterator[Any]:
    """Start in-process servers: ``start(rate_limit, store=None, **server_options)``."""
    running: list[tuple[Running, RememberPlugin]] = []

    def start(rate_limit: str, store: Store | None = None, **options: Any) -> Running:
        extra: dict[str, Any] = {} if store is None else {"store": store}
        plugin = RememberPlugin.init(
            encryption={"secrets": [TEST_SECRET]}, tools={"enabled": True},
            skip_legacy_purge=True, **extra,
        )  # fmt: skip
        server = Running(McpServer(plugin, rate_limit=rate_limit, **options))
        running.append((server, plugin))
        return server

    try:
        yield start
    finally:
        for server, plugin in running:
            server.stop()
            plugin.close()


# -- one server --------------------------------------------------------------------------------


def test_a_caller_over_the_limit_gets_429_with_retry_after_and_others_do_not(
    serve_app: Any,
) -> None:
    """Alice's 4th request in a minute: 429 with Retry-After (1..60 s), nothing run; Bob,
    another principal, is served meanwhile."""
    verifier = StaticTokenVerifier({"tok-alice-0123456789": "alice", "tok-bob-0123456789ab": "bob"})
    server: Running = serve_app("3/minute", token_verifier=verifier)
    alice = server.session("tok-alice-0123456789")  # 1
    assert server.post(call(2, "remember_this", key="a", value=1), alice)[0] == 200  # 2
    assert server.post(call(3), alice)[0] == 200  # 3
    status, headers, body = server.post(call(4, "remember_this", key="a", value=2), alice)
    assert status == 429
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert "3/minute" in body["error"]["message"]
    bob = server.session("tok-bob-0123456789ab")
    assert server.post(call(5), bob)[0] == 200
    # The refused write did not happen.
    who = Identity(session_id=alice["Mcp-Session-Id"], user_id="alice")
    assert server.app.plugin.accessor(who).get("a") == 1


def _from(port: int, source: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    """POST *body* to ``/mcp`` from the loopback address *source*; (status, headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("POST", "/mcp", json.dumps(body), {**HEADERS, **(headers or {})})
        reply = conn.getresponse()
        reply.read()
        return reply.status, dict(reply.getheaders())
    finally:
        conn.close()


def _new_session_and_a_call(port: int, source: str, n: int) -> list[int]:
    """``initialize`` a new session from *source*, then one tool call in it: the statuses."""
    status, headers = _from(port, source, INIT)
    if status != 200:
        return [status]
    session = {"Mcp-Session-Id": headers["Mcp-Session-Id"], "MCP-Protocol-Version": VERSION}
    return [status, _from(port, source, call(n), session)[0]]


def test_one_address_opening_any_number_of_sessions_is_served_at_most_the_limit(
    request: pytest.FixtureRequest,
) -> None:
    """``serve --allow-anonymous --rate-limit 4/minute`` (a real process, over HTTP): one
    client address opening a new session for every call is served 4 requests in the window,
    then only 429s; another address has its own 4."""
    served = request.getfixturevalue("start_serve")("--rate-limit", "4/minute")
    port = int(served.url.split(":")[2].split("/")[0])
    statuses = [s for n in range(10) for s in _new_session_and_a_call(port, "127.0.0.1", n)]
    assert statuses.count(200) == 4 and statuses[:4] == [200] * 4, statuses
    assert set(statuses[4:]) == {429}, statuses
    other = [s for n in range(3) for s in _new_session_and_a_call(port, "127.0.0.2", n)]
    assert other[:4] == [200] * 4 and set(other[4:]) == {429}, other


def _forwarded(port: int, client: str) -> int:
    """``initialize`` through a proxy on 127.0.0.1 that says it forwards *client*."""
    return int(_from(port, "127.0.0.1", INIT, {"X-Forwarded-For": client})[0])


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget(
    request: pytest.FixtureRequest,
) -> None:
    """``serve --trusted-proxy 127.0.0.1 --rate-limit 2/minute``: anonymous callers are
    counted by the address the proxy forwards (the last X-Forwarded-For hop), so one
    client's requests never use another's budget, and a client cannot pick its address by
    prefixing hops of its own."""
    served = request.getfixturevalue("start_serve")(
        "--rate-limit", "2/minute", "--trusted-proxy", "127.0.0.1"
    )
    port = int(served.url.split(":")[2].split("/")[0])
    assert [_forwarded(port, "203.0.113.5") for _ in range(3)] == [200, 200, 429]
    assert _forwarded(port, "203.0.113.6") == 200
    assert _forwarded(port, "198.51.100.1, 203.0.113.5") == 429  # the proxy's hop counts


def test_without_a_trusted_proxy_x_forwarded_for_is_ignored(
    request: pytest.FixtureRequest,
) -> None:
    """Without ``--trusted-proxy`` a client writing X-Forwarded-For gains no budget."""
    served = request.getfixturevalue("start_serve")("--rate-limit", "2/minute")
    port = int(served.url.split(":")[2].split("/")[0])
    assert [_forwarded(port, f"203.0.113.{n}") for n in range(3)] == [200, 200, 429]


def test_an_anonymous_session_counts_on_its_address_and_on_itself(serve_app: Any) -> None:
    """In-process: an anonymous session's requests count on the client address, so a new
    session gets no new budget."""
    server: Running = serve_app("3/minute")
    first = server.session()  # address: 1
    assert server.post(call(1), first)[0] == 200  # address: 2, session: 1
    second = server.session()  # address: 3
    status, headers, _ = server.post(call(2), second)
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert server.post(INIT)[0] == 429


def test_a_batch_counts_each_of_its_messages(serve_app: Any) -> None:
    """A 2025-03-26 batch of three tool calls costs three requests: with 3/minute the next
    request is refused (counted as one, it would pass), and so is a batch over the limit."""
    verifier = StaticTokenVerifier({"tok-alice-0123456789": "alice", "tok-bob-0123456789ab": "bob"})
    server: Running = serve_app("4/minute", token_verifier=verifier)
    session = server.session("tok-alice-0123456789")  # 1
    session["MCP-Protocol-Version"] = "2025-03-26"
    status, _, replies = server.post([call(1), call(2), call(3)], session)  # 2..4
    assert status == 200 and len(replies) == 3
    assert server.post(call(4), session)[0] == 429
    other = server.session("tok-bob-0123456789ab")  # another principal: 1
    other["MCP-Protocol-Version"] = "2025-03-26"
    assert server.post([call(n) for n in range(4)], other)[0] == 429


def test_limiter_keys_are_reserved_and_hashed_on_redis(
    serve_app: Any, redis_store: Store, redis_client: redis.Redis
) -> None:
    """On Redis the counts live under ``<prefix>__ratelimit__:`` and name neither the principal
    nor the session id; memory keys and listing are untouched."""
    verifier = StaticTokenVerifier({"tok-carol-0123456789": "carol-the-principal"})
    server: Running = serve_app("50/minute", store=redis_store, token_verifier=verifier)
    carol = server.session("tok-carol-0123456789")
    assert server.post(call(1, "remember_this", key="note", value=1, scope="user"), carol)[0] == 200
    status, _, body = server.post(call(2, "list_memories", scope="user"), carol)
    assert status == 200 and body["result"]["structuredContent"]["keys"] == ["note"]
    keys = [k.decode() for k in redis_client.keys("*")]
    limiter = [k for k in keys if k.startswith("remember:__ratelimit__:")]
    assert limiter, keys
    session_id = carol["Mcp-Session-Id"]
    for key in limiter:
        assert "carol" not in key and session_id not in key and "127.0.0.1" not in key
    assert not [k for k in keys if not k.startswith("remember:")]


@pytest.mark.parametrize("kind", ["redis_cluster", "vercel_kv"])
def test_the_limit_is_shared_through_the_store(kind: str, request: pytest.FixtureRequest) -> None:
    """Two servers over one Redis Cluster (its own cluster client) or one Vercel KV (its REST
    client running the moving-window scripts) share a caller's count; the counts sit under
    the reserved names, hashed."""
    store: Store = request.getfixturevalue(f"{kind}_store")
    serve_app = request.getfixturevalue("serve_app")
    verifier = StaticTokenVerifier({"tok-dan-0123456789ab": "dan"})
    one: Running = serve_app("4/minute", store=store, token_verifier=verifier)
    two: Running = serve_app("4/minute", store=store, token_verifier=verifier)
    session = one.session("tok-dan-0123456789ab")  # 1
    assert one.post(call(1), session)[0] == 200  # 2
    assert two.post(call(2), session)[0] == 200  # 3
    assert one.post(call(3), session)[0] == 200  # 4
    status, headers, _ = two.post(call(4), session)
    assert status == 429 and 1 <= int(headers["Retry-After"]) <= 60
    limiter = list(store.scan("remember:__ratelimit__:*"))
    assert limiter and not [k for k in limiter if "dan" in k]


def test_the_limit_is_counted_through_a_sentinel_primary(
    serve_app: Any, sentinel_set_factory: Any
) -> None:
    """A Sentinel-backed store counts on the primary the sentinels name."""
    from remember_sync.stores.redis import RedisStore

    sentinels = sentinel_set_factory()
    store = RedisStore.from_url(sentinels.url)
    try:
        server: Running = serve_app("3/minute", store=store)
        session = server.session()  # the address: 1
        assert server.post(call(1), session)[0] == 200  # 2
        assert server.post(call(2), session)[0] == 200  # 3
        assert server.post(call(3), session)[0] == 429
        primary = store.client
        assert [k for k in primary.keys("remember:__ratelimit__:*")]
    finally:
        store.close()


def test_a_store_failure_while_counting_is_503_never_a_free_pass(
    serve_app: Any, redis_url: str
) -> None:
    """Redis gone: the rate limit cannot be checked, so the request is refused with 503."""
    from remember_sync.stores.redis import RedisStore
    from remember_sync.testing.redis_server import RedisServer, find_redis_server

    binary = find_redis_server()
    require_component("redis-server", binary is not None, "not on PATH")
    assert binary is not None
    own = RedisServer(binary).start()
    store = RedisStore.from_url(own.url, retries=0, socket_timeout=2)
    try:
        server: Running = serve_app("50/minute", store=store)
        session = server.session()
        own.stop()
        status, headers, _ = server.post(call(1), session)
        assert status == 503 and headers["Retry-After"]
    finally:
        own.cleanup()
        store.close()


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", ["", "sixty", "60/fortnight", "0/minute", "1/second;2/minute"])
def test_a_bad_rate_is_refused(rate: str) -> None:
    """Anything but one rate is a configuration error naming the form expected; being bad
    input, it is a ValueError too (and never a bare one)."""
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}) as plugin:
        with pytest.raises(RememberConfigurationError, match="60/minute") as info:
            McpServer(plugin, rate_limit=rate)
    assert isinstance(info.value, RateLimitOptionError) and isinstance(info.value, ValueError)


def test_a_vercel_kv_failure_while_counting_is_503_never_a_free_pass(
    serve_app: Any, vercel_kv_store: Store, kv_emulator: Any, kv_redis: redis.Redis
) -> None:
    """The REST API failing while a request is counted: 503, nothing served."""
    server: Running = serve_app("50/minute", store=vercel_kv_store)
    session = server.session()
    kv_emulator.inject(status=500, times=None)
    status, headers, _ = server.post(call(1, "remember_this", key="k", value=1), session)
    kv_emulator.clear_faults()
    assert status == 503 and headers["Retry-After"]
    assert not [k for k in kv_redis.keys("remember:v2:*")]


def test_the_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the limits package a rate limit is refused with the install command."""
    monkeypatch.setitem(sys.modules, "limits", None)
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}) as plugin:
        with pytest.raises(RememberConfigurationError, match=r"remember-sync\[limits\]"):
            McpServer(plugin, rate_limit="60/minute")
        assert McpServer(plugin).rate_limiter is None  # without a limit nothing is imported


def test_create_app_reads_remember_rate_limit() -> None:
    """``REMEMBER_RATE_LIMIT`` gives create_app its limit; a bad value fails there."""
    env = {"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_RATE_LIMIT": "7/second"}
    app = create_app(environ=env)
    try:
        assert app.rate_limiter is not None and app.rate_limiter.rate == "7/second"
    finally:
        app.close()
    with pytest.raises(RememberConfigurationError, match="^REMEMBER_RATE_LIMIT must be one rate"):
        create_app(environ={**env, "REMEMBER_RATE_LIMIT": "lots"})


def test_serve_rate_limit_flag_is_checked(tmp_path: Path) -> None:
    """``serve --rate-limit nonsense``: usage error (exit 2) naming the flag; the same in
    ``REMEMBER_RATE_LIMIT``: exit 1 naming the variable; nothing started either way."""
    import subprocess

    from tests.test_cli import child_env

    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", "--rate-limit", "lots"],
        cwd=tmp_path, env=child_env(REMEMBER_SECRET=TEST_SECRET), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "--rate-limit" in done.stderr and "60/minute" in done.stderr
    from_env = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0"], cwd=tmp_path,
        env=child_env(REMEMBER_SECRET=TEST_SECRET, REMEMBER_RATE_LIMIT="lots",
                      HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "cfg")),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert from_env.returncode == 1, from_env
    assert "REMEMBER_RATE_LIMIT must be one rate" in from_env.stderr


# -- gunicorn, 4 workers, one Redis ---------------------------------------------------------------

LIMIT_PER_S = 20
HAMMER_S = 4.0


def test_the_accepted_rate_across_4_gunicorn_workers_is_within_10_percent_of_the_limit(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``REMEMBER_RATE_LIMIT=20/second``, one session hammered from 8 threads for 4 s over new
    connections (so every worker answers): 80 +- 10% accepted, the rest 429, both from several
    workers (a limit per worker would accept about four times as many)."""
    require_component("gunicorn", find_spec("gunicorn") is not None, "pip install gunicorn")
    monkeypatch.setenv("REMEMBER_RATE_LIMIT", f"{LIMIT_PER_S}/second")
    server = Gunicorn(tmp_path, redis_url)
    try:
        server.wait_ready(START_SECONDS)
        workers = worker_pids(server.port)  # GETs: refused before the limit, not counted
        session = initialize(server.port)
        time.sleep(1.1)  # the initialize requests' window (they count on the address) is over
        stop_at = time.monotonic() + HAMMER_S
        replies: list[Any] = []

        def hammer(thread: int) -> None:
            n = 0
            while time.monotonic() < stop_at:
                n += 1
                replies.append(tool_call(server.port, session, "recall", {"key": "k"},
                                         thread * 100_000 + n))  # fmt: skip

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(hammer, range(8)))
    finally:
        server.stop()
    assert "Traceback" not in server.output, server.output
    accepted = [r for r in replies if r.status == 200]
    refused = [r for r in replies if r.status == 429]
    assert len(accepted) + len(refused) == len(replies), {r.status for r in replies}
    assert len(replies) >= 3 * LIMIT_PER_S * HAMMER_S, "the client did not overload the limit"
    rate = len(accepted) / HAMMER_S
    print(f"accepted {len(accepted)} of {len(replies)} in {HAMMER_S} s: {rate:.1f}/s")
    assert abs(rate - LIMIT_PER_S) <= 0.1 * LIMIT_PER_S, (len(accepted), len(replies))
    assert len({r.pid for r in accepted}) >= 2 and len({r.pid for r in refused}) >= 2
    assert {r.pid for r in replies} <= workers
    for reply in refused:
        assert "Too many requests" in reply.json()["error"]["message"]


def test_vercel_kv_accepts_exactly_the_limit_per_window_across_4_gunicorn_workers(
    tmp_path: Path, kv_emulator: Any, kv_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``REMEMBER_RATE_LIMIT=60/minute`` on Vercel KV, a real ``gunicorn -w 4``: one caller
    sending 20 requests a second for 6 s over new connections (so every worker answers) is
    served exactly 60 in the window, the opening two included, and refused the rest; both
    answers come from several workers (a count per worker would accept up to four times
    as many)."""
    from tests.fixtures_kv import KV_TEST_TOKEN

    require_component("gunicorn", find_spec("gunicorn") is not None, "pip install gunicorn")
    monkeypatch.setenv("REMEMBER_RATE_LIMIT", "60/minute")
    server = Gunicorn(tmp_path, None, KV_REST_API_URL=kv_emulator.url,
                      KV_REST_API_TOKEN=KV_TEST_TOKEN)  # fmt: skip
    try:
        server.wait_ready(START_SECONDS)
        workers = worker_pids(server.port)  # GETs: refused before the limit, not counted
        session = initialize(server.port)  # initialize + notifications/initialized: 2
        began = time.monotonic()

        def paced(n: int) -> Any:
            time.sleep(max(0.0, began + n / 20 - time.monotonic()))  # pacing, not syncing
            return tool_call(server.port, session, "recall", {"key": "k"}, n)

        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(paced, range(120)))
        elapsed = time.monotonic() - began
    finally:
        server.stop()
    assert "Traceback" not in server.output, server.output
    assert elapsed < 50, "the requests did not fit in one window"
    accepted = [r for r in replies if r.status == 200]
    refused = [r for r in replies if r.status == 429]
    assert len(accepted) + len(refused) == len(replies), {r.status for r in replies}
    assert 2 + len(accepted) == 60, (len(accepted), len(refused))
    assert len({r.pid for r in accepted}) >= 2 and len({r.pid for r in refused}) >= 2
    assert {r.pid for r in replies} <= workers
    assert [k for k in kv_redis.keys("remember:__ratelimit__:*")]
