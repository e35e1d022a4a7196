"""The Flask bridge with real Flask-Login: who the mounted MCP server and the views see.

A Flask app with Flask-Login's ``LoginManager`` (its ``current_user`` is an
``AnonymousUserMixin`` -- truthy, ``is_authenticated`` false -- for a caller
who is not signed in), ``RememberSync`` with ``REMEMBER_USER_LOADER`` reading
``current_user``, and the MCP server mounted as docs/integrations.rst shows
(werkzeug's ``DispatcherMiddleware``, or returned from a view), driven with
Flask's test client.  A caller who is not signed in is anonymous, as the docs
say: the MCP endpoint answers ``200`` with a server-signed session of its own
(no ``401``), ``user`` scope is ``REMEMBER_IDENTITY_REQUIRED``, and two such
callers never share memory; with ``REMEMBER_TOKEN_VERIFIER`` set it is ``401``
with a ``Bearer`` challenge.  A signed-in user is the principal in both the
views and the tools.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask, request
from flask.testing import FlaskClient
from flask_login import AnonymousUserMixin, LoginManager, UserMixin, current_user, login_user
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from remember_sync.integrations.flask import RememberSync, get_plugin, remember, request_identity
from remember_sync.mcp import McpServer
from tests.conftest import TEST_SECRET
from tests.mcp_wire import ACCEPT, INIT, call

TOKENS = {"token-carol-0123456789": "carol"}


class User(UserMixin):
    def __init__(self, user_id: str) -> None:
        self.id = user_id


USERS = {name: User(name) for name in ("alice", "bob")}

#: The two ways to hand Flask-Login's user to the extension.
LOADERS: dict[str, Callable[[], object]] = {
    "get_id": lambda: current_user.get_id(),
    "current_user": lambda: current_user,
}


def bridge(loader: Callable[[], object], mount: str, **config: Any) -> Flask:
    """The Flask-Login bridge: login view, a user-memory view, the MCP mount."""
    app = Flask("flask_login_bridge")
    app.secret_key = "flask-login-bridge-test-key-0123456789"
    login = LoginManager(app)
    login.user_loader(USERS.get)
    app.config.update(
        REMEMBER_SECRET=TEST_SECRET,
        REMEMBER_TOOLS={"enabled": True},
        REMEMBER_USER_LOADER=loader,
        REMEMBER_OPTIONS={"skip_legacy_purge": True},
        **config,
    )
    RememberSync(app)

    @app.post("/login")
    def sign_in() -> dict[str, Any]:
        login_user(USERS[request.form["user"]])
        return {"ok": True}

    @app.get("/whoami")
    def whoami() -> dict[str, Any]:
        return {
            "anonymous_user": isinstance(current_user._get_current_object(), AnonymousUserMixin),
            "truthy": bool(current_user),
            "authenticated": current_user.is_authenticated,
            "principal": request_identity().user_id,
        }

    @app.get("/mine")
    def mine() -> dict[str, Any]:
        return {"notes": {k: e.value for k, e in remember.entries(scope="user").items()}}

    mcp = McpServer(get_plugin(app), path=None)
    if mount == "dispatch":
        app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, {"/mcp": mcp}
        )
    else:
        app.add_url_rule("/mcp", "mcp", lambda: mcp, methods=["POST", "GET", "DELETE"])
    return app


def signed_in(app: Flask, user: str) -> FlaskClient:
    client = app.test_client()
    assert client.post("/login", data={"user": user}).status_code == 200
    return client


def open_session(client: FlaskClient) -> str:
    reply = client.post("/mcp", json=INIT, headers=ACCEPT)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    return str(reply.headers["Mcp-Session-Id"])


def tool(client: FlaskClient, sid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    reply = client.post("/mcp", json=call(name, args, 2),
                        headers={**ACCEPT, "Mcp-Session-Id": sid})  # fmt: skip
    assert reply.status_code == 200, reply.get_data(as_text=True)
    result: dict[str, Any] = reply.get_json()["result"]
    return result


def error_of(result: dict[str, Any]) -> str:
    assert result["isError"] is True, result
    return str(result["content"][0]["text"]).split(":", 1)[0]


@pytest.fixture(params=["dispatch", "view"])
def mount(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=sorted(LOADERS))
def loader(request: pytest.FixtureRequest) -> Callable[[], object]:
    return LOADERS[request.param]


def test_a_caller_not_signed_in_is_anonymous_not_401(
    loader: Callable[[], object], mount: str
) -> None:
    """Flask-Login's anonymous user (truthy, not authenticated) is no principal: the
    mount serves it a session of its own, refuses it ``user`` scope, and two such
    callers do not share session memory."""
    app = bridge(loader, mount)
    first, second = app.test_client(), app.test_client()
    assert first.get("/whoami").get_json() == {
        "anonymous_user": True, "truthy": True, "authenticated": False, "principal": None,
    }  # fmt: skip
    mine = first.get("/mine")
    assert mine.status_code == 403
    assert mine.get_json()["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"

    sid = open_session(first)
    user_scope = tool(first, sid, "remember_this", {"key": "k", "value": 1, "scope": "user"})
    assert error_of(user_scope) == "REMEMBER_IDENTITY_REQUIRED"
    kept = tool(first, sid, "remember_this", {"key": "color", "value": "blue"})
    assert kept["isError"] is False, kept
    assert tool(first, sid, "recall", {"key": "color"})["structuredContent"]["value"] == "blue"

    other = open_session(second)
    assert other != sid
    recalled = tool(second, other, "recall", {"key": "color"})
    assert recalled.get("structuredContent", {}).get("value") != "blue", recalled
    assert tool(second, other, "list_memories", {})["structuredContent"]["keys"] == []
    get_plugin(app).close()


def test_a_signed_in_user_is_the_principal_of_views_and_tools(
    loader: Callable[[], object], mount: str
) -> None:
    """alice signed in with Flask-Login: her MCP ``user`` memory is what her view reads;
    bob sees none of it; her MCP session is refused to a caller not signed in."""
    app = bridge(loader, mount)
    alice, bob = signed_in(app, "alice"), signed_in(app, "bob")
    assert alice.get("/whoami").get_json()["principal"] == "alice"
    sid = open_session(alice)
    kept = tool(alice, sid, "remember_this", {"key": "color", "value": "blue", "scope": "user"})
    assert kept["isError"] is False, kept
    assert alice.get("/mine").get_json() == {"notes": {"color": "blue"}}
    assert bob.get("/mine").get_json() == {"notes": {}}
    stranger = app.test_client().post(
        "/mcp", json=call("list_memories", {}, 2), headers={**ACCEPT, "Mcp-Session-Id": sid}
    )
    assert stranger.status_code == 404
    get_plugin(app).close()


def test_with_a_token_verifier_a_caller_not_signed_in_gets_401(mount: str) -> None:
    """REMEMBER_TOKEN_VERIFIER closes the mount: no user and no token is ``401`` with a
    ``Bearer`` challenge; a signed-in user and a token holder are served."""
    app = bridge(LOADERS["get_id"], mount, REMEMBER_TOKEN_VERIFIER=TOKENS.get)
    refused = app.test_client().post("/mcp", json=INIT, headers=ACCEPT)
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert open_session(signed_in(app, "alice"))
    token = app.test_client().post(
        "/mcp", json=INIT, headers={**ACCEPT, "Authorization": "Bearer token-carol-0123456789"}
    )
    assert token.status_code == 200
    get_plugin(app).close()


class Guest(AnonymousUserMixin):
    """An app's own anonymous user with an id of its own (Flask-Login allows it)."""

    def get_id(self) -> str:
        return "guest"


def test_a_custom_anonymous_user_with_an_id_is_still_no_principal(mount: str) -> None:
    """``login_manager.anonymous_user`` with a ``get_id()``: handed over as the user
    object, it is not authenticated, so no principal -- callers not signed in never
    share a ``guest`` user's memory."""
    app = bridge(LOADERS["current_user"], mount)
    app.login_manager.anonymous_user = Guest  # type: ignore[attr-defined]
    first, second = app.test_client(), app.test_client()
    assert first.get("/whoami").get_json()["principal"] is None
    sid = open_session(first)
    user_scope = tool(first, sid, "remember_this", {"key": "k", "value": 1, "scope": "user"})
    assert error_of(user_scope) == "REMEMBER_IDENTITY_REQUIRED"
    assert second.get("/mine").status_code == 403
    get_plugin(app).close()


class _Inactive:
    """A user object that says it is not authenticated (e.g. a deactivated account)."""

    is_authenticated = False

    def get_id(self) -> str:
        return "mallory"


def test_a_user_object_not_authenticated_signs_no_one_in(mount: str) -> None:
    app = bridge(lambda: _Inactive(), mount)
    client = app.test_client()
    assert client.get("/whoami").get_json()["principal"] is None
    assert client.get("/mine").status_code == 403
    get_plugin(app).close()
