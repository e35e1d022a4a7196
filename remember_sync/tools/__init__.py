"""The LLM-callable memory tools, owned by the plugin (SPEC section 8.1).

* :mod:`~remember_sync.tools.memory` -- the four tools (:class:`MemoryTools`);
* :mod:`~remember_sync.tools.results` -- MCP ``CallToolResult`` shaping;
* :mod:`~remember_sync.tools._schema` -- the JSON Schema subset arguments are
  validated with (:func:`validate_arguments`, also used for the MCP server's
  user tools).

A plugin built with ``tools={"enabled": True}`` holds its own
:class:`MemoryTools`; reach it through ``plugin.tool_definitions()`` and
``plugin.call_tool()``.
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
