"""Helpers shared by the tests that drive MCP servers with the official ``mcp`` client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body to completion."""
    return anyio.run(main)


async def structured(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured content."""
    result = await client.call_tool(name, args)
    assert result.is_error is False, result
    content: dict[str, Any] = result.structured_content  # type: ignore[assignment]
    return content


async def error_code(client: Client, name: str, args: dict[str, Any]) -> str:
    """Call a tool that must fail; return the error's code.

    The code is read from the one text content, ``"<CODE>: <message>"``; an error
    result carries no structured content (it would have to match the tool's output
    schema).
    """
    result = await client.call_tool(name, args)
    assert result.is_error is True, result
    assert result.structured_content is None, result
    (content,) = result.content
    text: str = content.text  # type: ignore[union-attr]
    code, sep, message = text.partition(": ")
    assert sep and code.isupper() and message, text
    return code


@asynccontextmanager
async def connect(url: str, *, mode: str = "legacy", token: str | None = None
                  ) -> AsyncIterator[Client]:
    """The official client over Streamable HTTP, optionally with a bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client
