"""Small things users hit: help texts, generated secrets, one name per variable, the Flask mount.

* ``remember-sync --help`` cited "SPEC section 7", which users do not have;
* ``reindex --help`` said "Needs no secret" and then where secrets come from;
* ``secret generate`` could print a secret starting with ``-`` (``--token $T``
  then reads it as an option);
* ``KV_REST_API_URL`` was spelled in two modules;
* docs/integrations.rst said a Flask mount answers ``401`` to a caller with no
  token and no user; it opens an anonymous session (the documented model, see
  docs/authentication.rst), and ``401`` only when a token verifier is set;
* docs/mcp.rst described a production start without a secret that
  ``create_app()`` on Redis refuses;
* the README did not say that ``serve`` needs its local token, nor that the
  MCP-client tests need ``npm ci --prefix tests``, and had no quick subset.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from remember_sync import generate_secret
from remember_sync.errors import RememberConfigurationError
from remember_sync.integrations.flask import RememberSync, get_plugin
from remember_sync.mcp import McpServer, create_app
from remember_sync.mcp.auth import load_or_create_local_token
from tests.conftest import TEST_SECRET
from tests.mcp_wire import ACCEPT, INIT

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "remember_sync"


def _help(*args: str) -> str:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, "-m", "remember_sync", *args, "--help"],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


def test_help_cites_nothing_users_do_not_have() -> None:
    """No help page of any command points at the SPEC (it is not shipped)."""
    top = _help()
    assert "SPEC" not in top
    for command in ("purge-legacy", "reindex", "doctor", "rotate", "serve"):
        assert "SPEC" not in _help(command), command


def test_reindex_help_says_when_it_needs_a_secret() -> None:
    """reindex needs a secret only with --embeddings, and its help says so next to the
    sources; commands that read values list them."""
    reindex = " ".join(_help("reindex").split())
    assert "the index is rebuilt without any secret" in reindex
    assert "the secret options and the secret sources below are for --embeddings" in reindex
    assert "needs no secret" not in reindex.lower()
    assert "Secrets come from" in _help("rotate")


def test_generated_secrets_and_tokens_never_start_with_a_dash(tmp_path: Path) -> None:
    """20,000 draws (about 600 would start with - or _ before): none does, all 43 characters."""
    drawn = [generate_secret() for _ in range(20_000)]
    assert all(len(s) == 43 and s[0].isalnum() for s in drawn)
    assert len(set(drawn)) == len(drawn)
    assert {s[0] for s in drawn} >= set("AZaz09")  # the first character is still spread
    token, created = load_or_create_local_token(tmp_path / "tokens" / "local-token")
    assert created and token[0].isalnum()


def _string_constants(path: Path) -> set[str]:
    """The string literals of a module, docstrings excluded."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    }


@pytest.mark.parametrize("name", ["KV_REST_API_URL", "KV_REST_API_TOKEN", "REDIS_URL"])
def test_each_store_variable_is_named_in_one_module(name: str) -> None:
    """The environment's store variables are spelled once, in _config."""
    holders = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*.py"))
        if name in _string_constants(p)
    ]
    assert holders == ["_config.py"]


def _mounted_app(**config: Any) -> Flask:
    app = Flask("anonymous_mount")
    app.config.update(
        REMEMBER_SECRET=TEST_SECRET,
        REMEMBER_TOOLS={"enabled": True},
        REMEMBER_OPTIONS={"skip_legacy_purge": True},
        **config,
    )
    RememberSync(app)
    # The mount exactly as docs/integrations.rst shows it.
    app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, {"/mcp": McpServer(get_plugin(app), path=None)}
    )
    return app


def _call(client: Any, session: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}
    headers = {**ACCEPT, "Mcp-Session-Id": session}
    reply = client.post("/mcp", data=json.dumps(body), headers=headers)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    result: dict[str, Any] = reply.get_json()["result"]
    return result


def test_a_flask_mount_gives_a_caller_without_user_or_token_an_anonymous_session() -> None:
    """As documented: a session of its own, session scope only; never user scope."""
    client = _mounted_app().test_client()
    init = client.post("/mcp", data=json.dumps(INIT), headers=ACCEPT)
    assert init.status_code == 200
    session = init.headers["Mcp-Session-Id"]
    stored = _call(client, session, "remember_this", {"key": "k", "value": 1, "scope": "session"})
    assert stored["isError"] is False
    recalled = _call(client, session, "recall", {"key": "k", "scope": "session"})
    assert recalled["structuredContent"]["value"] == 1
    refused = _call(client, session, "remember_this", {"key": "k", "value": 1, "scope": "user"})
    assert refused["isError"] is True and "REMEMBER_IDENTITY_REQUIRED" in json.dumps(refused)
    other = client.post("/mcp", data=json.dumps(INIT), headers=ACCEPT)
    theirs = other.headers["Mcp-Session-Id"]
    assert _call(client, theirs, "recall", {"key": "k", "scope": "session"})[
        "structuredContent"
    ]["found"] is False


def test_a_flask_mount_with_a_token_verifier_answers_401() -> None:
    """With REMEMBER_TOKEN_VERIFIER, no user and no token: 401 and a Bearer challenge."""
    verifier = {"token-carol-0123456789": "carol"}.get
    client = _mounted_app(REMEMBER_TOKEN_VERIFIER=verifier).test_client()
    reply = client.post("/mcp", data=json.dumps(INIT), headers=ACCEPT)
    assert reply.status_code == 401
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert "Mcp-Session-Id" not in reply.headers


def test_the_docs_say_what_the_flask_mount_does() -> None:
    """docs/integrations.rst no longer promises 401 to every caller without a user or token."""
    text = " ".join((REPO / "docs" / "integrations.rst").read_text(encoding="utf-8").split())
    assert "(no token and no user: ``401``)" not in text
    assert "**anonymous**" in text and "unless ``REMEMBER_TOKEN_VERIFIER`` is set" in text


def test_the_documented_production_start_needs_a_secret(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_app() on Redis refuses to start without a secret, as docs/mcp.rst now says."""
    monkeypatch.setenv("REMEMBER_ENV", "production")
    with pytest.raises(RememberConfigurationError, match="no secret configured"):
        create_app(redis_url=redis_url)
    text = " ".join((REPO / "docs" / "mcp.rst").read_text(encoding="utf-8").split())
    assert "gives each process its own random secret" not in text
    assert "``create_app()`` (and ``serve``) with Redis or Vercel KV refuse to start" in text


def test_the_readme_says_what_the_tests_and_serve_need() -> None:
    """The first commands as they were; npm ci and a quick subset beside them; serve's token."""
    text = (REPO / "README.rst").read_text(encoding="utf-8")
    head = text.split("``remember_sync`` gives", 1)[0]
    first = "    pip install . && remember-sync demo\n    pip install -e '.[test]' && pytest\n"
    assert first in head
    assert "npm ci --prefix tests" in head and "skipped" in head
    quick = head.rsplit("::", 1)[1].replace("\\", " ").split()
    assert quick[0] == "pytest" and all((REPO / path).exists() for path in quick[1:])
    serve = text.split("Give a model memory: the MCP server", 1)[1].split("Who the caller is", 1)[0]
    assert "Authorization: Bearer" in serve and "serve-token" in serve
