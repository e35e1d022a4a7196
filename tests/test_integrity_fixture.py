"""A store written by verified mode's single-record manifests (tests/data/verified-store-v1.json).

The fixture was written once by this release (two users, a session, an
``approval``, an increment, a forgotten key) with the test secret.  Loaded
into each store as raw keys, it must read, verify clean, take new writes and
an erasure: a later manifest format has to keep reading it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remember_sync import RememberPlugin, identity
from remember_sync._ops.verify import VerifyResult, verify_store
from remember_sync.stores.base import Store
from tests import test_integrity as _shared
from tests.integrity_raw import RawStore

Factory = Callable[..., RememberPlugin]
FIXTURE = Path(__file__).parent / "data" / "verified-store-v1.json"
#: The same stores (and the attacker's raw client of each) as tests/test_integrity.py.
store_kind, raw = _shared.store_kind, _shared.raw


def _verify(store: Store, plugin: RememberPlugin, **options: Any) -> VerifyResult:
    core = plugin._core
    return verify_store(store, "remember:", core.codec, clock=core.clock, **options)


def test_a_store_of_this_release_reads_verifies_and_takes_writes(
    make_plugin: Factory, store: Store, raw: RawStore
) -> None:
    for key, value in json.loads(FIXTURE.read_text()).items():
        raw.set(key, value)
    plugin = make_plugin(integrity="verified")
    with identity(user_id="alice", session_id="s-1"):
        mem = plugin.remember
        assert mem.get("deploy", scope="user") == "revoked"
        assert mem.get_entry("deploy", scope="user").brand == "approval"  # type: ignore[union-attr]
        assert mem.list(scope="user") == ["deploy", "diet", "n"]
        assert mem.get("gone", scope="user") is None
        assert mem.get("draft") == {"text": "hello"}
    found = _verify(store, plugin)
    assert (found.violation_count, found.manifests, found.entries) == (0, 3, 5)
    assert _verify(store, plugin, repair=True).repaired == 0  # nothing to rebuild
    with identity(user_id="alice", session_id="s-1"):
        assert mem.increment("n", 1, scope="user") == 4
        mem.set("new", 1, scope="user")
        assert make_plugin(integrity="verified").remember.list(scope="user") == [
            "deploy", "diet", "n", "new"]
    receipt = plugin.erase(user_id="alice")
    assert (receipt.user_entries, receipt.session_entries) == (4, 1)
    assert _verify(store, plugin).violation_count == 0
    with identity(user_id="bob"):
        assert make_plugin(integrity="verified").remember.get("plan", scope="user") == "b"
