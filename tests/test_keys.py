"""Storage keys (SPEC section 3), encodeURIComponent and pattern escaping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remember_sync._keys import (
    check_key,
    check_pattern,
    encode_component,
    glob_escape,
    layout_marker_key,
    legacy_patterns,
    match_user_pattern,
    parse_storage_key,
    scope_glob,
    storage_key,
)
from remember_sync.errors import RememberInputError
from remember_sync.identity import resolve_namespace
from remember_sync.stores import glob_matcher
from remember_sync.types import Identity, Namespace
from tests.test_glob_linear import (
    HOSTILE_KEYS,
    HOSTILE_PATTERNS,
    MATCH_BUDGET_S,
    _cpu_seconds,
    reference_user_match,
)
from tests.vectors import VECTORS, vector_identity, vector_tool_name


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_every_vector_storage_key_is_rebuilt(vector: dict) -> None:
    """The key builder reproduces each 1.8.0 vector's storageKey and rawRedisKey."""
    ident = vector_identity(vector)
    tool = vector_tool_name(vector)
    if tool is not None:
        ident = ident.with_tool(tool)
    ns = _namespace_as_1_8_0(ident, vector["scope"])
    built = storage_key(vector["keyPrefix"], ns, vector["key"])
    assert built == vector["storageKey"]
    assert vector["storeKeyPrefix"] + built == vector["rawRedisKey"]


def _namespace_as_1_8_0(ident: Identity, scope: str) -> Namespace:
    """1.8.0 accepted anon: users and the 'unknown' tool; we build keys from the parts directly."""
    if scope == "global":
        return Namespace("global")
    if scope == "user":
        return Namespace("user", user=ident.user_id)
    session = ident.session_id or f"stateless-user:{ident.user_id}"
    if scope == "session":
        return Namespace("session", session=session)
    return Namespace("tool", session=session, tool=ident.tool_name)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vectors_through_the_scope_rules(vector: dict) -> None:
    """Our identity rules give the vector's key, except where SPEC section 2 refuses."""
    ident = vector_identity(vector)
    if vector["name"] == "user-anon-clientid-accepted":
        with pytest.raises(Exception) as info:
            resolve_namespace(ident, "user")
        assert getattr(info.value, "code", None) == "REMEMBER_IDENTITY_REQUIRED"
        return
    if vector["name"] == "tool-no-flow-defaults-unknown":
        with pytest.raises(Exception) as info:
            resolve_namespace(ident, "tool")
        assert getattr(info.value, "code", None) == "REMEMBER_IDENTITY_REQUIRED"
        return
    ns = resolve_namespace(ident, vector["scope"])
    assert storage_key(vector["keyPrefix"], ns, vector["key"]) == vector["storageKey"]


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("alice", "alice"),
        ("a:b/c d?\u00e9*", "a%3Ab%2Fc%20d%3F%C3%A9*"),
        ("carol@example.com", "carol%40example.com"),
        ("-_.!~*'()", "-_.!~*'()"),
        ("[x]\\%#&=+,;$", "%5Bx%5D%5C%25%23%26%3D%2B%2C%3B%24"),
        ("\U0001f389", "%F0%9F%8E%89"),
    ],
)
def test_encode_component_matches_javascript(text: str, encoded: str) -> None:
    """encode_component is encodeURIComponent (upper-case hex, JS's unreserved set)."""
    assert encode_component(text) == encoded


def test_encode_component_refuses_lone_surrogate() -> None:
    """A lone surrogate is refused, as JavaScript throws URIError."""
    with pytest.raises(ValueError):
        encode_component("a\ud800")


@pytest.mark.parametrize(
    ("ns", "key", "expected"),
    [
        (Namespace("session", session="s-1"), "k", "remember:v2:session:s-1:k"),
        (Namespace("user", user="a:b"), "x:y", "remember:v2:user:a%3Ab:x:y"),
        (Namespace("tool", session="s:1", tool="t/1"), "c", "remember:v2:tool:t%2F1:s%3A1:c"),
        (Namespace("global"), "g:1", "remember:global:g:1"),
    ],
)
def test_key_shapes(ns: Namespace, key: str, expected: str) -> None:
    """Each scope's key shape: v2 for session/user/tool, raw user key, unversioned global."""
    assert storage_key("remember:", ns, key) == expected


def test_layout_marker_and_legacy_patterns() -> None:
    """The marker is P + __layout__; legacy globs never reach v2:, global: or the marker."""
    assert layout_marker_key("remember:") == "remember:__layout__"
    patterns = legacy_patterns("my[app]:")
    assert patterns == ("my\\[app\\]:session:*", "my\\[app\\]:tool:*", "my\\[app\\]:user:*")
    for pattern in legacy_patterns("remember:"):
        matches = glob_matcher(pattern)
        assert not matches("remember:v2:session:s:k")
        assert not matches("remember:global:session:x")
        assert not matches("remember:__layout__")
    assert glob_matcher(legacy_patterns("remember:")[0])("remember:session:s:k")


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 1025, "\u00e9" * 513, 5, None, b"k"])
def test_check_key_refuses(bad: object) -> None:
    """Keys must be non-empty str, at most 1,024 UTF-8 bytes, without NUL."""
    with pytest.raises(ValueError):
        check_key(bad)


def test_check_key_accepts_limit() -> None:
    """Exactly 1,024 UTF-8 bytes is allowed."""
    assert check_key("\u00e9" * 512) == "\u00e9" * 512


def test_check_pattern_limits() -> None:
    """Patterns: at most 500 characters and 20 wildcards, with the reference's messages."""
    assert check_pattern("a" * 500)
    with pytest.raises(RememberInputError, match="Pattern too long: 501 chars"):
        check_pattern("a" * 501)
    with pytest.raises(RememberInputError, match="Too many wildcards in pattern: 21"):
        check_pattern("*?" * 10 + "*")
    with pytest.raises(ValueError):
        check_pattern(3)


@pytest.mark.parametrize("evil", ["ali*", "ali?", "[a-z]*", "a\\", "*", "?"])
def test_identity_glob_specials_never_match_other_identities(evil: str) -> None:
    """An identity with glob characters lists only its own keys."""
    matches = glob_matcher(scope_glob("remember:", Namespace("user", user=evil), "*"))
    own = storage_key("remember:", Namespace("user", user=evil), "mine")
    assert matches(own)
    for other in ["alice", "alicex", "ali", "b", "a", "aa", "zz"]:
        assert not matches(storage_key("remember:", Namespace("user", user=other), "k"))


def test_user_pattern_only_star_and_question_are_wildcards() -> None:
    """In list patterns `[`, `]` and `\\` are literal on every store."""
    ns = Namespace("session", session="s")
    matches = glob_matcher(scope_glob("remember:", ns, "[a]*"))
    assert matches("remember:v2:session:s:[a]x")
    assert not matches("remember:v2:session:s:ax")
    assert match_user_pattern("user_*", "user_theme")
    assert match_user_pattern("a?c", "abc")
    assert not match_user_pattern("[a]", "a")
    assert match_user_pattern("[a]", "[a]")


def test_glob_escape() -> None:
    """glob_escape backslash-escapes * ? [ ] and backslash."""
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"


@pytest.mark.parametrize(
    "ns",
    [
        Namespace("session", session="stateless-user:carol@example.com"),
        Namespace("user", user="a:b/c d?\u00e9*"),
        Namespace("tool", session="s:1", tool="search:web"),
        Namespace("global"),
    ],
)
def test_parse_storage_key_round_trips(ns: Namespace) -> None:
    """Operators' tools recover namespace and key from any storage key we write."""
    full = storage_key("remember:", ns, "x:y/\u00fc")
    parsed = parse_storage_key("remember:", full)
    assert parsed is not None
    assert parsed.namespace == ns
    assert parsed.key == "x:y/\u00fc"


@pytest.mark.parametrize(
    "full",
    ["remember:session:s:k", "remember:__layout__", "other:v2:user:a:k", "remember:v2:user:a"],
)
def test_parse_storage_key_refuses_foreign_keys(full: str) -> None:
    """Legacy keys, the marker, other prefixes and truncated keys are not ours."""
    assert parse_storage_key("remember:", full) is None


# -- the pattern matchers in linear time (the hostile inputs of test_glob_linear) ---------------


def test_the_hostile_patterns_are_legal() -> None:
    """A hostile pattern the library would refuse proves nothing: each passes check_pattern."""
    for pattern in HOSTILE_PATTERNS.values():
        assert check_pattern(pattern) == pattern


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pattern", HOSTILE_PATTERNS.values(), ids=HOSTILE_PATTERNS.keys())
def test_worst_user_patterns_match_1024_byte_keys_in_linear_time(pattern: str) -> None:
    """match_user_pattern spends well under 50 ms on any legal pattern and 1,024-byte key."""
    for key in HOSTILE_KEYS:
        spent, matched = _cpu_seconds(lambda: match_user_pattern(pattern, key))  # noqa: B023
        assert spent < MATCH_BUDGET_S, (pattern, key[:8], spent)
        assert matched == reference_user_match(pattern, key), (pattern, key[:8])


@settings(max_examples=1000, deadline=None)
@given(
    pattern=st.text(alphabet="ab*?[]\\\u00e9", max_size=12),
    text=st.text(alphabet="ab[]\\*?\u00e9", max_size=12),
)
def test_user_patterns_agree_with_the_textbook_match(pattern: str, text: str) -> None:
    """In user patterns only `*` and `?` are wildcards; `[`, `]`, `\\` are literal."""
    assert match_user_pattern(pattern, text) is reference_user_match(pattern, text)


def _server_wildcards(glob: str) -> int:
    """Unescaped ``*``, ``?`` and ``[`` in a Redis glob: what a server's matcher branches on."""
    count, escaped = 0, False
    for c in glob:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in "*?[":
            count += 1
    return count


@settings(max_examples=500, deadline=None)
@given(
    pattern=st.text(alphabet="ab*?[]\\:", max_size=20),
    key=st.text(alphabet="ab*?[]\\:", min_size=1, max_size=12),
    session=st.text(alphabet="s*?[]\\", min_size=1, max_size=4),
)
def test_servers_get_one_star_and_a_superset_of_the_pattern(
    pattern: str, key: str, session: str
) -> None:
    """scope_glob sends a server at most one `*` (no Redis can backtrack on it) and loses no key."""
    ns = Namespace("session", session=session)
    glob = scope_glob("remember[*]:", ns, pattern)
    assert _server_wildcards(glob) <= 1, glob
    if match_user_pattern(pattern, key):
        assert glob_matcher(glob)(storage_key("remember[*]:", ns, key)), glob
