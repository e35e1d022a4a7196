"""plugin.erase(user_id=...): every entry of one person, every scope and layout; nobody else's."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import pytest

from remember_sync import ErasureReceipt, Identity, RememberInputError, RememberPlugin
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET, stored_key

ALICE_SESSIONS = ("sa-1", "sa-2", "sa-3")


def _populate(plugin: RememberPlugin) -> None:
    """Alice and Bob, with every scope; a legacy session nobody owns; one session both used."""
    for session in ALICE_SESSIONS:
        mem = plugin.accessor(Identity(session, "alice", "notes"))
        mem.set("theme", f"alice-{session}")
        mem.set("draft", {"text": f"alice-tool-{session}"}, scope="tool")
        mem.increment("visits")
    alice = plugin.accessor(Identity(None, "alice", "notes"))
    alice.set("name", "Alice A.", scope="user")
    alice.set("colour", "green", scope="user")
    alice.set("stateless", "alice-stateless")  # stateless-user:alice
    alice.set("stateless-tool", 1, scope="tool")
    for session in ("sb-1", "sb-2"):
        mem = plugin.accessor(Identity(session, "bob", "notes"))
        mem.set("theme", f"bob-{session}")
        mem.set("draft", "bob-tool", scope="tool")
    plugin.accessor(Identity(None, "bob")).set("name", "Bob B.", scope="user")
    # Bob's stateless session: its name contains Alice's, it is not hers.
    plugin.accessor(Identity(None, "bob:alice")).set("x", "bob-alice-stateless")
    plugin.accessor(Identity(None, "alice2")).set("x", "alice2-stateless")
    # A session written before owners were recorded (no authenticated user).
    plugin.accessor(Identity("legacy-1", None, "notes")).set("old", "unattributed")
    # One session both wrote to: not Alice's alone, left as it is.
    plugin.accessor(Identity("shared-1", "alice")).set("a", "alice-shared")
    plugin.accessor(Identity("shared-1", "bob")).set("b", "bob-shared")
    plugin.accessor(Identity()).set("motd", "hello", scope="global")


def _entries(plugin: RememberPlugin) -> dict[str, str | None]:
    """Every entry's raw stored value by full storage key (a raw scan of the store).

    Entries are the keys of SPEC section 3 (``P + "v2:"...`` and ``P + "global:"...``,
    also behind 1.8.0's doubled prefix); bookkeeping (layout marker, listing indexes,
    owner records) is not.
    """
    prefix = plugin.key_prefix
    out: dict[str, str | None] = {}
    for key in plugin.store.scan(prefix + "*"):
        rest = key[len(prefix) :]
        if rest.startswith(prefix):
            rest = rest[len(prefix) :]
        if rest.startswith(("v2:", "global:")):
            out[key] = plugin.store.get(key)
    return out


def _is_alice(plugin: RememberPlugin, key: str) -> bool:
    """Whether the storage key *key* (SPEC section 3) is in one of Alice's namespaces."""
    rest = key[len(plugin.key_prefix) :]
    if rest.startswith(plugin.key_prefix):
        rest = rest[len(plugin.key_prefix) :]
    if rest.startswith("global:"):
        return False
    _, scope, *ids = rest.split(":", 4 if rest.startswith("v2:tool:") else 3)
    if scope == "user":
        return unquote(ids[0]) == "alice"
    session = unquote(ids[1] if scope == "tool" else ids[0])
    return session in (*ALICE_SESSIONS, "stateless-user:alice")


@pytest.mark.parametrize("listing", ["index", "scan"])
def test_erase_deletes_every_entry_of_the_person_and_nothing_else(
    make_plugin: Callable[..., RememberPlugin], listing: str
) -> None:
    """After erase a raw scan finds no entry of Alice; every other entry is byte-identical."""
    plugin = make_plugin(listing=listing)
    _populate(plugin)
    # An entry in Alice's user namespace no secret opens: hers by namespace, deleted, counted.
    plugin.store.set(plugin.key_prefix + "v2:user:alice:garbled", '{"alg":"A256GCM","iv":"x"}')
    before = _entries(plugin)
    assert sum(_is_alice(plugin, k) for k in before) == 3 * 3 + 2 + 2 + 1  # and the garbled one
    owners = _owner_records(plugin)
    # Alice's four sessions (sa-1..3, shared-1) and Bob's three (sb-1, sb-2, shared-1).
    assert sorted(len(keys) for keys in owners.values()) == [3, 4]
    [bobs] = [keys for keys in owners.values() if len(keys) == 3]
    others = {k: v for k, v in before.items() if not _is_alice(plugin, k)}

    receipt = plugin.erase(user_id="alice")

    after = _entries(plugin)
    assert after == others
    assert not [k for k in plugin.store.scan(plugin.key_prefix + "*") if "garbled" in k]
    assert (receipt.user_entries, receipt.session_entries, receipt.tool_entries) == (3, 7, 4)
    assert receipt.unreadable == 1
    assert receipt.sessions == 4
    assert receipt.unattributed_sessions == 1  # legacy-1
    assert receipt.shared_sessions == 1  # shared-1
    assert not receipt.dry_run and plugin.verify_receipt(receipt)
    # Alice's accessors see nothing; Bob's see everything they wrote.
    alice = plugin.accessor(Identity("sa-1", "alice", "notes"))
    assert alice.get("theme") is None and alice.list(scope="user") == []
    assert alice.list(scope="tool") == []
    assert plugin.accessor(Identity("sb-1", "bob")).get("theme") == "bob-sb-1"
    assert plugin.accessor(Identity(None, "bob")).list(scope="user") == ["name"]
    # Nothing of her owner records is left either; Bob's are all there.
    assert list(_owner_records(plugin).values()) == [bobs]


def _owner_records(plugin: RememberPlugin) -> dict[str, set[str]]:
    """The owner records by user: ``P + "__owner__:" + H(user) + ":" + H(session)``
    (docs/audit.rst), grouped by ``H(user)``."""
    head = plugin.key_prefix + "__owner__:"
    out: dict[str, set[str]] = {}
    for key in plugin.store.scan(head + "*"):
        out.setdefault(key[len(head) :].split(":", 1)[0], set()).add(key)
    return out


def test_dry_run_counts_and_deletes_nothing(make_plugin: Callable[..., RememberPlugin]) -> None:
    """--dry-run: the same counts as the real erasure, the store untouched."""
    plugin = make_plugin()
    _populate(plugin)
    keys, entries = sorted(plugin.store.scan("*")), _entries(plugin)
    dry = plugin.erase(user_id="alice", dry_run=True)
    assert sorted(plugin.store.scan("*")) == keys and _entries(plugin) == entries
    real = plugin.erase(user_id="alice")
    assert dry.dry_run and not real.dry_run
    assert dry.total == real.total == 13
    again = plugin.erase(user_id="alice")
    assert again.total == 0


def test_owner_records_never_hold_ids_in_clear(make_plugin: Callable[..., RememberPlugin]) -> None:
    """Owner records: a keyed hash of the user in the key, the session sealed in the value."""
    plugin = make_plugin()
    plugin.accessor(Identity("session-secret-id", "alice@example.com")).set("k", 1)
    records = list(plugin.store.scan(plugin.key_prefix + "__owner__:*"))
    assert len(records) == 1
    raw = plugin.store.get(records[0])
    assert raw is not None
    for text in (records[0], raw):
        assert "alice" not in text and "session-secret-id" not in text
    # Never listed or forgotten by any scope.
    mem = plugin.accessor(Identity("session-secret-id", "alice@example.com"))
    assert mem.list() == ["k"] and mem.list(scope="user") == []
    assert plugin.accessor(Identity()).list(scope="global") == []


def test_owner_records_from_before_a_rotation_are_found(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """Sessions recorded under the old secret are erased by a plugin whose keyring has both."""
    old = make_plugin(encryption={"secrets": ["old-secret-0123456789abcdef0123"]})
    old.accessor(Identity("s-old", "alice")).set("k", "v")
    new = make_plugin(encryption={"secrets": [TEST_SECRET, "old-secret-0123456789abcdef0123"]})
    receipt = new.erase(user_id="alice")
    assert receipt.session_entries == 1 and receipt.unattributed_sessions == 0
    assert not list(new.store.scan(new.key_prefix + "v2:*"))


def test_doubled_prefix_layout_is_erased_too(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """With read_doubled_prefix, 1.8.0's ``P + P + ...`` keys of the person go too."""
    plugin = make_plugin(read_doubled_prefix=True, listing="scan")
    for user in ("alice", "bob"):
        # Written as today's layout, then moved where 1.8.0 kept it: P + P + storage key.
        plugin.accessor(Identity(None, user)).set("legacy", "old", scope="user")
        skey = stored_key(plugin, "legacy", "user")
        sealed = store.get(skey)
        assert sealed is not None
        store.set(plugin.key_prefix + skey, sealed)
        store.delete(skey)
    assert plugin.accessor(Identity(None, "alice")).get("legacy", scope="user") == "old"
    receipt = plugin.erase(user_id="alice")
    assert receipt.user_entries == 1
    assert plugin.accessor(Identity(None, "alice")).get("legacy", scope="user") is None
    assert plugin.accessor(Identity(None, "bob")).get("legacy", scope="user") == "old"


def test_receipt_mac_detects_any_change(make_plugin: Callable[..., RememberPlugin]) -> None:
    """The receipt's MAC covers every field; another secret does not verify it."""
    plugin = make_plugin()
    _populate(plugin)
    receipt = plugin.erase(user_id="alice")
    assert plugin.verify_receipt(receipt)
    for name in ("user_entries", "session_entries", "erased_at", "subject"):
        value = getattr(receipt, name)
        changed = dataclasses.replace(
            receipt, **{name: value + 1 if isinstance(value, int) else value + "x"}
        )
        assert not plugin.verify_receipt(changed)
    assert not plugin.verify_receipt(dataclasses.replace(receipt, dry_run=True))
    other = make_plugin(encryption={"secrets": ["another-secret-0123456789abcdef"]})
    assert not other.verify_receipt(receipt)
    assert json.loads(json.dumps(receipt.as_dict()))["mac"] == receipt.mac
    assert isinstance(receipt, ErasureReceipt)


@pytest.mark.parametrize("bad", [None, "", "anon:123", 1.5, b"alice", True])
def test_erase_refuses_anonymous_or_bad_ids(
    plugin: RememberPlugin, bad: object
) -> None:
    """An anonymous principal is shared: nobody's to erase; a non-str id is bad input."""
    plugin.accessor(Identity(None, "alice")).set("k", 1, scope="user")
    with pytest.raises(RememberInputError):
        plugin.erase(user_id=bad)  # type: ignore[arg-type]
    assert plugin.accessor(Identity(None, "alice")).get("k", scope="user") == 1


def test_int_user_id_is_its_decimal_string(plugin: RememberPlugin) -> None:
    """erase(user_id=42) erases user "42"."""
    plugin.accessor(Identity(None, "42")).set("k", 1, scope="user")
    assert plugin.erase(user_id=42).user_entries == 1


@pytest.mark.parametrize("store_kind", ["redis"])
def test_cli_erase_dry_run_then_erase(
    make_plugin: Callable[..., RememberPlugin], redis_url: str, store_kind: str
) -> None:
    """``remember-sync erase --user ID [--dry-run]`` against a real Redis: JSON receipt."""
    plugin = make_plugin()
    _populate(plugin)
    env = {"REMEMBER_SECRET": TEST_SECRET, "REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"}
    import os

    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    run = [sys.executable, "-m", "remember_sync", "erase", "--redis-url", redis_url,
           "--user", "alice", "--json"]
    dry = subprocess.run([*run, "--dry-run"], env=env, capture_output=True, text=True, check=False)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["dry_run"] is True
    assert json.loads(dry.stdout)["session_entries"] == 7
    assert plugin.accessor(Identity("sa-1", "alice")).get("theme") == "alice-sa-1"
    done = subprocess.run(run, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["session_entries"] == 7 and out["dry_run"] is False
    assert plugin.verify_receipt(ErasureReceipt(**out))
    assert plugin.accessor(Identity("sa-1", "alice")).get("theme") is None
    assert plugin.accessor(Identity("sb-1", "bob")).get("theme") == "bob-sb-1"


def test_a_session_keeps_its_owner_after_another_process_erased_it(
    make_plugin: Callable[..., RememberPlugin], clock: Any
) -> None:
    """Process A keeps writing into a session after process B erased its user: within a
    minute A's writes are unattributed (reported), after it A records the owner again."""
    a, b = make_plugin(), make_plugin()
    mem = a.accessor(Identity("s-1", "erin"))
    mem.set("k", 1)
    assert b.erase(user_id="erin").session_entries == 1
    mem.set("k", 2)
    dry = b.erase(user_id="erin", dry_run=True)
    assert dry.session_entries == 0 and dry.unattributed_sessions == 1
    clock.advance(61_000)
    mem.set("k", 3)
    assert b.erase(user_id="erin").session_entries == 1
    assert a.accessor(Identity("s-1", "erin")).get("k") is None
