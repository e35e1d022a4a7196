"""The MCP messages and headers that raw-HTTP tests send: one copy of each."""

from __future__ import annotations

from typing import Any

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
