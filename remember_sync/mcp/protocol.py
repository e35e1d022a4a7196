"""MCP wire constants and JSON-RPC helpers (pure: no I/O, no ``mcp`` import).

The values mirror the official ``mcp`` Python SDK 2.3.0 (``mcp_types.version``,
``mcp_types.jsonrpc``, ``mcp.shared.inbound``), which our tests run against.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, Final

from ..errors import JsonRpcError

__all__ = [
    "ALL_PROTOCOL_VERSIONS",
    "BATCH_PROTOCOL_VERSIONS",
    "CLIENT_CAPABILITIES_META_KEY",
    "CLIENT_INFO_META_KEY",
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LATEST_HANDSHAKE_VERSION",
    "MAX_BATCH_MESSAGES",
    "METHOD_NOT_FOUND",
    "MODERN_PROTOCOL_VERSIONS",
    "PARSE_ERROR",
    "PROTOCOL_VERSION_META_KEY",
    "SERVER_INFO_META_KEY",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "declares_modern_version",
    "decode_header_value",
    "error_body",
    "is_request_id",
    "modern_error_status",
    "params_of",
]

#: Revisions negotiated with the ``initialize`` handshake (sessions exist).
HANDSHAKE_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = (
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
)
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_PROTOCOL_VERSIONS[-1]
#: Revisions with the stateless per-request envelope (``server/discover``, no sessions).
MODERN_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = ("2026-07-28",)
#: Every revision this server speaks, oldest first (the ``supported`` list of -32022).
ALL_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = (
    HANDSHAKE_PROTOCOL_VERSIONS + MODERN_PROTOCOL_VERSIONS
)
#: Revisions whose clients may POST a JSON-RPC batch (2025-03-26: servers MUST accept
#: them; 2025-06-18 removed them).  Clients of these revisions send no
#: ``MCP-Protocol-Version`` header, which 2025-06-18 introduced; a server seeing none
#: "SHOULD assume 2025-03-26", so no header or one of these values allows a batch.
BATCH_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = ("2024-11-05", "2025-03-26")
#: The most messages one batch may carry: a batch cannot multiply one request's work
#: without limit (the body limit bounds its bytes, not its tool calls).
MAX_BATCH_MESSAGES: Final = 100

PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META_KEY: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY: Final = "io.modelcontextprotocol/serverInfo"

# JSON-RPC 2.0 and MCP error codes.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

# At 2026-07-28 the HTTP status follows the JSON-RPC error code (the SDK's
# ERROR_CODE_HTTP_STATUS); unmapped codes answer 200.
_MODERN_STATUS: Final[dict[int, int]] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    -32021: 400,  # missing required client capability
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


def modern_error_status(code: int) -> int:
    """The HTTP status of a 2026-07-28 JSON-RPC error reply."""
    return _MODERN_STATUS.get(code, 200)


def error_body(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response object (``id`` may be ``None``: the request was unreadable)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


_B64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


def decode_header_value(value: str | None) -> str | None:
    """Undo the SDK's ``=?base64?...?=`` header wrapping (``Mcp-Name`` of non-ASCII names).

    A malformed sentinel yields ``None`` so it never matches a body value.
    """
    if value is None:
        return None
    match = _B64_SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded).decode("ascii") != payload:
            return None
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def declares_modern_version(message: object) -> bool:
    """Whether *message* carries a 2026-07-28 envelope version (``params._meta``)."""
    if not isinstance(message, dict):
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def is_request_id(value: object) -> bool:
    """MCP request ids are strings or integers (never ``null``, never a bool)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def params_of(message: Mapping[str, Any]) -> dict[str, Any]:
    """The request's ``params`` object (``{}`` when absent); raise when it is not an object."""
    params = message.get("params")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise JsonRpcError(INVALID_PARAMS, "params must be an object")
    return params
