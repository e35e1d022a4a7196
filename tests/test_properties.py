"""Property-based tests (hypothesis): key encoding, pattern isolation, parsers, JSON round trips.

Identity texts are drawn from an adversarial alphabet (``:``, ``%``, glob
specials, percent-escapes, control characters, non-ASCII) mixed with arbitrary
Unicode, so the properties are tried on exactly the inputs that break naive
key schemes.  Example counts are kept modest so the module runs in seconds;
``HYPOTHESIS_PROFILE``-style tuning is not needed for CI.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from remember_sync import Identity, RememberPlugin
from remember_sync._codec import EntryCodec, entry_from_json
from remember_sync._crypto import Keyring, b64url_encode, parse_envelope
from remember_sync._keys import (
    encode_component,
    glob_escape,
    layout_marker_key,
    legacy_patterns,
    match_user_pattern,
    parse_storage_key,
    scope_glob,
    scope_prefix,
    storage_key,
    storage_namespace,
)
from remember_sync.errors import (
    RememberDecryptionError,
    RememberError,
    RememberInputError,
    RememberInputTypeError,
)
from remember_sync.identity import resolve_namespace
from remember_sync.stores import glob_matcher
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from remember_sync.types import SCOPES, Namespace, Scope

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW_IO = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# -- strategies ---------------------------------------------------------------------------------

#: Fragments that break naive key schemes: separators, escapes, glob specials, controls.
_NASTY = list(":%*?[]\\^!-./~'() \t\n\r\x01\x7f") + ["é", "€", "😀", "\u200b", "%3A", "%2A", "%25"]
_char = st.characters(blacklist_categories=("Cs",))
_fragment = st.one_of(st.sampled_from(_NASTY), _char)
ident_text = st.lists(_fragment, min_size=1, max_size=8).map("".join)
#: A non-anonymous user id (``None``, empty and ``anon:...`` are anonymous).
user_text = ident_text.filter(lambda u: not u.startswith("anon:"))
#: Memory keys: non-empty, no NUL, no lone surrogate (what check_key accepts).
key_text = (
    st.lists(st.one_of(st.sampled_from(_NASTY), _char), min_size=1, max_size=10)
    .map("".join)
    .map(lambda k: k.replace("\x00", "") or "k")
)
pattern_text = st.lists(st.one_of(st.sampled_from(list("*?[]\\%:")), _fragment), max_size=8).map(
    "".join
)
prefix_text = st.one_of(
    st.sampled_from(["remember:", "", "app[1]*:", "a\\b?:", "v2:"]),
    st.lists(_fragment, max_size=5).map("".join),
)


@st.composite
def identities(draw: st.DrawFn, scope: Scope | None = None) -> tuple[Scope, Identity]:
    """A (scope, identity) pair the scope rules accept (no RememberIdentityError)."""
    chosen: Scope = scope or draw(st.sampled_from(SCOPES))
    if chosen == "global":
        return chosen, Identity(
            draw(st.none() | ident_text), draw(st.none() | ident_text), draw(st.none() | ident_text)
        )
    if chosen == "user":
        return chosen, Identity(draw(st.none() | ident_text), draw(user_text), None)
    # session / tool: a verified session, or no session and a signed-in user.
    if draw(st.booleans()):
        session, user = draw(ident_text.filter(lambda s: s != "__stateless__")), None
    else:
        session, user = None, draw(user_text)
    tool = draw(ident_text) if chosen == "tool" else None
    return chosen, Identity(session, user, tool)


def namespaces() -> st.SearchStrategy[Namespace]:
    return identities().map(lambda pair: resolve_namespace(pair[1], pair[0]))


#: Small alphabets make accidental collisions likely if the encoding allowed them.
_tiny = st.text(st.sampled_from(list(":%2A*a")), min_size=1, max_size=4)


@st.composite
def tiny_namespaces(draw: st.DrawFn) -> Namespace:
    scope = draw(st.sampled_from(SCOPES))
    if scope == "global":
        return Namespace("global")
    if scope == "user":
        return Namespace("user", user=draw(_tiny))
    if scope == "session":
        return Namespace("session", session=draw(_tiny))
    return Namespace("tool", session=draw(_tiny), tool=draw(_tiny))


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


def same_json(a: Any, b: Any) -> bool:
    """Equality that also tells ``True`` from ``1`` and ``1.0`` from ``1`` (JSON types)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


# -- storage keys: injective ----------------------------------------------------------------------


@FAST
@given(prefix=prefix_text, ns=namespaces(), key=key_text)
def test_storage_key_has_a_left_inverse(prefix: str, ns: Namespace, key: str) -> None:
    """Every storage key parses back to its exact (scope, identity, key): encoding is injective."""
    full = storage_key(prefix, ns, key)
    parsed = parse_storage_key(prefix, full)
    assert parsed is not None, full
    assert (parsed.namespace, parsed.key) == (ns, key)


def test_storage_namespace_is_the_scope_prefix() -> None:
    """Every scope's key maps to its scope prefix, also when identity and key contain ':'."""
    for prefix in ("remember:", "", "a:b:"):
        for ns in (
            Namespace("session", session="s:1"),
            Namespace("user", user="u:*:2"),
            Namespace("tool", tool="t:x", session="s:y"),
            Namespace("global"),
        ):
            key = storage_key(prefix, ns, "k:with:colons")
            assert storage_namespace(prefix, key) == scope_prefix(prefix, ns)
        assert storage_namespace(prefix, prefix + "__layout__") == prefix
        assert storage_namespace(prefix, prefix + "v2:tool:only-one-part") == prefix
    assert storage_namespace("p:", "foreign") == "p:"


@settings(max_examples=400, deadline=None)
@given(a=tiny_namespaces(), b=tiny_namespaces(), ka=_tiny, kb=_tiny)
def test_no_two_namespaced_keys_collide(a: Namespace, b: Namespace, ka: str, kb: str) -> None:
    """Two different (scope, identity, key) triples never give one storage key (tiny alphabet)."""
    if storage_key("remember:", a, ka) == storage_key("remember:", b, kb):
        assert (a, ka) == (b, kb)


@FAST
@given(prefix=prefix_text, ns=namespaces(), key=key_text)
def test_storage_keys_never_look_like_legacy_keys_or_the_marker(
    prefix: str, ns: Namespace, key: str
) -> None:
    """No storage key is the layout marker or matches a legacy-purge glob (the purge spares it)."""
    full = storage_key(prefix, ns, key)
    assert full != layout_marker_key(prefix)
    for glob in legacy_patterns(prefix):
        assert not glob_matcher(glob)(full), (glob, full)


@FAST
@given(text=st.text(min_size=1, max_size=6).map(lambda s: s + "\ud800"))
def test_lone_surrogate_identity_is_an_input_error(text: str) -> None:
    """An identity that is not valid Unicode gives RememberInputError, never UnicodeEncodeError."""
    with pytest.raises(RememberInputError):
        encode_component(text)


# -- pattern escaping: one identity never lists another's keys -----------------------------------


@settings(max_examples=300, deadline=None)
@given(
    prefix=prefix_text,
    a=namespaces(),
    b=namespaces(),
    pattern=pattern_text,
    key=key_text,
)
def test_scope_glob_never_matches_another_namespace(
    prefix: str, a: Namespace, b: Namespace, pattern: str, key: str
) -> None:
    """A's SCAN glob (escaped prefix + user pattern) never matches a key of namespace B != A."""
    if a == b:
        return
    matches = glob_matcher(scope_glob(prefix, a, pattern))
    assert not matches(storage_key(prefix, b, key))


@settings(max_examples=300, deadline=None)
@given(
    prefix=prefix_text,
    ns=namespaces(),
    pattern=pattern_text,
    key=key_text,
)
def test_scope_glob_admits_every_key_the_user_pattern_matches(
    prefix: str, ns: Namespace, pattern: str, key: str
) -> None:
    """Within one namespace the glob admits every key the pattern matches (a superset: the
    server sees only the pattern's literal head and tail around one `*`), and the exact
    filter then decides."""
    matches = glob_matcher(scope_glob(prefix, ns, pattern))
    if match_user_pattern(pattern, key):
        assert matches(storage_key(prefix, ns, key))
    if "*" not in pattern and "?" not in pattern:  # no wildcard: the glob is exact
        assert matches(storage_key(prefix, ns, key)) == (key == pattern)


def _two_identities(scope: Scope) -> st.SearchStrategy[tuple[Identity, Identity]]:
    return st.tuples(identities(scope), identities(scope)).map(lambda p: (p[0][1], p[1][1]))


@settings(max_examples=120, deadline=None)
@given(
    scope=st.sampled_from(["session", "user", "tool"]),
    data=st.data(),
    keys_a=st.lists(key_text, min_size=1, max_size=4),
    keys_b=st.lists(key_text, min_size=1, max_size=4),
    pattern=st.sampled_from(["*", "?", "*:*", "*%*", "*\\*", "[*", "*]*", "%2A*", "**"]),
)
def test_accessor_list_never_shows_another_identitys_keys(
    scope: Scope, data: st.DataObject, keys_a: list[str], keys_b: list[str], pattern: str
) -> None:
    """Through a real accessor on the memory store, list/entries of A show only A's own keys."""
    ident_a, ident_b = data.draw(_two_identities(scope))
    ns_a, ns_b = resolve_namespace(ident_a, scope), resolve_namespace(ident_b, scope)
    # Plaintext: a leaked key would decode fine and show up (encryption could hide it).
    with RememberPlugin.init(
        store=MemoryStore(), skip_legacy_purge=True, encryption={"enabled": False}
    ) as plugin:
        mem_a, mem_b = plugin.accessor(ident_a), plugin.accessor(ident_b)
        for k in keys_a:
            mem_a.set(k, {"owner": "a"}, scope=scope)
        for k in keys_b:
            mem_b.set(k, {"owner": "b"}, scope=scope)
        listed_a = mem_a.list(scope=scope, pattern=pattern)
        listed_b = mem_b.list(scope=scope, pattern=pattern)
        if ns_a == ns_b:  # the same namespace drawn twice: one shared set of keys
            assert listed_a == listed_b
            return
        assert listed_a == sorted({k for k in keys_a if match_user_pattern(pattern, k)})
        assert listed_b == sorted({k for k in keys_b if match_user_pattern(pattern, k)})
        for entry in mem_a.entries(scope=scope, pattern=pattern).values():
            assert entry.value == {"owner": "a"}
        assert plugin.stats()["unreadable"] == 0


_redis_prefixes = itertools.count()


@SLOW_IO
@given(
    data=st.data(),
    keys_a=st.lists(key_text, min_size=1, max_size=3),
    keys_b=st.lists(key_text, min_size=1, max_size=3),
)
def test_redis_list_never_shows_another_identitys_keys(
    redis_url: str, data: st.DataObject, keys_a: list[str], keys_b: list[str]
) -> None:
    """The same isolation on a real redis-server, whose SCAN MATCH does the glob matching."""
    ident_a, ident_b = data.draw(_two_identities("user"))
    prefix = f"prop{next(_redis_prefixes)}[*]:"
    store = RedisStore.from_url(redis_url)
    try:
        with RememberPlugin.init(
            store=store, key_prefix=prefix, skip_legacy_purge=True, encryption={"enabled": False}
        ) as plugin:
            mem_a, mem_b = plugin.accessor(ident_a), plugin.accessor(ident_b)
            for k in keys_a:
                mem_a.set(k, "a", scope="user")
            for k in keys_b:
                mem_b.set(k, "b", scope="user")
            if ident_a.user_id != ident_b.user_id:
                assert mem_a.list(scope="user") == sorted(set(keys_a))
                assert mem_b.list(scope="user") == sorted(set(keys_b))
            # SCAN itself (no post-filter) must not return B's keys for A's glob.
            ns_a = resolve_namespace(ident_a, "user")
            head_a = scope_prefix(prefix, ns_a)
            for full in store.scan(scope_glob(prefix, ns_a, "*")):
                assert full.startswith(head_a)
    finally:
        leftovers = list(store.scan(glob_escape(prefix) + "*"))
        if leftovers:
            store.delete(*leftovers)
        store.close()


def test_question_mark_matches_one_character_on_redis(redis_url: str) -> None:
    """list(pattern='caf?') finds 'café' on Redis as it does on the memory store."""
    store = RedisStore.from_url(redis_url)
    try:
        with RememberPlugin.init(
            store=store, key_prefix="qmark:", skip_legacy_purge=True, encryption={"enabled": False}
        ) as plugin:
            mem = plugin.accessor(Identity(user_id="u"))
            mem.set("café", 1, scope="user")
            mem.set("cafe", 2, scope="user")
            try:
                assert mem.list(scope="user", pattern="caf?") == ["cafe", "café"]
            finally:
                mem.forget("café", scope="user")
                mem.forget("cafe", scope="user")
    finally:
        store.close()


# -- parsers never raise anything but our errors

_KEYRING = Keyring(["property-test-secret-0123456789abcdef"], source="explicit")
_NS = Namespace("user", user="alice")
_SKEY = storage_key("remember:", _NS, "k")


def _b64_field() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.binary(max_size=40).map(b64url_encode),
        st.sampled_from([b64url_encode(b"\0" * 12), b64url_encode(b"\0" * 16)]),
        st.text(max_size=30),
        st.integers(),
        st.none(),
        st.lists(st.integers(), max_size=2),
    )


near_envelopes = st.fixed_dictionaries(
    {},
    optional={
        "alg": st.sampled_from(["A256GCM", "a256gcm", "none", ""]) | st.integers(),
        "iv": _b64_field(),
        "tag": _b64_field(),
        "data": _b64_field(),
        "kid": st.one_of(
            st.text(max_size=10), st.integers(), st.none(), st.just(_KEYRING.primary_kid)
        ),
        "aad": st.sampled_from(["key", "none", "", None, 1]),
    },
).map(lambda d: json.dumps(d, ensure_ascii=False))


_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_b64ish = st.text(st.sampled_from(_B64URL), max_size=40)


@st.composite
def canonical_envelopes(draw: st.DrawFn) -> str:
    """Strings in exactly the compact form seal() writes, with arbitrary base64url field text.

    Parsers may take a fast path for this exact shape; it must be as strict as the JSON one.
    """
    kid = draw(st.none() | st.just(_KEYRING.primary_kid) | _b64ish)
    head = '{"alg":"A256GCM",'
    if kid is not None:
        head += f'"kid":"{kid}",'
    if draw(st.booleans()):
        head += '"aad":"key",'
    iv = draw(_b64ish | st.just(b64url_encode(b"\1" * 12)))
    tag = draw(_b64ish | st.just(b64url_encode(b"\2" * 16)))
    return f'{head}"iv":"{iv}","tag":"{tag}","data":"{draw(_b64ish)}"}}'


def _only_our_errors(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except RememberDecryptionError:
        pass


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(),
        near_envelopes,
        canonical_envelopes(),
        st.binary().map(lambda b: b.decode("latin-1")),
    )
)
@example(text="[" * 100_000)
@example(text='{"alg":"A256GCM","iv":"","tag":"","data":""}')
@example(text='{"alg":"A256GCM","iv":"A","tag":"","data":""}')
@example(text='{"alg":"A256GCM","iv":"AAAAAAAAAAAAAAAAAAAA","tag":"AAAAAAAAAAAAAAAAAA","data":""}')
@example(
    text='{"alg":"A256GCM","iv":"AAAAAAAAAAAAAAAA","tag":"AAAAAAAAAAAAAAAAAAAAAA","data":"+/"}'
)
def test_envelope_parser_raises_only_decryption_errors(text: str) -> None:
    """parse_envelope and EntryCodec.decode raise only RememberDecryptionError on any string."""
    _only_our_errors(parse_envelope, text)
    for bind in (True, False):
        codec = EntryCodec(_KEYRING, prefix="remember:", bind_key=bind)
        _only_our_errors(codec.decode, text, _NS, _SKEY)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), st.binary().map(lambda b: b.decode("latin-1"))))
@example(text="{" * 100_000)
@example(text='{"value":1}')
def test_plaintext_entry_parser_raises_only_decryption_errors(text: str) -> None:
    """With encryption off, decoding any string raises only RememberDecryptionError."""
    codec = EntryCodec(None, prefix="remember:")
    _only_our_errors(codec.decode, text, _NS, _SKEY)


_number_like = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=1),
)
near_entries = st.fixed_dictionaries(
    {"value": json_scalars},
    optional={
        "brand": st.one_of(st.sampled_from(["cache", "x"]), st.integers(), st.none()),
        "createdAt": _number_like,
        "updatedAt": _number_like,
        "expiresAt": _number_like,
        "metadata": st.one_of(st.dictionaries(st.text(max_size=3), st.integers()), st.integers()),
    },
).map(lambda d: json.dumps(d, allow_nan=True))


@settings(max_examples=200, deadline=None)
@given(text=near_entries)
@example(text='{"value":1,"createdAt":1e400,"updatedAt":1}')
@example(text='{"value":1,"createdAt":1,"updatedAt":1,"expiresAt":-Infinity}')
def test_near_entries_raise_only_decryption_errors(text: str) -> None:
    """Entry JSON with wrong-typed or non-finite times is unreadable (RememberDecryptionError)."""
    _only_our_errors(entry_from_json, text)


def test_non_finite_time_in_a_stored_entry_reads_as_unreadable() -> None:
    """get() of an entry whose createdAt is 1e400 returns the default and counts it unreadable."""
    store = MemoryStore()
    with RememberPlugin.init(
        store=store, skip_legacy_purge=True, encryption={"enabled": False}
    ) as plugin:
        mem = plugin.accessor(Identity(user_id="u"))
        store.set(
            storage_key("remember:", Namespace("user", user="u"), "k"),
            '{"value":1,"createdAt":1e400,"updatedAt":1}',
        )
        assert mem.get("k", scope="user", default="gone") == "gone"
        assert plugin.stats()["unreadable"] == 1


# -- JSON values round-trip

_round_trip_keys = itertools.count()


@pytest.fixture(scope="module")
def round_trip_plugins(redis_url: str, kv_emulator: Any) -> Iterator[dict[str, RememberPlugin]]:
    """One encrypted plugin per store kind (memory, Redis, Vercel KV emulator), for all examples."""
    from remember_sync.stores.vercel_kv import VercelKVStore
    from tests.fixtures_kv import KV_TEST_TOKEN

    secret = {"secrets": ["round-trip-secret-0123456789abcdef"]}
    plugins = {
        "memory": RememberPlugin.init(skip_legacy_purge=True, encryption=secret),
        "redis": RememberPlugin.init(
            store=RedisStore.from_url(redis_url),
            key_prefix="rt:",
            skip_legacy_purge=True,
            encryption=secret,
        ),
        "vercel_kv": RememberPlugin.init(
            store=VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, environ={}),
            key_prefix="rt:",
            skip_legacy_purge=True,
            encryption=secret,
        ),
    }
    yield plugins
    for plugin in plugins.values():
        for key in list(plugin.store.scan("rt:*")):
            plugin.store.delete(key)
        plugin.close()
        plugin.store.close()


def _round_trip(plugin: RememberPlugin, value: Any, metadata: dict[str, Any]) -> None:
    mem = plugin.accessor(Identity("s-rt", "u-rt", "t-rt"))
    key = f"v{next(_round_trip_keys)}"
    mem.set(key, value, scope="user", metadata=metadata, brand="state")
    entry = mem.get_entry(key, scope="user")
    assert entry is not None
    assert same_json(entry.value, value), (entry.value, value)
    assert same_json(entry.metadata, metadata)
    assert mem.update(key, [value], scope="user")
    assert same_json(mem.get(key, scope="user"), [value])
    mem.forget(key, scope="user")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, metadata=st.dictionaries(st.text(max_size=5), json_values, max_size=3))
@example(value=-0.0, metadata={})
@example(value=[True, 1, 1.0, "1", None], metadata={"": None})
@example(value='\x00\u2028\ufeff😀\r\n"\\', metadata={"\x00": "\x7f"})
@example(value=2**70, metadata={})
@example(value=5e-324, metadata={})
def test_every_json_value_round_trips_in_memory(
    round_trip_plugins: dict[str, RememberPlugin], value: Any, metadata: dict[str, Any]
) -> None:
    """set/get/update return every JSON value (and metadata) exactly, types included (memory)."""
    _round_trip(round_trip_plugins["memory"], value, metadata)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, metadata=st.dictionaries(st.text(max_size=5), json_values, max_size=2))
@example(value='\x00\u2028\ufeff😀\r\n"\\', metadata={"\x00": "\x7f"})
@example(value=[True, 1, 1.0, "1", None, -0.0, 2**70], metadata={})
@pytest.mark.parametrize("kind", ["redis", "vercel_kv"])
def test_every_json_value_round_trips_on_remote_stores(
    round_trip_plugins: dict[str, RememberPlugin], kind: str, value: Any, metadata: dict[str, Any]
) -> None:
    """The same exact round trip through real Redis and the Vercel KV (Upstash REST) emulator."""
    _round_trip(round_trip_plugins[kind], value, metadata)


def test_lone_surrogate_value_is_refused_with_our_error() -> None:
    """A value that is not valid Unicode text is refused with RememberInputTypeError."""
    with RememberPlugin.init(skip_legacy_purge=True, encryption={"enabled": False}) as plugin:
        mem = plugin.accessor(Identity(user_id="u"))
        with pytest.raises(RememberError):
            mem.set("k", "\ud800", scope="user")
        assert not mem.knows("k", scope="user")


def test_deeply_nested_value_is_refused_with_our_error() -> None:
    """A value nested deeper than JSON encoding can handle is refused with a RememberError."""
    deep: list[Any] = []
    for _ in range(max(5000, 2 * sys.getrecursionlimit())):
        deep = [deep]
    with RememberPlugin.init(skip_legacy_purge=True, encryption={"enabled": False}) as plugin:
        mem = plugin.accessor(Identity(user_id="u"))
        with pytest.raises((RememberInputError, RememberInputTypeError)):
            mem.set("k", deep, scope="user")
