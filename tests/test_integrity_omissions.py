"""Verified memory: omissions -- a deleted manifest, a namespace deleted whole, a rollback.

The attacker holds the backing store (:class:`tests.integrity_raw.RawStore`),
not the process, the secret or the witness.  Stores: Redis standalone, Redis
Cluster and Vercel KV (its emulator over a real redis-server).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import RememberIntegrityError, RememberPlugin, identity
from remember_sync._integrity import FileWitness, StoreWitness
from remember_sync._ops.verify import verify_store
from remember_sync.cli import main
from remember_sync.stores.base import Store
from remember_sync.testing import HashingEmbedder
from remember_sync.tools.results import error_parts
from tests import test_integrity as _shared
from tests.conftest import TEST_SECRET
from tests.integrity_raw import RawStore

Factory = Callable[..., RememberPlugin]
#: The same stores (and the attacker's raw client of each) as tests/test_integrity.py.
store_kind, raw = _shared.store_kind, _shared.raw
ALICE = "alice"
ENTRY = "remember:v2:user:alice:"
MANIFEST = "remember:__manifest__:v2:user:alice:"
TOOLS = {"enabled": True, "allowed_scopes": ["user"]}


@pytest.fixture
def verified(make_plugin: Factory) -> Factory:
    """Verified plugins with search and the tools on."""
    return lambda **options: make_plugin(**{
        "integrity": "verified", "search": {"embedder": HashingEmbedder()}, "tools": TOOLS,
        **options,
    })


def every_read_refuses(plugin: RememberPlugin, match: str) -> None:
    """get (a listed and an unknown key), list, entries, search and the tools all refuse."""
    mem = plugin.remember
    reads: list[Callable[[], object]] = [
        lambda: mem.get("a", scope="user"),
        lambda: mem.get("never-written", scope="user"),
        lambda: mem.list(scope="user"),
        lambda: mem.entries(scope="user"),
        lambda: mem.search("one", scope="user"),
    ]
    with identity(user_id=ALICE):
        for read in reads:
            with pytest.raises(RememberIntegrityError, match=match):
                read()
        for tool, args in (("recall", {"key": "b", "scope": "user"}),
                           ("list_memories", {"scope": "user"})):
            code, _ = error_parts(plugin.call_tool(tool, args))
            assert code == "REMEMBER_INTEGRITY", tool


def _verify(store: Store, plugin: RememberPlugin, witness: Any = None) -> list[str]:
    found = verify_store(store, "remember:", plugin._core.codec, clock=plugin._core.clock,
                         witness=witness)
    return found.violations


@pytest.mark.parametrize("witnessed", [False, True], ids=["no-witness", "file-witness"])
def test_deleting_only_the_manifest_is_refused_everywhere(
    verified: Factory, raw: RawStore, store: Store, witnessed: bool, tmp_path: Path
) -> None:
    """The manifest key alone deleted: every read path refuses, in the writing process
    and in a fresh one, with or without a witness; verify reports it."""
    witness = str(tmp_path / "w.db") if witnessed else None
    writer = verified(witness=witness)
    with identity(user_id=ALICE):
        writer.remember.set("a", "one", scope="user")
        writer.remember.set("b", "two", scope="user")
    raw.delete(MANIFEST)
    assert raw.get(ENTRY + "a") is not None
    every_read_refuses(verified(witness=witness), "no manifest|older state|not in its manifest")
    every_read_refuses(writer, "older state")
    assert any("not in its manifest" in v for v in _verify(store, writer))


def test_manifest_and_some_entries_deleted_fresh_process(
    verified: Factory, raw: RawStore
) -> None:
    """Manifest and the entry read deleted, others left: a fresh process's get of that key
    finds the namespace's other entries and refuses (no witness)."""
    writer = verified()
    with identity(user_id=ALICE):
        writer.remember.set("a", "one", scope="user")
        writer.remember.set("b", "two", scope="user")
    raw.delete(MANIFEST, ENTRY + "a")
    with identity(user_id=ALICE), pytest.raises(RememberIntegrityError, match="no manifest"):
        verified().remember.get("a", scope="user")


def test_a_namespace_never_written_reads_empty(verified: Factory, raw: RawStore) -> None:
    """No manifest and no entries: an honest empty namespace, not an error."""
    plugin = verified()
    with identity(user_id="nobody"):
        assert plugin.remember.get("a", scope="user") is None
        assert plugin.remember.list(scope="user") == []
        plugin.remember.set("a", 1, scope="user")
        assert verified().remember.get("a", scope="user") == 1


@pytest.mark.parametrize("witness_kind", ["file", "redis", "custom"])
def test_verify_finds_a_namespace_deleted_whole(
    verified: Factory, raw: RawStore, store: Store, tmp_path: Path, redis_url: str,
    witness_kind: str,
) -> None:
    """Manifest and entries deleted: verify with a listable witness reports the namespace
    the witness knows and the store lacks; an erased one is not reported."""
    with witness_factory(witness_kind, tmp_path, redis_url) as make:
        plugin = verified(witness=make())
        with identity(user_id=ALICE):
            plugin.remember.set("a", 1, scope="user")
        with identity(user_id="carol"):
            plugin.remember.set("c", 1, scope="user")
        with identity(user_id="zoe"):
            plugin.remember.set("z", 1, scope="user")
        check = make()
        assert _verify(store, plugin, check) == []
        plugin.erase(user_id="zoe")
        assert _verify(store, plugin, check) == []
        raw.delete(*raw.keys("remember:*user:alice:*"))
        lost = _verify(store, plugin, check)
        assert len(lost) == 1 and "store has neither" in lost[0], lost
        with identity(user_id=ALICE), pytest.raises(RememberIntegrityError, match="older"):
            verified(witness=make()).remember.list(scope="user")


class DictWitness:
    """A custom witness object with the optional ``names``."""

    def __init__(self) -> None:
        self.heads: dict[str, tuple[int, int | None]] = {}

    def floor(self, name: str) -> tuple[int, int | None]:
        return self.heads.get(name, (0, None))

    def advance(self, name: str, counter: int, deadline: int | None) -> None:
        if self.floor(name)[0] < counter:
            self.heads[name] = (counter, deadline)

    def names(self) -> Iterator[tuple[str, int, int | None]]:
        for name, (counter, deadline) in list(self.heads.items()):
            yield name, counter, deadline

    def close(self) -> None:
        pass


class witness_factory:  # noqa: N801 - used as a context manager
    """Witnesses of one kind over the same record, closed at the end."""

    def __init__(self, kind: str, tmp_path: Path, redis_url: str) -> None:
        self.kind, self.path = kind, str(tmp_path / "w.db")
        self.url = redis_url.rsplit("/", 1)[0] + "/7"
        self.shared = DictWitness()
        self.opened: list[Any] = []

    def __enter__(self) -> Callable[[], Any]:
        if self.kind == "redis":
            with redis.Redis.from_url(self.url) as fresh:
                fresh.flushdb()
        return self.make

    def make(self) -> Any:
        if self.kind == "custom":
            return self.shared
        from remember_sync.stores.redis import RedisStore

        made = FileWitness(self.path) if self.kind == "file" else StoreWitness(
            RedisStore.from_url(self.url))
        self.opened.append(made)
        return made

    def __exit__(self, *exc: object) -> None:
        for made in self.opened:
            made.close()


@pytest.mark.parametrize("store_kind", ["redis"])
def test_cli_verify_with_a_witness_exits_1_for_a_deleted_namespace(
    verified: Factory, raw: RawStore, redis_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`remember-sync verify --witness FILE`: 0 on the intact store, 1 once a whole
    namespace (manifest and entries) is gone."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    witness = str(tmp_path / "w.db")
    plugin = verified(witness=witness)
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
    args = ["verify", "--redis-url", redis_url, "--witness", witness, "--json"]
    assert main(args) == 0
    capsys.readouterr()
    raw.delete(*raw.keys("remember:*user:alice:*"))
    assert main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["violations"] == 1
    assert main(args[:3] + ["--json"]) == 0  # without the witness: not detectable


@pytest.mark.parametrize("store_kind", ["redis"])
def test_verify_knows_the_audit_trails_record_in_the_witness(
    verified: Factory, store: Store, tmp_path: Path
) -> None:
    """The audit trail anchors its head in the same witness: not a lost namespace."""
    path = str(tmp_path / "w.db")
    plugin = verified(witness=path, audit=True)
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
    assert plugin.audit is not None
    plugin.audit.flush()
    check = FileWitness(path)
    try:
        assert len(list(check.names())) == 2  # the namespace and the trail's head
        assert _verify(store, plugin, check) == []
    finally:
        check.close()


@pytest.mark.parametrize("witnessed", [False, True], ids=["no-witness", "file-witness"])
def test_a_namespace_deleted_whole_on_the_read_path(
    verified: Factory, raw: RawStore, witnessed: bool, tmp_path: Path
) -> None:
    """Manifest and entries deleted: the process that saw the namespace refuses; a fresh
    one refuses only with a witness (without one it reads an empty namespace)."""
    witness = str(tmp_path / "w.db") if witnessed else None
    writer = verified(witness=witness)
    with identity(user_id=ALICE):
        writer.remember.set("opted_out", True, scope="user")
        raw.delete(*raw.keys("remember:*user:alice:*"))
        with pytest.raises(RememberIntegrityError, match="older state"):
            writer.remember.get("opted_out", scope="user")
        fresh = verified(witness=witness)
        if witnessed:
            with pytest.raises(RememberIntegrityError, match="older state"):
                fresh.remember.list(scope="user")
        else:
            assert fresh.remember.list(scope="user") == []  # not detected


@pytest.mark.parametrize("keys", ["remember:*user:alice:*", "remember:*"],
                         ids=["one-namespace", "whole-store"])
@pytest.mark.parametrize("witnessed", [False, True], ids=["no-witness", "file-witness"])
def test_a_rollback_with_and_without_a_witness(
    verified: Factory, raw: RawStore, witnessed: bool, tmp_path: Path, keys: str
) -> None:
    """DUMP/RESTORE of one namespace's keys, or of the whole store: refused by a fresh
    process with a witness; without one only the process that saw the newer state refuses."""
    witness = str(tmp_path / "w.db") if witnessed else None
    plugin = verified(witness=witness)
    with identity(user_id=ALICE):
        plugin.remember.set("deploy", "granted", scope="user")
        snap = raw.snapshot(keys)
        plugin.remember.set("deploy", "revoked", scope="user")
        raw.restore(snap, keys)
        with pytest.raises(RememberIntegrityError, match="older state"):
            plugin.remember.get("deploy", scope="user")
        fresh = verified(witness=witness)
        if witnessed:
            with pytest.raises(RememberIntegrityError, match="older state"):
                fresh.remember.get("deploy", scope="user")
        else:
            assert fresh.remember.get("deploy", scope="user") == "granted"  # not detected


def test_a_namespace_another_process_emptied_may_expire(
    verified: Factory, raw: RawStore, clock: Any
) -> None:
    """No witness: A reads; B forgets the last entry (the emptied manifest outlives it by a
    minute); a minute later the manifest expires (deleted here, as Redis would): A reads an
    empty namespace, no error.  Within that minute an absent manifest is refused."""
    reader, writer = verified(), verified()
    with identity(user_id=ALICE):
        writer.remember.set("a", 1, scope="user")
        assert reader.remember.list(scope="user") == ["a"]
        assert writer.remember.forget("a", scope="user") is True
        raw.delete(MANIFEST)
        with pytest.raises(RememberIntegrityError, match="older state"):
            reader.remember.list(scope="user")
        clock.advance(61_000)
        assert reader.remember.list(scope="user") == []
        assert reader.remember.get("a", scope="user") is None
