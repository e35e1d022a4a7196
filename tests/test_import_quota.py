"""``import`` charges every entry to its principal and keeps to the quota; ``rotate`` keeps it.

An export of a store whose principals hold entries -- a token user with user-scope notes and
an MCP session of its own, an anonymous MCP session, a host's own session id whose user is
named nowhere in the file -- imported into an empty store with the same quota must leave each
principal charged exactly as in the source (entries and bytes); an import that would take a
principal over its quota writes none of the entries beyond it and names each of them; with
``ignore_quota`` they are written and still charged.  Run on the memory store and a real
redis-server (library), and through ``remember-sync import`` on Redis (the command).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin, RememberQuotaError
from remember_sync._ops.rotate import rotate
from remember_sync._ops.transfer import export_entries, import_entries, parse_records
from remember_sync._sessions import SessionSigner
from remember_sync.identity import principal_of
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from tests.conftest import TEST_SECRET
from tests.served import REPO

OTHER_SECRET = "an-entirely-different-secret-for-rotation-0123456789"


def _plugin(store: Store, quota: dict[str, int] | None, *secrets: str) -> RememberPlugin:
    return RememberPlugin.init(
        store=store, key_prefix="remember:", encryption={"secrets": list(secrets or [TEST_SECRET])},
        skip_legacy_purge=True, background_reindex=False,
        **({"quota": quota} if quota is not None else {}),
    )  # fmt: skip


@pytest.fixture(params=["memory", "bounded memory", "redis"])
def new_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Store]]:
    """``new_store()``: an empty store of the parameter's kind (Redis: its own database)."""
    made: list[Store] = []

    def make() -> Store:
        if request.param == "memory":
            store: Store = MemoryStore(max_entries=None)
        elif request.param == "bounded memory":  # serve's: it evicts, by principal
            store = MemoryStore(max_entries=1000, max_bytes=10_000_000)
        else:
            url = request.getfixturevalue("redis_url").rsplit("/", 1)[0] + f"/{len(made) + 2}"
            store = RedisStore.from_url(url)
            store.client.flushdb()
        made.append(store)
        return store

    yield make
    for store in made:
        if isinstance(store, RedisStore):
            store.client.flushdb()
        store.close()


class Seeded:
    """What was written in the source store, and by whom."""

    def __init__(self, plugin: RememberPlugin) -> None:
        assert plugin.keyring is not None
        signer = SessionSigner(plugin.keyring)
        self.alice_session = signer.issue("alice")  # an MCP session of a token user
        self.anonymous = signer.issue(None)  # an anonymous MCP session
        alice = plugin.accessor(Identity(session_id=self.alice_session, user_id="alice"))
        alice.set("theme", "dark", scope="user")
        alice.set("lang", "en", scope="user", ttl=3600)
        alice.set("draft", "x" * 300, scope="session")
        anon = plugin.accessor(Identity(session_id=self.anonymous))
        anon.set("cart", [1, 2, 3], scope="session")
        anon.set("step", 2, scope="session")
        # A host's own session id of a user with no entry of its own in the file.
        plugin.accessor(Identity(session_id="host-sess-9", user_id="bob")).set(
            "n", 1, scope="session"
        )
        plugin.accessor(Identity()).set("motd", "hi", scope="global")
        self.principals = {
            "alice": principal_of("alice", None),
            "anonymous": principal_of(None, self.anonymous),
            "bob": principal_of("bob", None),
        }


def usage(plugin: RememberPlugin, principal: str) -> tuple[int, int]:
    """The (entries, bytes) charged to *principal* in *plugin*'s store."""
    owners = plugin._core.charges
    assert owners is not None
    entries, nbytes = plugin.store.owner_usage(owners.tag(principal))  # type: ignore[attr-defined]
    return int(entries), int(nbytes)


def _exported(plugin: RememberPlugin, decrypted: bool = False) -> list[str]:
    out = io.StringIO()
    assert export_entries(plugin._core, out, decrypted=decrypted).exported == 7
    return out.getvalue().splitlines()


@pytest.mark.parametrize("decrypted", [False, True])
def test_import_charges_each_entry_to_its_principal(
    new_store: Callable[[], Store], decrypted: bool
) -> None:
    """After export -> import each principal is charged as in the source (entries, bytes);
    the entry whose owner the file does not tell is written uncharged and named."""
    quota = {"entries": 10}
    source = _plugin(new_store(), quota)
    seeded = Seeded(source)
    lines = _exported(source, decrypted)
    target = _plugin(new_store(), quota)
    result = import_entries(target._core, parse_records(lines))
    assert (result.imported, result.over_quota, result.uncharged) == (7, 0, 1)
    [uncharged] = result.uncharged_keys
    assert "host-sess-9" in uncharged
    alice, anonymous = seeded.principals["alice"], seeded.principals["anonymous"]
    assert usage(target, alice)[0] == 3 and usage(target, anonymous)[0] == 2
    if not decrypted:  # the very envelopes: the very bytes
        assert usage(target, alice) == usage(source, alice)
        assert usage(target, anonymous) == usage(source, anonymous)
    assert usage(target, seeded.principals["bob"]) == (0, 0)
    # The quota holds from the imported state on: alice may add 7 more, not 8.
    mem = target.accessor(Identity(session_id=seeded.alice_session, user_id="alice"))
    for n in range(7):
        mem.set(f"more-{n}", n, scope="user")
    with pytest.raises(RememberQuotaError):
        mem.set("one-too-many", 0, scope="user")
    source.close()
    target.close()


def test_an_import_over_the_quota_writes_nothing_beyond_it_unless_told(
    new_store: Callable[[], Store],
) -> None:
    """Quota 2: alice's third entry is refused and named (nothing written for it); the other
    principals' entries are imported.  ``ignore_quota`` writes it and still charges it."""
    source = _plugin(new_store(), {"entries": 10})
    seeded = Seeded(source)
    records = parse_records(_exported(source))
    target = _plugin(new_store(), {"entries": 2})
    result = import_entries(target._core, records)
    assert (result.imported, result.over_quota) == (6, 1)
    [refused] = result.over_quota_keys
    assert refused.startswith("remember:")
    assert target.store.get(refused) is None
    assert usage(target, seeded.principals["alice"])[0] == 2
    assert usage(target, seeded.principals["anonymous"])[0] == 2
    again = import_entries(target._core, records, ignore_quota=True)
    assert (again.imported, again.existing, again.over_quota) == (1, 6, 0)
    assert target.store.get(refused) is not None
    assert usage(target, seeded.principals["alice"])[0] == 3  # charged past the quota
    source.close()
    target.close()


def test_a_record_naming_an_anonymous_user_is_imported_uncharged(
    new_store: Callable[[], Store],
) -> None:
    """A hand-made user-scope record of an ``anon:`` user (no write of the library makes one)
    is imported uncharged and named, never charged to a shared made-up principal."""
    target = _plugin(new_store(), {"entries": 1})
    line = json.dumps({"scope": "user", "user": "anon:x", "key": "k", "value": 1,
                       "createdAt": 1, "updatedAt": 1})  # fmt: skip
    records = parse_records([line, line.replace('"k"', '"k2"')])
    result = import_entries(target._core, records)
    assert (result.imported, result.uncharged, result.over_quota) == (2, 2, 0)
    assert usage(target, "session\x00") == (0, 0)
    target.close()


def test_import_without_a_quota_charges_no_one(new_store: Callable[[], Store]) -> None:
    """No quota configured: the import writes as before and keeps no ledger."""
    source = _plugin(new_store(), {"entries": 10})
    Seeded(source)
    target_store = new_store()
    target = _plugin(target_store, None)
    result = import_entries(target._core, parse_records(_exported(source)))
    assert (result.imported, result.uncharged) == (7, 0)
    assert not [k for k in target_store.scan("remember:__quota__:*")]
    source.close()
    target.close()


def test_rotate_leaves_the_accounting_of_every_principal_unchanged(
    new_store: Callable[[], Store],
) -> None:
    """rotate re-seals every entry in place: the entries and bytes charged to each principal
    are the same after it (under the tags its writers computed)."""
    store = new_store()
    plugin = _plugin(store, {"entries": 10})
    seeded = Seeded(plugin)
    before = {name: usage(plugin, p) for name, p in seeded.principals.items()}
    rotating = _plugin(store, {"entries": 10}, OTHER_SECRET, TEST_SECRET)
    assert rotate(rotating._core).rotated == 7
    assert {name: usage(plugin, p) for name, p in seeded.principals.items()} == before
    rotating.close()
    plugin.close()


def test_remember_sync_import_reports_entries_over_the_quota(
    tmp_path: Path, redis_url: str
) -> None:
    """``remember-sync import`` with REMEMBER_QUOTA_ENTRIES=2 names the refused entry and exits
    1; ``--ignore-quota`` imports it; ``--json`` counts both and the uncharged one."""
    base = redis_url.rsplit("/", 1)[0]
    source_store, target_store = RedisStore.from_url(base + "/4"), RedisStore.from_url(base + "/5")
    for store in (source_store, target_store):
        store.client.flushdb()
    try:
        source = _plugin(source_store, {"entries": 10})
        seeded = Seeded(source)
        dump = tmp_path / "dump.jsonl"
        dump.write_text("\n".join(_exported(source)) + "\n", encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "REMEMBER_SECRET": TEST_SECRET,
               "REMEMBER_QUOTA_ENTRIES": "2"}  # fmt: skip

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "remember_sync", "import", str(dump), "--redis-url",
                 base + "/5", *args],
                env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
            )  # fmt: skip

        done = run()
        assert done.returncode == 1, done.stdout + done.stderr
        assert "1 entries were NOT imported, each would take its principal over its quota" in (
            done.stdout
        )
        assert "--ignore-quota" in done.stdout and "host-sess-9" in done.stdout
        target = _plugin(target_store, {"entries": 2})
        assert usage(target, seeded.principals["alice"])[0] == 2
        forced = run("--ignore-quota", "--json")
        assert forced.returncode == 1, forced.stdout  # it kept the 6 that exist
        report: dict[str, Any] = json.loads(forced.stdout)
        assert (report["imported"], report["existing"], report["over_quota"]) == (1, 6, 0)
        assert usage(target, seeded.principals["alice"])[0] == 3
        source.close()
        target.close()
    finally:
        for store in (source_store, target_store):
            store.client.flushdb()
            store.close()


def test_ignore_quota_without_a_quota_is_a_usage_error(tmp_path: Path) -> None:
    """``--ignore-quota`` needs the server's quota to charge against: exit 2, nothing opened."""
    dump = tmp_path / "dump.jsonl"
    dump.write_text("", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "import", str(dump), "--redis-url",
         "redis://127.0.0.1:1/0", "--ignore-quota"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "REMEMBER_SECRET": TEST_SECRET},
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--ignore-quota" in done.stderr and "REMEMBER_QUOTA_ENTRIES" in done.stderr
