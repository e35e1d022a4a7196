"""An int identity part is its decimal string everywhere; any other type is a clear error.

Most Flask and Django apps have integer user ids (``current_user.id``).  Such
an id used to raise a raw ``AttributeError`` from ``Identity(user_id=42)``, and
a Flask ``REMEMBER_USER_LOADER`` returning one turned every signed-in MCP
request into a 500 whose log named an internal function.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask, request, session

from remember_sync import Identity, RememberPlugin, identity
from remember_sync.errors import RememberIdentityError, RememberInputError
from remember_sync.integrations.flask import RememberSync, get_plugin, remember
from remember_sync.mcp import McpServer
from tests.conftest import TEST_SECRET
from tests.mcp_wire import ACCEPT, INIT


@pytest.fixture
def plugin() -> Any:
    built = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True)
    yield built
    built.close()


def test_an_int_identity_part_is_its_decimal_string(plugin: RememberPlugin) -> None:
    """Identity, identity() and accessor() take 42 as "42": one user, one namespace."""
    assert Identity(user_id=42) == Identity(user_id="42")
    assert Identity(7, 42, 3) == Identity("7", "42", "3")
    plugin.accessor(Identity(user_id=42)).set("color", "red", scope="user")
    assert plugin.accessor(Identity(user_id="42")).get("color", scope="user") == "red"
    with identity(user_id=42):
        assert plugin.remember.get("color", scope="user") == "red"


@pytest.mark.parametrize("bad", [4.2, True, b"42", ["42"], object()])
@pytest.mark.parametrize("part", ["session_id", "user_id", "tool_name"])
def test_any_other_type_is_an_input_error_naming_the_parameter(part: str, bad: object) -> None:
    """A float, a bool, bytes...: RememberInputError naming the part, at construction."""
    with pytest.raises(RememberInputError, match=part):
        Identity(**{part: bad})
    with pytest.raises(RememberInputError, match=part), identity(**{part: bad}):
        pass  # pragma: no cover - identity() refuses before binding


def test_an_explicit_empty_identity_says_what_it_lacks(plugin: RememberPlugin) -> None:
    """accessor(Identity()) is not "no identity bound": it says what the given one lacks."""
    with pytest.raises(RememberIdentityError) as info:
        plugin.accessor(Identity()).set("k", 1, scope="user")
    assert "No identity is bound" not in str(info.value)
    assert "has no user_id" in str(info.value)
    with pytest.raises(RememberIdentityError) as info:
        plugin.accessor(Identity(user_id="anon:123")).get("k", scope="session")
    assert "no verified session_id and an anonymous user_id" in str(info.value)
    with pytest.raises(RememberIdentityError, match="No identity is bound"):
        plugin.remember.get("k", scope="user")  # nothing given, nothing bound


def _login_app() -> Flask:
    """A Flask app whose login session holds an int user id, with the MCP server mounted."""
    app = Flask("int_user_app")
    app.secret_key = "int-identity-test-key"
    app.config.update(
        REMEMBER_SECRET=TEST_SECRET,
        REMEMBER_TOOLS={"enabled": True},
        REMEMBER_OPTIONS={"skip_legacy_purge": True},
        REMEMBER_USER_LOADER=lambda: session.get("user_id"),
    )
    RememberSync(app)

    @app.post("/login")
    def login() -> dict[str, Any]:
        session["user_id"] = int(request.form["id"])  # as a database id
        return {"ok": True}

    @app.get("/mine")
    def mine() -> dict[str, Any]:
        return {"notes": {k: e.value for k, e in remember.entries(scope="user").items()}}

    mcp = McpServer(get_plugin(app), path=None)
    app.add_url_rule("/mcp", "mcp", lambda: mcp, methods=["POST", "GET", "DELETE"])
    return app


def _rpc(client: Any, body: dict[str, Any], session_id: str | None = None) -> Any:
    headers = dict(ACCEPT)
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    return client.post("/mcp", data=json.dumps(body), headers=headers)


def test_a_flask_user_loader_returning_an_int_id_works_over_mcp() -> None:
    """Signed in as user 42: the MCP call succeeds, and the user's view reads what it wrote."""
    app = _login_app()
    client = app.test_client()
    assert client.post("/login", data={"id": "42"}).status_code == 200
    init = _rpc(client, INIT)
    assert init.status_code == 200, init.get_data(as_text=True)
    session_id = init.headers["Mcp-Session-Id"]
    call = _rpc(
        client,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "remember_this",
                "arguments": {"key": "tea", "value": "green", "scope": "user"},
            },
        },
        session_id,
    )
    assert call.status_code == 200, call.get_data(as_text=True)
    result = call.get_json()["result"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["success"] is True
    assert client.get("/mine").get_json() == {"notes": {"tea": "green"}}
    plugin = get_plugin(app)
    assert plugin.accessor(Identity(user_id="42")).get("tea", scope="user") == "green"
    other = app.test_client()
    other.post("/login", data={"id": "43"})
    assert other.get("/mine").get_json() == {"notes": {}}
