"""The two MCP protocol eras of :class:`~remember_sync.mcp.McpServer`.

The handshake era (``initialize``, sessions, 2025-03-26 batches) and the 2026-07-28
era (no handshake, the ``params._meta`` envelope), chosen per ``POST`` by the
``MCP-Protocol-Version`` header (see :mod:`.server`).  :class:`ProtocolDispatch`
answers one ``POST`` body of an :class:`~._wsgi.McpRequest`; its sessions come
from a :class:`~._gate.SessionGate`, its tools from the server (:class:`ToolHost`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import JsonRpcError
from ..types import Identity
from ._gate import SessionGate
from ._wsgi import McpRequest, _Response
from .protocol import (
    ALL_PROTOCOL_VERSIONS,
    BATCH_PROTOCOL_VERSIONS,
    CLIENT_CAPABILITIES_META_KEY,
    HANDSHAKE_PROTOCOL_VERSIONS,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_HANDSHAKE_VERSION,
    MAX_BATCH_MESSAGES,
    METHOD_NOT_FOUND,
    MODERN_PROTOCOL_VERSIONS,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    declares_modern_version,
    error_body,
    is_request_id,
    modern_error_status,
    params_of,
)

log = logging.getLogger("remember_sync.mcp")
_NOT_ONE_MESSAGE = "Body must be a single JSON-RPC request or notification object"


@dataclass(frozen=True)
class _Call:
    """One JSON-RPC request being served."""

    request_id: Any
    method: str
    params: dict[str, Any]
    identity: Identity
    modern: bool


class ToolHost(Protocol):
    """What the protocol asks of its server: who it is and its tools."""

    name: str
    version: str
    instructions: str | None

    def tool_definitions(self) -> list[dict[str, Any]]: ...

    def call_tool(
        self, name: str, arguments: dict[str, Any], who: Identity,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]: ...  # fmt: skip


class ProtocolDispatch:
    """``POST`` handling for both protocol eras: ``dispatch(request, body) -> reply``."""

    def __init__(self, host: ToolHost, sessions: SessionGate) -> None:
        self.host = host
        self.sessions = sessions

    # -- POST: one JSON-RPC message (or a 2025-03-26 batch) --------------------------------

    def __call__(self, request: McpRequest, body: bytes) -> _Response:
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return _Response.error(400, "Parse error: the body is not valid JSON", code=PARSE_ERROR)
        version = request.protocol_version
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            return self._legacy(message, request)
        if version in MODERN_PROTOCOL_VERSIONS or declares_modern_version(message):
            # A body with a 2026-07-28 envelope gets that era's answer even when its
            # version is unknown (-32022, or a header/body mismatch).
            return self._modern(message, request)
        request_id = message.get("id") if isinstance(message, dict) else None
        requested = str(version)
        return _Response.error(
            400,
            f"Bad Request: unsupported MCP-Protocol-Version header {requested[:64]!r}; this "
            f"server speaks {', '.join(ALL_PROTOCOL_VERSIONS)}",
            code=UNSUPPORTED_PROTOCOL_VERSION,
            request_id=request_id if is_request_id(request_id) else None,
            data={"supported": list(ALL_PROTOCOL_VERSIONS), "requested": requested},
        )

    def _legacy(self, message: Any, request: McpRequest) -> _Response:
        if isinstance(message, list):
            return self._legacy_batch(message, request)
        if not isinstance(message, dict):
            return _Response.error(
                400,
                "Invalid request: the body must be a JSON-RPC message object (or, at protocol "
                "revision 2025-03-26, a batch array of them)",
            )
        request_id = message.get("id") if is_request_id(message.get("id")) else None
        if message.get("method") != "initialize" or request.session_id is not None:
            # Never bind (or even look at) a session this server did not issue to this
            # caller, or one that was ended.
            refused = self.sessions.require(request, request_id)
            if refused is not None:
                return refused
        headers: list[tuple[str, str]] = []
        who = Identity(session_id=request.session_id, user_id=request.principal)
        status, payload = self._legacy_message(message, who, request.principal, headers)
        if payload is None:
            return _Response(202)
        return _Response.json(status, payload, headers)

    def _legacy_batch(self, batch: list[Any], request: McpRequest) -> _Response:
        """A JSON-RPC batch (2025-03-26): every member answered in one JSON array."""
        version = request.protocol_version
        if version is not None and version not in BATCH_PROTOCOL_VERSIONS:
            return _Response.error(
                400,
                f"Bad Request: JSON-RPC batches are not part of protocol revision {version} "
                "(2025-06-18 removed them); send one message per request",
            )
        if not batch:
            return _Response.error(400, "Invalid request: the batch is empty")
        if len(batch) > MAX_BATCH_MESSAGES:
            return _Response.error(
                400,
                f"Invalid request: a batch of {len(batch)} messages; this server takes at most "
                f"{MAX_BATCH_MESSAGES} per request",
            )
        if any(isinstance(m, dict) and m.get("method") == "initialize" for m in batch):
            return _Response.error(
                400, "Invalid request: initialize must not be part of a JSON-RPC batch"
            )
        refused = self.sessions.require(request)
        if refused is None:  # the request counted once already; each further member counts
            refused = self.sessions.rate_check(request, cost=len(batch) - 1)
        if refused is not None:
            return refused
        who = Identity(session_id=request.session_id, user_id=request.principal)
        replies: list[dict[str, Any]] = []
        for message in batch:
            if not isinstance(message, dict):
                replies.append(
                    error_body(
                        None,
                        INVALID_REQUEST,
                        "Invalid request: each batch member must be a JSON-RPC message object",
                    )
                )
                continue
            _, payload = self._legacy_message(message, who, request.principal, [])
            if payload is not None:
                replies.append(payload)
        if not replies:
            return _Response(202)  # only notifications and responses
        return _Response.json(200, replies)

    def _legacy_message(
        self,
        message: dict[str, Any],
        who: Identity,
        principal: str | None,
        headers: list[tuple[str, str]],
    ) -> tuple[int, dict[str, Any] | None]:
        """One handshake-era message: ``(HTTP status, reply)``; ``None``: nothing to reply."""
        if "method" not in message:
            if "id" in message and ("result" in message or "error" in message):
                return 202, None  # a reply to a server request; we never send any
            return 400, error_body(None, INVALID_REQUEST, "Invalid request: no method")
        if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
            return 400, error_body(
                None, INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message"
            )
        if "id" not in message:
            return 202, None  # notifications/initialized, cancelled, ...: nothing to do
        request_id = message["id"]
        if not is_request_id(request_id):
            return 400, error_body(
                None, INVALID_REQUEST, "Invalid request: id must be a string or an integer"
            )
        method: str = message["method"]
        try:
            params = params_of(message)
            if method == "initialize":
                result = self._initialize(params, principal, headers)
            elif method == "ping":
                result = {}
            else:
                result = self._dispatch(_Call(request_id, method, params, who, modern=False))
        except JsonRpcError as exc:
            return 200, error_body(request_id, exc.rpc_code, exc.message, exc.data)
        return 200, {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _initialize(
        self, params: Mapping[str, Any], principal: str | None, headers: list[tuple[str, str]]
    ) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise JsonRpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        negotiated = (
            requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        )
        headers.append(("Mcp-Session-Id", self.sessions.issue(principal)))
        result: dict[str, Any] = {
            "protocolVersion": negotiated,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": self._server_info(),
        }
        if self.host.instructions:
            result["instructions"] = self.host.instructions
        return result

    def _modern(self, message: Any, request: McpRequest) -> _Response:
        version_header = request.protocol_version
        if isinstance(message, list):
            return self._modern_error(
                None,
                INVALID_REQUEST,
                f"JSON-RPC batches are not part of protocol revision {version_header}; "
                "send one request or notification per HTTP request",
            )
        if not isinstance(message, dict):
            return self._modern_error(None, INVALID_REQUEST, _NOT_ONE_MESSAGE)
        if "id" not in message:
            if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
                return self._modern_error(None, INVALID_REQUEST, _NOT_ONE_MESSAGE)
            if version_header not in MODERN_PROTOCOL_VERSIONS:
                return self._unsupported_version(None, str(version_header))
            return _Response(202)  # 2026-07-28 defines no client notifications: accept, drop
        request_id = message.get("id")
        if (
            message.get("jsonrpc") != "2.0"
            or not is_request_id(request_id)
            or not isinstance(message.get("method"), str)
            or not isinstance(message.get("params", {}), dict)
        ):
            return self._modern_error(None, INVALID_REQUEST, _NOT_ONE_MESSAGE)
        method: str = message["method"]
        params: dict[str, Any] = message.get("params") or {}
        rejection = self._ladder(method, params, request)
        if rejection is not None:
            return self._modern_error(request_id, *rejection)
        call = _Call(request_id, method, params, Identity(user_id=request.principal), modern=True)
        try:
            if method == "server/discover":
                result = self._discover()
            else:
                result = self._dispatch(call)
        except JsonRpcError as exc:
            return self._modern_error(request_id, exc.rpc_code, exc.message, exc.data)
        result.setdefault("resultType", "complete")
        meta = result.get("_meta")
        result["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: self._server_info()}
        return _Response.json(200, {"jsonrpc": "2.0", "id": request_id, "result": result})

    def _ladder(
        self, method: str, params: Mapping[str, Any], request: McpRequest
    ) -> tuple[int, str, Any] | None:
        """The 2026-07-28 envelope checks, in the SDK's order; the first failure or None."""
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            return (
                INVALID_PARAMS,
                "params._meta must be an object carrying the required "
                f"{PROTOCOL_VERSION_META_KEY!r} and {CLIENT_CAPABILITIES_META_KEY!r} envelope keys",
                None,
            )
        missing = [
            k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta
        ]
        if missing:
            return (
                INVALID_PARAMS,
                f"params._meta is missing the required envelope key(s): {', '.join(missing)}",
                None,
            )
        version = meta[PROTOCOL_VERSION_META_KEY]
        if request.protocol_version != version:
            return (
                HEADER_MISMATCH,
                "mcp-protocol-version header does not match the request envelope's protocol "
                "version",
                None,
            )
        if request.mcp_method != method:
            return (
                HEADER_MISMATCH,
                "mcp-method header does not match the request body's method",
                None,
            )
        if method == "tools/call" and params.get("name") is not None:
            if request.mcp_name != params.get("name"):
                return (
                    HEADER_MISMATCH,
                    "mcp-name header does not match the request body's 'name' parameter",
                    None,
                )
        if not isinstance(version, str):
            return (INVALID_PARAMS, "the protocol-version envelope value must be a string", None)
        if version not in MODERN_PROTOCOL_VERSIONS:
            return self._unsupported_data(version)
        return None

    @staticmethod
    def _unsupported_data(requested: str) -> tuple[int, str, Any]:
        return (
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(ALL_PROTOCOL_VERSIONS), "requested": requested},
        )

    def _unsupported_version(self, request_id: Any, requested: str) -> _Response:
        return self._modern_error(request_id, *self._unsupported_data(requested))

    @staticmethod
    def _modern_error(request_id: Any, code: int, message: str, data: Any = None) -> _Response:
        return _Response.json(
            modern_error_status(code), error_body(request_id, code, message, data)
        )

    def _server_info(self) -> dict[str, str]:
        return {"name": self.host.name, "version": self.host.version}

    def _discover(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": list(MODERN_PROTOCOL_VERSIONS),
            "capabilities": {"tools": {"listChanged": False}},
            "resultType": "complete",
            # The answer is the same for every caller and changes only on a restart.
            "ttlMs": 0,
            "cacheScope": "public",
        }
        if self.host.instructions:
            result["instructions"] = self.host.instructions
        return result

    # -- methods shared by both eras ----------------------------------------------------

    def _dispatch(self, call: _Call) -> dict[str, Any]:
        if call.method == "tools/list":
            if call.params.get("cursor") is not None:
                raise JsonRpcError(
                    INVALID_PARAMS, "Invalid cursor: this server lists every tool at once"
                )
            result: dict[str, Any] = {"tools": self.host.tool_definitions()}
            if call.modern:
                result.update(ttlMs=0, cacheScope="public")
            return result
        if call.method == "tools/call":
            name = call.params.get("name")
            if not isinstance(name, str) or not name:
                raise JsonRpcError(INVALID_PARAMS, "tools/call needs params.name (a string)")
            arguments = call.params.get("arguments")
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise JsonRpcError(INVALID_PARAMS, "tools/call params.arguments must be an object")
            meta = call.params.get("_meta")
            log.debug("tools/call %s (session=%s)", name, bool(call.identity.session_id))
            return self.host.call_tool(
                name, arguments, call.identity, meta if isinstance(meta, dict) else None
            )
        raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {call.method}")

