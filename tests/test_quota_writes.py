"""Under a quota every acknowledged write is stored and every principal's count is exact:
each write operation (set, update, modify, increment, the tools, forget, forget_many), on
every store, with an entry quota, a byte quota and both."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin, RememberQuotaError
from tests.features.raw_scan import RAW_CLIENT

ALICE = Identity(session_id="s-alice", user_id="alice")
ALICE_2 = Identity(session_id="s-alice-2", user_id="alice")
BOB = Identity(session_id="s-bob", user_id="bob")

QUOTAS = {
    "entries": {"entries": 10},
    "bytes": {"bytes": 1_000_000},
    "both": {"entries": 10, "bytes": 1_000_000},
}


@pytest.fixture(params=sorted(QUOTAS))
def quota(request: pytest.FixtureRequest) -> dict[str, int]:
    return dict(QUOTAS[request.param])


def tool(plugin: RememberPlugin, name: str, args: dict[str, Any], who: Identity) -> Any:
    """The tool's structured result (a failed call fails the test)."""
    result = plugin.call_tool(name, args, identity=who)
    assert result["isError"] is False, result
    return json.loads(result["content"][0]["text"])


def usage_settles(plugin: RememberPlugin, entries: int, **principal: str) -> None:
    """The principal's count reaches *entries* (a forget through the tools leaves a
    tombstone that counts until it expires, a millisecond later), and stays there."""
    deadline = time.monotonic() + 2.0
    while plugin.quota_usage(**principal)["entries"] != entries:
        assert time.monotonic() < deadline, (plugin.quota_usage(**principal), entries)
        time.sleep(0.002)
    assert plugin.quota_usage(**principal)["entries"] == entries


def held(plugin: RememberPlugin, who: Identity, tools: tuple[str, ...] = ()) -> int:
    """How many live entries *who*'s principal holds, counted by listing every namespace."""
    count = 0
    for ident in (who, *(who.with_tool(name) for name in tools)):
        accessor = plugin.accessor(ident)
        scopes = ("tool",) if ident.tool_name else ("user", "session")
        count += sum(len(accessor.list(scope=scope)) for scope in scopes)
    return count


def test_increment_then_modify_is_stored(make_plugin: Any, quota: dict[str, int]) -> None:
    """set, increment, modify: each returned value is the one read back afterwards."""
    plugin = make_plugin(quota=quota)
    alice = plugin.accessor(ALICE)
    alice.set("x", 1, scope="user")
    assert alice.increment("x", 5, scope="user") == 6
    assert alice.get("x", scope="user") == 6
    assert alice.modify("x", lambda v: v * 10, scope="user") == 60
    assert alice.get("x", scope="user") == 60
    assert plugin.quota_usage(user_id="alice")["entries"] == 1


def test_update_then_increments_are_stored(make_plugin: Any, quota: dict[str, int]) -> None:
    """set, update, increment, increment: every step lands, in session scope too."""
    plugin = make_plugin(quota=quota)
    alice = plugin.accessor(ALICE)
    for scope in ("user", "session"):
        alice.set("n", 0, scope=scope)
        assert alice.update("n", 1, scope=scope)
        assert alice.increment("n", scope=scope) == 2
        assert alice.increment("n", scope=scope) == 3
        assert alice.get("n", scope=scope) == 3
        assert alice.increment("n", 10, scope=scope) == 13
        assert alice.get("n", scope=scope) == 13
    assert plugin.quota_usage(user_id="alice") == {
        "entries": 2,
        "bytes": plugin.quota_usage(user_id="alice")["bytes"],
    }


def test_many_compare_and_sets_in_a_row(make_plugin: Any, quota: dict[str, int]) -> None:
    """A long run of read-modify-writes on several keys: nothing acknowledged is lost."""
    plugin = make_plugin(quota=quota)
    alice = plugin.accessor(ALICE)
    expected: dict[str, int] = {}
    for step in range(30):
        key = f"k{step % 3}"
        expected[key] = alice.increment(key, step + 1, scope="user")
        assert alice.get(key, scope="user") == expected[key]
    assert expected == {"k0": 145, "k1": 155, "k2": 165}
    assert plugin.quota_usage(user_id="alice")["entries"] == 3


def test_tools_write_and_forget_under_a_quota(make_plugin: Any, quota: dict[str, int]) -> None:
    """remember_this (new and overwrite, session, user and tool scope) and forget through the
    tools: values read back, the count follows."""
    plugin = make_plugin(quota=quota, tools={"enabled": True})
    for scope in ("session", "user", "tool"):
        tool(plugin, "remember_this", {"key": "t", "value": 1, "scope": scope}, ALICE)
        tool(plugin, "remember_this", {"key": "t", "value": 2, "scope": scope}, ALICE)
        if scope != "tool":  # tool scope is the writing tool's own namespace
            found = tool(plugin, "recall", {"key": "t", "scope": scope}, ALICE)
            assert found["found"] is True and found["value"] == 2, found
    writer = plugin.accessor(ALICE.with_tool("remember_this"))
    assert writer.get("t", scope="tool") == 2
    assert plugin.quota_usage(user_id="alice")["entries"] == 3
    assert held(plugin, ALICE, ("remember_this",)) == 3
    assert tool(plugin, "forget", {"key": "t", "scope": "session"}, ALICE)["existed"] is True
    usage_settles(plugin, 2, user_id="alice")
    alice = plugin.accessor(ALICE)
    assert alice.increment("t", scope="user") == 3  # a host write over a tool's entry
    assert tool(plugin, "recall", {"key": "t", "scope": "user"}, ALICE)["value"] == 3


def test_forget_and_forget_many_refund_exactly(make_plugin: Any, quota: dict[str, int]) -> None:
    """forget and forget_many (a session pattern, across sessions of one person) refund
    exactly what they delete; bob's charges are untouched."""
    plugin = make_plugin(quota=quota)
    alice, alice_2, bob = (plugin.accessor(i) for i in (ALICE, ALICE_2, BOB))
    alice.set("u", 1, scope="user")
    alice.set("tmp:a", 1, scope="session")
    alice.set("tmp:b", 1, scope="session")
    alice.set("keep", 1, scope="session")
    alice_2.set("tmp:c", 1, scope="session")
    bob.set("tmp:a", 1, scope="session")
    alice.update("tmp:a", 2, scope="session")
    alice.increment("keep", scope="session")
    assert plugin.quota_usage(user_id="alice")["entries"] == 5
    assert alice.forget_many(scope="session", pattern="tmp:*") == 2
    assert plugin.quota_usage(user_id="alice")["entries"] == 3
    assert alice.forget("u", scope="user")
    assert not alice.forget("u", scope="user")
    assert plugin.quota_usage(user_id="alice")["entries"] == 2
    assert held(plugin, ALICE) + held(plugin, ALICE_2) - len(alice.list(scope="user")) == 2
    assert plugin.quota_usage(user_id="bob")["entries"] == 1
    assert alice.get("keep", scope="session") == 2


def test_count_after_a_mixed_workload(make_plugin: Any) -> None:
    """After user and session writes, update, increment, forget, forget_many of a session
    pattern and the tools writing and forgetting in session and tool scope, a person holding
    6 entries under entries=10 can write exactly 4 more."""
    plugin = make_plugin(quota={"entries": 10, "bytes": 1_000_000}, tools={"enabled": True})
    alice = plugin.accessor(ALICE)
    for key, scope in (("a", "user"), ("b", "user"), ("s1", "session"), ("tmp:1", "session"),
                       ("tmp:2", "session")):  # fmt: skip
        alice.set(key, 1, scope=scope)
    alice.update("a", 2, scope="user")
    alice.increment("b", scope="user")
    alice.increment("c", scope="user")
    assert alice.forget_many(scope="session", pattern="tmp:*") == 2
    for scope in ("session", "tool"):
        tool(plugin, "remember_this", {"key": "t1", "value": 1, "scope": scope}, ALICE)
        tool(plugin, "remember_this", {"key": "t2", "value": 1, "scope": scope}, ALICE)
        tool(plugin, "remember_this", {"key": "t1", "value": 5, "scope": scope}, ALICE)
        if scope == "session":
            tool(plugin, "forget", {"key": "t2", "scope": scope}, ALICE)
        else:  # tool scope: the writing tool's own namespace
            assert plugin.accessor(ALICE.with_tool("remember_this")).forget("t2", scope="tool")
    alice.set("gone", 1, scope="user")
    assert alice.forget("gone", scope="user")
    assert held(plugin, ALICE, ("remember_this",)) == 6
    usage_settles(plugin, 6, user_id="alice")
    for n in range(4):
        alice.set(f"more{n}", n, scope="user")
    with pytest.raises(RememberQuotaError):
        alice.set("one-too-many", 1, scope="user")
    assert plugin.quota_usage(user_id="alice")["entries"] == 10
    assert alice.get("a", scope="user") == 2 and alice.get("c", scope="user") == 1


def test_quota_usage_arguments(make_plugin: Any) -> None:
    """quota_usage names one principal; without a quota it is a configuration error."""
    from remember_sync.errors import RememberConfigurationError, RememberInputError

    plugin = make_plugin(quota={"entries": 3})
    anonymous = Identity(session_id="s-anon")
    plugin.accessor(anonymous).set("k", 1, scope="session")
    assert plugin.quota_usage(session_id="s-anon")["entries"] == 1
    assert plugin.quota_usage(user_id="nobody") == {"entries": 0, "bytes": 0}
    for bad in ({}, {"user_id": "a", "session_id": "s"}, {"user_id": "anon:x"}, {"user_id": ""}):
        with pytest.raises(RememberInputError):
            plugin.quota_usage(**bad)
    with pytest.raises(RememberConfigurationError, match="quota"):
        make_plugin().quota_usage(user_id="alice")


@pytest.mark.parametrize("store_kind", ["redis", "redis_cluster", "vercel_kv"], indirect=True)
def test_the_ledger_stays_consistent(
    make_plugin: Any, store_kind: str, request: pytest.FixtureRequest
) -> None:
    """After compare-and-sets, tool writes and forgets, the ledger in the store lists in its
    sorted set exactly the members its sizes hash has, and the hash's total is their sum."""
    plugin = make_plugin(quota={"entries": 10, "bytes": 1_000_000}, tools={"enabled": True})
    alice = plugin.accessor(ALICE)
    for n in range(4):
        alice.set(f"k{n}", n, scope="user")
        alice.increment(f"k{n}", scope="user")
        tool(plugin, "remember_this", {"key": f"t{n}", "value": n, "scope": "session"}, ALICE)
        tool(plugin, "remember_this", {"key": f"t{n}", "value": -n, "scope": "session"}, ALICE)
    alice.forget("k0", scope="user")
    assert alice.forget_many(scope="session", pattern="t1") == 1
    client = request.getfixturevalue(RAW_CLIENT[store_kind])
    [ledger] = [k for k in client.scan_iter(match="remember:__quota__:*", count=1000)
                if not k.endswith(b"#sizes")]  # fmt: skip
    members = set(client.zrange(ledger, 0, -1))
    sizes = client.hgetall(ledger + b"#sizes")
    total = int(sizes.pop(b""))
    sizes.pop(b"\x00reconciled", None)
    assert set(sizes) == members and len(members) == 6
    assert total == sum(int(v) for v in sizes.values())
    assert plugin.quota_usage(user_id="alice") == {"entries": 6, "bytes": total}
