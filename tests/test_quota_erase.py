"""Erasure under a quota, on every store: the person's charges are refunded and nothing in
the store -- no usage ledger, no compare-and-set marker, no owner record -- names them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin, RememberQuotaError
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.testing import HashingEmbedder
from tests.features.raw_scan import naming, raw_texts

USER = "zelda-user"
SESSIONS = ("zelda-sess-1", "zelda-sess-2")
KEYS = ("zelda_hiv_status", "zelda_diary", "zelda_tool_note", "zelda_counter")
ZELDA = Identity(session_id=SESSIONS[0], user_id=USER)
ZELDA_2 = Identity(session_id=SESSIONS[1], user_id=USER)
BOB = Identity(session_id="s-bob", user_id="bob")
QUOTA = 10


def tool(plugin: RememberPlugin, name: str, args: dict[str, Any], who: Identity) -> Any:
    result = plugin.call_tool(name, args, identity=who)
    assert result["isError"] is False, result
    return json.loads(result["content"][0]["text"])


def zelda_writes(plugin: RememberPlugin) -> None:
    """Every kind of write, in every scope, from two sessions: markers, ledgers, records."""
    zelda, zelda_2 = plugin.accessor(ZELDA), plugin.accessor(ZELDA_2)
    zelda.set(KEYS[0], "positive", scope="user")
    zelda.update(KEYS[0], "negative", scope="user")
    zelda.increment(KEYS[3], scope="session")
    zelda.increment(KEYS[3], scope="session")
    zelda_2.set(KEYS[1], "dear diary", scope="session", ttl=3600)
    zelda_2.modify(KEYS[1], lambda v: v + "!", scope="session")
    for scope in ("session", "tool", "user"):
        tool(plugin, "remember_this", {"key": KEYS[2], "value": 1, "scope": scope}, ZELDA)
        tool(plugin, "remember_this", {"key": KEYS[2], "value": 2, "scope": scope}, ZELDA)


def bob_writes(plugin: RememberPlugin) -> dict[str, Any]:
    bob = plugin.accessor(BOB)
    bob.set("bob_note", "hello", scope="user")
    bob.increment("bob_count", scope="session")
    tool(plugin, "remember_this", {"key": "bob_tool", "value": 7, "scope": "session"}, BOB)
    return {"bob_note": "hello", "bob_count": 1}


def check_bob(plugin: RememberPlugin) -> None:
    bob = plugin.accessor(BOB)
    assert bob.get("bob_note", scope="user") == "hello"
    assert bob.get("bob_count", scope="session") == 1
    assert bob.get("bob_tool", scope="session") == 7
    assert plugin.quota_usage(user_id="bob")["entries"] == 3


def check_zelda_refunded(plugin: RememberPlugin) -> None:
    """Nothing charged; exactly the quota may be written again, not one more."""
    assert plugin.quota_usage(user_id=USER) == {"entries": 0, "bytes": 0}
    zelda = plugin.accessor(ZELDA)
    for n in range(QUOTA):
        zelda.set(f"again{n}", n, scope="user" if n % 2 else "session")
    with pytest.raises(RememberQuotaError):
        zelda.set("one-too-many", 1, scope="user")


def test_erase_refunds_and_leaves_no_ledger_or_marker(
    make_plugin: Any, store_kind: str, store: Store, request: pytest.FixtureRequest
) -> None:
    """After erase(user_id=...) under a quota, a raw scan of every key, member, field and
    value finds nothing naming the person, and their quota is refunded exactly."""
    plugin = make_plugin(quota={"entries": QUOTA, "bytes": 1_000_000}, tools={"enabled": True})
    bob_writes(plugin)
    zelda_writes(plugin)
    needles = [USER, *SESSIONS, *KEYS]
    assert len(list(store.scan("remember:__owner__:*"))) == 3
    before = raw_texts(store_kind, store, request)
    assert naming(before, needles), "the workload wrote nothing naming the person"
    receipt = plugin.erase(user_id=USER)
    assert receipt.total >= 5
    after = raw_texts(store_kind, store, request)
    left = naming(after, needles)
    assert left == [], "\n".join(left)
    records = [k for k in store.scan("remember:__owner__:*")]
    assert len(records) == 1  # bob's session's; zelda's two sessions' are gone
    assert plugin.store.get(records[0]) is not None
    check_bob(plugin)
    check_zelda_refunded(plugin)


def test_erase_with_every_feature_leaves_nothing_naming_the_person(
    make_plugin: Any, store_kind: str, store: Store, request: pytest.FixtureRequest,
    tmp_path: Any,
) -> None:
    """quota + audit + subject keys + search + metrics: after the erase nothing in the store
    names the person, none of their sealed values is left anywhere, others are intact."""
    keystore = MemoryStore()
    plugin = make_plugin(
        quota={"entries": QUOTA, "bytes": 1_000_000}, tools={"enabled": True}, audit=True,
        encryption={"subject_keys": True}, keystore=keystore,
        search={"embedder": HashingEmbedder()}, metrics=True,
    )  # fmt: skip
    bob_writes(plugin)
    zelda_writes(plugin)
    assert [h.key for h in plugin.accessor(ZELDA).search("diary", scope="session")]
    sealed = [v for k, v in _entries(plugin) if USER in k or any(s in k for s in SESSIONS)]
    assert sealed
    plugin.erase(user_id=USER)
    assert plugin.audit is not None
    plugin.audit.flush()
    after = raw_texts(store_kind, store, request)
    assert naming(after, [USER, *SESSIONS, *KEYS]) == []
    assert naming(after, sealed) == []  # no copy of a value only their keys opened
    assert plugin.accessor(ZELDA).search("diary", scope="session") == []
    assert plugin.audit.verify()
    check_bob(plugin)
    check_zelda_refunded(plugin)
    keystore.close()


def _entries(plugin: RememberPlugin) -> list[tuple[str, str]]:
    store = plugin.store
    keys = list(store.scan("remember:v2:*"))
    return [(k, v) for k, v in zip(keys, store.get_many(keys), strict=True) if v is not None]
