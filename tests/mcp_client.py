"""Helpers shared by the tests that drive MCP servers with the official ``mcp`` client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body to completion."""
    return anyio.run(main)


async def structured(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured content."""
    result = await client.call_tool(name, args)
    assert result.is_error is False, result
    content: dict[str, Any] = result.structured_content  # type: ignore[assignment]
    return content


async def error_code(
    client: Client, name: str, args: dict[str, Any], *, text_form: bool = False
) -> str:
    """Call a tool that must fail; return the error's code.

    With ``text_form`` also pin the text content to our ``"<CODE>: <message>"`` form.
    """
    result = await client.call_tool(name, args)
    assert result.is_error is True, result
    code: str = result.structured_content["code"]  # type: ignore[index]
    if text_form:
        assert result.content[0].text.startswith(code + ": ")  # type: ignore[union-attr]
    return code
