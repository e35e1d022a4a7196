"""Session owner records: kept by a bounded memory store, and living as long as the entries.

An owner record ties a session to the person who wrote in it; without it
``erase`` cannot find that session ("unattributed").  So a bounded memory
store must not evict it while the person still has entries, and its TTL must
reach at least as far as the latest entry written in the session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from remember_sync import Identity, RememberPlugin
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore

Factory = Callable[..., RememberPlugin]
OWNERS = "__owner__:"
DAY_MS = 86_400_000


def _records(plugin: RememberPlugin) -> list[str]:
    return sorted(plugin.store.scan(plugin.key_prefix + OWNERS + "*"))


@pytest.mark.parametrize("store_kind", ["memory"])
def test_a_bounded_memory_store_keeps_the_owner_records_of_people_with_entries(
    make_plugin: Factory, store_kind: str
) -> None:
    """Alice writes in two sessions; Mallory then opens 150 sessions on a store bounded to 60
    entries.  Mallory's entries go (fair eviction), Alice's entries and owner records stay,
    and nobody's session is left unattributed: a record goes only once its person has no
    entry left in the store."""
    plugin = make_plugin(store=None, max_entries=60)
    assert isinstance(plugin.store, MemoryStore)
    for session in ("sa-1", "sa-2"):
        mem = plugin.accessor(Identity(session, "alice", "notes"))
        mem.set("theme", session)
        mem.set("draft", session, scope="tool")
    for n in range(150):
        plugin.accessor(Identity(f"sm-{n}", "mallory", "notes")).set("x", n)
    assert plugin.store.evictions > 0
    alice = plugin.erase(user_id="alice", dry_run=True)
    assert (alice.sessions, alice.session_entries, alice.tool_entries) == (2, 2, 2)
    assert alice.unattributed_sessions == 0
    assert plugin.erase(user_id="mallory", dry_run=True).unattributed_sessions == 0
    assert plugin.accessor(Identity("sa-2", "alice", "notes")).get("theme") == "sa-2"


@pytest.mark.parametrize("store_kind", ["memory"])
def test_kept_records_still_count_toward_the_bound(store_kind: str) -> None:
    """A kept record is charged like any entry; when a group holds nothing else, its oldest
    kept record goes, so the store stays within its bound."""
    store = MemoryStore(max_entries=5)
    for n in range(8):
        assert store.write_kept(f"rec-{n}", "v", group="g")
    assert len(list(store.scan("*"))) == 5
    assert store.get("rec-0") is None and store.get("rec-7") == "v"
    store.set("entry", "e")
    assert len(list(store.scan("*"))) == 5 and store.get("entry") == "e"


@pytest.mark.parametrize("store_kind", ["memory"])
def test_kept_records_go_after_every_ordinary_entry_of_their_group(store_kind: str) -> None:
    store = MemoryStore(max_entries=4, namespace_of=lambda key: key.split(":", 1)[0])
    assert store.write_kept("g:rec", "r", group="g")
    assert store.write_kept("g:rec", "r2", group="g", expected="r")
    assert not store.write_kept("g:rec", "r3", group="g", only_if_absent=True)
    for n in range(6):
        store.set(f"g:e{n}", "e")
    assert store.get("g:rec") == "r2"
    assert store.get("g:e5") == "e" and store.get("g:e0") is None
    assert list(store.scan_pages("g:rec"))  # a scan touches a kept record without harm


def _pttl(client: redis.Redis, key: str) -> int:
    return int(client.pttl(key))


@pytest.mark.parametrize("store_kind", ["redis"])
def test_an_owner_record_lives_at_least_as_long_as_the_sessions_latest_entry(
    make_plugin: Factory, store: Store, store_kind: str, redis_client: redis.Redis
) -> None:
    """A session of short-lived entries leaves a record that expires too (a day after the
    entry); an entry written later with a longer TTL -- by another process, which has not
    seen the record -- extends it; a shorter one never shortens it; a persistent entry makes
    it persistent, and a later short one leaves it so."""
    writer = make_plugin()
    writer.accessor(Identity("s-1", "erin")).set("short", 1, ttl=60)
    (record,) = _records(writer)
    entry = next(iter(store.scan(writer.key_prefix + "*short")))
    assert _pttl(redis_client, entry) <= 60_000
    assert 60_000 + DAY_MS - 5_000 <= _pttl(redis_client, record) <= 60_000 + DAY_MS

    make_plugin().accessor(Identity("s-1", "erin")).set("long", 1, ttl=10 * 86_400)
    assert _pttl(redis_client, record) >= 11 * DAY_MS - 5_000
    writer.accessor(Identity("s-1", "erin")).set("brief", 1, ttl=5)
    make_plugin().accessor(Identity("s-1", "erin")).set("brief2", 1, ttl=5)
    assert _pttl(redis_client, record) >= 11 * DAY_MS - 5_000

    third = make_plugin()
    third.accessor(Identity("s-1", "erin")).set("forever", 1)
    assert _pttl(redis_client, record) == -1
    make_plugin().accessor(Identity("s-1", "erin")).modify("counter", lambda v: v + 1,
                                                          default=0, ttl=5)
    assert _pttl(redis_client, record) == -1
    assert _records(writer) == [record]


@pytest.mark.parametrize("store_kind", ["memory"])
def test_an_owner_record_expires_after_its_sessions_entries(
    make_plugin: Factory, store_kind: str, clock: Any
) -> None:
    """On a memory store driven by the clock: the record outlives the session's latest entry
    (written by update, modify and the tools too), then expires; one for a persistent entry
    never does, whatever is written after it."""
    shared = MemoryStore(clock=clock)
    writer = make_plugin(store=shared, tools={"enabled": True})
    mem = writer.accessor(Identity("s-1", "erin"))
    mem.set("short", 1, ttl=60)
    (record,) = _records(writer)
    make_plugin(store=shared).accessor(Identity("s-1", "erin")).update("short", 2, ttl=86_400)
    make_plugin(store=shared).accessor(Identity("s-1", "erin")).increment("n", ttl=2 * 86_400)
    done = writer.call_tool("remember_this", {"key": "t", "value": 1, "ttl": 3 * 86_400},
                            identity=Identity("s-1", "erin"))
    assert not done.get("isError"), done
    clock.advance(3 * DAY_MS + 1_000)  # every entry is gone; the record is not
    assert mem.list() == [] and _records(writer) == [record]
    clock.advance(DAY_MS)
    assert _records(writer) == []

    mem2 = writer.accessor(Identity("s-2", "erin"))
    mem2.set("forever", 1)
    make_plugin(store=shared).accessor(Identity("s-2", "erin")).set("later", 1, ttl=5)
    clock.advance(400 * DAY_MS)
    assert len(_records(writer)) == 1 and mem2.get("forever") == 1


def test_every_store_extends_a_record_and_never_shortens_it(
    make_plugin: Factory, store: Store, store_kind: str, clock: Any
) -> None:
    """The record's deadline (sealed in it) follows the latest entry on every store kind:
    extended by another process's longer-lived write, kept by a shorter one, dropped (no
    deadline) by a persistent entry."""
    first = make_plugin()
    first.accessor(Identity("s-1", "erin")).set("a", 1, ttl=60)
    (record,) = _records(first)
    book = first._core.owners

    def until() -> int | None:
        stored = store.get(record)
        assert stored is not None
        opened = book._open(record, stored)
        assert opened is not None and opened[0] == "s-1"
        return opened[1]

    now = clock()
    assert until() == now + 60_000 + DAY_MS
    make_plugin().accessor(Identity("s-1", "erin")).set("b", 1, ttl=10 * 86_400)
    assert until() == now + 11 * DAY_MS
    make_plugin().accessor(Identity("s-1", "erin")).set("c", 1, ttl=5)
    assert until() == now + 11 * DAY_MS
    make_plugin().accessor(Identity("s-1", "erin")).set("d", 1)
    assert until() is None
    make_plugin().accessor(Identity("s-1", "erin")).set("e", 1, ttl=5)
    assert until() is None and _records(first) == [record]
