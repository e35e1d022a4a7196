"""Erasure in verified mode: the person's manifests go with their entries, the store verifies.

``erase(user_id=...)`` deletes the person's namespaces' manifests (their keys
name user and session ids) and leaves only a sealed mark under a keyed name
(and, with a witness, its record raised to the erasure): afterwards the
person's namespaces read as empty in every process, ``verify`` finds nothing,
and no key names the person -- while the erased state put back is still refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from remember_sync import RememberIntegrityError, RememberPlugin, identity
from remember_sync._integrity import FileWitness
from remember_sync._ops.verify import VerifyResult, verify_store
from remember_sync.stores.base import Store
from remember_sync.testing import HashingEmbedder
from tests.integrity_raw import RawStore

Factory = Callable[..., RememberPlugin]
KINDS = ["memory", "redis", "redis_cluster", "vercel_kv"]
RAW_FIXTURE = {"redis": "redis_client", "redis_cluster": "redis_cluster_client",
               "vercel_kv": "kv_redis"}
ZELDA, ZELDA_SESSION, BOB = "zelda-user", "zelda-session", "bob-user"


@pytest.fixture(params=KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def verified(make_plugin: Factory) -> Factory:
    return lambda **options: make_plugin(**{"integrity": "verified", **options})


def _write_zelda_and_bob(plugin: RememberPlugin) -> None:
    with identity(user_id=ZELDA, session_id=ZELDA_SESSION):
        plugin.remember.set("hiv_status", "x", scope="user")
        plugin.remember.set("diet", "vegan", scope="user", ttl=600)
        plugin.remember.set("draft", 1)  # session scope: Zelda owns the session
        plugin.remember.set("gone", 1)
        plugin.remember.forget("gone")
    with identity(user_id=BOB, session_id="bob-session"):
        plugin.remember.set("plan", "b", scope="user")
        plugin.remember.set("draft", 2)


def _zelda_reads_empty(plugin: RememberPlugin) -> None:
    with identity(user_id=ZELDA, session_id=ZELDA_SESSION):
        assert plugin.remember.get("hiv_status", scope="user") is None
        assert plugin.remember.list(scope="user") == []
        assert plugin.remember.entries(scope="user") == {}
        assert plugin.remember.list() == []
        assert plugin.remember.get("draft") is None


def _verified_clean(store: Store, plugin: RememberPlugin, witness: str | None) -> VerifyResult:
    """``verify`` of the whole store (with the witness file, if any): no violation."""
    check = FileWitness(witness) if witness is not None else None
    try:
        found = verify_store(store, "remember:", plugin._core.codec,
                             clock=plugin._core.clock, witness=check)
    finally:
        if check is not None:
            check.close()
    assert (found.violation_count, found.violations) == (0, [])
    return found


def _keys(store: Store) -> list[str]:
    return sorted(store.scan("*"))


@pytest.mark.parametrize("witnessed", [False, True], ids=["no-witness", "file-witness"])
def test_erase_leaves_a_verifying_store_that_names_nobody(
    verified: Factory, store: Store, store_kind: str, witnessed: bool, tmp_path: Path
) -> None:
    """After erase: empty reads in the erasing, a reading and a fresh process; verify finds
    no violation (with the witness compared both ways); no key names Zelda; Bob intact."""
    witness = str(tmp_path / "witness.db") if witnessed else None
    plugin = verified(witness=witness)
    _write_zelda_and_bob(plugin)
    reader = verified(witness=witness)  # another process that saw Zelda's namespaces
    with identity(user_id=ZELDA, session_id=ZELDA_SESSION):
        assert reader.remember.list(scope="user") == ["diet", "hiv_status"]
        assert reader.remember.list() == ["draft"]
    if store_kind != "memory":
        assert any(ZELDA in k for k in _keys(store))  # the manifests name her before

    receipt = plugin.erase(user_id=ZELDA)
    assert (receipt.user_entries, receipt.session_entries) == (2, 1)

    for p in (plugin, reader, verified(witness=witness)):
        _zelda_reads_empty(p)
        with identity(user_id=BOB, session_id="bob-session"):
            assert p.remember.get("plan", scope="user") == "b"
            assert p.remember.get("draft") == 2
    names = [k for k in _keys(store) if ZELDA in k or ZELDA_SESSION in k]
    assert names == []
    if store_kind != "memory":
        found = _verified_clean(store, plugin, witness)
        assert found.manifests == 2  # Bob's two namespaces
    # Zelda comes back: her new entries are written and read everywhere.
    with identity(user_id=ZELDA, session_id=ZELDA_SESSION):
        plugin.remember.set("hello", 1, scope="user")
        assert reader.remember.list(scope="user") == ["hello"]
        assert verified(witness=witness).remember.get("hello", scope="user") == 1


@pytest.mark.parametrize("store_kind", ["redis", "redis_cluster", "vercel_kv"])
@pytest.mark.parametrize("witnessed", [False, True], ids=["no-witness", "file-witness"])
def test_the_erased_state_put_back_is_refused(
    verified: Factory, store_kind: str, witnessed: bool, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """A snapshot from before the erase, restored: the witness refuses it in any process;
    without one, a process that saw the erasure does."""
    raw = RawStore(request.getfixturevalue(RAW_FIXTURE[store_kind]))
    witness = str(tmp_path / "witness.db") if witnessed else None
    plugin = verified(witness=witness)
    _write_zelda_and_bob(plugin)
    snap = raw.snapshot("remember:*")
    plugin.erase(user_id=ZELDA)
    raw.restore(snap, "remember:*")
    readers = [plugin, verified(witness=witness)] if witnessed else [plugin]
    for p in readers:
        with identity(user_id=ZELDA, session_id=ZELDA_SESSION), pytest.raises(
            RememberIntegrityError, match="older state"
        ):
            p.remember.get("hiv_status", scope="user")


@pytest.mark.parametrize("store_kind", ["redis"])
def test_dry_run_keeps_the_manifests(verified: Factory, store: Store) -> None:
    """A dry run counts and deletes nothing: Zelda still reads her entries."""
    plugin = verified()
    _write_zelda_and_bob(plugin)
    before = _keys(store)
    receipt = plugin.erase(user_id=ZELDA, dry_run=True)
    assert receipt.user_entries == 2 and _keys(store) == before
    with identity(user_id=ZELDA):
        assert verified().remember.list(scope="user") == ["diet", "hiv_status"]


@pytest.mark.parametrize("store_kind", ["redis", "redis_cluster", "vercel_kv"])
def test_erase_with_search_and_tools(verified: Factory, store: Store) -> None:
    """Search and the tools read the person's erased namespaces as empty, never as an error."""
    plugin = verified(search={"embedder": HashingEmbedder()},
                      tools={"enabled": True, "allowed_scopes": ["user", "session"]})
    _write_zelda_and_bob(plugin)
    plugin.erase(user_id=ZELDA)
    other = verified(search={"embedder": HashingEmbedder()},
                     tools={"enabled": True, "allowed_scopes": ["user", "session"]})
    for p in (plugin, other):
        with identity(user_id=ZELDA, session_id=ZELDA_SESSION):
            assert p.remember.search("vegan", scope="user") == []
            listed = p.call_tool("list_memories", {"scope": "user"})
            assert listed["isError"] is False, listed
            recalled = p.call_tool("recall", {"key": "diet", "scope": "user"})
            assert recalled["isError"] is False and not recalled["structuredContent"]["found"]


@pytest.mark.parametrize("store_kind", ["redis", "redis_cluster", "vercel_kv"])
@pytest.mark.parametrize("witnessed", [False, True], ids=["no-witness", "file-witness"])
def test_verified_mode_with_subject_keys(
    verified: Factory, store: Store, witnessed: bool, tmp_path: Path
) -> None:
    """Subject keys and verified mode together: accepted at init; every operation works;
    erase destroys the person's key and leaves a store that verifies and names nobody.
    Manifests are sealed under the master secret, so destroying a person's key never
    makes a manifest unreadable."""
    witness = str(tmp_path / "witness.db") if witnessed else None
    keystore = str(tmp_path / "keys.db")

    def make() -> RememberPlugin:
        return verified(witness=witness, keystore=keystore,
                        encryption={"subject_keys": True})

    plugin = make()
    _write_zelda_and_bob(plugin)
    with identity(user_id=ZELDA, session_id=ZELDA_SESSION):
        assert plugin.remember.increment("n", 2, scope="user") == 2
        assert plugin.remember.update("diet", "omnivore", scope="user") is True
        assert make().remember.list(scope="user") == ["diet", "hiv_status", "n"]
        assert make().remember.get("draft") == 1
    receipt = plugin.erase(user_id=ZELDA)
    assert receipt.keys_destroyed == 1 and receipt.user_entries == 3
    # Nothing the erasure left (its end marks) made Zelda a new key.
    assert plugin.erase(user_id=ZELDA, dry_run=True).keys_destroyed == 0
    for p in (plugin, make()):
        _zelda_reads_empty(p)
        with identity(user_id=BOB, session_id="bob-session"):
            assert p.remember.get("plan", scope="user") == "b"
    assert [k for k in _keys(store) if ZELDA in k or ZELDA_SESSION in k] == []
    assert _verified_clean(store, plugin, witness).unreadable == 0
