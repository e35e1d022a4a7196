"""Run real MCP clients against a real ``remember-sync serve`` (the clients' conformance suite).

A *plan* is a list of steps, ``{"op": "list"}`` or ``{"op": "call", "name": N, "arguments": A}``;
every runner here answers one *outcome* per step, in order, as plain JSON:
``{"tools": [...]}`` for a list, ``{"result": {...}}`` for a call (the ``CallToolResult`` as the
client surfaced it, camelCase keys) or ``{"error": "..."}`` (the message of what the client raised).
Node clients run from ``tests/node_modules`` (``npm ci --prefix tests``), on the Node.js binary
pinned there when the platform has one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
NODE_MODULES = TESTS / "node_modules"
JS = TESTS / "js"
INSPECTOR = NODE_MODULES / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build"
CLIENT_TIMEOUT = 90.0

Step = dict[str, Any]
Outcome = dict[str, Any]


# -- Node.js ---------------------------------------------------------------------------------


def node_binary() -> str | None:
    """The Node.js pinned in tests/package.json (``node-linux-*``), else the one on PATH.

    The package's own path, not ``.bin/node``: npm 9 (Debian's) installs it without that link.
    """
    for pinned in sorted(NODE_MODULES.glob("node-linux-*/bin/node")):
        if os.access(pinned, os.X_OK):
            return str(pinned)
    return shutil.which("node")


def node_version(node: str) -> tuple[int, int]:
    text = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30,
                          check=True).stdout.strip()
    found = re.match(r"v(\d+)\.(\d+)", text)
    assert found is not None, text
    return int(found.group(1)), int(found.group(2))


def node_env(home: Path) -> dict[str, str]:
    """The environment of a Node client: its config, state and caches under *home*, no browser."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NODE_", "NPM_", "npm_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        MCP_REMOTE_CONFIG_DIR=str(home / "mcp-remote"),
        MCP_CATALOG_PATH=str(home / "inspector-catalog.json"),
        MCP_CLIENT_CONFIG_PATH=str(home / "inspector-client.json"),
        NODE_COMPILE_CACHE=str(home / "node-compile-cache"),  # node >= 22.1: later starts faster
        BROWSER="/bin/false",
        NO_COLOR="1",
    )
    return env


def run_node_driver(
    node: str, script: str, url: str, headers: dict[str, str], steps: list[Step],
    env: dict[str, str], options: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Outcome]]:
    """Run ``tests/js/<script>`` once for the whole plan; its connect line and the outcomes."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as plan:
        json.dump({"options": options or {}, "steps": steps}, plan)
    try:
        done = subprocess.run(
            [node, str(JS / script), url, json.dumps(headers), plan.name],
            cwd=TESTS, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=CLIENT_TIMEOUT,
        )
    finally:
        os.unlink(plan.name)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    context = f"{script} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert lines and lines[0].get("op") == "connect", context
    connect = lines[0]
    assert "error" not in connect, context
    outcomes = [_outcome(line) for line in lines[1:]]
    assert [line["step"] for line in lines[1:]] == list(range(len(steps))), context
    return connect, outcomes


def _outcome(line: dict[str, Any]) -> Outcome:
    for field in ("tools", "result", "error"):
        if field in line:
            return {field: line[field]}
    raise AssertionError(f"a driver line with no outcome: {line}")


Call = tuple[str, dict[str, str], Step]  # (URL, HTTP headers, step)


def run_inspector(
    node: str, calls: list[Call], env: dict[str, str], *, era: str = "auto", in_order: int = 0,
) -> list[Outcome]:
    """The MCP Inspector CLI, one process per call (as a person runs it).

    The first *in_order* calls run one after the other; the rest, which must not depend on
    each other, run concurrently after them.
    """

    def one(call: Call) -> Outcome:
        url, headers, step = call
        argv = [node, str(INSPECTOR / "index.js"), "--cli", "--server-url", url,
                "--transport", "http", "--protocol-era", era, "--format", "json", "--quiet",
                "--stored-auth-only"]
        for name, value in headers.items():
            argv += ["--header", f"{name}: {value}"]
        if step["op"] == "list":
            argv += ["--method", "tools/list"]
        else:
            argv += ["--method", "tools/call", "--tool-name", step["name"],
                     "--tool-args-json", json.dumps(step["arguments"])]
        done = subprocess.run(argv, cwd=TESTS, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
        text = done.stdout.strip() or done.stderr.strip()
        try:
            reply = json.loads(text)
        except ValueError:
            raise AssertionError(
                f"the Inspector printed no JSON (exit {done.returncode}):\n{done.stdout}\n"
                f"{done.stderr}") from None
        if "error" in reply:
            error = reply["error"]
            return {"error": f"{error.get('code')}: {error.get('message')}"}
        result = reply["result"]
        return {"tools": result["tools"]} if step["op"] == "list" else {"result": result}

    outcomes = [one(call) for call in calls[:in_order]]
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes += pool.map(one, calls[in_order:])
    return outcomes


# -- the official Python client ----------------------------------------------------------------


def run_python(
    url: str, headers: dict[str, str], steps: list[Step], *, mode: str
) -> tuple[dict[str, Any], list[Outcome]]:
    """The official ``mcp`` client (*mode* ``"legacy"`` or ``"2026-07-28"``), one connection."""

    async def main() -> tuple[dict[str, Any], list[Outcome]]:
        outcomes: list[Outcome] = []
        async with httpx2.AsyncClient(headers=headers or None,
                                      timeout=httpx2.Timeout(CLIENT_TIMEOUT)) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                connect = {"protocolVersion": client.protocol_version}
                for step in steps:
                    try:
                        if step["op"] == "list":
                            listed = await client.list_tools()
                            outcomes.append({"tools": [
                                t.model_dump(by_alias=True, mode="json", exclude_none=True)
                                for t in listed.tools]})
                        else:
                            result = await client.call_tool(step["name"], step["arguments"])
                            outcomes.append({"result": result.model_dump(
                                by_alias=True, mode="json", exclude_none=True)})
                    except Exception as exc:  # what the client raised is the outcome
                        outcomes.append({"error": f"{type(exc).__name__}: {exc}"})
        return connect, outcomes

    result: tuple[dict[str, Any], list[Outcome]] = anyio.run(main)
    return result
