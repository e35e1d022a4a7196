"""The accessor (SPEC sections 1.1, 1.2 and 5), run unchanged on every store kind."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from remember_sync import (
    Identity,
    RememberEntry,
    RememberIdentityError,
    RememberPlugin,
    identity,
)
from remember_sync.accessor import RememberAccessor
from remember_sync.stores.base import Store
from tests.conftest import FakeClock

ALICE = Identity(session_id="s-1", user_id="alice", tool_name="t1")
BOB = Identity(session_id="s-2", user_id="bob", tool_name="t1")


@pytest.fixture
def mem(plugin: RememberPlugin) -> RememberAccessor:
    return plugin.accessor(ALICE)


def all_keys(store: Store) -> list[str]:
    """Every key but the bookkeeping ones (listing indexes, ``__indexed__``, markers)."""
    return sorted(k for k in store.scan("*") if not k.startswith("remember:__"))


# -- SPEC 1.1, row by row ------------------------------------------------------------------


def test_set_replaces_entry_with_fresh_times(mem: RememberAccessor, clock: FakeClock) -> None:
    """set() replaces the whole entry: created_at = updated_at = now, old brand/metadata gone."""
    mem.set("k", 1, brand="cache", metadata={"a": 1})
    clock.advance(s=5)
    assert mem.set("k", 2) is None
    entry = mem.get_entry("k")
    assert entry == RememberEntry(2, None, clock.now, clock.now, None, None)


def test_get_default_only_when_missing(mem: RememberAccessor) -> None:
    """get() returns default for a missing key, and a stored None as None."""
    assert mem.get("nope", default="fallback") == "fallback"
    assert mem.get("nope") is None
    mem.set("none", None)
    assert mem.get("none", default="fallback") is None
    mem.set("falsy", 0)
    assert mem.get("falsy", default=5) == 0


def test_get_entry_returns_whole_entry(mem: RememberAccessor, clock: FakeClock) -> None:
    """get_entry() has value, brand, times (epoch ms ints), expiry and metadata."""
    mem.set("k", {"q": "weather", "n": 3}, ttl=600, brand="cache", metadata={"source": "api"})
    entry = mem.get_entry("k")
    assert entry is not None
    assert entry.value == {"q": "weather", "n": 3}
    assert entry.brand == "cache"
    assert entry.created_at == entry.updated_at == clock.now
    assert entry.expires_at == clock.now + 600_000
    assert entry.metadata == {"source": "api"}
    assert all(isinstance(t, int) for t in (entry.created_at, entry.updated_at, entry.expires_at))
    assert mem.get_entry("missing") is None


def test_update_keeps_created_brand_metadata(mem: RememberAccessor, clock: FakeClock) -> None:
    """update() keeps created_at, brand, metadata; sets updated_at; returns True."""
    mem.set("k", "v1", brand="state", metadata={"m": True})
    created = clock.now
    clock.advance(s=3)
    assert mem.update("k", "v2") is True
    entry = mem.get_entry("k")
    assert entry == RememberEntry("v2", "state", created, clock.now, None, {"m": True})


def test_update_missing_or_expired_returns_false(mem: RememberAccessor, clock: FakeClock) -> None:
    """update() of a missing or expired entry returns False and writes nothing."""
    assert mem.update("missing", 1) is False
    assert mem.get_entry("missing") is None
    mem.set("short", 1, ttl=5)
    clock.advance(s=5)
    assert mem.update("short", 2) is False
    assert mem.get("short") is None


def test_update_keeps_deadline_unless_ttl(mem: RememberAccessor, clock: FakeClock) -> None:
    """update() keeps the deadline; ttl= sets a new one from now."""
    mem.set("k", 1, ttl=100)
    deadline = clock.now + 100_000
    clock.advance(s=40)
    mem.update("k", 2)
    assert mem.get_entry("k").expires_at == deadline  # type: ignore[union-attr]
    mem.update("k", 3, ttl=10)
    assert mem.get_entry("k").expires_at == clock.now + 10_000  # type: ignore[union-attr]


def test_update_without_deadline_gets_default_ttl(
    make_plugin: Callable[..., RememberPlugin], clock: FakeClock
) -> None:
    """An entry without a deadline gets default_ttl from now when updated."""
    plain = make_plugin().accessor(ALICE)
    plain.set("k", 1)
    with_default = make_plugin(default_ttl=60).accessor(ALICE)
    clock.advance(s=1)
    assert with_default.update("k", 2)
    assert with_default.get_entry("k").expires_at == clock.now + 60_000  # type: ignore[union-attr]


def test_knows(mem: RememberAccessor, clock: FakeClock) -> None:
    """knows() is True only for a readable, unexpired entry."""
    assert mem.knows("k") is False
    mem.set("k", None, ttl=1)
    assert mem.knows("k") is True
    clock.advance(ms=1000)
    assert mem.knows("k") is False


def test_forget_returns_whether_something_was_there(mem: RememberAccessor) -> None:
    """forget() deletes and reports whether the entry existed."""
    mem.set("k", 1)
    assert mem.forget("k") is True
    assert mem.forget("k") is False
    assert mem.get("k") is None


def test_list_sorted_deduplicated_bare_keys(mem: RememberAccessor) -> None:
    """list() returns bare keys (prefix stripped), sorted, once each."""
    for key in ["b", "a:1", "c/\u00fc", "a:2"]:
        mem.set(key, 1)
    mem.set("other-scope", 1, scope="user")
    assert mem.list() == ["a:1", "a:2", "b", "c/\u00fc"]
    assert mem.list(pattern="a:*") == ["a:1", "a:2"]
    assert mem.list(pattern="?") == ["b"]
    assert mem.list(scope="user") == ["other-scope"]


def test_list_excludes_expired(mem: RememberAccessor, clock: FakeClock) -> None:
    """list() and entries() never return expired entries (now >= expiresAt)."""
    mem.set("short", 1, ttl=2)
    mem.set("long", 1, ttl=50)
    clock.advance(ms=2000)
    assert mem.list() == ["long"]
    assert list(mem.entries()) == ["long"]


def test_list_pattern_specials_are_literal(mem: RememberAccessor) -> None:
    """Only * and ? are wildcards in list patterns; [ ] and backslash are literal."""
    for key in ["[a]", "a", "b\\c", "bxc"]:
        mem.set(key, 1)
    assert mem.list(pattern="[a]") == ["[a]"]
    assert mem.list(pattern="b\\c") == ["b\\c"]
    assert mem.list(pattern="b?c") == ["b\\c", "bxc"]


def test_entries_filters_by_brand(mem: RememberAccessor) -> None:
    """entries() returns whole entries, filtered by brand when asked."""
    mem.set("theme", "dark", brand="preference")
    mem.set("lang", "en", brand="preference")
    mem.set("cached", [1], brand="cache")
    mem.set("plain", 0)
    prefs = mem.entries(brand="preference")
    assert sorted(prefs) == ["lang", "theme"]
    assert prefs["theme"].value == "dark"
    assert sorted(mem.entries()) == ["cached", "lang", "plain", "theme"]
    assert list(mem.entries(pattern="c*")) == ["cached"]


def test_forget_many(mem: RememberAccessor) -> None:
    """forget_many() deletes by pattern (and brand) and returns the count."""
    mem.set("tmp:1", 1, brand="cache")
    mem.set("tmp:2", 1, brand="state")
    mem.set("keep", 1, brand="cache")
    assert mem.forget_many(pattern="tmp:*", brand="cache") == 1
    assert mem.list() == ["keep", "tmp:2"]
    assert mem.forget_many(pattern="*") == 2
    assert mem.list() == []


@pytest.mark.parametrize("scope", ["session", "user", "tool", "global"])
def test_every_method_takes_every_scope(mem: RememberAccessor, scope: str) -> None:
    """Each scope is its own namespace and every method works in it."""
    mem.set("k", scope, scope=scope)  # type: ignore[arg-type]
    for other in {"session", "user", "tool", "global"} - {scope}:
        assert mem.get("k", scope=other) is None  # type: ignore[arg-type]
    assert mem.get("k", scope=scope) == scope  # type: ignore[arg-type]
    assert mem.update("k", "u", scope=scope)  # type: ignore[arg-type]
    assert mem.knows("k", scope=scope)  # type: ignore[arg-type]
    assert mem.list(scope=scope) == ["k"]  # type: ignore[arg-type]
    assert mem.forget("k", scope=scope)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["set", "get", "get_entry", "update", "knows", "forget"])
def test_unknown_scope_is_value_error(mem: RememberAccessor, method: str) -> None:
    """An unknown scope raises ValueError for every method."""
    args: tuple[Any, ...] = ("k", 1) if method in ("set", "update") else ("k",)
    with pytest.raises(ValueError, match="scope must be one of"):
        getattr(mem, method)(*args, scope="forever")
    with pytest.raises(ValueError):
        mem.list(scope="Session")  # type: ignore[arg-type]


def test_identities_are_isolated(plugin: RememberPlugin) -> None:
    """Two identities never see each other's session, user or tool memory; global is shared."""
    alice, bob = plugin.accessor(ALICE), plugin.accessor(BOB)
    for scope in ("session", "user", "tool", "global"):
        alice.set("k", f"alice-{scope}", scope=scope)  # type: ignore[arg-type]
    for scope in ("session", "user", "tool"):
        assert bob.get("k", scope=scope) is None  # type: ignore[arg-type]
        assert bob.list(scope=scope) == []  # type: ignore[arg-type]
    assert bob.get("k", scope="global") == "alice-global"


def test_user_scope_shared_across_sessions(plugin: RememberPlugin) -> None:
    """user scope follows the user across sessions; session scope does not."""
    plugin.accessor(Identity("s-a", "carol")).set("pref", 1, scope="user")
    plugin.accessor(Identity("s-a", "carol")).set("tmp", 1)
    other_session = plugin.accessor(Identity("s-b", "carol"))
    assert other_session.get("pref", scope="user") == 1
    assert other_session.get("tmp") is None


def test_tool_scope_is_per_tool(plugin: RememberPlugin) -> None:
    """tool scope differs between tools of the same session."""
    plugin.accessor(Identity("s", None, "search")).set("cache", 1, scope="tool")
    assert plugin.accessor(Identity("s", None, "other")).get("cache", scope="tool") is None
    assert plugin.accessor(Identity("s", None, "search")).get("cache", scope="tool") == 1


def test_remember_reads_context_identity_per_call(plugin: RememberPlugin) -> None:
    """plugin.remember follows the identity bound at call time, not at access time."""
    mem = plugin.remember
    with identity(session_id="s-x", user_id="dave"):
        mem.set("k", "dave", scope="user")
    with identity(session_id="s-y", user_id="erin"):
        assert mem.get("k", scope="user") is None
    with identity(session_id="s-z", user_id="dave"):
        assert plugin.remember.get("k", scope="user") == "dave"


def test_refusals_happen_before_store_io(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """An anonymous caller is refused for session/user/tool before touching the store."""
    calls: list[str] = []
    me = threading.get_ident()  # the plugin's background checks run on threads of their own

    class Spy:
        def __getattr__(self, name: str) -> Any:
            if threading.get_ident() == me:
                calls.append(name)
            return getattr(store, name)

    plugin = make_plugin(store=Spy())
    calls.clear()  # what init() looked up
    anon = plugin.accessor(Identity(None, "anon:1", "t"))
    for scope in ("session", "user", "tool"):
        with pytest.raises(RememberIdentityError):
            anon.set("k", 1, scope=scope)  # type: ignore[arg-type]
        with pytest.raises(RememberIdentityError):
            anon.get("k", scope=scope)  # type: ignore[arg-type]
        with pytest.raises(RememberIdentityError):
            anon.list(scope=scope)  # type: ignore[arg-type]
    assert calls == []
    anon.set("g", 1, scope="global")
    assert calls == ["set"]


# -- SPEC 1.2: input rules, nothing written ------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"key": ""}, ValueError),
        ({"key": "a\x00b"}, ValueError),
        ({"key": "k" * 1025}, ValueError),
        ({"key": 7}, ValueError),
        ({"value": object()}, TypeError),
        ({"value": {1: "int key"}}, TypeError),
        ({"value": float("nan")}, TypeError),
        ({"value": [float("inf")]}, TypeError),
        ({"value": {"s": {1, 2}}}, TypeError),
        ({"metadata": ["not", "a", "dict"]}, TypeError),
        ({"metadata": {"k": b"bytes"}}, TypeError),
        ({"metadata": {2: "x"}}, TypeError),
        ({"ttl": 0}, ValueError),
        ({"ttl": -1}, ValueError),
        ({"ttl": 1.5}, ValueError),
        ({"ttl": True}, ValueError),
        ({"ttl": "10"}, ValueError),
        ({"brand": "secret"}, ValueError),
        ({"scope": "forever"}, ValueError),
        ({"value": "x" * (1024 * 1024)}, ValueError),
    ],
)
def test_set_input_rules_write_nothing(
    mem: RememberAccessor, store: Store, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """Each input-rule violation raises a clear exception and writes nothing."""
    args = {"key": "k", "value": "v", **kwargs}
    key, value = args.pop("key"), args.pop("value")
    with pytest.raises(error) as info:
        mem.set(key, value, **args)
    assert str(info.value)
    assert all_keys(store) == []


def test_error_messages_name_the_offence(mem: RememberAccessor) -> None:
    """Messages name the offending type or limit."""
    with pytest.raises(TypeError, match="set"):
        mem.set("k", {1, 2})
    with pytest.raises(TypeError, match="metadata"):
        mem.set("k", 1, metadata="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        mem.set("k", 1, ttl=0)
    with pytest.raises(ValueError, match="max_value_bytes"):
        mem.set("k", "x" * (1024 * 1024))


def test_max_value_bytes_configurable(make_plugin: Callable[..., RememberPlugin]) -> None:
    """max_value_bytes bounds the serialised entry."""
    small = make_plugin(max_value_bytes=200).accessor(ALICE)
    small.set("k", "x" * 100)
    with pytest.raises(ValueError, match="max_value_bytes is 200"):
        small.set("k", "x" * 150)
    assert small.get("k") == "x" * 100


def test_update_input_rules_write_nothing(mem: RememberAccessor) -> None:
    """update() validates value and ttl before writing."""
    mem.set("k", "v")
    before = mem.get_entry("k")
    for bad in ({"value": object()}, {"value": 1, "ttl": 0}, {"value": 1, "ttl": 2.5}):
        with pytest.raises((TypeError, ValueError)):
            mem.update("k", **bad)
    assert mem.get_entry("k") == before


@pytest.mark.parametrize("pattern", ["a" * 501, "*" * 21, 5])
def test_list_pattern_rules(mem: RememberAccessor, pattern: Any) -> None:
    """list/entries/forget_many refuse over-long or over-wild patterns."""
    with pytest.raises(ValueError):
        mem.list(pattern=pattern)
    with pytest.raises(ValueError):
        mem.forget_many(pattern=pattern)


def test_values_round_trip(mem: RememberAccessor) -> None:
    """Every JSON value round-trips: unicode, nesting, big ints, floats, null, tuples as lists."""
    values = [
        "h\u00e9llo \u2713 \U0001f389",
        {"a": [1, 2.5, None, True, {"b": "c"}]},
        -0.0005,
        2**62,
        [],
        {},
        "",
        '\x00\x1f"\\',
    ]
    for i, value in enumerate(values):
        mem.set(f"k{i}", value)
        assert mem.get(f"k{i}") == value
    mem.set("tuple", (1, 2))
    assert mem.get("tuple") == [1, 2]


# -- SPEC 5: TTL with an injected clock ----------------------------------------------------


def test_default_ttl_recorded(make_plugin: Callable[..., RememberPlugin], clock: FakeClock) -> None:
    """set without ttl records default_ttl; ttl overrides it; 0 means none."""
    mem = make_plugin(default_ttl=120).accessor(ALICE)
    mem.set("d", 1)
    mem.set("t", 1, ttl=5)
    assert mem.get_entry("d").expires_at == clock.now + 120_000  # type: ignore[union-attr]
    assert mem.get_entry("t").expires_at == clock.now + 5_000  # type: ignore[union-attr]
    none = make_plugin(default_ttl=0).accessor(ALICE)
    none.set("n", 1)
    assert none.get_entry("n").expires_at is None  # type: ignore[union-attr]


def test_expired_at_exactly_expires_at(mem: RememberAccessor, clock: FakeClock) -> None:
    """An entry is expired when now >= expiresAt, for get, get_entry, knows, list, entries."""
    mem.set("k", "v", ttl=10)
    clock.advance(ms=9_999)
    assert mem.get("k") == "v"
    clock.advance(ms=1)
    assert mem.get("k", default="gone") == "gone"
    assert mem.get_entry("k") is None
    assert mem.knows("k") is False
    assert mem.list() == []
    assert mem.entries() == {}


def test_self_containing_value_is_refused(mem: RememberAccessor, store: Store) -> None:
    """A value that contains itself is a TypeError (never an endless check); nothing written."""
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(TypeError, match="Circular"):
        mem.set("k", loop)
    shared = {"x": 1}
    mem.set("shared", [shared, shared])  # shared, not circular: fine
    assert mem.get("shared") == [{"x": 1}, {"x": 1}]
    assert all_keys(store) == ["remember:v2:session:s-1:shared"]


class _ProtocolOnly:
    """The store under test seen through the Store protocol alone (no ``scan_pages``)."""

    def __init__(self, store: Store) -> None:
        self.get, self.get_many, self.set = store.get, store.get_many, store.set
        self.compare_and_set, self.delete = store.compare_and_set, store.delete
        self.scan, self.close = store.scan, store.close


def test_entries_are_the_same_with_and_without_the_item_scanner(
    make_plugin: Callable[..., RememberPlugin], store: Store, clock: FakeClock
) -> None:
    """entries()/list() through scan_pages equal scan + get_many, filters and all."""
    assert hasattr(store, "scan_pages") and not hasattr(_ProtocolOnly(store), "scan_pages")
    direct = make_plugin(read_doubled_prefix=True)
    mem = direct.accessor(ALICE)
    for i in range(120):
        mem.set(f"k{i}", {"i": i}, brand="cache" if i % 2 == 0 else None, ttl=10 if i < 5 else None)
    mem.set("k*", "star")
    mem.set("n:1", 1)
    plugin_bob = direct.accessor(BOB)
    plugin_bob.set("k1", "bob's")
    # One unreadable entry and one written under 1.8.0's doubled prefix.
    store.set("remember:v2:session:s-1:k-broken", "not an envelope")
    doubled = "remember:" + "remember:v2:session:s-1:old"
    mem.set("old", "from 1.8.0")
    store.set(doubled, store.get("remember:v2:session:s-1:old") or "")
    store.delete("remember:v2:session:s-1:old")
    clock.advance(s=11)  # k0 .. k4 expire

    plain = make_plugin(read_doubled_prefix=True, store=_ProtocolOnly(store))
    for pattern in ("*", "k1?", "k\\*", "n:*", "nothing*"):
        for brand in (None, "cache"):
            via_items = mem.entries(pattern=pattern, brand=brand)
            via_scan = plain.accessor(ALICE).entries(pattern=pattern, brand=brand)
            assert via_items == via_scan, (pattern, brand)
    everything = mem.entries()
    assert len(everything) == 115 + 1 + 1 + 1  # k5..k119, k*, n:1, old
    assert everything["old"].value == "from 1.8.0"
    assert "k-broken" not in everything and "k0" not in everything
    assert mem.list(pattern="k1?") == sorted(f"k{i}" for i in range(10, 20))
    assert direct.stats()["unreadable"] >= 1
