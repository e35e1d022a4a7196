"""RememberStore on every store: namespaces onto people, isolation, erasure, TTL, raw layout.

The isolation tests take the shape of LangGraph's published advisory (one tenant's
prefix search returning a sibling tenant's items, one tenant's put deleting
another's): prefixes, ``"*"`` wildcards, empty labels and look-alike ids.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

from remember_sync import RememberPlugin, RememberQuotaError, identity
from remember_sync._clock import FakeClock
from remember_sync.errors import (
    RememberConfigurationError,
    RememberIdentityError,
    RememberInputError,
)
from remember_sync.integrations.langgraph import RememberStore
from tests.conftest import scan_items

Factory = Callable[..., RememberPlugin]

PEOPLE = ["alice", "alice2", "bob:alice", "bob", "ali", "alice/x", "alice%3A"]


def _everything(plugin: RememberPlugin) -> list[tuple[str, str]]:
    return scan_items(plugin.store, plugin.key_prefix + "*")


def _fill(store: RememberStore) -> None:
    """Each person writes the same keys in their own namespaces; one shared namespace."""
    for who in PEOPLE:
        store.put(("users", who, "memories"), "fact", {"text": f"secret of {who}"})
        store.put(("users", who), "fact", {"text": f"top of {who}"})
    store.put(("docs", "faq"), "hours", {"text": "open 9 to 5"})


def _owners(items: list[Any]) -> set[str]:
    return {i.namespace[1] for i in items if i.namespace[0] == "users"}


def test_a_person_namespace_is_their_user_scope_and_encrypted(make_plugin: Factory) -> None:
    """("users", id, rest...) is that person's user scope; the other labels are the memory key."""
    plugin = make_plugin()
    store = RememberStore(plugin)
    store.put(("users", "alice", "prefs"), "theme", {"color": "plum-velvet"})
    store.put(("docs", "faq"), "hours", {"text": "tangerine-hours"})
    keys = sorted(k for k, _ in _everything(plugin) if ":langgraph:" in k)
    assert keys == [
        "remember:global:langgraph:docs/faq:hours",
        "remember:v2:user:alice:langgraph:users/prefs:theme",
    ]
    raw = " ".join(v for _, v in _everything(plugin))
    assert "plum-velvet" not in raw and "tangerine-hours" not in raw
    got = store.get(("users", "alice", "prefs"), "theme")
    assert got is not None and got.value == {"color": "plum-velvet"}
    assert got.created_at.tzinfo is not None and got.updated_at >= got.created_at
    assert plugin.accessor(identity_of("alice")).knows("langgraph:users/prefs:theme", scope="user")


def identity_of(user: str) -> Any:
    from remember_sync import Identity

    return Identity(user_id=user)


@pytest.mark.parametrize("how", ["for_user", "context"])
def test_a_bound_store_sees_only_its_person_and_shared(make_plugin: Factory, how: str) -> None:
    """Every spelling of prefix, wildcard and look-alike id returns alice's and shared only."""
    plugin = make_plugin()
    _fill(RememberStore(plugin))
    base = RememberStore(plugin)
    store = base.for_user("alice") if how == "for_user" else base
    with identity(user_id="alice", session_id="s-1"):
        for prefix in [(), ("users",), ("users", "alice"), ("users", "alice", "memories")]:
            found = store.search(prefix, limit=100)
            assert _owners(found) == {"alice"}, prefix
            assert all("alice" in i.value["text"] or i.namespace == ("docs", "faq")
                       for i in found)
        for other in PEOPLE[1:] + ["alic", "alice*", "*", "Alice"]:
            assert store.search(("users", other)) == []
            assert store.get(("users", other), "fact") is None
            if other != "*":  # a wildcard in listings: it matches alice's own, tested below
                assert store.list_namespaces(prefix=("users", other)) == []
        spaces = set(store.list_namespaces(limit=100))
        assert spaces == {("users", "alice"), ("users", "alice", "memories"), ("docs", "faq")}
        for cond in [{"prefix": ("*",)}, {"prefix": ("users", "*")}, {"suffix": ("*",)},
                     {"suffix": ("memories",)}, {"prefix": ("*", "*"), "suffix": ("*",)}]:
            assert _owners_ns(store.list_namespaces(**cond, limit=100)) <= {"alice"}, cond
        assert set(store.list_namespaces(max_depth=2, limit=100)) == {
            ("users", "alice"), ("docs", "faq")}
        with pytest.raises(InvalidNamespaceError):
            store.search(("users", ""))
        with pytest.raises(InvalidNamespaceError):
            store.list_namespaces(prefix=("users", ""))


def _owners_ns(spaces: list[tuple[str, ...]]) -> set[str]:
    return {ns[1] for ns in spaces if ns[0] == "users" and len(ns) > 1}


def test_nobody_overwrites_or_deletes_another_person(make_plugin: Factory) -> None:
    """A bound store refuses puts and deletes into another person's namespace; nothing changes."""
    plugin = make_plugin()
    _fill(RememberStore(plugin))
    before = sorted(_everything(plugin))
    mallory = RememberStore(plugin).for_user("alice")
    for victim in PEOPLE[1:]:
        with pytest.raises(RememberIdentityError):
            mallory.put(("users", victim, "memories"), "fact", {"text": "pwned"})
        with pytest.raises(RememberIdentityError):
            mallory.delete(("users", victim), "fact")
        with pytest.raises(RememberIdentityError):  # one bad op: nothing of the batch runs
            mallory.batch([PutOp(("users", "alice"), "new", {"v": 1}),
                           PutOp(("users", victim), "fact", None)])
    assert sorted(_everything(plugin)) == before
    mallory.put(("users", "alice"), "fact", {"text": "rewritten"})  # her own: fine
    process = RememberStore(plugin)
    for who in PEOPLE[1:]:
        item = process.get(("users", who), "fact")
        assert item is not None and item.value == {"text": f"top of {who}"}


def test_anonymous_and_sessions_see_shared_only(make_plugin: Factory) -> None:
    """A bound identity without a user (anonymous, a session only) sees the shared namespaces."""
    plugin = make_plugin()
    _fill(RememberStore(plugin))
    store = RememberStore(plugin)
    for bound in [{"session_id": "s-1"}, {"user_id": "anon:x", "session_id": "s-2"}, {}]:
        with identity(**bound):
            assert [i.namespace for i in store.search((), limit=100)] == [("docs", "faq")]
            assert store.list_namespaces() == [("docs", "faq")]
            with pytest.raises(RememberIdentityError):
                store.put(("users", "alice"), "x", {"v": 1})
    assert len(store.search(("users",), limit=100)) == 2 * len(PEOPLE)  # unbound: the process
    with pytest.raises(RememberIdentityError, match="anonymous"):
        store.batch([PutOp(("docs",), "new", {"v": 1}), PutOp(("users", "anon:x"), "k", {"v": 1})])
    assert store.get(("docs",), "new") is None and store.get(("users", "anon:x"), "k") is None
    assert store.search(("users", "anon:x")) == []


def test_labels_and_keys_are_encoded_injectively(make_plugin: Factory) -> None:
    """Labels and keys with ``:``, ``/``, ``%``, ``*`` and look-alikes never collide."""
    plugin = make_plugin()
    store = RememberStore(plugin, user_prefix=())
    pairs = [
        (("s", "a/b"), "k"), (("s", "a", "b"), "k"), (("s", "a:b"), "c"), (("s", "a"), "b:c"),
        (("s", "%41"), "k"), (("s", "A"), "k"), (("s", "*"), "k"), (("s", "x"), "*"),
        (("s", "x"), ""), (("s", "x"), "%"), (("s", "é"), "ключ"), (("s", "?"), "k?"),
    ]
    for n, (ns, key) in enumerate(pairs):
        store.put(ns, key, {"n": n})
    for n, (ns, key) in enumerate(pairs):
        item = store.get(ns, key)
        assert item is not None and item.value == {"n": n} and item.namespace == ns
    assert len(store.search(("s",), limit=100)) == len(pairs)
    assert [i.value["n"] for i in store.search(("s", "a"))] == [3, 2, 1] or {
        i.value["n"] for i in store.search(("s", "a"))} == {1, 3}
    assert sorted(store.list_namespaces(prefix=("s",))) == sorted({ns for ns, _ in pairs})


def test_erase_removes_a_person_from_store_and_backing_store(make_plugin: Factory) -> None:
    """After erase(user_id="alice"): nothing of hers readable or in a raw scan; others kept."""
    plugin = make_plugin()
    store = RememberStore(plugin)
    store.put(("users", "alice", "memories"), "m1", {"text": "alice likes sushi"})
    store.put(("users", "alice"), "m2", {"text": "alice lives in Lyon"})
    store.put(("users", "bob", "memories"), "m1", {"text": "bob likes pizza"})
    for twin in ["alice2", "bob:alice"]:
        store.put(("users", twin), "m2", {"text": f"{twin} stays"})
    receipt = plugin.erase(user_id="alice")
    assert receipt is not None
    assert store.get(("users", "alice", "memories"), "m1") is None
    assert _owners(store.search(("users",), limit=100)) == {"bob", "alice2", "bob:alice"}
    assert _owners_ns(store.list_namespaces()) == {"bob", "alice2", "bob:alice"}
    assert store.for_user("alice").search(()) == []
    for key, _ in _everything(plugin):
        assert ":alice:" not in key and not key.endswith(":alice"), key
    for twin in ["alice2", "bob:alice"]:
        kept = store.get(("users", twin), "m2")
        assert kept is not None and kept.value == {"text": f"{twin} stays"}
    item = store.get(("users", "bob", "memories"), "m1")
    assert item is not None and item.value == {"text": "bob likes pizza"}


def test_subject_keys_leave_a_restored_backup_unreadable(
    make_plugin: Factory, tmp_path: Path
) -> None:
    """With a data key per person, alice's items restored from a backup after her erasure
    stay unreadable through the store; bob's restored items read back."""
    plugin = make_plugin(encryption={"subject_keys": True},
                         keystore=str(tmp_path / "keys.sqlite"))
    store = RememberStore(plugin)
    store.put(("users", "alice", "m"), "k", {"text": "alice's secret"})
    store.put(("users", "bob", "m"), "k", {"text": "bob's note"})
    backup = [(k, v) for k, v in _everything(plugin) if ":langgraph:" in k]
    assert len(backup) == 2
    plugin.erase(user_id="alice")
    for key, value in backup:
        plugin.store.set(key, value)
    assert store.get(("users", "alice", "m"), "k") is None
    bob = store.get(("users", "bob", "m"), "k")
    assert bob is not None and bob.value == {"text": "bob's note"}


def test_quota_counts_a_persons_items(make_plugin: Factory) -> None:
    """Items in a person's namespaces count against their quota, not anyone else's."""
    plugin = make_plugin(quota={"entries": 2})
    store = RememberStore(plugin)
    store.put(("users", "alice"), "a", {"v": 1})
    store.put(("users", "alice", "x"), "b", {"v": 2})
    with pytest.raises(RememberQuotaError):
        store.put(("users", "alice"), "c", {"v": 3})
    store.put(("users", "bob"), "a", {"v": 1})
    assert store.get(("users", "alice"), "c") is None


def test_ttl_minutes_expire_and_reads_refresh(make_plugin: Factory, clock: FakeClock) -> None:
    """``ttl`` (minutes) expires by the plugin clock; a read with refresh restarts it."""
    plugin = make_plugin()
    store = RememberStore(plugin, ttl={"default_ttl": 1.0, "refresh_on_read": True})
    store.put(("users", "alice"), "short", {"v": 1})
    store.put(("users", "alice"), "long", {"v": 2}, ttl=10)
    store.put(("docs",), "kept", {"v": 3}, ttl=None)
    clock.advance(s=50)
    assert store.get(("users", "alice"), "short") is not None  # refreshed: one more minute
    clock.advance(s=50)
    assert store.get(("users", "alice"), "short", refresh_ttl=False) is not None
    clock.advance(s=20)
    assert store.get(("users", "alice"), "short") is None
    assert [i.key for i in store.search(("users",))] == ["long"]
    assert store.get(("docs",), "kept") is not None
    with pytest.raises(RememberInputError):
        store.put(("docs",), "bad", {"v": 1}, ttl=-1)
    assert store.get(("docs",), "bad") is None


def test_verified_mode_and_audit(make_plugin: Factory, tmp_path: Path) -> None:
    """With integrity="verified", a witness and audit on, every op works and is audited."""
    plugin = make_plugin(integrity="verified", witness=str(tmp_path / "w.db"), audit=True)
    store = RememberStore(plugin, index={"dims": 3, "embed": _embed})
    store.put(("users", "alice", "m"), "k1", {"text": "apple pie"})
    store.put(("users", "alice", "m"), "k2", {"text": "zzz"})
    store.put(("docs",), "k", {"text": "apple"})
    hits = store.for_user("alice").search(("users", "alice"), query="apple")
    assert [h.key for h in hits][0] == "k1" and hits[0].score is not None
    store.delete(("users", "alice", "m"), "k2")
    assert store.get(("users", "alice", "m"), "k2") is None
    assert plugin.audit is not None
    ops = [e.op for e in plugin.audit.events(principal="alice")]
    assert ops.count("set") == 2 and "forget" in ops
    assert plugin.audit.verify().ok


def _embed(texts: list[str]) -> list[list[float]]:
    return [[float(t.count("a")), float(t.count("p")), float(t.count("z")) + 0.1] for t in texts]


def test_batch_mixes_ops_and_bad_input_writes_nothing(make_plugin: Factory) -> None:
    """A batch runs in order; a bad op anywhere raises before anything is written."""
    plugin = make_plugin()
    store = RememberStore(plugin)
    out = store.batch([PutOp(("t",), "k", {"v": 1}), GetOp(("t",), "k"), SearchOp(("t",))])
    assert out[0] is None and out[1].value == {"v": 1} and len(out[2]) == 1
    before = sorted(_everything(plugin))
    for bad in [PutOp(("t",), "k2", ["not", "a", "dict"]), PutOp(("t",), 5, {"v": 1}),
                PutOp(("t", "a.b"), "k", {"v": 1}), PutOp(("t",), "k3", {"v": 1}, ttl=0),
                PutOp(("t",), "x" * 1100, {"v": 1}), PutOp(("t",), "k", {"v": 1}, index="text"),
                GetOp(("t",), 7), SearchOp(("t",), limit=-1), SearchOp(("t",), offset=-2),
                SearchOp(("t",), filter={"v": {"$regex": "x"}}), SearchOp(("t",), filter=[1])]:
        with pytest.raises((RememberInputError, InvalidNamespaceError)):
            store.batch([PutOp(("t",), "ok", {"v": 1}), bad])
    assert sorted(_everything(plugin)) == before
    with pytest.raises(RememberConfigurationError):
        RememberStore(plugin, user_prefix="users")  # type: ignore[arg-type]
    with pytest.raises(RememberConfigurationError):
        RememberStore(object())  # type: ignore[arg-type]


def test_index_embed_wordllama_uses_the_plugins_offline_model() -> None:
    """``index={"embed": "wordllama"}`` ranks by meaning with the model shipped in the wheel."""
    plugin = RememberPlugin.init(encryption={"secrets": ["s" * 32]}, skip_legacy_purge=True)
    store = RememberStore(plugin, index={"dims": 256, "embed": "wordllama"})
    ns = ("users", "alice", "memories")
    store.put(ns, "allergy", {"text": "I am allergic to peanuts"})
    store.put(ns, "car", {"text": "My car is a blue hatchback"})
    store.put(ns, "city", {"text": "I moved to Lisbon last spring"})
    hits = store.for_user("alice").search(ns, query="which foods make me sick?")
    assert hits[0].key == "allergy" and hits[0].score is not None
    plugin.close()
