"""The optional capabilities together, on every store: the full stack and every pair.

Under each combination the whole operation set works (set, get, update, increment, forget,
forget_many, entries, search, the five tools, export/import, rotate, reindex, erase), and
each capability's own guarantee holds afterwards: quota counts equal what each principal
holds (after import, rotate and erase too), the audit trail verifies, search never returns
what was forgotten or erased, an erased person's entries are gone for every reader.
"""

from __future__ import annotations

import io
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin
from remember_sync._ops.rotate import rotate
from remember_sync._ops.transfer import export_entries, import_entries, parse_records
from remember_sync._ops.verify import open_witness, verify_store
from remember_sync.errors import RememberConfigurationError
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.testing import HashingEmbedder
from tests.features.raw_scan import naming, raw_texts

FEATURES = ("quota", "audit", "subject_keys", "search", "metrics")
#: Every pair of features, and all of them.
COMBINATIONS = [*itertools.combinations(FEATURES, 2), FEATURES]
#: ``integrity="verified"`` with a file witness, with each feature it composes with and with
#: all of them; a quota is the one it does not take yet (``test_verified_with_a_quota``).
VERIFIED_WITH = ("audit", "subject_keys", "search", "metrics")
VERIFIED_COMBINATIONS: list[tuple[str, ...]] = [
    *(("verified", feature) for feature in VERIFIED_WITH), ("verified", *VERIFIED_WITH),
]
QUOTA = 40

ALICE = Identity(session_id="s-alice-combo", user_id="alice-combo")
BOB = Identity(session_id="s-bob-combo", user_id="bob-combo")


@pytest.fixture
def keystore() -> Iterator[MemoryStore]:
    store = MemoryStore()
    yield store
    store.close()


def options(
    features: tuple[str, ...], keystore: Store, witness: str | None = None
) -> dict[str, Any]:
    """``RememberPlugin.init`` options turning on *features* (*witness*: verified mode's)."""
    out: dict[str, Any] = {"tools": {"enabled": True}}
    if "verified" in features:
        out["integrity"] = "verified"
        out["witness"] = witness
    if "quota" in features:
        out["quota"] = {"entries": QUOTA, "bytes": 2_000_000}
    if "audit" in features:
        out["audit"] = True
    if "subject_keys" in features:
        out["encryption"] = {"subject_keys": True}
        out["keystore"] = keystore
    if "search" in features:
        out["search"] = {"embedder": HashingEmbedder()}
    if "metrics" in features:
        out["metrics"] = True
    return out


def tool(plugin: RememberPlugin, name: str, args: dict[str, Any], who: Identity) -> Any:
    result = plugin.call_tool(name, args, identity=who)
    assert result["isError"] is False, result
    return json.loads(result["content"][0]["text"])


def held(plugin: RememberPlugin, who: Identity) -> int:
    """The live entries *who* holds in user, session and the remember_this tool's scope."""
    accessor, writer = plugin.accessor(who), plugin.accessor(who.with_tool("remember_this"))
    return (len(accessor.list(scope="user")) + len(accessor.list(scope="session"))
            + len(writer.list(scope="tool")))  # fmt: skip


def counts_exact(plugin: RememberPlugin, features: tuple[str, ...]) -> None:
    if "quota" not in features:
        return
    for who in (ALICE, BOB):
        assert who.user_id is not None
        # The forget tool's tombstone counts until it expires, a millisecond after it.
        deadline = time.monotonic() + 2.0
        while plugin.quota_usage(user_id=who.user_id)["entries"] != held(plugin, who):
            assert time.monotonic() < deadline, (who, plugin.quota_usage(user_id=who.user_id))
            time.sleep(0.002)


def searched(plugin: RememberPlugin, who: Identity, query: str) -> set[str]:
    accessor = plugin.accessor(who)
    return {hit.key for scope in ("user", "session") for hit in accessor.search(query, scope=scope)}


def workload(plugin: RememberPlugin, who: Identity) -> None:
    """Every accessor write and the five tools."""
    mem = plugin.accessor(who)
    mem.set("colour", "blue sky", scope="user")
    assert mem.get("colour", scope="user") == "blue sky"
    assert mem.update("colour", "green grass", scope="user")
    assert mem.increment("visits", scope="session") == 1
    assert mem.increment("visits", 2, scope="session") == 3
    mem.set("tmp:a", "scratch one", scope="session")
    mem.set("tmp:b", "scratch two", scope="session")
    mem.set("forgettable", "purple elephant", scope="user")
    assert mem.forget("forgettable", scope="user")
    assert mem.forget_many(scope="session", pattern="tmp:*") == 2
    assert set(mem.entries(scope="user")) == {"colour"}
    tool(plugin, "remember_this", {"key": "pet", "value": "a cat named tom", "scope": "session"},
         who)  # fmt: skip
    tool(plugin, "remember_this", {"key": "note", "value": "tool scope note", "scope": "tool"},
         who)  # fmt: skip
    assert tool(plugin, "recall", {"key": "pet", "scope": "session"}, who)["value"] == (
        "a cat named tom"
    )
    tool(plugin, "remember_this", {"key": "gone", "value": "orange", "scope": "session"}, who)
    assert tool(plugin, "forget", {"key": "gone", "scope": "session"}, who)["existed"]
    listed = tool(plugin, "list_memories", {"scope": "session"}, who)
    assert "pet" in listed["keys"] and "gone" not in listed["keys"]
    found = tool(plugin, "search_memories", {"query": "cat", "scope": "session"}, who)
    assert [r["key"] for r in found["results"]] == ["pet"]


def settle(plugin: RememberPlugin, features: tuple[str, ...], witness: str) -> None:
    """After ``import`` or ``rotate``, which rewrite entries past verified mode's manifests:
    what the CLI does around them (``remember-sync verify --repair``, its
    ``manifests_kept``), until they write through the manifests themselves."""
    core = plugin._core
    if "verified" in features and core.verifier is not None:  # (the memory store needs none)
        verify_store(plugin.store, plugin.key_prefix, core.codec, clock=core.clock,
                     witness=open_witness(witness), repair=True)


@pytest.mark.parametrize("features", COMBINATIONS + VERIFIED_COMBINATIONS, ids="+".join)
def test_every_operation_under_the_combination(
    make_plugin: Any, features: tuple[str, ...], keystore: MemoryStore, store: Store,
    store_kind: str, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    witness = str(tmp_path / "witness.db")
    plugin = make_plugin(**options(features, keystore, witness))
    for who in (ALICE, BOB):
        workload(plugin, who)
    # Search never returns what was forgotten.
    assert "forgettable" not in searched(plugin, ALICE, "purple elephant")
    assert "colour" in searched(plugin, ALICE, "green grass")
    # The tools' forget leaves a tombstone for a millisecond: a read after it drops it.
    assert not plugin.accessor(ALICE).knows("gone", scope="session")
    counts_exact(plugin, features)

    # Export, forget, import: what was forgotten comes back, charged again.
    out = io.StringIO()
    exported = export_entries(plugin._core, out).exported
    assert exported == 2 * 4
    assert plugin.accessor(BOB).forget("colour", scope="user")
    imported = import_entries(plugin._core, parse_records(out.getvalue().splitlines()))
    settle(plugin, features, witness)
    assert (imported.imported, imported.existing, imported.over_quota) == (1, 7, 0)
    assert plugin.accessor(BOB).get("colour", scope="user") == "green grass"
    counts_exact(plugin, features)

    # Rotate (nothing to re-seal under one secret) and reindex leave everything readable.
    assert rotate(plugin._core).complete
    settle(plugin, features, witness)
    assert plugin.reindex().indexed > 0  # every live entry of both people is indexed
    assert plugin.accessor(ALICE).get("visits", scope="session") == 3
    counts_exact(plugin, features)

    # Erase: alice is gone for every reader and search; bob is intact.
    receipt = plugin.erase(user_id=str(ALICE.user_id))
    assert receipt.total == 4
    alice = plugin.accessor(ALICE)
    assert alice.list(scope="user") == [] and alice.list(scope="session") == []
    assert searched(plugin, ALICE, "green grass cat") == set()
    assert plugin.accessor(BOB).get("colour", scope="user") == "green grass"
    assert "pet" in searched(plugin, BOB, "cat")
    if "audit" in features:
        assert plugin.audit is not None
        plugin.audit.flush()
    # Nothing in the store names alice any more (bob's keys have the same names).
    named = naming(raw_texts(store_kind, store, request), [ALICE.user_id or "", "s-alice"])
    assert named == [], "\n".join(named)
    counts_exact(plugin, features)
    if "quota" in features:
        assert plugin.quota_usage(user_id=str(ALICE.user_id)) == {"entries": 0, "bytes": 0}
    if "audit" in features:
        assert plugin.audit is not None
        assert plugin.audit.verify()
        kinds = {event.op for event in plugin.audit.events()}
        assert {"set", "forget", "forget_many", "import", "rotate", "erase"} <= kinds
    if "verified" in features and plugin._core.verifier is not None:
        # The erased person's namespaces verify, compared both ways with the witness (the
        # memory store keeps no manifests: nothing outside the process can edit it).
        checked = verify_store(plugin.store, plugin.key_prefix, plugin._core.codec,
                               clock=plugin._core.clock, witness=open_witness(witness))
        assert checked.violations == [], checked.violations


@pytest.mark.parametrize("store_kind", ["redis"], indirect=True)
def test_verified_with_a_quota(make_plugin: Any) -> None:
    """``integrity="verified"`` with a quota on a shared store: refused at init today, with
    the reason in the error (until it composes: then it joins ``VERIFIED_COMBINATIONS``)."""
    assert not any("quota" in c for c in VERIFIED_COMBINATIONS)
    with pytest.raises(RememberConfigurationError) as caught:
        make_plugin(integrity="verified", quota={"entries": 10})
    message = caught.value.message
    assert "quota" in message and "verified" in message
