"""agmi (``agent-memory-integrity==0.6.3``) against remember_sync on every networked store.

In verified mode (with a witness file outside the store) every one of agmi's
nine edits, T1-T9, must be REJECTED on the read path on Redis standalone,
Sentinel, Redis Cluster and Vercel KV, with agmi's controls holding and its
"edit landed" guard passing for every cell.  Default mode is run too, and its
row pinned: the authenticated encryption rejects the edits of an entry's
ciphertext or place (T1, T4-T7); deletion (T2, T3), a field added to the
envelope's unauthenticated header (T8: read, then ignored) and a whole-store
rollback (T9) pass unnoticed, which is what verified mode is for
(docs/reliability.rst).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agmi.check import render, run

from remember_sync import RememberPlugin
from remember_sync.stores.base import Store
from tests.agmi_adapter import RememberSyncAdapter
from tests.conftest import TEST_SECRET
from tests.fixtures_redis import SENTINEL_SERVICE
from tests.integrity_raw import RawStore

EDITS = [
    "T1 content tamper", "T2 tail truncation", "T3 middle deletion", "T4 reordering",
    "T5 forged insertion", "T6 cross-context replay", "T7 rollback replay",
    "T8 metadata tamper", "T9 snapshot rollback",
]
#: Default mode: what the bound AES-GCM envelope alone rejects.
DEFAULT_ROW = {
    edit: "ACCEPTED" if edit[:2] in ("T2", "T3", "T8", "T9") else "REJECTED" for edit in EDITS
}


@pytest.fixture(params=["redis", "sentinel", "redis_cluster", "vercel_kv"])
def target(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[str, RawStore, Callable[..., RememberPlugin]]]:
    """(kind, the attacker's raw client, a plugin factory over the store)."""
    kind = str(request.param)
    made: list[RememberPlugin] = []
    options: dict[str, Any]
    if kind == "sentinel":
        sentinels = request.getfixturevalue("sentinel_set_factory")()
        raw = RawStore(sentinels.primary.client())
        options = {"type": "redis", "config": {"sentinels": sentinels.addresses,
                                               "service_name": SENTINEL_SERVICE}}
    else:
        store: Store = request.getfixturevalue(f"{kind}_store")
        client = {"redis": "redis_client", "redis_cluster": "redis_cluster_client",
                  "vercel_kv": "kv_redis"}[kind]
        raw = RawStore(request.getfixturevalue(client))
        options = {"store": store}

    def factory(**extra: Any) -> RememberPlugin:
        plugin = RememberPlugin.init(
            **options, **extra, skip_legacy_purge=True, encryption={"secrets": [TEST_SECRET]}
        )
        if plugin.index_backfill is not None:
            assert plugin.index_backfill.wait(30)
        made.append(plugin)
        return plugin

    yield kind, raw, factory
    for plugin in made:
        plugin.close()


def _row(adapter: RememberSyncAdapter) -> dict[str, str]:
    rows = run(adapter)
    print("\n" + render(adapter.name, rows))
    for row in rows:
        # The controls held and every edit landed: no cell is an error or unevaluable.
        assert row["verdict"] in ("REJECTED", "ACCEPTED"), row
    return {row["edit"]: row["verdict"] for row in rows}


@pytest.mark.parametrize("fill", [0, 2000], ids=["small", "2000-entries"])
def test_verified_mode_rejects_every_edit_on_the_read_path(
    target: tuple[str, RawStore, Callable[..., RememberPlugin]], fill: int
) -> None:
    """T1-T9 all REJECTED, on every networked store; also with agmi's records among 2,000
    other entries of the namespace."""
    kind, raw, factory = target
    row = _row(RememberSyncAdapter(kind, raw, factory, verified=True, fill=fill))
    assert row == dict.fromkeys(EDITS, "REJECTED")


def test_default_mode_row(
    target: tuple[str, RawStore, Callable[..., RememberPlugin]],
) -> None:
    """The default mode's row, pinned: the scorecard in docs/reliability.rst is this one."""
    kind, raw, factory = target
    row = _row(RememberSyncAdapter(kind, raw, factory, verified=False))
    assert row == DEFAULT_ROW
