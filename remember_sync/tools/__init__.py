"""The LLM-callable memory tools (SPEC section 8.1): :mod:`.memory` (the four tools),
:mod:`.results` (``CallToolResult`` shaping) and :func:`validate_arguments` (the JSON Schema
subset, also used for the MCP server's user tools).  A plugin built with
``tools={"enabled": True}`` owns one :class:`MemoryTools`: ``plugin.tool_definitions()``
and ``plugin.call_tool()`` are the way in.
"""

from __future__ import annotations

from ._schema import validate_arguments
from .memory import (
    APPROVAL_PROTECTED_CODE,
    DEFAULT_ALLOWED_SCOPES,
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    MAX_NESTING,
    RESERVED_BRAND,
    TOOL_BRANDS,
    TOOL_NAMES,
    MemoryTools,
)
from .results import (
    INTERNAL_ERROR_CODE,
    UNKNOWN_TOOL_CODE,
    error_parts,
    error_result,
    result_for_exception,
    success_result,
)

__all__ = [
    "APPROVAL_PROTECTED_CODE",
    "DEFAULT_ALLOWED_SCOPES",
    "DEFAULT_LIST_LIMIT",
    "INTERNAL_ERROR_CODE",
    "MAX_LIST_LIMIT",
    "MAX_NESTING",
    "RESERVED_BRAND",
    "TOOL_BRANDS",
    "TOOL_NAMES",
    "UNKNOWN_TOOL_CODE",
    "MemoryTools",
    "error_parts",
    "error_result",
    "result_for_exception",
    "success_result",
    "validate_arguments",
]
