"""The four memory tools (SPEC section 8.1): definitions, validation, dispatch, results."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from remember_sync import Identity, RememberPlugin, identity
from remember_sync.errors import (
    RememberConfigurationError,
    RememberInputError,
    RememberStoreError,
)
from remember_sync.stores.memory import MemoryStore
from remember_sync.tools import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    MAX_NESTING,
    error_parts,
    error_result,
    validate_arguments,
)
from tests.conftest import STORE_KINDS, TEST_SECRET, FakeClock

SESSION = Identity(session_id="s-1", user_id="alice")
OTHER_SESSION = Identity(session_id="s-2", user_id="alice")
ANONYMOUS = Identity()
NAMES = ("remember_this", "recall", "forget", "list_memories", "search_memories")

Factory = Callable[..., RememberPlugin]


@pytest.fixture(params=["memory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Most tool tests need one store; the round trip below runs on every kind."""
    return str(request.param)


@pytest.fixture
def tools_plugin(make_plugin: Factory) -> RememberPlugin:
    return make_plugin(tools={"enabled": True})


def call(plugin: RememberPlugin, name: str, args: Any, who: Identity = SESSION) -> dict[str, Any]:
    result = plugin.call_tool(name, args, identity=who)
    assert set(result) <= {"content", "structuredContent", "isError"}
    assert result["content"][0]["type"] == "text"
    return result


def ok(plugin: RememberPlugin, name: str, args: Any, who: Identity = SESSION) -> dict[str, Any]:
    result = call(plugin, name, args, who)
    assert result["isError"] is False, result
    structured: dict[str, Any] = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) == structured
    return structured


def fails(plugin: RememberPlugin, name: str, args: Any, who: Identity = SESSION) -> tuple[str, str]:
    result = call(plugin, name, args, who)
    assert result["isError"] is True, result
    # No structuredContent: it would have to match the tool's outputSchema.
    assert set(result) == {"content", "isError"} and len(result["content"]) == 1
    code, message = error_parts(result)
    assert result["content"][0]["text"] == f"{code}: {message}"
    assert "Traceback" not in message
    return code, message


def definition(plugin: RememberPlugin, name: str) -> dict[str, Any]:
    (found,) = [d for d in plugin.tool_definitions() if d["name"] == name]
    return found


# -- definitions ---------------------------------------------------------------------------


def test_disabled_tools_have_no_definitions(make_plugin: Factory) -> None:
    """tools.enabled=False (the default) lists no tool and answers calls as unknown."""
    plugin = make_plugin()
    assert plugin.tool_definitions() == []
    code, message = fails(plugin, "recall", {"key": "k"})
    assert code == "REMEMBER_UNKNOWN_TOOL" and "not enabled" in message


@pytest.mark.parametrize("prefix", ["", "memory_"])
def test_four_tools_named_with_the_prefix(make_plugin: Factory, prefix: str) -> None:
    """The tools are <prefix>remember_this, recall, forget, list_memories, with full definitions."""
    plugin = make_plugin(tools={"enabled": True, "prefix": prefix})
    definitions = plugin.tool_definitions()
    assert [d["name"] for d in definitions] == [prefix + n for n in NAMES]
    for d in definitions:
        assert {"name", "description", "inputSchema", "outputSchema", "annotations"} <= set(d)
        jsonschema.Draft202012Validator.check_schema(d["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(d["outputSchema"])
        assert d["inputSchema"]["type"] == "object"
        assert d["inputSchema"]["additionalProperties"] is False
        assert {"readOnlyHint", "destructiveHint"} <= set(d["annotations"])


def test_annotations_mark_readers_and_forget_as_destructive(tools_plugin: RememberPlugin) -> None:
    """recall/list_memories/search_memories are read-only; forget is destructive;
    remember_this is neither."""
    hints = {
        d["name"]: (d["annotations"]["readOnlyHint"], d["annotations"]["destructiveHint"])
        for d in tools_plugin.tool_definitions()
    }
    assert hints == {
        "remember_this": (False, False),
        "recall": (True, False),
        "forget": (False, True),
        "list_memories": (True, False),
        "search_memories": (True, False),
    }


def test_descriptions_name_the_prefixed_siblings(make_plugin: Factory) -> None:
    """Each tool's description names the others by their prefixed names."""
    plugin = make_plugin(tools={"enabled": True, "prefix": "mem_"})
    for d in plugin.tool_definitions():
        others = [f"mem_{n}" for n in NAMES if f"mem_{n}" != d["name"]]
        for other in others:
            assert f"`{other}`" in d["description"], (d["name"], other)


def test_input_schemas_match_the_spec(tools_plugin: RememberPlugin) -> None:
    """Inputs: key min 1, value required, ttl positive int, brand enum, metadata object, limit."""
    remember = definition(tools_plugin, "remember_this")["inputSchema"]
    props = remember["properties"]
    assert remember["required"] == ["key", "value"]
    assert set(props) == {"key", "value", "scope", "ttl", "brand", "metadata"}
    assert props["key"]["minLength"] == 1 and props["key"]["type"] == "string"
    # Any JSON value, null included, with a type list for strict schema consumers.
    assert props["value"]["type"] == [
        "string", "number", "integer", "boolean", "object", "array", "null"
    ]
    assert props["ttl"] == {**props["ttl"], "type": "integer", "minimum": 1}
    assert props["brand"]["enum"] == ["preference", "cache", "state", "conversation", "custom"]
    assert props["metadata"]["type"] == "object"
    assert definition(tools_plugin, "recall")["inputSchema"]["required"] == ["key"]
    assert definition(tools_plugin, "forget")["inputSchema"]["required"] == ["key"]
    listing = definition(tools_plugin, "list_memories")["inputSchema"]
    assert listing["required"] == []
    assert listing["properties"]["limit"] == {
        **listing["properties"]["limit"],
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_LIST_LIMIT,
        "default": DEFAULT_LIST_LIMIT,
    }
    assert listing["properties"]["pattern"]["type"] == "string"


def test_scope_schema_lists_only_allowed_scopes(make_plugin: Factory) -> None:
    """The scope enum and its one shared description name only the allowed scopes."""
    default = make_plugin(tools={"enabled": True})
    scope = definition(default, "recall")["inputSchema"]["properties"]["scope"]
    assert scope["enum"] == ["session", "user", "tool"] and scope["default"] == "session"
    assert "global" not in scope["description"]
    restricted = make_plugin(tools={"enabled": True, "allowed_scopes": ["user", "global"]})
    scope = definition(restricted, "recall")["inputSchema"]["properties"]["scope"]
    assert scope["enum"] == ["user", "global"] and "default" not in scope
    text = scope["description"]
    assert "user: the signed-in caller" in text and "global: shared by every caller" in text
    assert "session:" not in text and "tool:" not in text
    assert "always pass one of: user, global" in text
    for d in restricted.tool_definitions():
        if d["name"] == "search_memories":  # the shared text, after what searching does
            searched = d["inputSchema"]["properties"]["scope"]
            assert searched["description"].endswith(scope["description"])
            assert searched["enum"] == scope["enum"] and "default" not in searched
            continue
        assert d["inputSchema"]["properties"]["scope"] == scope  # one shared description


def test_scope_description_avoids_false_lifetimes(make_plugin: Factory) -> None:
    """No "until disconnect" and no "forever": entries last until forgotten or their ttl ends."""
    plugin = make_plugin(tools={"enabled": True, "prefix": "m_", "allowed_scopes": list(
        ("session", "user", "tool", "global"))})
    text = definition(plugin, "m_recall")["inputSchema"]["properties"]["scope"]["description"]
    assert "disconnect" not in text and "forever" not in text
    assert "until they are forgotten or their ttl runs out" in text
    assert "`m_recall` does not see what `m_remember_this` stored in tool scope" in text


def test_definitions_are_copies(tools_plugin: RememberPlugin) -> None:
    """Mutating a returned definition does not change what the next caller gets."""
    tools_plugin.tool_definitions()[0]["name"] = "changed"
    assert tools_plugin.tool_definitions()[0]["name"] == "remember_this"


# -- results ------------------------------------------------------------------------------


@pytest.mark.parametrize("store_kind", STORE_KINDS, indirect=True)
def test_round_trip_results_match_output_schemas(tools_plugin: RememberPlugin) -> None:
    """remember_this/recall/list_memories/forget return SPEC 8.1 outputs that fit their schemas."""
    schemas = {d["name"]: d["outputSchema"] for d in tools_plugin.tool_definitions()}
    results = [
        ("remember_this", ok(tools_plugin, "remember_this", {"key": "k", "value": {"a": [1]}})),
        ("recall", ok(tools_plugin, "recall", {"key": "k"})),
        ("list_memories", ok(tools_plugin, "list_memories", {})),
        ("forget", ok(tools_plugin, "forget", {"key": "k"})),
        ("recall", ok(tools_plugin, "recall", {"key": "k"})),
    ]
    for name, structured in results:
        jsonschema.validate(structured, schemas[name])
    assert results[0][1] == {"success": True, "key": "k", "scope": "session"}
    assert results[1][1] == {
        "found": True,
        "key": "k",
        "value": {"a": [1]},
        "scope": "session",
        "createdAt": results[1][1]["createdAt"],
    }
    assert results[2][1] == {"keys": ["k"], "scope": "session", "count": 1, "truncated": False}
    assert results[3][1] == {"success": True, "key": "k", "scope": "session", "existed": True}
    assert results[4][1] == {"found": False, "key": "k", "scope": "session"}


def test_recall_reports_created_at_and_deadline(
    tools_plugin: RememberPlugin, clock: FakeClock
) -> None:
    """recall gives createdAt and expiresAt of the stored entry (epoch ms)."""
    ok(tools_plugin, "remember_this", {"key": "k", "value": "v", "ttl": 30})
    created = clock.now
    clock.advance(s=10)
    found = ok(tools_plugin, "recall", {"key": "k"})
    assert found["createdAt"] == created and found["expiresAt"] == created + 30_000
    clock.advance(s=20)
    assert ok(tools_plugin, "recall", {"key": "k"})["found"] is False


def test_expires_at_is_the_stored_deadline_with_default_ttl(
    make_plugin: Factory, clock: FakeClock
) -> None:
    """remember_this's expiresAt equals the stored entry's deadline, default_ttl included."""
    plugin = make_plugin(tools={"enabled": True}, default_ttl=3600)
    out = ok(plugin, "remember_this", {"key": "k", "value": 1})
    entry = plugin.accessor(SESSION).get_entry("k")
    assert entry is not None and entry.expires_at == clock.now + 3_600_000
    assert out["expiresAt"] == entry.expires_at
    out = ok(plugin, "remember_this", {"key": "j", "value": 1, "ttl": 5})
    assert out["expiresAt"] == clock.now + 5_000


def test_no_expires_at_without_a_ttl(tools_plugin: RememberPlugin) -> None:
    """Without ttl and default_ttl the entry never expires and no expiresAt is reported."""
    assert "expiresAt" not in ok(tools_plugin, "remember_this", {"key": "k", "value": 1})
    assert "expiresAt" not in ok(tools_plugin, "recall", {"key": "k"})


def test_remember_this_stores_brand_metadata_and_null(tools_plugin: RememberPlugin) -> None:
    """brand and metadata reach the entry; a null value is stored and recalled as null."""
    ok(tools_plugin, "remember_this",
       {"key": "k", "value": None, "brand": "preference", "metadata": {"src": "chat"}})
    entry = tools_plugin.accessor(SESSION).get_entry("k")
    assert entry is not None
    assert (entry.value, entry.brand, entry.metadata) == (None, "preference", {"src": "chat"})
    found = ok(tools_plugin, "recall", {"key": "k"})
    assert found["found"] is True and found["value"] is None


def test_forget_reports_whether_something_existed(tools_plugin: RememberPlugin) -> None:
    """forget returns existed=true once, then existed=false."""
    ok(tools_plugin, "remember_this", {"key": "k", "value": 1})
    assert ok(tools_plugin, "forget", {"key": "k"})["existed"] is True
    assert ok(tools_plugin, "forget", {"key": "k"})["existed"] is False


def test_list_memories_limits_filters_and_truncates(tools_plugin: RememberPlugin) -> None:
    """list_memories: sorted keys, pattern filter, limit (default 50), count and truncated."""
    mem = tools_plugin.accessor(SESSION)
    for i in range(60):
        mem.set(f"note_{i:02d}", i)
    mem.set("other", 1)
    out = ok(tools_plugin, "list_memories", {})
    assert out["count"] == 50 and out["truncated"] is True
    assert out["keys"] == sorted(out["keys"]) and len(out["keys"]) == 50
    out = ok(tools_plugin, "list_memories", {"pattern": "note_5?", "limit": 3})
    assert out == {"keys": ["note_50", "note_51", "note_52"], "scope": "session", "count": 3,
                   "truncated": True}
    out = ok(tools_plugin, "list_memories", {"pattern": "oth*", "limit": 100})
    assert out == {"keys": ["other"], "scope": "session", "count": 1, "truncated": False}


def test_sessions_are_separate(tools_plugin: RememberPlugin) -> None:
    """A value remembered in one session is not recalled from another."""
    ok(tools_plugin, "remember_this", {"key": "k", "value": 1}, SESSION)
    assert ok(tools_plugin, "recall", {"key": "k"}, OTHER_SESSION)["found"] is False
    assert ok(tools_plugin, "recall", {"key": "k", "scope": "user"}, OTHER_SESSION)[
        "found"
    ] is False


def test_user_scope_is_shared_across_sessions(tools_plugin: RememberPlugin) -> None:
    """User scope follows the user across sessions."""
    ok(tools_plugin, "remember_this", {"key": "k", "value": 1, "scope": "user"}, SESSION)
    assert ok(tools_plugin, "recall", {"key": "k", "scope": "user"}, OTHER_SESSION)["value"] == 1


def test_tool_scope_is_keyed_by_the_running_tool(make_plugin: Factory) -> None:
    """recall in tool scope does not see remember_this's tool-scope value (each has its own)."""
    plugin = make_plugin(tools={"enabled": True, "prefix": "m_"})
    ok(plugin, "m_remember_this", {"key": "k", "value": 1, "scope": "tool"})
    assert ok(plugin, "m_recall", {"key": "k", "scope": "tool"})["found"] is False
    assert ok(plugin, "m_list_memories", {"scope": "tool"})["keys"] == []
    # It was stored under the full name of the tool that ran the call.
    stored = plugin.accessor(SESSION.with_tool("m_remember_this")).get("k", scope="tool")
    assert stored == 1
    assert ok(plugin, "m_forget", {"key": "k", "scope": "tool"})["existed"] is False


def test_identity_defaults_to_the_bound_one(tools_plugin: RememberPlugin) -> None:
    """Without identity=, call_tool acts for the identity bound in the context."""
    with identity(session_id="bound"):
        ok(tools_plugin, "remember_this", {"key": "k", "value": 7}, who=None)  # type: ignore[arg-type]
        assert tools_plugin.call_tool("recall", {"key": "k"})["structuredContent"]["value"] == 7
    assert tools_plugin.accessor(Identity("bound")).get("k") == 7


# -- errors -------------------------------------------------------------------------------


INVALID = [
    ("remember_this", {"value": 1}, "missing required argument 'key'"),
    ("remember_this", {"key": "", "value": 1}, "argument 'key' must not be empty"),
    ("remember_this", {"key": 5, "value": 1}, "argument 'key' must be a string; got integer"),
    ("remember_this", {"key": "k"}, "missing required argument 'value'"),
    ("remember_this", {"key": "k", "value": 1, "ttl": 0}, "argument 'ttl' must be >= 1; got 0"),
    ("remember_this", {"key": "k", "value": 1, "ttl": -5}, "argument 'ttl' must be >= 1"),
    ("remember_this", {"key": "k", "value": 1, "ttl": 1.5},
     "argument 'ttl' must be an integer; got number"),
    ("remember_this", {"key": "k", "value": 1, "ttl": "60"},
     "argument 'ttl' must be an integer; got string"),
    ("remember_this", {"key": "k", "value": 1, "ttl": True},
     "argument 'ttl' must be an integer; got boolean"),
    ("remember_this", {"key": "k", "value": 1, "brand": "approval"},
     "argument 'brand' must be one of preference, cache, state, conversation, custom; "
     "got \"approval\""),
    ("remember_this", {"key": "k", "value": 1, "metadata": ["x"]},
     "argument 'metadata' must be an object; got array"),
    ("remember_this", {"key": "k", "value": 1, "color": "red"},
     "unknown argument 'color' (allowed: key, value, scope, ttl, brand, metadata)"),
    ("remember_this", {"key": "k", "value": 1, "scope": 3},
     "argument 'scope' must be a string; got integer"),
    ("remember_this", ["k", 1], "the arguments must be an object; got array"),
    ("recall", {}, "missing required argument 'key'"),
    ("recall", {"key": "k", "value": 1}, "unknown argument 'value' (allowed: key, scope)"),
    ("forget", {}, "missing required argument 'key'"),
    ("list_memories", {"limit": 0}, "argument 'limit' must be >= 1; got 0"),
    ("list_memories", {"limit": 101}, "argument 'limit' must be <= 100; got 101"),
    ("list_memories", {"limit": 10.0}, "argument 'limit' must be an integer; got number"),
    ("list_memories", {"pattern": 5}, "argument 'pattern' must be a string; got integer"),
    ("list_memories", {"pattern": "a" * 501}, "Pattern too long"),
    ("remember_this", {"key": "a\x00b", "value": 1}, "NUL"),
    ("remember_this", {"key": "x" * 1025, "value": 1}, "1024"),
]


@pytest.mark.parametrize(("tool", "args", "expected"), INVALID)
def test_invalid_arguments_are_clear_tool_errors(
    tools_plugin: RememberPlugin, tool: str, args: Any, expected: str
) -> None:
    """Every schema violation is REMEMBER_INVALID_INPUT naming the argument; nothing is written."""
    code, message = fails(tools_plugin, tool, args)
    assert code == "REMEMBER_INVALID_INPUT"
    assert expected.lower() in message.lower(), message
    assert list(tools_plugin.store.scan("*")) == []


def test_oversized_value_is_refused(make_plugin: Factory) -> None:
    """A value over max_value_bytes is an input error, not a crash."""
    plugin = make_plugin(tools={"enabled": True}, max_value_bytes=100)
    code, message = fails(plugin, "remember_this", {"key": "k", "value": "x" * 200})
    assert code == "REMEMBER_INVALID_INPUT" and "max_value_bytes" in message


def test_value_of_every_json_type_is_accepted_and_non_json_refused_as_before(
    tools_plugin: RememberPlugin,
) -> None:
    """The typed value schema admits every JSON type; NaN keeps check_json_value's message."""
    for value in ("s", 1.5, 7, True, {"a": [1]}, [None], None):
        ok(tools_plugin, "remember_this", {"key": "k", "value": value})
        assert ok(tools_plugin, "recall", {"key": "k"})["value"] == value
    code, message = fails(tools_plugin, "remember_this", {"key": "k", "value": float("nan")})
    assert code == "REMEMBER_INVALID_INPUT" and "float nan" in message, message


def test_nesting_beyond_the_bound_is_refused(tools_plugin: RememberPlugin) -> None:
    """A value or metadata nested past MAX_NESTING is REMEMBER_INVALID_INPUT; at it, stored."""
    def nested(depth: int) -> Any:
        return json.loads("[" * depth + "]" * depth)

    ok(tools_plugin, "remember_this", {"key": "k", "value": nested(MAX_NESTING)})
    assert ok(tools_plugin, "recall", {"key": "k"})["value"] == nested(MAX_NESTING)
    for args in (
        {"key": "k", "value": nested(MAX_NESTING + 1)},
        {"key": "k", "value": 1, "metadata": {"m": nested(MAX_NESTING)}},
    ):
        code, message = fails(tools_plugin, "remember_this", args)
        assert code == "REMEMBER_INVALID_INPUT" and f"{MAX_NESTING} levels" in message


def test_error_parts_reads_back_error_result() -> None:
    """error_parts splits "<CODE>: <message>" (the message may hold ': '); refuses successes."""
    assert error_parts(error_result("REMEMBER_X", "a: b")) == ("REMEMBER_X", "a: b")
    with pytest.raises(ValueError, match="not a tool error"):
        error_parts({"content": [{"type": "text", "text": "A: b"}], "isError": False})
    with pytest.raises(ValueError, match="not a tool error"):
        error_parts({"content": [], "isError": True})


def test_scope_outside_allowed_scopes_is_refused(tools_plugin: RememberPlugin) -> None:
    """global is opt-in: by default it is REMEMBER_SCOPE_NOT_ALLOWED with the allowed list."""
    code, message = fails(tools_plugin, "remember_this", {"key": "k", "value": 1,
                                                            "scope": "global"})
    assert code == "REMEMBER_SCOPE_NOT_ALLOWED"
    assert message == "Scope 'global' is not allowed. Allowed scopes: session, user, tool"
    code, message = fails(tools_plugin, "list_memories", {"scope": "forever"})
    assert message == "Scope 'forever' is not allowed. Allowed scopes: session, user, tool"
    assert list(tools_plugin.store.scan("*")) == []


def test_defaulted_session_scope_can_be_refused(make_plugin: Factory) -> None:
    """Omitting scope means session, which is refused when session is not allowed."""
    plugin = make_plugin(tools={"enabled": True, "allowed_scopes": ["user", "global"]})
    for tool, args in [("remember_this", {"key": "k", "value": 1}), ("recall", {"key": "k"}),
                       ("forget", {"key": "k"}), ("list_memories", {})]:
        code, message = fails(plugin, tool, args)
        assert code == "REMEMBER_SCOPE_NOT_ALLOWED", tool
        assert message == "Scope 'session' is not allowed. Allowed scopes: user, global"
    assert ok(plugin, "remember_this", {"key": "k", "value": 1, "scope": "global"}, ANONYMOUS)


@pytest.mark.parametrize("scope", ["session", "tool", "user"])
def test_anonymous_caller_without_session_gets_identity_required(
    tools_plugin: RememberPlugin, scope: str
) -> None:
    """An anonymous caller with no verified session is refused with REMEMBER_IDENTITY_REQUIRED."""
    code, message = fails(tools_plugin, "recall", {"key": "k", "scope": scope}, ANONYMOUS)
    assert code == "REMEMBER_IDENTITY_REQUIRED"
    assert "without a verified session" in message or "without an authenticated user" in message
    assert "No identity is bound" not in message  # call_tool binds the caller for the call


def test_signed_in_caller_without_session_uses_its_principal(tools_plugin: RememberPlugin) -> None:
    """No session but a principal: session scope falls back to that principal."""
    user = Identity(user_id="carol")
    ok(tools_plugin, "remember_this", {"key": "k", "value": 1}, user)
    assert ok(tools_plugin, "recall", {"key": "k"}, Identity(user_id="carol"))["value"] == 1
    assert ok(tools_plugin, "recall", {"key": "k"}, Identity(user_id="dave"))["found"] is False


@pytest.mark.parametrize("name", ["nope", "", None, 5])
def test_unknown_tool_is_an_error_result(tools_plugin: RememberPlugin, name: Any) -> None:
    """An unknown tool name is REMEMBER_UNKNOWN_TOOL listing the memory tools."""
    code, message = fails(tools_plugin, name, {})
    assert code == "REMEMBER_UNKNOWN_TOOL" and "remember_this, recall" in message


class _BrokenStore(MemoryStore):
    """A store whose reads fail: one with a driver-like error, one with a bug."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def get(self, key: str) -> str | None:
        raise self.error


def test_store_failure_is_a_generic_tool_error(
    make_plugin: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    """A failing store gives REMEMBER_STORE_ERROR without the store's details; it is logged."""
    failure = RememberStoreError("redis at 10.1.2.3:6379 refused the connection")
    plugin = make_plugin(tools={"enabled": True}, store=_BrokenStore(failure))
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        code, message = fails(plugin, "recall", {"key": "k"})
    assert code == "REMEMBER_STORE_ERROR" and "10.1.2.3" not in message
    assert "10.1.2.3" in caplog.text


def test_unexpected_exception_is_internal_and_logged(
    make_plugin: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug becomes REMEMBER_INTERNAL_ERROR with no internals; the traceback is logged."""
    plugin = make_plugin(tools={"enabled": True},
                         store=_BrokenStore(RuntimeError("secret internal detail")))
    with caplog.at_level(logging.ERROR, logger="remember_sync"):
        code, message = fails(plugin, "recall", {"key": "k"})
    assert code == "REMEMBER_INTERNAL_ERROR"
    assert "secret internal detail" not in message and "RuntimeError" not in message
    assert "secret internal detail" in caplog.text


def test_unreadable_entry_is_reported_without_details(make_plugin: Factory) -> None:
    """With on_decrypt_error='raise', an entry under another secret is a generic tool error."""
    writer = make_plugin(tools={"enabled": True})
    ok(writer, "remember_this", {"key": "k", "value": 1})
    reader = make_plugin(
        tools={"enabled": True},
        on_decrypt_error="raise",
        encryption={"secrets": ["another-secret-0123456789abcdef0123"]},
    )
    code, message = fails(reader, "recall", {"key": "k"})
    assert code == "REMEMBER_DECRYPTION_FAILED" and "remember:" not in message
    assert TEST_SECRET not in message


# -- validate_arguments (also used for user tools) ------------------------------------------


def test_validator_reports_nested_paths() -> None:
    """Nested objects and arrays are checked, and the message says where."""
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
            "pos": {"type": "object", "properties": {"x": {"type": "number"}},
                    "required": ["x"]},
        },
    }
    with pytest.raises(RememberInputError, match=r"argument 'tags\[1\]' must be a string"):
        validate_arguments(schema, {"tags": ["a", 2]})
    with pytest.raises(RememberInputError, match="at most 3 characters"):
        validate_arguments(schema, {"tags": ["abcd"]})
    with pytest.raises(RememberInputError, match="missing required argument 'pos.x'"):
        validate_arguments(schema, {"pos": {}})
    validate_arguments(schema, {"tags": ["ab"], "pos": {"x": 1.5}, "extra": True})


@pytest.mark.parametrize(
    ("schema", "good", "bad", "expected"),
    [
        ({"type": ["string", "null"]}, None, 1, "must be a string or null"),
        ({"const": 3}, 3, 4, "must be 3"),
        ({"type": "number", "exclusiveMinimum": 0}, 0.5, 0, "must be > 0"),
        ({"type": "number", "exclusiveMaximum": 1}, 0.5, 1, "must be < 1"),
        ({"type": "string", "pattern": "^[a-z]+$"}, "abc", "ABC", "must match the pattern"),
        ({"type": "array", "minItems": 1}, [1], [], "at least 1 item"),
        ({"type": "array", "maxItems": 1}, [1], [1, 2], "at most 1 item"),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, 3, 1.5, "any of the allowed"),
        ({"type": "integer"}, 3, True, "must be an integer; got boolean"),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": 1}, {"a": "x"},
         "argument 'a' must be an integer"),
    ],
)
def test_validator_keywords(schema: dict[str, Any], good: Any, bad: Any, expected: str) -> None:
    """Each supported keyword accepts a good value and refuses a bad one with a clear message."""
    validate_arguments(schema, good)
    with pytest.raises(RememberInputError, match=expected):
        validate_arguments(schema, bad)


@pytest.mark.parametrize("scopes", [["forever"], [], ["session", "forever"]])
def test_memory_tools_refuse_unknown_allowed_scopes(scopes: list[str]) -> None:
    """tools.allowed_scopes with an unknown scope, or none, is refused at init()."""
    with pytest.raises(RememberConfigurationError, match="allowed_scopes"):
        RememberPlugin.init(
            store=MemoryStore(), tools={"enabled": True, "allowed_scopes": scopes},
            encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True,
        )


def test_plugin_tools_is_the_public_way_to_the_memory_tools(make_plugin: Factory) -> None:
    """plugin.tools: the prefixed tools a host dispatches to (None when disabled)."""
    plugin = make_plugin(tools={"enabled": True, "prefix": "memory_"})
    tools = plugin.tools
    assert tools is not None
    assert tools.handles("memory_recall") and not tools.handles("recall")
    assert tools.names["recall"] == "memory_recall"
    assert tools.definitions() == plugin.tool_definitions()
    assert make_plugin().tools is None
