"""Building the MCP server from plain options: token files, verifiers, ``create_app``."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from remember_sync import (
    Identity,
    RememberConfigurationError,
    RememberInputError,
    RememberPlugin,
)
from remember_sync.mcp import McpServer, StaticTokenVerifier, create_app, load_token_file
from tests.conftest import TEST_SECRET
from tests.mcp_wire import body_limit

TOKEN_A, TOKEN_B = "a" * 20, "b" * 20


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_token_file_lines(tmp_path: Path) -> None:
    """`token principal` lines, with comments and blank lines skipped."""
    path = write(tmp_path / "t", f"# comment\n\n{TOKEN_A} alice\n  {TOKEN_B}\tbob  \n")
    assert load_token_file(path) == {TOKEN_A: "alice", TOKEN_B: "bob"}


def test_token_file_json(tmp_path: Path) -> None:
    """A JSON object token -> principal is accepted too."""
    path = write(tmp_path / "t", json.dumps({TOKEN_A: "alice"}))
    assert load_token_file(path) == {TOKEN_A: "alice"}


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        (f"{TOKEN_A} alice\n", 0o644, "chmod 600"),
        (f"{TOKEN_A} alice\n", 0o640, "mode 0640"),
        (f"{TOKEN_A}\n", 0o600, "line 1: expected `<token> <principal>`"),
        (f"{TOKEN_A} alice extra\n", 0o600, "two fields"),
        (f"{TOKEN_A} alice\n{TOKEN_A} bob\n", 0o600, "line 2: repeats a token"),
        ("{not json", 0o600, "not valid JSON"),
        ('{"token": 5}', 0o600, "JSON object"),
    ],
)
def test_bad_token_files_are_refused(tmp_path: Path, text: str, mode: int, expected: str) -> None:
    """A token file others can read, or a malformed one, is a configuration error."""
    path = write(tmp_path / "tokens", text, mode)
    with pytest.raises(RememberConfigurationError, match=expected.replace("(", r"\(")):
        load_token_file(path)


def test_missing_token_file(tmp_path: Path) -> None:
    """A missing file is a configuration error naming it."""
    with pytest.raises(RememberConfigurationError, match="cannot read the auth tokens file"):
        load_token_file(tmp_path / "nope")


def test_static_verifier() -> None:
    """Known tokens map to their principal; others to None; the repr shows no token."""
    verifier = StaticTokenVerifier({TOKEN_A: "alice", TOKEN_B: "bob"})
    assert (verifier(TOKEN_A), verifier(TOKEN_B), verifier("c" * 20)) == ("alice", "bob", None)
    assert verifier.principals == ["alice", "bob"]
    assert TOKEN_A not in repr(verifier)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ({"short": "alice"}, "at least 16"),
        ({TOKEN_A: "anon:123"}, "anon:"),
        ({TOKEN_A: " "}, "non-empty"),
        ({}, "empty"),
    ],
)
def test_static_verifier_refuses_weak_tables(tokens: dict[str, str], expected: str) -> None:
    """Short tokens, anonymous or empty principals and empty tables are refused."""
    with pytest.raises(RememberConfigurationError, match=expected):
        StaticTokenVerifier(tokens)


def _post(app: McpServer, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": app.path or "/", "CONTENT_LENGTH":
               str(len(data)), "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(data)}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in (headers or {}).items()})
    statuses: list[str] = []
    out = b"".join(app(environ, lambda status, h: statuses.append(status)))
    return statuses[0], json.loads(out) if out else None


def _initialize(app: McpServer, headers: dict[str, str]) -> str:
    """Open a session (handshake-era requests need one); its Mcp-Session-Id."""
    data = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25"}}).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": app.path or "/", "CONTENT_LENGTH":
               str(len(data)), "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(data)}
    environ.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
    sent: list[dict[str, str]] = []
    b"".join(app(environ, lambda status, h: sent.append(dict(h))))
    return sent[0]["Mcp-Session-Id"]


def test_create_app_reads_the_environment(tmp_path: Path) -> None:
    """create_app() takes prefix, scopes, TTL and the token file from REMEMBER_* variables."""
    tokens = write(tmp_path / "tokens", f"{TOKEN_A} alice\n")
    environ = {
        "REMEMBER_TOOLS_PREFIX": "mem_",
        "REMEMBER_ALLOWED_SCOPES": "user, global",
        "REMEMBER_DEFAULT_TTL": "60",
        "REMEMBER_AUTH_TOKENS": str(tokens),
        "REMEMBER_SECRET": TEST_SECRET,
    }
    app = create_app(environ=environ)
    try:
        assert [d["name"] for d in app.tool_definitions()][0] == "mem_remember_this"
        assert app.plugin.tools_options["allowed_scopes"] == ["user", "global"]
        memory = app.plugin.accessor(Identity(user_id="carol"))
        memory.set("t", 1, scope="user")  # REMEMBER_DEFAULT_TTL: it expires in 60 s
        entry = memory.get_entry("t", scope="user")
        assert entry is not None and entry.expires_at is not None
        assert 0 < entry.expires_at - entry.updated_at <= 60_000
        status, _ = _post(app, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert status.startswith("401")
        alice = {"Authorization": f"Bearer {TOKEN_A}"}
        alice["Mcp-Session-Id"] = _initialize(app, alice)
        status, reply = _post(
            app,
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "mem_remember_this", "arguments": {"key": "k", "value": 1,
                                                           "scope": "user"}}},
            alice,
        )
        assert status == "200 OK" and "expiresAt" in reply["result"]["structuredContent"]
    finally:
        app.close()


def test_create_app_stays_anonymous_without_auth_tokens(tmp_path: Path) -> None:
    """create_app() has no local token: no REMEMBER_AUTH_TOKENS, anonymous callers, no file."""
    environ = {"REMEMBER_SECRET": TEST_SECRET, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    app = create_app(environ=environ)
    try:
        assert app.token_verifier is None
        session = _initialize(app, {})
        status, reply = _post(app, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": {"name": "recall",
                                               "arguments": {"key": "k", "scope": "user"}}},
                              {"Mcp-Session-Id": session})
        assert status == "200 OK"
        assert reply["result"]["isError"] is True
        assert "REMEMBER_IDENTITY_REQUIRED" in reply["result"]["content"][0]["text"]
        assert not (tmp_path / "config").exists()
    finally:
        app.close()


def test_create_app_arguments_win_and_reach_the_server(make_plugin: Any) -> None:
    """Keyword arguments override the environment; the rest configure McpServer."""
    app = create_app(tools_prefix="x_", environ={"REMEMBER_TOOLS_PREFIX": "mem_"},
                     max_body_bytes=10, path="/rpc")
    try:
        assert app.tool_definitions()[0]["name"] == "x_remember_this"
        assert app.max_body_bytes == 10 and app.path == "/rpc"
    finally:
        app.close()
    # A plugin passed in is not closed (closing would empty the memory store it owns).
    with RememberPlugin.init(tools={"enabled": True}, encryption={"secrets": [TEST_SECRET]},
                             skip_legacy_purge=True) as mine:
        mine.accessor(Identity("s")).set("k", 1)
        app = create_app(plugin=mine, environ={})
        app.close()
        assert mine.accessor(Identity("s")).get("k") == 1


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"REMEMBER_DEFAULT_TTL": "soon"}, "REMEMBER_DEFAULT_TTL"),
        ({"REMEMBER_ALLOWED_SCOPES": "session,forever"}, "forever"),
        ({"REMEMBER_TOOLS_PREFIX": "my prefix"}, "tools prefix"),
        ({"REMEMBER_REDIS_URL": "redis://127.0.0.1:1", "REMEMBER_VERCEL_KV": "1"}, "not both"),
    ],
)
def test_create_app_refuses_bad_settings(environ: dict[str, str], expected: str) -> None:
    """Bad REMEMBER_* values are configuration errors naming the problem."""
    with pytest.raises(RememberConfigurationError, match=expected):
        create_app(environ={"REMEMBER_SECRET": TEST_SECRET, **environ})


def test_mcp_server_checks_its_arguments(make_plugin: Any) -> None:
    """McpServer refuses a non-plugin, a bad body limit and a non-callable verifier."""
    plugin = make_plugin()
    with pytest.raises(TypeError, match="RememberPlugin"):
        McpServer(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_body_bytes"):
        McpServer(plugin, max_body_bytes=0)
    with pytest.raises(TypeError, match="token_verifier"):
        McpServer(plugin, token_verifier="secret")  # type: ignore[arg-type]
    assert "anonymous" in repr(McpServer(plugin))


def test_principal_resolver_names_the_caller_before_any_token(make_plugin: Any) -> None:
    """A resolved principal is the caller (no token read); None falls through to the token."""
    plugin = make_plugin(tools={"enabled": True})
    seen: list[Any] = []

    def resolver(environ: Any) -> str | None:
        seen.append(environ.get("HTTP_X_TEST_USER"))
        return environ.get("HTTP_X_TEST_USER") or None

    verifier = StaticTokenVerifier({"t" * 16: "bob"})
    app = McpServer(plugin, principal_resolver=resolver, token_verifier=verifier, path=None)
    remember = {"name": "remember_this",
                "arguments": {"key": "k", "value": "v", "scope": "user"}}
    recall = {"name": "recall", "arguments": {"key": "k", "scope": "user"}}
    alice = {"X-Test-User": "alice"}
    session = _initialize(app, alice)
    status, reply = _post(app, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": remember}, {**alice, "Mcp-Session-Id": session})
    assert status == "200 OK" and reply["result"]["isError"] is False
    assert plugin.accessor(Identity(user_id="alice")).get("k", scope="user") == "v"
    # Unresolved: the bearer token decides; bob does not see alice's memory.
    status, _ = _post(app, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert status == "401 Unauthorized"
    bob = {"Authorization": "Bearer " + "t" * 16}
    session = _initialize(app, bob)
    status, reply = _post(app, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                "params": recall}, {**bob, "Mcp-Session-Id": session})
    assert reply["result"]["structuredContent"]["found"] is False
    assert seen and set(seen) == {"alice", None}


def test_a_failing_principal_resolver_refuses(make_plugin: Any) -> None:
    """A resolver that raises gives 503, never an anonymous caller; a bad return is a bug."""
    plugin = make_plugin(tools={"enabled": True})

    def broken(environ: Any) -> str | None:
        raise RuntimeError("directory down")

    app = McpServer(plugin, principal_resolver=broken, path=None)
    status, reply = _post(app, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                "params": {"protocolVersion": "2025-11-25"}})
    assert status == "503 Service Unavailable"
    assert "could not be identified" in reply["error"]["message"]
    bad = McpServer(plugin, principal_resolver=lambda environ: "anon:x", path=None)
    status, _ = _post(bad, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                            "params": {"protocolVersion": "2025-11-25"}})
    assert status == "500 Internal Server Error"
    with pytest.raises(TypeError, match="principal_resolver must be a callable"):
        McpServer(plugin, principal_resolver="alice")  # type: ignore[arg-type]


def test_max_value_bytes_from_the_environment_sets_the_body_limit(tmp_path: Path) -> None:
    """REMEMBER_MAX_VALUE_BYTES bounds values; the HTTP body limit follows it."""
    app = create_app(environ={"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_MAX_VALUE_BYTES": "100"})
    try:
        memory = app.plugin.accessor(Identity(user_id="carol"))
        with pytest.raises(RememberInputError, match="max_value_bytes is 100"):
            memory.set("too-big", "x" * 101, scope="user")
        assert app.max_body_bytes == body_limit(100)
    finally:
        app.close()
    with pytest.raises(RememberConfigurationError, match="REMEMBER_MAX_VALUE_BYTES"):
        create_app(environ={"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_MAX_VALUE_BYTES": "0"})
