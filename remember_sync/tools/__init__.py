"""The LLM-callable memory tools (SPEC sections 8.1 and 11): :mod:`.memory` (the five tools),
:mod:`.results` (``CallToolResult`` shaping) and :func:`validate_arguments` (the JSON Schema
subset, also used for the MCP server's user tools).  A plugin built with
``tools={"enabled": True}`` owns one :class:`MemoryTools`: ``plugin.tool_definitions()``
and ``plugin.call_tool()`` are the way in.
"""

from __future__ import annotations

from ._schema import validate_arguments
from .memory import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, MAX_NESTING, MemoryTools
from .results import error_parts, error_result, result_for_exception, success_result

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "MAX_LIST_LIMIT",
    "MAX_NESTING",
    "MemoryTools",
    "error_parts",
    "error_result",
    "result_for_exception",
    "success_result",
    "validate_arguments",
]
