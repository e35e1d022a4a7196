"""Ended MCP sessions stay ended (issue 18 item 5, issue 19 item 3), over real HTTP servers.

Every server here is real: ``create_app`` behind the threaded stdlib server on
127.0.0.1, or ``remember-sync serve`` subprocesses sharing a real redis-server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from remember_sync import RememberPlugin
from remember_sync.mcp import McpServer, create_app
from remember_sync.mcp.httpd import make_server
from remember_sync.mcp.revocations import CLOCK_MARGIN_MS, FULL_CODE, EndedSessions
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisServer
from remember_sync.types import Identity
from tests.conftest import TEST_SECRET
from tests.served import serve
from tests.test_cli import child_env, run_cli

#: Where an ended session's record lives (docs/mcp.rst): the key prefix, then ``__revoked__:``.
REVOKED = "remember:__revoked__:"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class Http:
    """Raw MCP requests to one server URL over a keep-alive connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = requests.Session()

    def post(self, message: dict[str, Any], sid: str | None = None) -> requests.Response:
        headers = dict(HEADERS)
        if sid is not None:
            headers["Mcp-Session-Id"] = sid
        return self.http.post(self.url, json=message, headers=headers, timeout=30)

    def initialize(self) -> str:
        reply = self.post(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}},
            }
        )
        assert reply.status_code == 200, reply.text
        return reply.headers["Mcp-Session-Id"]

    def tools_list(self, sid: str) -> int:
        reply = self.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
        return reply.status_code

    def end(self, sid: str) -> requests.Response:
        return self.http.delete(self.url, headers={"Mcp-Session-Id": sid}, timeout=30)


@contextmanager
def threaded(app: McpServer) -> Iterator[Http]:
    """*app* on a real threaded HTTP server on 127.0.0.1 (stopped and closed afterwards)."""
    httpd = make_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield Http(f"http://127.0.0.1:{httpd.server_port}/mcp")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
        app.close()


def test_ending_many_own_sessions_never_revives_another_callers_ended_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's attack: B ends its session, A ends more sessions than any cap; B's stays 404."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    with threaded(create_app()) as bob:
        victim = bob.initialize()
        assert bob.tools_list(victim) == 200
        assert bob.end(victim).status_code == 204
        assert bob.tools_list(victim) == 404
        attacker = Http(bob.url)
        own = [attacker.initialize() for _ in range(120)]
        for sid in own:
            assert attacker.end(sid).status_code == 204
        assert bob.tools_list(victim) == 404
        assert bob.end(victim).status_code == 404
        assert all(attacker.tools_list(sid) == 404 for sid in own[:5])



def test_sessions_and_their_ends_follow_the_servers_clock(
    monkeypatch: pytest.MonkeyPatch, clock: Any
) -> None:
    """McpServer(clock=...) dates sessions and ended-session records: no wall clock is read."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    with threaded(create_app(clock=clock)) as http:
        ended, live = http.initialize(), http.initialize()
        assert http.end(ended).status_code == 204
        clock.advance(7 * 86_400_000 - 1)  # the last millisecond of the signed lifetime
        assert http.tools_list(live) == 200 and http.tools_list(ended) == 404
        clock.advance(2)
        assert http.tools_list(live) == 404


def test_a_caller_at_its_share_is_refused_and_nothing_of_it_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One caller filling the table (its share is the whole table here): its next DELETE gets
    503 (session left live); every session it ended stays 404 -- a caller's own DELETE never
    makes room by bringing back one of its ended sessions."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    with threaded(create_app(max_ended_sessions=4)) as client:
        victim = client.initialize()
        assert client.end(victim).status_code == 204
        own = [client.initialize() for _ in range(5)]
        for sid in own[:3]:
            assert client.end(sid).status_code == 204
        refused = client.end(own[3])
        assert refused.status_code == 503, refused.text
        assert FULL_CODE not in refused.text and "its share" in refused.text
        assert refused.headers["Retry-After"]
        assert client.tools_list(own[3]) == 200  # not ended, and the caller was told so
        assert client.tools_list(victim) == 404
        assert all(client.tools_list(sid) == 404 for sid in own[:3])


def test_the_in_process_table_never_uses_the_plugins_evicting_memory_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With max_entries=1 on the plugin's memory store, writing memory evicts no ended session."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    plugin = RememberPlugin.init(tools={"enabled": True}, max_entries=1, skip_legacy_purge=True)
    with threaded(McpServer(plugin, owns_plugin=True)) as client:
        ended = client.initialize()
        assert client.end(ended).status_code == 204
        live = client.initialize()
        for i in range(3):
            reply = client.post(
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"name": "remember_this", "arguments": {"key": f"k{i}", "value": i}}},
                live,
            )
            assert reply.status_code == 200 and '"isError":false' in reply.text, reply.text
        assert client.tools_list(ended) == 404
        assert not [k for k in plugin.store.scan("*") if k.startswith(REVOKED)]


def test_ending_on_one_server_ends_on_another_sharing_redis(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    """Two `remember-sync serve` processes on one Redis: DELETE on one, the other answers 404."""
    argv = ["--allow-anonymous", "--redis-url", redis_url]
    servers = []
    try:
        for _ in range(2):
            served = serve(tmp_path, *argv)
            served.wait_ready()
            servers.append(served)
        one, two = (Http(s.url) for s in servers)
        sid = one.initialize()
        assert two.tools_list(sid) == 200 and one.tools_list(sid) == 200
        assert one.end(sid).status_code == 204
        assert two.tools_list(sid) == 404  # the very next request on the other process
        assert two.end(sid).status_code == 404
        assert one.tools_list(sid) == 404
        other = two.initialize()
        assert one.tools_list(other) == 200  # only the ended session is refused
        # The record: a digest under the prefix (never the id), TTL = the rest of the
        # signed lifetime (7 days) plus the clock margin.
        names = [k.decode() for k in redis_client.keys(REVOKED + "*")]
        assert len(names) == 1 and sid.split(".")[1] not in names[0]
        key = names[0]
        pttl = redis_client.pttl(key)
        week = 7 * 86_400_000
        assert week - 120_000 < pttl <= week + CLOCK_MARGIN_MS
        # That record is what keeps the session ended: without it both servers serve it.
        redis_client.delete(key)
        assert one.tools_list(sid) == 200 and two.tools_list(sid) == 200
    finally:
        for served in servers:
            assert served.stop() == 0, served.output


def test_ended_session_records_are_no_entries(redis_store: RedisStore, redis_url: str) -> None:
    """The purge, list/forget_many in every scope and the operator walk leave the record alone."""
    plugin = RememberPlugin.init(store=redis_store, tools={"enabled": True},
                                 encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True)
    ended = EndedSessions(plugin.store, plugin.key_prefix)
    sid = McpServer(plugin).session_signer.issue(None)
    ended.end(sid, None, 0)
    [key] = [k for k in redis_store.scan("*") if k.startswith(REVOKED)]
    env = child_env(REMEMBER_SECRET=TEST_SECRET)
    stats = run_cli("stats", "--redis-url", redis_url, "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    counts = json.loads(stats.stdout)
    assert (counts["entries"], counts["legacy"]) == (0, 0)
    assert counts["other"] == counts["keys"] >= 1  # the operator walk: no entry, an "other" key
    purge = run_cli("purge-legacy", "--redis-url", redis_url, "--yes", "--json", env=env)
    assert purge.returncode == 0, purge.stderr
    assert json.loads(purge.stdout)["found"] == 0
    who = plugin.accessor(Identity(session_id=sid, user_id="u"))
    for scope in ("session", "user", "global"):
        assert who.list(scope=scope) == []  # type: ignore[arg-type]
        assert who.forget_many(scope=scope, pattern="*") == 0  # type: ignore[arg-type]
    assert ended.is_ended(sid) and redis_store.get(key) is not None
    plugin.close()


def test_a_store_failure_while_checking_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis down: a request with a signed session id gets 503 (never served), DELETE 503."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    redis = RedisServer().start()
    try:
        store = RedisStore.from_url(redis.url, socket_timeout=1.0)
        plugin = RememberPlugin.init(store=store, tools={"enabled": True},
                                     skip_legacy_purge=True)
        with threaded(McpServer(plugin)) as client:
            sid = client.initialize()
            assert client.tools_list(sid) == 200
            redis.stop()
            reply = client.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sid)
            assert reply.status_code == 503, reply.text
            assert "tools" not in reply.text and redis.url not in reply.text
            assert client.end(sid).status_code == 503
            # A forged id is refused before any store read: still a plain 404.
            assert client.tools_list(sid[:-2] + "AA") == 404
        store.close()
    finally:
        redis.stop()
