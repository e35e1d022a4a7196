"""The LLM-callable memory tools (SPEC sections 8.1 and 11): definitions, validation, dispatch.

With ``tools={"enabled": True}`` a plugin builds one :class:`MemoryTools`, which
publishes ``<prefix>remember_this``, ``<prefix>recall``, ``<prefix>forget``,
``<prefix>list_memories`` and ``<prefix>search_memories`` (unless
``tools={"search": False}``) as MCP tool definitions (:meth:`MemoryTools.definitions`)
and runs them with :meth:`MemoryTools.call`, which returns an MCP
``CallToolResult``-shaped dict (:mod:`~remember_sync.tools.results`).

``tool`` scope is keyed by the tool actually running the call, so ``recall``
never sees what ``remember_this`` stored in ``tool`` scope: each memory tool
has its own.

Entries branded ``approval`` belong to the host (its approval flows): the
tools never create one, and ``remember_this`` and ``forget`` never replace or
delete one (``REMEMBER_APPROVAL_PROTECTED``), nor an entry they cannot read
(its brand is unknown).  Both write with compare-and-set against exactly what
they checked, so an approval the host writes meanwhile is never overwritten;
the host's own accessor is not restricted.

``remember_this`` records its own name in the entry (``writtenBy``, sealed
with it), so ``search_memories`` and ``RememberAccessor.search`` can tell what
a model wrote from what the host wrote.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from copy import deepcopy
from typing import Any, Final

from .. import _metrics
from .._codec import EntryFields, check_json_value
from .._core import MAX_TTL_SECONDS, AccessorCore, SwapRules
from .._keys import check_key
from .._search import MAX_QUERY_CHARS, preview
from ..accessor import RememberAccessor, accessor_for
from ..errors import (
    RememberDecryptionError,
    RememberInputError,
    RememberInputTypeError,
    RememberScopeNotAllowedError,
)
from ..identity import current_identity
from ..identity import identity as bind_identity
from ..types import SCOPES, Identity, RememberEntry, Scope
from ._schema import JSON_TYPES, validate_arguments
from .results import (
    UNKNOWN_TOOL_CODE,
    error_parts,
    error_result,
    result_for_exception,
    success_result,
)

__all__ = [
    "APPROVAL_PROTECTED_CODE", "DEFAULT_ALLOWED_SCOPES", "DEFAULT_LIST_LIMIT",
    "DEFAULT_SEARCH_LIMIT", "MAX_LIST_LIMIT", "MAX_NESTING", "MAX_SEARCH_LIMIT", "RESERVED_BRAND",
    "TOOL_BRANDS", "TOOL_NAMES", "MemoryTools",
]

#: The bare tool names; the published names are ``prefix + name``.
TOOL_NAMES: Final[tuple[str, ...]] = (
    "remember_this", "recall", "forget", "list_memories", "search_memories"
)
#: ``global`` is opt-in: model-written global memory is read by every caller's model.
DEFAULT_ALLOWED_SCOPES: Final[tuple[Scope, ...]] = ("session", "user", "tool")
#: Brands a model may give (``approval`` is reserved for the host's approval flows).
TOOL_BRANDS: Final[tuple[str, ...]] = ("preference", "cache", "state", "conversation", "custom")
DEFAULT_LIST_LIMIT: Final = 50
MAX_LIST_LIMIT: Final = 100
DEFAULT_SEARCH_LIMIT: Final = 10
MAX_SEARCH_LIMIT: Final = 50
#: The host's brand: the tools never create, replace or delete an entry carrying it.
RESERVED_BRAND: Final = "approval"
#: The code of the tool error for an attempt to replace or forget an approval.
APPROVAL_PROTECTED_CODE: Final = "REMEMBER_APPROVAL_PROTECTED"
#: Compare-and-set rounds a tool write may lose to concurrent writers before it fails.
_WRITE_ATTEMPTS: Final = 1000
#: Deepest nesting of a value or metadata the tools store.  json's encoder and decoder
#: recurse, so a value nested near the interpreter's recursion limit could be stored
#: from one stack depth and then not be read back from a deeper one.
MAX_NESTING: Final = 128

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


_Handler = Callable[[RememberAccessor, Mapping[str, Any], Any], dict[str, Any]]


class MemoryTools:
    """The memory tools of one plugin: definitions and a dispatcher.

    A plugin built with ``tools={"enabled": True}`` makes one (:attr:`RememberPlugin.tools
    <remember_sync.RememberPlugin.tools>`), from its ``tools`` options: ``prefix``
    (prepended to every tool name), ``allowed_scopes`` (the scopes a model may use)
    and ``search`` (publish ``search_memories`` too); ``names`` maps each tool's
    bare name to the prefixed name it is listed under.
    """

    def __init__(self) -> None:
        raise TypeError('get the memory tools from plugin.tools (tools={"enabled": True})')

    def _setup(
        self,
        core: AccessorCore,
        *,
        prefix: str = "",
        allowed_scopes: Sequence[str] = DEFAULT_ALLOWED_SCOPES,
        search: bool = True,
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
        self.names: dict[str, str] = {
            bare: prefix + bare for bare in TOOL_NAMES if search or bare != "search_memories"
        }
        self._by_name = {full: bare for bare, full in self.names.items()}
        self._handlers: dict[str, _Handler] = {
            "remember_this": self._remember_this,
            "recall": self._recall,
            "forget": self._forget,
            "list_memories": self._list_memories,
            "search_memories": self._search_memories,
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
        """The MCP tool definitions (a fresh copy the caller may modify)."""
        return deepcopy(self._definitions)

    def handles(self, name: str) -> bool:
        """Whether *name* is one of these (prefixed) tools."""
        return name in self._by_name

    def scope_description(self) -> str:
        """The one ``scope`` description shared by every memory tool (allowed scopes only)."""
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
        remember = self._definition(
            "remember_this",
            "Remember this",
            (
                "Remember something for later. Store a value that can be recalled in future "
                "conversations. Use this when the user asks you to remember preferences, "
                "settings, or any information they want to persist. Read it back with "
                f"{n['recall']}, delete it with {n['forget']}, and see what is stored with "
                f"{n['list_memories']}{self._find_hint(n)}."
            ),
            _object(
                {
                    "key": {
                        **key,
                        "description": (
                            'What to call this memory (e.g., "user_preference", "last_action")'
                        ),
                    },
                    "value": {
                        "type": list(JSON_TYPES),
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
            _object(
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
            read_only=False,
        )
        recall = self._definition(
            "recall",
            "Recall",
            (
                "Recall something that was previously remembered. Use this to retrieve stored "
                "preferences, settings, or any information that was saved with "
                f"{n['remember_this']}. Use {n['list_memories']} to see which keys exist"
                f"{self._find_hint(n)} and {n['forget']} to delete one."
            ),
            _object(
                {"key": {**key, "description": "What memory to recall"}, "scope": scope},
                required=["key"],
            ),
            {
                **_object(
                    {
                        "found": {"type": "boolean"},
                        "key": {"type": "string"},
                        "value": {
                            "type": list(JSON_TYPES),
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
            read_only=True,
        )
        forget = self._definition(
            "forget",
            "Forget",
            (
                "Forget a previously remembered value (stored with "
                f"{n['remember_this']}). Use this when the user wants to delete stored "
                f"preferences or information. {n['list_memories']} shows which keys exist"
                f"{self._find_hint(n)}; {n['recall']} reads one back."
            ),
            _object(
                {"key": {**key, "description": "What memory to forget"}, "scope": scope},
                required=["key"],
            ),
            _object(
                {
                    "success": {"type": "boolean"},
                    "key": {"type": "string"},
                    "scope": {"type": "string", "enum": scopes},
                    "existed": {"type": "boolean"},
                },
                required=["success", "key", "scope", "existed"],
            ),
            read_only=False, destructive=True, idempotent=True,
        )
        listing = self._definition(
            "list_memories",
            "List memories",
            (
                "List all remembered keys in a scope. Use this to see what memories are stored "
                f"for the current session or user. Read one with {n['recall']}, delete one "
                f"with {n['forget']}, and store one with {n['remember_this']}"
                f"{self._find_hint(n)}."
            ),
            _object(
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
            _object(
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
                    "unreadable": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": (
                            "Keys that exist but could not be read (another secret, or "
                            "damaged): not absent, and left unchanged"
                        ),
                    },
                },
                required=["keys", "scope", "count", "truncated"],
            ),
            read_only=True,
        )
        definitions = [remember, recall, forget, listing]
        if "search_memories" in self.names:
            definitions.append(self._search_definition(n, scope, scopes))
        return definitions

    def _find_hint(self, n: Mapping[str, str]) -> str:
        if "search_memories" not in self.names:
            return ""
        return f" ({n['search_memories']} finds memories by what they say)"

    def _search_definition(
        self, n: Mapping[str, str], scope: dict[str, Any], scopes: Sequence[str]
    ) -> dict[str, Any]:
        scope = {
            **{k: v for k, v in scope.items() if k != "default"},
            "description": (
                "Only search this scope (default: every scope you may use). "
                + str(scope["description"])
            ),
        }
        return self._definition(
            "search_memories",
            "Search memories",
            (
                "Search what was remembered by what it says, when you do not know the key. "
                "Returns the best matches first, each with its key, scope, a short preview, "
                "when it was written and by whom (\"host\": the application; otherwise the "
                f"memory tool a model called). Read a whole memory with {n['recall']}, list "
                f"keys with {n['list_memories']}, store one with {n['remember_this']} and "
                f"delete one with {n['forget']}."
            ),
            _object(
                {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_QUERY_CHARS,
                        "description": "What to look for, in words (e.g., \"preferred language\")",
                    },
                    "scope": scope,
                    "brand": {
                        "type": "string",
                        "enum": ["approval", *TOOL_BRANDS],
                        "description": "Only memories of this type",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_SEARCH_LIMIT,
                        "default": DEFAULT_SEARCH_LIMIT,
                        "description": (
                            f"Maximum number of results (default: {DEFAULT_SEARCH_LIMIT})"
                        ),
                    },
                    "host_only": {
                        "type": "boolean",
                        "default": False,
                        "description": (
                            "Only memories the application wrote, none written through "
                            "these tools"
                        ),
                    },
                },
                required=["query"],
            ),
            _object(
                {
                    "results": {
                        "type": "array",
                        "items": _object(
                            {
                                "key": {"type": "string"},
                                "scope": {"type": "string", "enum": list(scopes)},
                                "brand": {"type": "string"},
                                "score": {"type": "number"},
                                "preview": {"type": "string"},
                                "writtenAt": {
                                    "type": "integer",
                                    "description": "When it was last written (epoch ms)",
                                },
                                "writtenBy": {
                                    "type": "string",
                                    "description": "\"host\" or the memory tool that wrote it",
                                },
                            },
                            required=["key", "scope", "score", "preview", "writtenAt",
                                      "writtenBy"],
                        ),
                    },
                    "count": {"type": "integer"},
                },
                required=["results", "count"],
            ),
            read_only=True,
        )

    def _definition(
        self, bare: str, title: str, description: str, inputs: dict[str, Any],
        outputs: dict[str, Any], *, read_only: bool, destructive: bool = False,
        idempotent: bool = False,
    ) -> dict[str, Any]:
        """One tool's definition; the memory tools never reach outside the store."""
        annotations: dict[str, Any] = {
            "title": title,
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
        }
        if idempotent:
            annotations["idempotentHint"] = True
        annotations["openWorldHint"] = False
        return {
            "name": self.names[bare],
            "title": title,
            "description": description,
            "inputSchema": inputs,
            "outputSchema": outputs,
            "annotations": annotations,
        }

    # -- dispatch -------------------------------------------------------------------

    def call(
        self, name: str, arguments: Mapping[str, Any] | None, identity: Identity | None
    ) -> dict[str, Any]:
        """Run tool *name* and return a ``CallToolResult``-shaped dict; never raises.

        :param identity: who is calling (``None``: the identity bound in this
            context).  The tool's own name is added, so ``tool`` scope is
            keyed by the tool running the call.
        """
        bare = self._by_name.get(name) if isinstance(name, str) else None
        if bare is None:
            return error_result(
                UNKNOWN_TOOL_CODE,
                f"Unknown tool {name!r}. Memory tools: {', '.join(self.names.values())}",
            )
        if not _metrics.STATE.on:
            return self._call(bare, name, arguments, identity)
        began = time.perf_counter()
        result = self._call(bare, name, arguments, identity)
        code = error_parts(result)[0] if result.get("isError") else ""
        _metrics.TOOL_CALLS.record(
            time.perf_counter() - began, self._core.store_kind, bare,
            "error" if code else "ok", code,
        )  # fmt: skip
        return result

    def _call(
        self, bare: str, name: str, arguments: Mapping[str, Any] | None, identity: Identity | None
    ) -> dict[str, Any]:
        """:meth:`call` of a memory tool (*bare*: its name without the prefix)."""
        try:
            args = {} if arguments is None else arguments
            validate_arguments(self._checks[bare], args)
            # Without a scope, search_memories searches every allowed scope.
            scope = None if bare == "search_memories" and "scope" not in args else self._scope(args)
            who = (identity if identity is not None else current_identity()).with_tool(name)
            # Bound for the call, so identity errors do not suggest binding one.
            with bind_identity(bound=who):
                accessor = accessor_for(self._core, who)
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
        for what, data in (("value", value), ("metadata", metadata)):
            check_json_value(data, what)
            _check_nesting(data, what)
        core = self._core
        ns, head = core.namespace(mem.identity, scope)
        skey = head + key
        brand = args.get("brand")
        rules = _rules(key, scope, fresh=(brand, metadata, self.names["remember_this"]))
        if core.read_doubled_prefix:
            # Reads fall back to a 1.8.0 doubled-prefix twin while the key is absent,
            # so writing the key would hide an approval held there.
            twin_raw = core.store.get(core.prefix + skey)
            core.checked_entry(twin_raw, ns, key, skey, core.clock(), rules)
        with core.audited("set", mem.identity, scope, key, brand, ttl) as event:
            expires = core.swap(
                mem.identity, key, ns, skey, lambda _: value, ttl=ttl, rules=rules
            )[1]
            event.outcome = "written"
        out: dict[str, Any] = {"success": True, "key": key, "scope": scope}
        if expires is not None:
            out["expiresAt"] = expires
        return out

    @property
    def _store_kind(self) -> str:
        """The ``store`` attribute of the tools' measurements (:func:`._metrics.measured`)."""
        return self._core.store_kind

    # The reads the tools make on the core directly, measured as the accessor's would be.
    @_metrics.measured("get_entry")
    def _strict_fields(self, ident: Identity | None, key: str, scope: Scope) -> EntryFields | None:
        return self._core.get_fields(ident, key, scope, strict=True)

    @_metrics.measured("list")
    def _listed(
        self, ident: Identity | None, scope: Scope, pattern: str, unreadable: list[str]
    ) -> dict[str, RememberEntry]:
        return self._core.entries(ident, scope, pattern, None, unreadable)

    def _recall(
        self, mem: RememberAccessor, args: Mapping[str, Any], scope: Scope
    ) -> dict[str, Any]:
        key = args["key"]
        try:
            # Strict: a memory that exists but cannot be read is a tool error naming
            # it, never "not found" (the model would act on the absence).
            fields = self._strict_fields(mem.identity, key, scope)
        except RememberDecryptionError as exc:
            exc.memory = (key, scope)  # type: ignore[attr-defined]
            raise
        if fields is None:
            return {"found": False, "key": key, "scope": scope}
        entry = RememberEntry(*fields)
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
        # A 1.8.0 doubled-prefix twin first: forgetting the key first would let
        # reads fall back to it.
        twin = [core.prefix + skey] if core.read_doubled_prefix and core.verifier is None else []
        rules = _rules(key, scope, forget=True)
        existed = False
        with core.audited("forget", mem.identity, scope, key) as event:
            for where in (*twin, None):
                existed |= core.swap(
                    mem.identity, key, ns, skey, lambda _: None, ttl=None, rules=rules, where=where
                )[0]
            event.outcome = "deleted" if existed else "absent"
        return {"success": True, "key": key, "scope": scope, "existed": existed}

    def _search_memories(
        self, mem: RememberAccessor, args: Mapping[str, Any], scope: Scope | None
    ) -> dict[str, Any]:
        hits = self._core.search(
            mem.identity, args["query"], scope, args.get("brand"),
            args.get("limit", DEFAULT_SEARCH_LIMIT), args.get("host_only", False),
            scopes=self.allowed_scopes, max_limit=MAX_SEARCH_LIMIT,
        )
        results = []
        for hit in hits:
            value, brand, _, updated_at, _, _ = hit.fields
            item: dict[str, Any] = {"key": hit.key, "scope": hit.label}
            if brand is not None:
                item["brand"] = brand
            item.update(
                score=hit.score, preview=preview(value), writtenAt=updated_at,
                writtenBy=hit.written_by or "host",
            )
            results.append(item)
        return {"results": results, "count": len(results)}

    def _list_memories(
        self, mem: RememberAccessor, args: Mapping[str, Any], scope: Scope
    ) -> dict[str, Any]:
        limit = args.get("limit", DEFAULT_LIST_LIMIT)
        unreadable: list[str] = []
        keys = sorted(self._listed(mem.identity, scope, args.get("pattern", "*"), unreadable))
        shown = keys[:limit]
        out: dict[str, Any] = {
            "keys": shown, "scope": scope, "count": len(shown), "truncated": len(keys) > limit
        }
        if unreadable:
            # Never left out silently: the model must not act as if they were absent.
            out["unreadable"] = sorted(set(unreadable))[:limit]
        return out


def _check_nesting(data: Any, what: str) -> None:
    """Refuse *data* nested more than ``MAX_NESTING`` containers deep (walked iteratively)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if depth > MAX_NESTING:
                raise RememberInputTypeError(
                    f"{what} is nested more than {MAX_NESTING} levels deep"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _rules(
    key: str,
    scope: Scope,
    *,
    fresh: tuple[str | None, dict[str, Any] | None, str | None] | None = None,
    forget: bool = False,
) -> SwapRules:
    """The tools' :class:`SwapRules` for *key* in *scope*: never an approval, never
    an entry they cannot read (its brand is unknown)."""

    def unreadable(key: str, exc: RememberDecryptionError) -> RememberDecryptionError:
        return RememberDecryptionError(
            f"memory {key!r} in {scope} scope is unreadable ({exc.message}); left unchanged"
        )

    def guard(fields: EntryFields) -> None:
        if fields[1] == RESERVED_BRAND:
            raise RememberInputError(
                f"The memory {key!r} in {scope} scope is an approval recorded by the "
                "application; the memory tools cannot change or forget it. Use another key.",
                code=APPROVAL_PROTECTED_CODE,
            )

    return SwapRules(create=not forget, unreadable=unreadable, guard=guard, fresh=fresh,
                     forget=forget)  # fmt: skip


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
    if "value" in properties and properties["value"].get("type") == list(JSON_TYPES):
        del properties["value"]["type"]
    return copy
