"""Defects found by an outside review of issue 19 (MCP clients), each pinned by a test.

* a JSON-RPC id, method or tool name holding a lone surrogate (``"\\ud800"``,
  valid JSON, not valid Unicode) made the reply unencodable: ``500`` and a
  traceback per request -- and inside a 2025-03-26 batch the replies of the
  members already run (writes included) were lost;
* an empty ``Mcp-Session-Id`` header was taken for a session id (``404``,
  which tells a client to start over, also on ``initialize``) where ``DELETE``
  already treated it as missing (``400``);
* ``serve --cors-origin`` with a bad port or a wildcard passed the command
  line check and crashed with a ``ValueError`` traceback after creating the
  token file.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remember_sync import RememberPlugin
from remember_sync.mcp import McpServer
from tests.conftest import TEST_SECRET
from tests.mcp_wire import initialize
from tests.served import REPO

INIT = initialize("2025-03-26", client="raw")


def _app() -> McpServer:
    plugin = RememberPlugin.init(tools={"enabled": True}, encryption={"secrets": [TEST_SECRET]})
    return McpServer(plugin, owns_plugin=True)


def _post(
    app: McpServer, body: bytes | Any, headers: dict[str, str] | None = None, method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/mcp",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(raw)),
        "HTTP_ACCEPT": "application/json, text/event-stream",
        "wsgi.input": io.BytesIO(raw),
    }
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    seen: dict[str, Any] = {}

    def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
        seen["status"] = int(status.split()[0])
        seen["headers"] = dict(response_headers)

    out = b"".join(app(environ, start_response))
    return seen["status"], seen["headers"], out


def _session(app: McpServer) -> str:
    status, headers, _ = _post(app, INIT)
    assert status == 200
    return headers["Mcp-Session-Id"]


# -- lone surrogates --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
        b'{"jsonrpc":"2.0","id":3,"method":"\\ud800x"}',
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"\\udfff","arguments":{}}}',
    ],
    ids=["id", "method", "tool-name"],
)
def test_lone_surrogates_are_answered_not_a_500(
    raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    app = _app()
    try:
        sid = _session(app)
        status, headers, body = _post(app, raw, {"Mcp-Session-Id": sid})
        assert status == 200, body
        reply = json.loads(body)  # valid JSON (and UTF-8): the surrogate escaped as \\uXXXX
        sent = json.loads(raw)
        assert reply["id"] == sent["id"]  # the id comes back as the client sent it
        assert "error" in reply or "result" in reply
        assert not [r for r in caplog.records if r.levelname == "ERROR"]
    finally:
        app.close()


def test_a_bad_member_does_not_lose_a_batchs_other_replies() -> None:
    app = _app()
    try:
        sid = _session(app)
        batch = (
            b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"remember_this",'
            b'"arguments":{"key":"k","value":"v"}}},'
            b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}]'
        )
        status, _, body = _post(app, batch, {"Mcp-Session-Id": sid})
        assert status == 200, body
        replies = json.loads(body)
        assert [r["id"] for r in replies] == [1, "\ud800"]
        assert replies[0]["result"]["isError"] is False
    finally:
        app.close()


# -- empty session header ---------------------------------------------------------------------


def test_an_empty_session_header_is_a_missing_one() -> None:
    app = _app()
    try:
        _session(app)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        for headers in ({}, {"Mcp-Session-Id": ""}, {"Mcp-Session-Id": "  "}):
            status, _, body = _post(app, ping, headers)
            assert status == 400, (headers, body)
            assert b"Mcp-Session-Id header is required" in body
            status, _, body = _post(app, [ping], headers)
            assert status == 400, (headers, body)
        # initialize with an empty header starts a session (no 404 "start over" loop)
        status, headers_out, body = _post(app, INIT, {"Mcp-Session-Id": ""})
        assert status == 200, body
        assert headers_out["Mcp-Session-Id"]
        # a garbage one is still an unknown session
        status, _, _ = _post(app, ping, {"Mcp-Session-Id": "garbage"})
        assert status == 404
    finally:
        app.close()


# -- serve --cors-origin ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin", ["http://x.example:99999", "http://x.example:abc", "https://*.example.com"]
)
def test_serve_refuses_a_bad_cors_origin_as_a_usage_error(tmp_path: Path, origin: str) -> None:
    (tmp_path / "home").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", "--cors-origin", origin],
        cwd=tmp_path,
        env={
            **os.environ,
            "REMEMBER_SECRET": TEST_SECRET,
            "PYTHONPATH": str(REPO),
            "HOME": str(tmp_path / "home"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "--cors-origin" in done.stderr and origin in done.stderr
    assert not (tmp_path / "config").exists()  # a refused start creates no token file


@pytest.mark.parametrize("length", ["5_0", "+50", "٥٠", "50 50"])
def test_content_length_is_digits_only(length: str) -> None:
    """RFC 9110 Content-Length is 1*DIGIT: Python's int() spellings are refused with 400."""
    with RememberPlugin.init(tools={"enabled": True}, encryption={"secrets": [TEST_SECRET]},
                             skip_legacy_purge=True) as plugin:
        app = McpServer(plugin, path=None)
        body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}' + b" " * 100
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": length,
                   "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(body)}
        statuses: list[str] = []
        b"".join(app(environ, lambda status, headers: statuses.append(status)))
        assert statuses == ["400 Bad Request"]


@pytest.mark.parametrize("principal", ["", " ", " alice", "anon:x"])
def test_a_resolver_returning_a_blank_or_padded_principal_is_refused(principal: str) -> None:
    """Such a principal would key memory by a name no token or --user could produce."""
    with RememberPlugin.init(tools={"enabled": True}, encryption={"secrets": [TEST_SECRET]},
                             skip_legacy_purge=True) as plugin:
        app = McpServer(plugin, path=None, principal_resolver=lambda environ: principal)
        body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}'
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": str(len(body)),
                   "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(body)}
        statuses: list[str] = []
        b"".join(app(environ, lambda status, headers: statuses.append(status)))
        assert statuses == ["500 Internal Server Error"]
