"""``import`` charges every entry to its principal and keeps to the quota; ``rotate`` keeps it.

An export of a store whose principals hold entries -- a token user with user-scope notes and
an MCP session of its own, an anonymous MCP session, a host's own session id whose user is
named nowhere in the file -- imported into an empty store with the same quota must leave each
principal charged exactly as in the source (entries and bytes); an import that would take a
principal over its quota writes none of the entries beyond it and names each of them; with
``ignore_quota`` they are written and still charged.  Here through ``remember-sync import``
on Redis (the command); ``test_cli_ops`` runs the operator functions behind it on the memory
store and a real redis-server, with this module's seeding and stores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from remember_sync import Identity, RememberPlugin
from remember_sync.identity import principal_of
from remember_sync.mcp import McpServer
from remember_sync.stores.base import Store
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


class Seeded:
    """What was written in the source store, and by whom."""

    def __init__(self, plugin: RememberPlugin) -> None:
        signer = McpServer(plugin).session_signer  # ids as the MCP server issues them
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
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "REMEMBER_SECRET": TEST_SECRET,
               "REMEMBER_QUOTA_ENTRIES": "2"}  # fmt: skip
        exported = subprocess.run(
            [sys.executable, "-m", "remember_sync", "export", "--redis-url", base + "/4",
             "-o", str(dump)],
            env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert exported.returncode == 0 and "exported 7" in exported.stderr, exported.stderr

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
