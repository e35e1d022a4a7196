"""The memory tools never replace or delete the host's approvals (issue 18 item 6).

Through ``plugin.call_tool`` on every store, with a writer slipped in between
a tool's check and its write, and through a real MCP server driven by the
official ``mcp`` client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from remember_sync import Identity, RememberPlugin
from remember_sync.mcp import McpServer
from remember_sync.mcp.auth import StaticTokenVerifier
from remember_sync.mcp.httpd import make_server
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.types import Scope
from tests.conftest import TEST_SECRET, FakeClock, stored_key
from tests.mcp_client import run

WHO = Identity(session_id="s-1", user_id="alice")
PROTECTED = "REMEMBER_APPROVAL_PROTECTED"
SCOPES: tuple[Scope, ...] = ("session", "user", "global")

Factory = Callable[..., RememberPlugin]


def code_of(result: dict[str, Any]) -> str:
    """The code of a tool error, from its text content ("<CODE>: <message>")."""
    assert result["isError"] is True, result
    text: str = result["content"][0]["text"]
    return text.split(":", 1)[0]


@pytest.fixture
def plugin(make_plugin: Factory) -> RememberPlugin:
    return make_plugin(tools={"enabled": True, "allowed_scopes": list(SCOPES)})


def approve(plugin: RememberPlugin, key: str, scope: Scope, value: Any = "yes") -> str:
    """The host records an approval; returns the stored string (to check it is untouched)."""
    host = plugin.accessor(WHO)
    host.set(key, value, scope=scope, brand="approval", metadata={"by": "host"})
    raw = plugin.store.get(stored_key(plugin, key, scope))
    assert raw is not None
    return raw


@pytest.mark.parametrize("scope", SCOPES)
def test_remember_this_and_forget_refuse_an_approval_and_leave_it_unchanged(
    plugin: RememberPlugin, scope: Scope
) -> None:
    """On every store: both tools answer REMEMBER_APPROVAL_PROTECTED; the stored bytes stay."""
    before = approve(plugin, "deploy", scope)
    replaced = plugin.call_tool(
        "remember_this", {"key": "deploy", "value": "no", "scope": scope}, identity=WHO
    )
    assert code_of(replaced) == PROTECTED
    assert "approval" in replaced["content"][0]["text"]
    forgot = plugin.call_tool("forget", {"key": "deploy", "scope": scope}, identity=WHO)
    assert code_of(forgot) == PROTECTED
    assert plugin.store.get(stored_key(plugin, "deploy", scope)) == before
    entry = plugin.accessor(WHO).get_entry("deploy", scope=scope)
    assert entry is not None and entry.brand == "approval" and entry.value == "yes"
    # The host's own accessor is not restricted.
    assert plugin.accessor(WHO).forget("deploy", scope=scope) is True


def test_other_brands_are_still_replaced_and_forgotten(plugin: RememberPlugin) -> None:
    """A preference is replaced (existed) and forgotten once; a second forget finds nothing."""
    plugin.accessor(WHO).set("k", 1, brand="preference")
    result = plugin.call_tool("remember_this", {"key": "k", "value": 2}, identity=WHO)
    assert result["isError"] is False, result
    assert plugin.accessor(WHO).get("k") == 2
    first = plugin.call_tool("forget", {"key": "k"}, identity=WHO)
    second = plugin.call_tool("forget", {"key": "k"}, identity=WHO)
    assert first["structuredContent"]["existed"] is True
    assert second["structuredContent"]["existed"] is False
    assert plugin.accessor(WHO).get("k") is None and plugin.accessor(WHO).list() == []


def test_an_expired_approval_may_be_replaced(plugin: RememberPlugin, clock: FakeClock) -> None:
    """An approval past its deadline is gone for every reader, so a tool may write the key."""
    plugin.accessor(WHO).set("k", "yes", brand="approval", ttl=60)
    clock.advance(s=61)
    result = plugin.call_tool("remember_this", {"key": "k", "value": "mine"}, identity=WHO)
    assert result["isError"] is False, result
    assert plugin.accessor(WHO).get("k") == "mine"


def test_an_unreadable_entry_is_left_unchanged(make_plugin: Factory) -> None:
    """An entry no secret opens might be an approval: both tools refuse and keep its bytes."""
    other = make_plugin(tools={"enabled": True}, encryption={"secrets": ["another-0123456789ab"]})
    other.accessor(WHO).set("k", "sealed elsewhere", brand="approval")
    plugin = make_plugin(tools={"enabled": True})
    skey = stored_key(plugin, "k")
    before = plugin.store.get(skey)
    for name, args in (("remember_this", {"key": "k", "value": 1}), ("forget", {"key": "k"})):
        result = plugin.call_tool(name, args, identity=WHO)
        assert code_of(result) == "REMEMBER_DECRYPTION_FAILED"
        assert "unchanged" in result["content"][0]["text"]
    assert plugin.store.get(skey) == before


def test_1_8_0_doubled_prefix_entries(make_plugin: Factory, store: Store) -> None:
    """read_doubled_prefix: an approval 1.8.0 stored under P+P+key is neither replaced nor
    forgotten by the tools; other such entries are forgotten with the key, never to
    reappear, and replaced by remember_this."""
    plugin = make_plugin(tools={"enabled": True}, read_doubled_prefix=True)
    host = plugin.accessor(WHO)

    def doubled(key: str, **entry: Any) -> str:
        """The entry *entry* as 1.8.0 stored it (under P+P+key); that storage key."""
        host.set(key, **entry)
        skey = stored_key(plugin, key)
        raw = store.get(skey)
        assert raw is not None and store.delete(skey) == 1
        assert store.set(plugin.key_prefix + skey, raw)
        return plugin.key_prefix + skey

    def call(name: str, key: str, **args: Any) -> dict[str, Any]:
        return plugin.call_tool(name, {"key": key, **args}, identity=WHO)

    twin = doubled("ok", value="yes", brand="approval")
    before = store.get(twin)
    assert code_of(call("remember_this", "ok", value="no")) == PROTECTED
    assert code_of(call("forget", "ok")) == PROTECTED
    assert store.get(twin) == before and host.get("ok") == "yes"

    doubled("old", value=1)
    assert call("forget", "old")["structuredContent"]["existed"] is True
    host.set("both", 2)  # the key and, shadowed by it, a doubled-prefix twin
    twin = plugin.key_prefix + stored_key(plugin, "both")
    assert store.set(twin, store.get(twin[len(plugin.key_prefix):]) or "")
    assert call("forget", "both")["structuredContent"]["existed"] is True
    assert host.get("old") is None and host.get("both") is None
    assert call("recall", "both")["structuredContent"]["found"] is False

    doubled("mine", value=3)
    assert call("remember_this", "mine", value=4)["isError"] is False
    assert host.get("mine") == 4 and call("recall", "mine")["structuredContent"]["value"] == 4


class _HostBetween:
    """A store that, once, lets the host write an approval right after a tool's read.

    The tool's read has returned; its write comes next.  This is the interleaving a
    check-then-write would lose: the write must not replace what the host wrote.
    """

    def __init__(self, store: Store, host: Callable[[], None], suffix: str) -> None:
        self._store = store
        self._host = host
        self._suffix = suffix
        self.fired = False

    def get(self, key: str) -> str | None:
        value = self._store.get(key)
        if key.endswith(self._suffix) and not self.fired:
            self.fired = True
            self._host()
        return value

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        return self._store.get_many(keys)

    def set(self, key: str, value: str, *, ttl_ms: int | None = None,
            only_if_absent: bool = False) -> bool:
        return self._store.set(key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)

    def compare_and_set(self, key: str, expected: str, value: str, *,
                        ttl_ms: int | None = None) -> bool:
        return self._store.compare_and_set(key, expected, value, ttl_ms=ttl_ms)

    def delete(self, *keys: str) -> int:
        return self._store.delete(*keys)

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        return self._store.scan(pattern, count=count)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("before", ["absent", "preference"])
@pytest.mark.parametrize("tool", ["remember_this", "forget"])
def test_an_approval_written_between_check_and_write_is_never_overwritten(
    store: Store, make_plugin: Factory, before: str, tool: str
) -> None:
    """On every store: the host's approval landing after the tool's read survives the write.

    A forget that found nothing is ordered before the host's write (it reports
    existed=false); every other case sees the approval on its retry and refuses.
    """
    host_plugin = make_plugin(store=store)
    host = host_plugin.accessor(WHO)
    if before == "preference":
        host.set("k", "old", brand="preference")
    # The tool's read of the entry: the one key of this test named "k" (SPEC section 4).
    racing = _HostBetween(store, lambda: host.set("k", "approved", brand="approval"), ":k")
    plugin = make_plugin(store=racing, tools={"enabled": True})
    args: dict[str, Any] = {"key": "k", "value": "model"} if tool == "remember_this" else {
        "key": "k"}
    result = plugin.call_tool(tool, args, identity=WHO)
    assert racing.fired
    if tool == "forget" and before == "absent":
        assert result["isError"] is False and result["structuredContent"]["existed"] is False
    else:
        assert code_of(result) == PROTECTED
    entry = host.get_entry("k")
    assert entry is not None and entry.brand == "approval" and entry.value == "approved"


# -- over MCP, with the official client ------------------------------------------------------

TOKEN = "alice-token-0123456789"


@asynccontextmanager
async def _connect(url: str) -> Any:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def test_the_official_client_cannot_replace_or_forget_an_approval() -> None:
    """Over a real MCP server: both tools fail with the code in the text; the value stays."""
    plugin = RememberPlugin.init(tools={"enabled": True}, skip_legacy_purge=True,
                                 store=MemoryStore(), encryption={"secrets": [TEST_SECRET]})
    server = McpServer(plugin, token_verifier=StaticTokenVerifier({TOKEN: "alice"}))
    httpd = make_server("127.0.0.1", 0, server)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    host = plugin.accessor(Identity(user_id="alice"))
    host.set("deploy", {"ok": True}, scope="user", brand="approval")
    url = f"http://127.0.0.1:{httpd.server_port}/mcp"

    async def main() -> None:
        async with _connect(url) as client:
            for name, args in (
                ("remember_this", {"key": "deploy", "value": "forged", "scope": "user"}),
                ("forget", {"key": "deploy", "scope": "user"}),
            ):
                result = await client.call_tool(name, args)
                assert result.is_error is True
                text = result.content[0].text  # type: ignore[union-attr]
                assert text.startswith(PROTECTED + ": ") and "approval" in text
            found = await client.call_tool("recall", {"key": "deploy", "scope": "user"})
            assert found.structured_content is not None
            assert found.structured_content["value"] == {"ok": True}

    try:
        run(main)
        entry = host.get_entry("deploy", scope="user")
        assert entry is not None and entry.brand == "approval" and entry.value == {"ok": True}
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
        plugin.close()
