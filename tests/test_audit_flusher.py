"""The audit trail's background flusher: one append per ``flush_ms``, whatever the write rate."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from remember_sync import Identity, RememberPlugin
from remember_sync.stores.base import Store

BLOCKS = "__audit__:b:"


@pytest.mark.parametrize("store_kind", ["memory", "redis"])
def test_the_flusher_appends_once_per_interval_while_writes_go_on(
    make_plugin: Callable[..., RememberPlugin], store: Store, store_kind: str
) -> None:
    """A writer that never pauses: the flusher appends what was buffered when it woke, then
    sleeps ``flush_ms`` -- it does not chase the writer with one append per few events (three
    store round trips each, competing with the writes for the interpreter and the store)."""
    plugin = make_plugin(audit={"batch": 50_000, "flush_ms": 100})
    mem = plugin.accessor(Identity("s-1", "alice", "notes"))
    start = time.monotonic()
    writes = 0
    while time.monotonic() - start < 1.0:
        mem.set(f"k{writes % 50}", writes)
        writes += 1
    elapsed = time.monotonic() - start
    trail = plugin.audit
    assert trail is not None
    trail.flush()
    blocks = [json.loads(v) for v in store.get_many(sorted(store.scan(
        plugin.key_prefix + BLOCKS + "*")))]
    sizes = [len(b["events"]) for b in blocks if b is not None]
    assert sum(sizes) == writes
    # One block per wake-up (two if more than 1,024 events waited), plus the final flush.
    wakes = int(elapsed / 0.1) + 1
    assert len(sizes) <= 2 * wakes + writes // 1024 + 1, (len(sizes), writes, elapsed)
    assert trail.verify().ok
