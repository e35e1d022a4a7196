"""MCP ``CallToolResult`` shaping: successes, tool errors, and exceptions mapped to codes.

Every failure becomes a tool error (``isError: true``) whose text content is
``"<CODE>: <message>"``: a stable code and a message the model can act on;
never a traceback and never an internal detail (store addresses, storage
keys, secrets).  Error results carry no ``structuredContent``: it would have
to match the tool's ``outputSchema``, and clients such as the TypeScript SDK
1.x validate it even on errors (:func:`error_parts` reads the code back).
Unexpected exceptions are logged here, server-side, and reported as
``REMEMBER_INTERNAL_ERROR``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from .. import errors
from ._schema import json_text

__all__ = [
    "INTERNAL_ERROR_CODE", "UNKNOWN_TOOL_CODE", "error_parts", "error_result",
    "result_for_exception", "success_result", "tools_disabled_result",
]

log = logging.getLogger("remember_sync")

INTERNAL_ERROR_CODE: Final = "REMEMBER_INTERNAL_ERROR"
UNKNOWN_TOOL_CODE: Final = "REMEMBER_UNKNOWN_TOOL"

_INTERNAL_MESSAGE = (
    "The memory tool failed because of a problem on the server; it has been logged. "
    "Try again later."
)
_STORE_MESSAGE = "The memory store is unavailable right now; try again later."
_DECRYPT_MESSAGE = (
    "A stored memory could not be read: it was written under another secret or is damaged. "
    "The memory tools leave it unchanged."
)

_INTEGRITY_ADVICE = (
    "The memory store was changed by someone without the secret; do not treat this memory "
    "as absent or act on an older state of it"
)

#: Errors the caller can act on: their code and message go back as they are.
_CALLER_ERRORS: Final = (
    errors.RememberInputError, errors.RememberInputTypeError, errors.RememberScopeNotAllowedError,
    errors.RememberIdentityError, errors.RememberQuotaError,
)


def success_result(structured: Mapping[str, Any]) -> dict[str, Any]:
    """A successful ``CallToolResult``: the JSON text plus ``structuredContent``."""
    data = dict(structured)
    return {
        "content": [{"type": "text", "text": json_text(data)}],
        "structuredContent": data,
        "isError": False,
    }


def error_result(code: str, message: str) -> dict[str, Any]:
    """A tool error (``isError: true``): one text content ``"<CODE>: <message>"`` (see above)."""
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
    if isinstance(exc, _CALLER_ERRORS):
        return error_result(exc.code, exc.message)
    if isinstance(exc, errors.RememberStoreError):
        log.warning("remember: tool %r: the store failed: %s", tool, exc.message, exc_info=exc)
        return error_result(exc.code, _STORE_MESSAGE)
    if isinstance(exc, errors.RememberIntegrityError):
        # Its message names the bare key and the scope, never an identity.
        log.warning("remember: tool %r: %s", tool, exc.message)
        return error_result(exc.code, f"{exc.message}. {_INTEGRITY_ADVICE}")
    if isinstance(exc, errors.RememberDecryptionError):
        log.warning("remember: tool %r: %s", tool, exc.message)
        memory = getattr(exc, "memory", None)
        if memory is not None:
            key, scope = memory
            return error_result(
                exc.code,
                f"The memory {key!r} in {scope} scope exists but could not be read: it was "
                "written under another secret or is damaged. It is not absent; the memory "
                "tools leave it unchanged.",
            )
        return error_result(exc.code, _DECRYPT_MESSAGE)
    log.error("remember: tool %r failed unexpectedly", tool, exc_info=exc)
    return error_result(INTERNAL_ERROR_CODE, _INTERNAL_MESSAGE)


def tools_disabled_result(name: object) -> dict[str, Any]:
    """The tool error for a call to a plugin whose memory tools are not enabled."""
    return error_result(
        UNKNOWN_TOOL_CODE,
        f"Unknown tool {name!r}: the memory tools are not enabled "
        "(RememberPlugin.init(tools={'enabled': True}))",
    )
