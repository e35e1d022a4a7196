"""The four LLM-callable memory tools (SPEC section 8.1): definitions, validation, dispatch.

With ``tools={"enabled": True}`` a plugin exposes ``<prefix>remember_this``,
``<prefix>recall``, ``<prefix>forget`` and ``<prefix>list_memories`` as MCP
tool definitions (:meth:`MemoryTools.definitions`) and runs them with
:meth:`MemoryTools.call`, which returns an MCP ``CallToolResult``-shaped dict.

Every failure becomes a tool error (``isError: true``) whose text content is
``"<CODE>: <message>"``: a stable code and a message the model can act on;
never a traceback and never an internal detail (store addresses, storage
keys, secrets).  Error results carry no ``structuredContent``: it would have
to match the tool's ``outputSchema``, and clients such as the TypeScript SDK
1.x validate it even on errors (:func:`error_parts` reads the code back).
Unexpected exceptions are logged here, server-side, and reported as
``REMEMBER_INTERNAL_ERROR``.

``tool`` scope is keyed by the tool actually running the call, so ``recall``
never sees what ``remember_this`` stored in ``tool`` scope: each memory tool
has its own.

Entries branded ``approval`` belong to the host (its approval flows): the
tools never create one, and ``remember_this`` and ``forget`` never replace or
delete one (``REMEMBER_APPROVAL_PROTECTED``), nor an entry they cannot read
(its brand is unknown).  Both write with compare-and-set against exactly what
they checked, so an approval the host writes meanwhile is never overwritten;
the host's own accessor is not restricted.

:func:`validate_arguments` is the small JSON Schema subset the tools (and the
MCP server's user tools) validate arguments with, so a published schema and
the checks made against it cannot drift apart.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from copy import deepcopy
from typing import TYPE_CHECKING, Any, Final
from weakref import WeakKeyDictionary

from ._codec import check_json_value, entry_json
from ._core import MAX_TTL_SECONDS, AccessorCore
from ._keys import check_key
from .accessor import RememberAccessor
from .errors import (
    RememberDecryptionError,
    RememberIdentityError,
    RememberInputError,
    RememberInputTypeError,
    RememberScopeNotAllowedError,
    RememberStoreError,
)
from .identity import current_identity
from .identity import identity as bind_identity
from .types import SCOPES, Identity, Namespace, Scope

if TYPE_CHECKING:
    from .plugin import RememberPlugin

__all__ = [
    "APPROVAL_PROTECTED_CODE",
    "DEFAULT_ALLOWED_SCOPES",
    "DEFAULT_LIST_LIMIT",
    "INTERNAL_ERROR_CODE",
    "MAX_LIST_LIMIT",
    "RESERVED_BRAND",
    "TOOL_BRANDS",
    "TOOL_NAMES",
    "UNKNOWN_TOOL_CODE",
    "MemoryTools",
    "call_plugin_tool",
    "error_parts",
    "error_result",
    "memory_tools",
    "plugin_tool_definitions",
    "result_for_exception",
    "success_result",
    "validate_arguments",
]

log = logging.getLogger("remember_sync")

#: The bare tool names; the published names are ``prefix + name``.
TOOL_NAMES: Final[tuple[str, ...]] = ("remember_this", "recall", "forget", "list_memories")
#: ``global`` is opt-in: model-written global memory is read by every caller's model.
DEFAULT_ALLOWED_SCOPES: Final[tuple[Scope, ...]] = ("session", "user", "tool")
#: Brands a model may give (``approval`` is reserved for the host's approval flows).
TOOL_BRANDS: Final[tuple[str, ...]] = ("preference", "cache", "state", "conversation", "custom")
DEFAULT_LIST_LIMIT: Final = 50
MAX_LIST_LIMIT: Final = 100
INTERNAL_ERROR_CODE: Final = "REMEMBER_INTERNAL_ERROR"
UNKNOWN_TOOL_CODE: Final = "REMEMBER_UNKNOWN_TOOL"
#: The host's brand: the tools never create, replace or delete an entry carrying it.
RESERVED_BRAND: Final = "approval"
#: The code of the tool error for an attempt to replace or forget an approval.
APPROVAL_PROTECTED_CODE: Final = "REMEMBER_APPROVAL_PROTECTED"
#: Compare-and-set rounds a tool write may lose to concurrent writers before it fails.
_WRITE_ATTEMPTS: Final = 1000

_INTERNAL_MESSAGE = (
    "The memory tool failed because of a problem on the server; it has been logged. "
    "Try again later."
)
_STORE_MESSAGE = "The memory store is unavailable right now; try again later."
_DECRYPT_MESSAGE = (
    "A stored memory could not be read: it was written under another secret or is damaged. "
    "The memory tools leave it unchanged."
)

# What the model is told about each scope: one shared description for all four
# tools (SPEC section 8.1).  None of these lifetimes is "until disconnect" or
# "forever": entries last until they are forgotten or their ttl runs out.
_SCOPE_TEXT: Final[dict[str, str]] = {
    "session": (
        "this session; without one (stateless HTTP, MCP 2026-07-28), the signed-in caller "
        "across its requests"
    ),
    "user": "the signed-in caller, across all of its sessions",
    "tool": (
        "the tool running the call, for the same caller as session. Each memory tool has its "
        "own, so {recall} does not see what {remember_this} stored in tool scope"
    ),
    "global": "shared by every caller",
}


# -- results -----------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def success_result(structured: Mapping[str, Any]) -> dict[str, Any]:
    """A successful ``CallToolResult``: the JSON text plus ``structuredContent``."""
    data = dict(structured)
    return {
        "content": [{"type": "text", "text": _json_text(data)}],
        "structuredContent": data,
        "isError": False,
    }


def error_result(code: str, message: str) -> dict[str, Any]:
    """A tool error (``isError: true``) the model can read and act on.

    The one text content is ``"<CODE>: <message>"``; there is no
    ``structuredContent``, which would have to match the tool's
    ``outputSchema`` (SPEC section 10).
    """
    return {"content": [{"type": "text", "text": f"{code}: {message}"}], "isError": True}


def error_parts(result: Mapping[str, Any]) -> tuple[str, str]:
    """``(code, message)`` of a tool error made by :func:`error_result`.

    :raises ValueError: *result* is not such an error.
    """
    content = result.get("content")
    first = content[0] if isinstance(content, list) and content else None
    text = first.get("text") if isinstance(first, Mapping) else None
    code, sep, message = text.partition(": ") if isinstance(text, str) else ("", "", "")
    if result.get("isError") is not True or not sep or not code:
        raise ValueError("not a tool error result of the form '<CODE>: <message>'")
    return code, message


def result_for_exception(exc: BaseException, *, tool: str) -> dict[str, Any]:
    """Map an exception raised while running *tool* to a tool error.

    Errors meant for the caller (bad input, scope, identity) keep their code
    and message; anything else is logged here and reported without detail.
    """
    if isinstance(
        exc,
        (
            RememberInputError,
            RememberInputTypeError,
            RememberScopeNotAllowedError,
            RememberIdentityError,
        ),
    ):
        return error_result(exc.code, exc.message)
    if isinstance(exc, RememberStoreError):
        log.warning("remember: tool %r: the store failed: %s", tool, exc.message, exc_info=exc)
        return error_result(exc.code, _STORE_MESSAGE)
    if isinstance(exc, RememberDecryptionError):
        log.warning("remember: tool %r: %s", tool, exc.message)
        return error_result(exc.code, _DECRYPT_MESSAGE)
    log.error("remember: tool %r failed unexpectedly", tool, exc_info=exc)
    return error_result(INTERNAL_ERROR_CODE, _INTERNAL_MESSAGE)


# -- argument validation (a JSON Schema subset) --------------------------------------------

#: Every JSON type: the schema ``type`` of a value that may be any JSON value
#: (strict schema consumers want a ``type`` on every property).
_JSON_TYPES: Final[tuple[str, ...]] = (
    "string",
    "number",
    "integer",
    "boolean",
    "object",
    "array",
    "null",
)
_TYPE_NAMES: Final[dict[str, str]] = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _has_type(value: Any, wanted: str) -> bool:
    actual = _json_type(value)
    if wanted == "number":
        return actual in ("integer", "number") and not (
            isinstance(value, float) and not math.isfinite(value)
        )
    # Integers are strict: 5.0 is refused, like the accessor's ttl check (SPEC 1.2).
    return actual == wanted


def _where(path: str) -> str:
    return f"argument {path!r}" if path else "the arguments"


def _fail(path: str, problem: str) -> RememberInputError:
    return RememberInputError(f"{_where(path)} {problem}")


def validate_arguments(schema: Mapping[str, Any], value: Any, path: str = "") -> None:
    """Check *value* against *schema*; raise :class:`RememberInputError` on the first problem.

    Supports the keywords tool schemas use: ``type`` (a name or a list),
    ``properties``, ``required``, ``additionalProperties`` (a bool or a
    schema), ``enum``, ``const``, ``minLength``/``maxLength``,
    ``minimum``/``maximum``, ``exclusiveMinimum``/``exclusiveMaximum``,
    ``pattern``, ``items``, ``minItems``/``maxItems`` and ``anyOf``.  Other
    keywords are ignored, so a tool must still check anything more exotic
    itself.  ``integer`` means a JSON integer: ``5.0`` is refused.
    """
    if not isinstance(schema, Mapping):
        return
    wanted = schema.get("type")
    if wanted is not None:
        kinds = [wanted] if isinstance(wanted, str) else list(wanted)
        if not any(_has_type(value, k) for k in kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k) for k in kinds)
            raise _fail(path, f"must be {names}; got {_json_type(value)}")
    if "const" in schema and value != schema["const"]:
        raise _fail(path, f"must be {_json_text(schema['const'])}")
    if "enum" in schema:
        options = list(schema["enum"])
        if not any(value == o and type(value) is type(o) for o in options):
            shown = ", ".join(o if isinstance(o, str) else _json_text(o) for o in options)
            raise _fail(path, f"must be one of {shown}; got {_shown(value)}")
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                validate_arguments(option, value, path)
            except RememberInputError:
                continue
            break
        else:
            raise _fail(path, "does not match any of the allowed forms")
    if isinstance(value, str):
        _check_string(schema, value, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(schema, value, path)
    elif isinstance(value, (list, tuple)):
        _check_array(schema, value, path)
    elif isinstance(value, Mapping):
        _check_object(schema, value, path)


def _shown(value: Any) -> str:
    try:
        text = _json_text(value)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _check_string(schema: Mapping[str, Any], value: str, path: str) -> None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        if low == 1:
            raise _fail(path, "must not be empty")
        raise _fail(path, f"must be at least {low} characters long")
    if isinstance(high, int) and len(value) > high:
        raise _fail(path, f"must be at most {high} characters long; got {len(value)}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        raise _fail(path, f"must match the pattern {pattern!r}")


def _check_number(schema: Mapping[str, Any], value: float, path: str) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and value < low:
        raise _fail(path, f"must be >= {low}; got {value}")
    if high is not None and value > high:
        raise _fail(path, f"must be <= {high}; got {value}")
    xlow, xhigh = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if xlow is not None and not isinstance(xlow, bool) and value <= xlow:
        raise _fail(path, f"must be > {xlow}; got {value}")
    if xhigh is not None and not isinstance(xhigh, bool) and value >= xhigh:
        raise _fail(path, f"must be < {xhigh}; got {value}")


def _check_array(schema: Mapping[str, Any], value: Sequence[Any], path: str) -> None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        raise _fail(path, f"must have at least {low} item(s)")
    if isinstance(high, int) and len(value) > high:
        raise _fail(path, f"must have at most {high} item(s); got {len(value)}")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            validate_arguments(items, item, f"{path}[{i}]")


def _check_object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str) -> None:
    properties = schema.get("properties")
    props: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    for name in schema.get("required", ()):
        if name not in value:
            raise RememberInputError(f"missing required argument {_join(path, name)!r}")
    extra = schema.get("additionalProperties", True)
    for name in value:
        if not isinstance(name, str):
            raise _fail(path, f"has a non-string key {name!r}")
        child = _join(path, name)
        if name in props:
            validate_arguments(props[name], value[name], child)
        elif extra is False:
            allowed = ", ".join(props) or "none"
            raise RememberInputError(f"unknown argument {child!r} (allowed: {allowed})")
        elif isinstance(extra, Mapping):
            validate_arguments(extra, value[name], child)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# -- the four tools -----------------------------------------------------------------------

_Handler = Callable[[RememberAccessor, Mapping[str, Any], Scope], dict[str, Any]]


class MemoryTools:
    """The memory tools of one plugin: definitions and a dispatcher.

    :param core: the plugin's :class:`~remember_sync._core.AccessorCore`.
    :param prefix: prepended to every tool name (``"memory_"`` gives ``memory_recall``).
    :param allowed_scopes: the scopes a model may use (default ``session``,
        ``user``, ``tool``; ``global`` is opt-in).
    """

    def __init__(
        self,
        core: AccessorCore,
        *,
        prefix: str = "",
        allowed_scopes: Sequence[str] = DEFAULT_ALLOWED_SCOPES,
    ) -> None:
        bad = [s for s in allowed_scopes if s not in SCOPES]
        if bad or not allowed_scopes:
            raise RememberInputError(
                f"allowed_scopes must be a non-empty list of {', '.join(SCOPES)}; "
                f"got {allowed_scopes!r}"
            )
        self._core = core
        self.prefix = prefix
        self.allowed_scopes: tuple[Scope, ...] = tuple(dict.fromkeys(allowed_scopes))  # type: ignore[arg-type]
        self.names: dict[str, str] = {bare: prefix + bare for bare in TOOL_NAMES}
        self._by_name = {full: bare for bare, full in self.names.items()}
        self._handlers: dict[str, _Handler] = {
            "remember_this": self._remember_this,
            "recall": self._recall,
            "forget": self._forget,
            "list_memories": self._list_memories,
        }
        self._definitions = self._build_definitions()
        # Validated against copies whose scope has no enum: a known scope that is not
        # allowed gets REMEMBER_SCOPE_NOT_ALLOWED (so the model can retry), not a
        # generic enum failure.  See _check_schema for the value's type.
        self._checks = {
            self._by_name[d["name"]]: _check_schema(d["inputSchema"])
            for d in self._definitions
        }

    def __repr__(self) -> str:
        return f"MemoryTools(prefix={self.prefix!r}, allowed_scopes={list(self.allowed_scopes)!r})"

    # -- definitions ----------------------------------------------------------------

    def definitions(self) -> list[dict[str, Any]]:
        """The four MCP tool definitions (a fresh copy the caller may modify)."""
        return deepcopy(self._definitions)

    def handles(self, name: str) -> bool:
        """Whether *name* is one of these four (prefixed) tools."""
        return name in self._by_name

    def scope_description(self) -> str:
        """The one ``scope`` description shared by all four tools (allowed scopes only)."""
        names = {bare: f"`{full}`" for bare, full in self.names.items()}
        lines = [f"{s}: {_SCOPE_TEXT[s].format(**names)}" for s in self.allowed_scopes]
        if "session" in self.allowed_scopes:
            head = "Where the memory lives (default: session). "
        else:
            head = (
                "Where the memory lives. The default, session, is not allowed here, so always "
                f"pass one of: {', '.join(self.allowed_scopes)}. "
            )
        return (
            head
            + "; ".join(lines)
            + ". Entries last until they are forgotten or their ttl runs out."
        )

    def _scope_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "string",
            "enum": list(self.allowed_scopes),
            "description": self.scope_description(),
        }
        if "session" in self.allowed_scopes:
            schema["default"] = "session"
        return schema

    def _build_definitions(self) -> list[dict[str, Any]]:
        n = {bare: f"`{full}`" for bare, full in self.names.items()}
        scope = self._scope_schema()
        scopes = list(self.allowed_scopes)
        key = {"type": "string", "minLength": 1}
        remember = {
            "name": self.names["remember_this"],
            "title": "Remember this",
            "description": (
                "Remember something for later. Store a value that can be recalled in future "
                "conversations. Use this when the user asks you to remember preferences, "
                "settings, or any information they want to persist. Read it back with "
                f"{n['recall']}, delete it with {n['forget']}, and see what is stored with "
                f"{n['list_memories']}."
            ),
            "inputSchema": _object(
                {
                    "key": {
                        **key,
                        "description": (
                            'What to call this memory (e.g., "user_preference", "last_action")'
                        ),
                    },
                    "value": {
                        "type": list(_JSON_TYPES),
                        "description": "The value to remember (any JSON value)",
                    },
                    "scope": scope,
                    "ttl": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TTL_SECONDS,
                        "description": "Forget after this many seconds (a whole number)",
                    },
                    "brand": {
                        "type": "string",
                        "enum": list(TOOL_BRANDS),
                        "description": "Type hint for the stored value",
                    },
                    "metadata": {
                        "type": "object",
                        "description": "Extra JSON details to keep with the value",
                    },
                },
                required=["key", "value"],
            ),
            "outputSchema": _object(
                {
                    "success": {"type": "boolean"},
                    "key": {"type": "string"},
                    "scope": {"type": "string", "enum": scopes},
                    "expiresAt": {
                        "type": "integer",
                        "description": "When the memory expires (epoch milliseconds)",
                    },
                },
                required=["success", "key", "scope"],
            ),
            "annotations": {
                "title": "Remember this",
                "readOnlyHint": False,
                "destructiveHint": False,
                "openWorldHint": False,
            },
        }
        recall = {
            "name": self.names["recall"],
            "title": "Recall",
            "description": (
                "Recall something that was previously remembered. Use this to retrieve stored "
                "preferences, settings, or any information that was saved with "
                f"{n['remember_this']}. Use {n['list_memories']} to see which keys exist and "
                f"{n['forget']} to delete one."
            ),
            "inputSchema": _object(
                {"key": {**key, "description": "What memory to recall"}, "scope": scope},
                required=["key"],
            ),
            "outputSchema": {
                **_object(
                    {
                        "found": {"type": "boolean"},
                        "key": {"type": "string"},
                        "value": {
                            "type": list(_JSON_TYPES),
                            "description": "The remembered value (when found)",
                        },
                        "scope": {"type": "string", "enum": scopes},
                        "createdAt": {"type": "integer"},
                        "expiresAt": {"type": "integer"},
                    },
                    required=["found", "key", "scope"],
                ),
                "if": {"properties": {"found": {"const": True}}},
                "then": {"required": ["value", "createdAt"]},
            },
            "annotations": {
                "title": "Recall",
                "readOnlyHint": True,
                "destructiveHint": False,
                "openWorldHint": False,
            },
        }
        forget = {
            "name": self.names["forget"],
            "title": "Forget",
            "description": (
                "Forget a previously remembered value (stored with "
                f"{n['remember_this']}). Use this when the user wants to delete stored "
                f"preferences or information. {n['list_memories']} shows which keys exist; "
                f"{n['recall']} reads one back."
            ),
            "inputSchema": _object(
                {"key": {**key, "description": "What memory to forget"}, "scope": scope},
                required=["key"],
            ),
            "outputSchema": _object(
                {
                    "success": {"type": "boolean"},
                    "key": {"type": "string"},
                    "scope": {"type": "string", "enum": scopes},
                    "existed": {"type": "boolean"},
                },
                required=["success", "key", "scope", "existed"],
            ),
            "annotations": {
                "title": "Forget",
                "readOnlyHint": False,
                "destructiveHint": True,
                "idempotentHint": True,
                "openWorldHint": False,
            },
        }
        listing = {
            "name": self.names["list_memories"],
            "title": "List memories",
            "description": (
                "List all remembered keys in a scope. Use this to see what memories are stored "
                f"for the current session or user. Read one with {n['recall']}, delete one "
                f"with {n['forget']}, and store one with {n['remember_this']}."
            ),
            "inputSchema": _object(
                {
                    "scope": scope,
                    "pattern": {
                        "type": "string",
                        "description": (
                            'Pattern to filter keys (e.g., "user_*"); only * and ? are wildcards'
                        ),
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_LIST_LIMIT,
                        "default": DEFAULT_LIST_LIMIT,
                        "description": (
                            f"Maximum number of keys to return (default: {DEFAULT_LIST_LIMIT})"
                        ),
                    },
                },
                required=[],
            ),
            "outputSchema": _object(
                {
                    "keys": {"type": "array", "items": {"type": "string"}},
                    "scope": {"type": "string", "enum": scopes},
                    "count": {
                        "type": "integer",
                        "description": "How many keys are returned",
                    },
                    "truncated": {
                        "type": "boolean",
                        "description": "Whether more keys matched than were returned",
                    },
                },
                required=["keys", "scope", "count", "truncated"],
            ),
            "annotations": {
                "title": "List memories",
                "readOnlyHint": True,
                "destructiveHint": False,
                "openWorldHint": False,
            },
        }
        return [remember, recall, forget, listing]

    # -- dispatch -------------------------------------------------------------------

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        identity: Identity | None = None,
    ) -> dict[str, Any]:
        """Run tool *name* and return a ``CallToolResult``-shaped dict; never raises.

        :param identity: who is calling (default: the identity bound in this
            context).  The tool's own name is added, so ``tool`` scope is
            keyed by the tool running the call.
        """
        bare = self._by_name.get(name) if isinstance(name, str) else None
        if bare is None:
            return error_result(
                UNKNOWN_TOOL_CODE,
                f"Unknown tool {name!r}. Memory tools: {', '.join(self.names.values())}",
            )
        try:
            args = {} if arguments is None else arguments
            validate_arguments(self._checks[bare], args)
            scope = self._scope(args)
            who = (identity if identity is not None else current_identity()).with_tool(name)
            # Bound for the call, so identity errors do not suggest binding one.
            with bind_identity(bound=who):
                accessor = RememberAccessor(self._core, who)
                structured = self._handlers[bare](accessor, args, scope)
            return success_result(structured)
        except Exception as exc:  # noqa: BLE001 - the boundary: every failure is a tool error
            return result_for_exception(exc, tool=name)

    def _scope(self, args: Mapping[str, Any]) -> Scope:
        scope = args.get("scope", "session")
        if scope not in self.allowed_scopes:
            raise RememberScopeNotAllowedError(
                f"Scope '{scope}' is not allowed. Allowed scopes: {', '.join(self.allowed_scopes)}"
            )
        return scope  # type: ignore[no-any-return]

    def _remember_this(
        self, mem: RememberAccessor, args: Mapping[str, Any], scope: Scope
    ) -> dict[str, Any]:
        key = check_key(args["key"])
        ttl = args.get("ttl")
        value, metadata = args["value"], args.get("metadata")
        check_json_value(value, "value")
        if metadata is not None:
            check_json_value(metadata, "metadata")
        core = self._core
        ns, head = core.namespace(mem.identity, scope)
        skey = head + key
        now = core.clock()
        if ttl is not None:
            expires: int | None = now + ttl * 1000
        else:
            expires = now + core.default_ttl * 1000 if core.default_ttl else None
        stored = core.seal_checked(
            entry_json(value, args.get("brand"), now, now, expires, metadata), ns, skey
        )
        if core.read_doubled_prefix:
            # Reads fall back to a 1.8.0 doubled-prefix twin while the key is absent,
            # so writing the key would hide an approval held there.
            twin = core.prefix + skey
            twin_raw = core.store.get(twin)
            if twin_raw is not None:
                _check_replaceable(core, ns, skey, twin_raw, key, scope)
        _write_unless_protected(
            core, ns, skey, skey, key, scope, stored, core.ttl_ms(expires, now)
        )
        out: dict[str, Any] = {"success": True, "key": key, "scope": scope}
        if expires is not None:
            out["expiresAt"] = expires
        return out

    def _recall(
        self, mem: RememberAccessor, args: Mapping[str, Any], scope: Scope
    ) -> dict[str, Any]:
        key = args["key"]
        entry = mem.get_entry(key, scope=scope)
        if entry is None:
            return {"found": False, "key": key, "scope": scope}
        out: dict[str, Any] = {
            "found": True,
            "key": key,
            "value": entry.value,
            "scope": scope,
            "createdAt": entry.created_at,
        }
        if entry.expires_at is not None:
            out["expiresAt"] = entry.expires_at
        return out

    def _forget(
        self, mem: RememberAccessor, args: Mapping[str, Any], scope: Scope
    ) -> dict[str, Any]:
        key = check_key(args["key"])
        core = self._core
        ns, head = core.namespace(mem.identity, scope)
        skey = head + key
        places = [skey, core.prefix + skey] if core.read_doubled_prefix else [skey]
        existed = False
        for where in places:
            existed |= _write_unless_protected(core, ns, where, skey, key, scope, None, None)
        return {"success": True, "key": key, "scope": scope, "existed": existed}

    def _list_memories(
        self, mem: RememberAccessor, args: Mapping[str, Any], scope: Scope
    ) -> dict[str, Any]:
        limit = args.get("limit", DEFAULT_LIST_LIMIT)
        keys = mem.list(scope=scope, pattern=args.get("pattern", "*"))
        shown = keys[:limit]
        return {"keys": shown, "scope": scope, "count": len(shown), "truncated": len(keys) > limit}


def _check_replaceable(
    core: AccessorCore, ns: Namespace, skey: str, raw: str, key: str, scope: Scope
) -> bool:
    """Whether *raw* (stored for *skey*) is a live entry; raise if a tool may not touch it.

    :raises RememberInputError: it is an unexpired approval (``REMEMBER_APPROVAL_PROTECTED``).
    :raises RememberDecryptionError: it cannot be read, so its brand is unknown.
    """
    try:
        _, brand, _, _, expires, _ = core.codec.decode_fields(raw, ns, skey)[0]
    except RememberDecryptionError as exc:
        raise RememberDecryptionError(
            f"memory {key!r} in {scope} scope is unreadable ({exc.message}); left unchanged"
        ) from exc
    if expires is not None and core.clock() >= expires:
        return False  # expired: gone for every reader, so it may be replaced
    if brand == RESERVED_BRAND:
        raise RememberInputError(
            f"The memory {key!r} in {scope} scope is an approval recorded by the application; "
            "the memory tools cannot change or forget it. Use another key.",
            code=APPROVAL_PROTECTED_CODE,
        )
    return True


def _write_unless_protected(
    core: AccessorCore,
    ns: Namespace,
    where: str,
    skey: str,
    key: str,
    scope: Scope,
    stored: str | None,
    ttl_ms: int | None,
) -> bool:
    """Put *stored* under *where* (``None``: forget it) unless an approval is there.

    Atomic: the write is a compare-and-set against the exact value checked (or
    only-if-absent when nothing was there), so a value written in between --
    an approval, say -- makes it look again instead of being overwritten.
    Forgetting swaps the entry for an already-expired one that the store drops
    a millisecond later: stores have no compare-and-delete.  *where* is *skey*
    or its 1.8.0 doubled-prefix twin; values decode against *skey*.

    :returns: whether a live entry was there.
    """
    store = core.store
    for _attempt in range(_WRITE_ATTEMPTS):
        raw = store.get(where)
        if raw is None:
            if stored is None or store.set(where, stored, ttl_ms=ttl_ms, only_if_absent=True):
                return False
            continue  # written meanwhile: check what is there now
        live = _check_replaceable(core, ns, skey, raw, key, scope)
        if stored is None:
            # Expired since the epoch, so every reader sees nothing from now on.
            gone = core.seal_checked(entry_json(None, None, 0, 0, 1, None), ns, skey)
            if store.compare_and_set(where, raw, gone, ttl_ms=1):
                return live
        elif store.compare_and_set(where, raw, stored, ttl_ms=ttl_ms):
            return live
    raise RememberStoreError(
        f"memory {key!r} changed {_WRITE_ATTEMPTS} times while a tool was writing it"
    )


def _object(properties: dict[str, Any], *, required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _check_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The input schema arguments are validated against: *schema* with two relaxations.

    The scope has no enum (see ``MemoryTools.__init__``), and a ``value`` of any
    JSON type is left to :func:`~remember_sync._codec.check_json_value`, whose
    messages say what is not JSON (NaN, a set, a non-``str`` key) where the
    published every-JSON-type list could only say "must be a string or ...".
    """
    copy = deepcopy(dict(schema))
    properties = copy["properties"]
    properties["scope"] = {"type": "string"}
    if "value" in properties and properties["value"].get("type") == list(_JSON_TYPES):
        del properties["value"]["type"]
    return copy


# -- per-plugin cache -------------------------------------------------------------------

_cache: WeakKeyDictionary[Any, tuple[tuple[Any, ...], MemoryTools]] = WeakKeyDictionary()


def memory_tools(plugin: RememberPlugin) -> MemoryTools:
    """The :class:`MemoryTools` for *plugin*'s ``tools`` options (built once, then cached)."""
    options = plugin.tools_options
    settings = (options.get("prefix", ""), tuple(options.get("allowed_scopes") or ()))
    cached = _cache.get(plugin)
    if cached is not None and cached[0] == settings:
        return cached[1]
    tools = MemoryTools(
        plugin.core, prefix=settings[0], allowed_scopes=settings[1] or DEFAULT_ALLOWED_SCOPES
    )
    _cache[plugin] = (settings, tools)
    return tools


def _unknown_tool_disabled(name: object) -> dict[str, Any]:
    return error_result(
        UNKNOWN_TOOL_CODE,
        f"Unknown tool {name!r}: the memory tools are not enabled "
        "(RememberPlugin.init(tools={'enabled': True}))",
    )


def call_plugin_tool(
    plugin: RememberPlugin,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    identity: Identity | None = None,
) -> dict[str, Any]:
    """``plugin.call_tool``: dispatch to the memory tools, or an unknown-tool error."""
    if not plugin.tools_options.get("enabled"):
        return _unknown_tool_disabled(name)
    return memory_tools(plugin).call(name, arguments, identity=identity)


def plugin_tool_definitions(plugin: RememberPlugin) -> list[dict[str, Any]]:
    """``plugin.tool_definitions``: the four definitions, or none when tools are disabled."""
    if not plugin.tools_options.get("enabled"):
        return []
    return memory_tools(plugin).definitions()
