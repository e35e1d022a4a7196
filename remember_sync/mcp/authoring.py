"""Writing your own tools for :class:`~remember_sync.mcp.McpServer`, in two styles.

A function registered with :meth:`~remember_sync.mcp.McpServer.tool` receives
the validated input and a :class:`ToolContext`; a :class:`ToolContext` subclass
with ``execute`` is registered with ``add_tool``.  Both styles, what a return
value becomes and how errors reach the model: ``docs/mcp.rst`` ("Writing your
own tools").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ..accessor import RememberAccessor
from ..errors import RememberInputError, ToolError
from ..tools import error_result, result_for_exception, success_result, validate_arguments
from ..tools._schema import json_text
from ..types import Identity

__all__ = ["ToolContext", "ToolError", "UserTool"]

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class ToolContext:
    """The context of one tool call; subclass it to write a class-style tool.

    Class attributes of a subclass: ``name``, ``description``,
    ``input_schema`` (JSON Schema of the arguments object), and optionally
    ``output_schema``, ``annotations`` and ``title``.  Override
    :meth:`execute`.  A new instance is made for every call.

    :ivar remember: the accessor for the caller, with ``tool_name`` set to this tool.
    :ivar identity: the caller's :class:`~remember_sync.types.Identity`.
    :ivar meta: the request's ``_meta`` object (``{}`` when absent).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    input_schema: ClassVar[Mapping[str, Any] | None] = None
    output_schema: ClassVar[Mapping[str, Any] | None] = None
    annotations: ClassVar[Mapping[str, Any] | None] = None
    title: ClassVar[str | None] = None

    def __init__(
        self, *, remember: RememberAccessor, identity: Identity, meta: Mapping[str, Any]
    ) -> None:
        self.remember = remember
        self.identity = identity
        self.meta = dict(meta)

    @property
    def tool_name(self) -> str | None:
        """The name of the tool running this call."""
        return self.identity.tool_name

    def execute(self, input: dict[str, Any]) -> Any:
        """Run the tool with the validated *input*; override in a subclass."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(self, input)")


ToolFunction = Callable[[dict[str, Any], ToolContext], Any]


class UserTool:
    """One registered user tool: its definition and how to run it."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        input_schema: Mapping[str, Any] | None,
        output_schema: Mapping[str, Any] | None = None,
        annotations: Mapping[str, Any] | None = None,
        title: str | None = None,
        function: ToolFunction | None = None,
        cls: type[ToolContext] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError("a tool needs a non-empty str name")
        if not isinstance(description, str):
            raise TypeError(f"tool {name!r}: description must be a str")
        schema = dict(input_schema) if input_schema is not None else dict(_EMPTY_SCHEMA)
        if schema.get("type") != "object":
            raise TypeError(f"tool {name!r}: input_schema must be a JSON Schema with type 'object'")
        target = function if function is not None else getattr(cls, "execute", None)
        if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
            raise TypeError(
                f"tool {name!r}: the MCP server is synchronous (WSGI); write a plain def, "
                "not async def"
            )
        self.name = name
        self.description = description
        self.input_schema = schema
        self.output_schema = dict(output_schema) if output_schema is not None else None
        self.annotations = dict(annotations) if annotations is not None else None
        self.title = title
        self._function = function
        self._cls = cls

    def definition(self) -> dict[str, Any]:
        """The MCP tool definition."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "title": self.title,
            "outputSchema": self.output_schema,
            "annotations": self.annotations,
        }
        return {k: v for k, v in out.items() if v is not None}

    def run(
        self,
        arguments: dict[str, Any],
        *,
        remember: RememberAccessor,
        identity: Identity,
        meta: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Validate *arguments*, run the tool, and shape a ``CallToolResult``; never raises."""
        try:
            validate_arguments(self.input_schema, arguments)
            if self._cls is not None:
                instance = self._cls(remember=remember, identity=identity, meta=meta)
                value = instance.execute(arguments)
            else:
                assert self._function is not None
                context = ToolContext(remember=remember, identity=identity, meta=meta)
                value = self._function(arguments, context)
            return self._shape(value)
        except ToolError as exc:
            return error_result(exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - the boundary: every failure is a tool error
            return result_for_exception(exc, tool=self.name)

    def _shape(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str):
            if self.output_schema is not None:
                raise RuntimeError(
                    f"tool {self.name!r} declares an output_schema but returned a str"
                )
            return {"content": [{"type": "text", "text": value}], "isError": False}
        if isinstance(value, Mapping):
            if self.output_schema is not None:
                # A result that breaks its own schema is a server bug, not the caller's:
                # report it as internal rather than let the client reject the reply.
                try:
                    validate_arguments(self.output_schema, value)
                except RememberInputError as exc:
                    raise RuntimeError(
                        f"tool {self.name!r} broke its output_schema: {exc}"
                    ) from exc
            return success_result(value)
        if self.output_schema is not None:
            raise RuntimeError(f"tool {self.name!r} declares an output_schema but returned no dict")
        return {"content": [{"type": "text", "text": json_text(value)}], "isError": False}
