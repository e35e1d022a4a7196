"""``import`` and ``rotate`` under a quota, on every store.

An import charges each entry to its principal and writes none beyond the quota (each named,
nothing written for it); a rotation to a new secret changes the owner tags, and each rotated
entry is charged under its principal's new tag, so the counts the rotated fleet judges writes
by are exact; an erasure afterwards leaves no ledger of either secret naming the person."""

from __future__ import annotations

import io
from typing import Any

import pytest

from remember_sync import Identity, RememberQuotaError
from remember_sync._ops.rotate import rotate
from remember_sync._ops.transfer import export_entries, import_entries, parse_records
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET
from tests.features.raw_scan import naming, raw_texts

NEW_SECRET = "an-entirely-different-secret-for-rotation-0123456789"
QUOTA = {"entries": 6, "bytes": 1_000_000}


def test_rotate_charges_under_the_new_tags(
    make_plugin: Any, store_kind: str, store: Store, request: pytest.FixtureRequest
) -> None:
    old = make_plugin(quota=QUOTA)
    alice = old.accessor(Identity(session_id="stateless", user_id="alice-rot"))
    alice.set("a", 1, scope="user")
    alice.set("b", "two", scope="user", ttl=3600)
    stateless = old.accessor(Identity(user_id="alice-rot"))  # a stateless-user: session
    stateless.set("c", 3, scope="session")
    old.accessor(Identity(session_id="host-s-1", user_id="alice-rot")).set("d", 4, scope="session")
    old.accessor(Identity(session_id="anon-s-1")).set("e", 5, scope="session")
    assert old.quota_usage(user_id="alice-rot")["entries"] == 4
    assert old.quota_usage(session_id="anon-s-1")["entries"] == 1

    new = make_plugin(quota=QUOTA, encryption={"secrets": [NEW_SECRET, TEST_SECRET]})
    assert new.quota_usage(user_id="alice-rot")["entries"] == 0  # a new tag: not yet charged
    result = rotate(new._core)
    assert result.rotated == 5 and result.complete
    assert new.quota_usage(user_id="alice-rot")["entries"] == 4
    assert new.quota_usage(session_id="anon-s-1")["entries"] == 1
    assert old.quota_usage(user_id="alice-rot")["entries"] == 0  # moved, not doubled
    mem = new.accessor(Identity(session_id="stateless", user_id="alice-rot"))
    assert mem.get("b", scope="user") == "two"
    for n in range(2):
        mem.set(f"more{n}", n, scope="user")
    with pytest.raises(RememberQuotaError):
        mem.set("one-too-many", 1, scope="user")

    new.erase(user_id="alice-rot")
    assert naming(raw_texts(store_kind, store, request), ["alice-rot"]) == []
    assert new.quota_usage(user_id="alice-rot") == {"entries": 0, "bytes": 0}
    assert old.quota_usage(user_id="alice-rot") == {"entries": 0, "bytes": 0}


def test_import_over_the_quota_is_refused_and_named(make_plugin: Any) -> None:
    """Quota 2 in the target: alice's third entry is refused and named, nothing is written
    for it, the counts are exact; the plugin then refuses alice's next new write."""
    source = make_plugin(quota={"entries": 10}, key_prefix="src:")
    alice = source.accessor(Identity(session_id="s-imp", user_id="alice-imp"))
    for n in range(3):
        alice.set(f"k{n}", n, scope="user")
    out = io.StringIO()
    assert export_entries(source._core, out).exported == 3
    target = make_plugin(quota={"entries": 2})
    result = import_entries(target._core, parse_records(out.getvalue().splitlines()))
    assert (result.imported, result.over_quota) == (2, 1)
    [refused] = result.over_quota_keys
    assert target.store.get(refused) is None
    assert target.quota_usage(user_id="alice-imp")["entries"] == 2
    mem = target.accessor(Identity(session_id="s-imp", user_id="alice-imp"))
    assert len(mem.list(scope="user")) == 2
    with pytest.raises(RememberQuotaError):
        mem.set("more", 1, scope="user")
