"""The MCP messages and headers that raw-HTTP tests send: one copy of each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from remember_sync.tools import error_parts

#: What a Streamable HTTP client sends with every POST.
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
#: The newest handshake-era protocol revision.
LATEST = "2025-11-25"


def initialize(protocol: str = LATEST, *, id: int = 1, client: str = "t") -> dict[str, Any]:
    """A JSON-RPC ``initialize`` request for *protocol*."""
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": protocol,
            "capabilities": {},
            "clientInfo": {"name": client, "version": "1"},
        },
    }


#: ``initialize`` at :data:`LATEST`.
INIT = initialize()

#: The largest value a memory may hold by default (docs/mcp.rst: 1 MiB).
DEFAULT_MAX_VALUE_BYTES = 1024 * 1024


def body_limit(max_value_bytes: int) -> int:
    """The default HTTP body limit docs/mcp.rst states: ``3 * max_value_bytes + 64 KiB``."""
    return 3 * max_value_bytes + 64 * 1024


#: The stateless protocol revision (no handshake; every request says its revision).
MODERN = "2026-07-28"


def rpc(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    """A JSON-RPC request (``params`` left out when ``None``)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(name: str, arguments: Any = None, request_id: Any = 1) -> dict[str, Any]:
    """A ``tools/call`` request (``{}`` for arguments left out)."""
    return rpc("tools/call", {"name": name, "arguments": {} if arguments is None else arguments},
               request_id)


def modern(
    method: str, params: dict[str, Any] | None = None, *, version: str = MODERN,
    request_id: Any = 1,
) -> tuple[dict[str, Any], dict[str, str]]:
    """A stateless-era request: the message (its ``_meta`` names *version*) and the headers
    that mirror it."""
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        **params.get("_meta", {}),
    }
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return rpc(method, params, request_id), headers


def tool_code(result: dict[str, Any]) -> str:
    """The code of a tool error result (its text "<CODE>: <message>"; no structuredContent)."""
    assert "structuredContent" not in result, result  # it would break the outputSchema
    return error_parts(result)[0]


@dataclass
class Reply:
    """One HTTP reply: status, headers (a dict or the ``http.client`` message), body."""

    status: int
    headers: Any
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = self.json["error"]
        return error

    @property
    def result(self) -> dict[str, Any]:
        result: dict[str, Any] = self.json["result"]
        return result

    def tool_code(self) -> str | None:
        """The code of a tool error result, ``None`` for a success."""
        result = self.json.get("result") or {}
        return tool_code(result) if result.get("isError") else None

    def structured(self) -> dict[str, Any]:
        return dict(self.json["result"]["structuredContent"])
