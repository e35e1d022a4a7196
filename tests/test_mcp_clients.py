"""Client conformance (issue 19): the MCP clients people run against a real ``serve``.

Clients: the official Python ``mcp`` client on the session-ful legacy revision and on the
stateless 2026-07-28 one; the TypeScript SDK 1.x client (``@modelcontextprotocol/sdk``, embedded
by most IDEs and desktop hosts); the TypeScript SDK 2.x client (``@modelcontextprotocol/client``,
``versionNegotiation: auto``, which settles on 2026-07-28 here); the MCP Inspector CLI
(``--protocol-era auto``, one process per call, as a person runs it); and ``mcp-remote``, the stdio
bridge desktop hosts run, spoken to over its stdin/stdout. The npm packages are pinned in
``tests/package.json`` + ``package-lock.json`` (``npm ci --prefix tests``; ``.ci/run`` does it).

For every client: the memory tools are listed with both schemas; every tool's success path; and
every error path arrives as the tool's error *text* (``"<CODE>: <message>"``, ``isError``) that the
model can read and act on -- not as an exception the host swallows (SDK 1.x and the Inspector
raise ``-32602`` when an error result carries ``structuredContent`` that breaks the output schema)
and not as a transport error (a value over ``max_value_bytes`` must not be a ``413``).

Each client runs its whole plan once per module (one Node process per client and server; the
Inspector one per call); the tests then assert on the recorded outcomes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.client_drivers import (
    INSPECTOR,
    NODE_MODULES,
    Outcome,
    Step,
    node_binary,
    node_env,
    node_version,
    run_inspector,
    run_node_driver,
    run_python,
)
from tests.conftest import TEST_SECRET, require_component
from tests.mcp_wire import DEFAULT_MAX_VALUE_BYTES
from tests.served import Served, serve
from tests.test_cli import child_env

MODERN = "2026-07-28"

#: Every client, and whether it is stateless here (negotiates 2026-07-28: no session, so its
#: session scope needs an authenticated caller).
CLIENTS: dict[str, bool] = {
    "python-legacy": False,
    "python-2026-07-28": True,
    "ts-sdk-1": False,
    "ts-client-2": True,
    "inspector-cli": True,
    "mcp-remote": False,
}
NODE_CLIENTS = ("ts-sdk-1", "ts-client-2", "inspector-cli", "mcp-remote")
#: Node.js the Inspector 2.x needs (its package.json ``engines``).
INSPECTOR_NODE = (22, 19)

#: How many steps of the token plan are tools/list and the success path (they run in order).
SUCCESS_STEPS = 7
TOOLS = ["remember_this", "recall", "forget", "list_memories", "search_memories"]
VALUE = {"theme": "dark", "sizes": [1, 2.5], "nested": {"ok": True, "none": None}}
#: A value whose serialised entry is just over max_value_bytes (serve's default, 1 MiB).
OVERSIZED = "x" * DEFAULT_MAX_VALUE_BYTES
#: The Inspector CLI takes arguments on its command line, and Linux caps one argument at 128 KiB
#: (MAX_ARG_STRLEN): it sends its oversized value to a server with --max-value-bytes SMALL_MAX.
SMALL_MAX = 64 * 1024

#: Stands for the client's key (key_of) in ERROR_CASES.
KEY = "<key>"
#: Error cases run on the authenticated server: (step name, tool, arguments, code, must mention).
ERROR_CASES: list[tuple[str, str, dict[str, Any], str, str]] = [
    ("missing-argument", "recall", {}, "REMEMBER_INVALID_INPUT", "key"),
    ("ttl-not-an-integer", "remember_this", {"key": KEY, "value": 1, "ttl": "abc"},
     "REMEMBER_INVALID_INPUT", "ttl"),
    ("ttl-negative", "remember_this", {"key": KEY, "value": 1, "ttl": -1},
     "REMEMBER_INVALID_INPUT", "ttl"),
    ("scope-not-allowed", "recall", {"key": KEY, "scope": "global"},
     "REMEMBER_SCOPE_NOT_ALLOWED", "global"),
    ("oversized-value", "remember_this", {"key": KEY, "value": OVERSIZED},
     "REMEMBER_INVALID_INPUT", "max_value_bytes"),
]


def key_of(client: str) -> str:
    """Each client its own key: stateless clients of one user share session-scope memory."""
    return f"note-{client}"


def token_plan(client: str) -> tuple[list[str], list[Step]]:
    """Step names and steps on the authenticated server: list, success path, error paths."""
    key = key_of(client)
    steps: list[tuple[str, Step]] = [
        ("list", {"op": "list"}),
        ("remember", _call("remember_this", key=key, value=VALUE, ttl=600)),
        ("recall", _call("recall", key=key)),
        ("list_memories", _call("list_memories")),
        ("search_memories", _call("search_memories", query="dark theme")),
        ("forget", _call("forget", key=key)),
        ("recall-gone", _call("recall", key=key)),
    ]
    assert len(steps) == SUCCESS_STEPS
    for name, tool, args, _, _ in ERROR_CASES:  # oversized last: a transport error may end a run
        arguments = {k: key if v == KEY else v for k, v in args.items()}
        if client == "inspector-cli" and name == "oversized-value":
            arguments["value"] = "x" * SMALL_MAX  # to the small server (see SMALL_MAX)
        steps.append((name, _call(tool, **arguments)))
    return [n for n, _ in steps], [s for _, s in steps]


def anonymous_plan(client: str) -> tuple[list[str], list[Step]]:
    """On the anonymous server: user scope, and the default (session) scope."""
    key = key_of(client)
    return (["user-scope", "session-scope"],
            [_call("recall", key=key, scope="user"), _call("recall", key=key)])


def _call(name: str, **arguments: Any) -> Step:
    return {"op": "call", "name": name, "arguments": arguments}


# -- servers and client runs --------------------------------------------------------------------


class Servers:
    """The authenticated server (and its token) and the anonymous one, for the whole module."""

    def __init__(self, workdir: Path) -> None:
        env = child_env(REMEMBER_SECRET=TEST_SECRET)
        self.started: list[Served] = []
        # serve's default loopback mode: it writes the token, the clients present it.
        token_file = workdir / "token"
        self.token_server = self._start(
            ["--token-file", str(token_file), "--user", "alice"], workdir, env)
        self.token = token_file.read_text(encoding="utf-8").strip()
        self.anonymous_server = self._start(["--allow-anonymous"], workdir, env)
        # The same token file, so the same token (serve reuses it).
        self.small_server = self._start(
            ["--token-file", str(token_file), "--user", "alice",
             "--max-value-bytes", str(SMALL_MAX)], workdir, env)

    def _start(self, args: list[str], workdir: Path, env: dict[str, str]) -> Served:
        server = serve(workdir, *args, env=env, exact_env=True)
        self.started.append(server)
        server.wait_ready()
        return server

    def stop(self) -> None:
        for server in self.started:
            server.close()


class ClientRun:
    """What one client surfaced for both plans, by step name, and how long it took."""

    def __init__(self, outcomes: dict[str, Outcome], connect: dict[str, Any],
                 seconds: float) -> None:
        self.outcomes = outcomes
        self.connect = connect
        self.seconds = seconds

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        listed = self.outcomes["list"]
        assert "tools" in listed, listed
        return {tool["name"]: tool for tool in listed["tools"]}


class Runs:
    """Runs each client once, on first use, against both servers."""

    def __init__(self, servers: Servers, home: Path) -> None:
        self.servers = servers
        self.home = home
        self.cache: dict[str, ClientRun] = {}

    def __getitem__(self, client: str) -> ClientRun:
        if client not in self.cache:
            started = time.perf_counter()
            auth = {"Authorization": f"Bearer {self.servers.token}"}
            plans = [(self.servers.token_server.url, auth, token_plan(client)),
                     (self.servers.anonymous_server.url, {}, anonymous_plan(client))]
            outcomes: dict[str, Outcome] = {}
            connect: dict[str, Any] = {}
            if client == "inspector-cli":
                # One process per call: the success path in order, then the rest at once.
                names = [name for _, _, (names, _) in plans for name in names]
                calls = [(url, headers, step) for url, headers, (_, steps) in plans
                         for step in steps]
                oversized = names.index("oversized-value")
                calls[oversized] = (self.servers.small_server.url, auth, calls[oversized][2])
                results = run_inspector(self._node(), calls, node_env(self.home / client),
                                        in_order=SUCCESS_STEPS)
                outcomes.update(zip(names, results, strict=True))
            else:
                for url, headers, (names, steps) in plans:
                    seen, results = self._run(client, url, headers, steps)
                    connect = connect or seen
                    outcomes.update(zip(names, results, strict=True))
            self.cache[client] = ClientRun(outcomes, connect, time.perf_counter() - started)
        return self.cache[client]

    @staticmethod
    def _node() -> str:
        node = node_binary()
        assert node is not None
        return node

    def _run(self, client: str, url: str, headers: dict[str, str], steps: list[Step]
             ) -> tuple[dict[str, Any], list[Outcome]]:
        if client.startswith("python-"):
            return run_python(url, headers, steps,
                              mode="legacy" if client == "python-legacy" else MODERN)
        script = {"ts-sdk-1": "ts_sdk1.mjs", "ts-client-2": "ts_client2.mjs",
                  "mcp-remote": "mcp_remote.mjs"}[client]
        return run_node_driver(self._node(), script, url, headers, steps,
                               node_env(self.home / client), options={"mode": "auto"})


def _require_node_clients() -> None:
    node = node_binary()
    require_component("node", node is not None, "install Node.js (apt-get install nodejs npm)")
    require_component(
        "tests/node_modules", (NODE_MODULES / "mcp-remote").is_dir() and INSPECTOR.is_dir(),
        "run `npm ci --prefix tests` (the pinned MCP clients of tests/package.json)")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    started = Servers(tmp_path_factory.mktemp("clients-serve"))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def runs(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(servers, tmp_path_factory.mktemp("clients-home"))


@pytest.fixture(params=list(CLIENTS))
def client(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name in NODE_CLIENTS:
        _require_node_clients()
        if name == "inspector-cli":
            node = node_binary()
            assert node is not None
            require_component(
                f"Node.js >= {INSPECTOR_NODE[0]}.{INSPECTOR_NODE[1]} (the Inspector's engines)",
                node_version(node) >= INSPECTOR_NODE,
                f"{node} is older; tests/package.json pins node-linux-* 22 for linux x64/arm64")
    return name


# -- assertions ---------------------------------------------------------------------------------


def result_of(run: ClientRun, step: str) -> dict[str, Any]:
    """The call's result; a client exception fails, naming it (the model never saw the text)."""
    outcome = run.outcomes[step]
    assert "error" not in outcome, (
        f"{step}: the client raised instead of surfacing the tool result: {outcome['error']}")
    result: dict[str, Any] = outcome["result"]
    return result


def assert_conforms(content: Any, schema: dict[str, Any], what: str) -> None:
    """*content* matches *schema*, else one line saying what breaks it."""
    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(content))
    if error is not None:
        raise AssertionError(f"{what} breaks the tool's outputSchema ({error.message}): {content}")


def structured(run: ClientRun, step: str, tool: str) -> dict[str, Any]:
    """A successful call's structured content, checked against the tool's output schema."""
    result = result_of(run, step)
    assert result.get("isError") is not True, result
    content: dict[str, Any] = result["structuredContent"]
    assert_conforms(content, run.tools[tool]["outputSchema"], f"{step}: structuredContent")
    text = [c["text"] for c in result["content"] if c.get("type") == "text"]
    assert text and json.loads(text[0]) == content  # the same, for clients that read only text
    return content


def assert_tool_error(run: ClientRun, step: str, tool: str, code: str, mention: str = "") -> None:
    """The error arrives as the tool's text "<CODE>: <message>" with isError; no schema breach."""
    result = result_of(run, step)
    assert result.get("isError") is True, result
    text = [c["text"] for c in result["content"] if c.get("type") == "text"]
    assert text and text[0].startswith(f"{code}: "), result
    assert mention in text[0].split(": ", 1)[1], text[0]
    if "structuredContent" in result:  # the spec: structured results MUST match outputSchema
        # (SDK 1.x and the Inspector enforce it even on errors: -32602, the text never shown).
        assert_conforms(result["structuredContent"], run.tools[tool]["outputSchema"],
                        f"{step}: the error result's structuredContent")


# -- the suite ----------------------------------------------------------------------------------


def test_lists_the_memory_tools(runs: Runs, client: str) -> None:
    """tools/list: the memory tools, each with an input and an output schema."""
    run = runs[client]
    tools = run.tools
    assert list(tools) == TOOLS
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object"
        assert tool["outputSchema"]["type"] == "object"
        jsonschema.validators.validator_for(tool["outputSchema"]).check_schema(
            tool["outputSchema"])
    if "protocolVersion" in run.connect:  # the era each client was meant to negotiate
        assert (run.connect["protocolVersion"] == MODERN) is CLIENTS[client], run.connect


def test_every_tool_succeeds(runs: Runs, client: str) -> None:
    """remember_this, recall (found), list_memories (shows the key), search_memories (finds
    it, written by remember_this), forget, recall (gone)."""
    run = runs[client]
    key = key_of(client)
    stored = structured(run, "remember", "remember_this")
    assert stored["success"] is True and stored["key"] == key
    assert stored["expiresAt"] > time.time() * 1000
    found = structured(run, "recall", "recall")
    assert found["found"] is True and found["value"] == VALUE
    assert key in structured(run, "list_memories", "list_memories")["keys"]
    results = structured(run, "search_memories", "search_memories")["results"]
    assert key in [r["key"] for r in results]
    assert next(r for r in results if r["key"] == key)["writtenBy"] == "remember_this"
    assert structured(run, "forget", "forget")["existed"] is True
    assert structured(run, "recall-gone", "recall")["found"] is False


@pytest.mark.parametrize("case", [c[0] for c in ERROR_CASES])
def test_errors_reach_the_model_as_tool_text(runs: Runs, client: str, case: str) -> None:
    """Bad arguments, a disallowed scope, an oversized value: the tool's error text."""
    _, tool, _, code, mention = next(c for c in ERROR_CASES if c[0] == case)
    assert_tool_error(runs[client], case, tool, code, mention)


def test_identity_required_reaches_the_model(runs: Runs, client: str) -> None:
    """Anonymous server: user scope needs an authenticated caller, on every client.

    The default session scope needs one only without a session: stateless (2026-07-28) clients
    get REMEMBER_IDENTITY_REQUIRED, session-ful ones get their per-session memory.
    """
    run = runs[client]
    assert_tool_error(run, "user-scope", "recall", "REMEMBER_IDENTITY_REQUIRED")
    if CLIENTS[client]:
        assert_tool_error(run, "session-scope", "recall", "REMEMBER_IDENTITY_REQUIRED")
    else:
        assert structured(run, "session-scope", "recall")["found"] is False


def test_node_clients_are_pinned() -> None:
    """tests/package.json pins every client exactly, and the lock file matches it."""
    tests = Path(__file__).resolve().parent
    package = json.loads((tests / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((tests / "package-lock.json").read_text(encoding="utf-8"))
    pinned = {**package["dependencies"], **package.get("optionalDependencies", {})}
    assert {"@modelcontextprotocol/sdk", "@modelcontextprotocol/client",
            "@modelcontextprotocol/inspector", "mcp-remote"} <= set(pinned)
    for name, version in pinned.items():
        assert version[0].isdigit(), f"{name} is not pinned exactly: {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
