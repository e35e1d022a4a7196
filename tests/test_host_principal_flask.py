"""One principal for a Flask app and the MCP server mounted in it (issue 20, item 1).

Pins: ``McpServer(get_plugin(app), path=None)`` mounted as docs/integrations.rst
shows it (werkzeug's ``DispatcherMiddleware``, or returned from a view) takes
the app's signed-in user without being told -- ``REMOTE_USER`` set by an auth
layer in front, or a Flask login session read by ``REMEMBER_USER_LOADER`` --
so the model's ``user`` memory (``remember_this`` through the official ``mcp``
client, over a real threaded HTTP server on 127.0.0.1) is what the user's own
view reads; another user sees none of it; an anonymous caller gets
``REMEMBER_IDENTITY_REQUIRED``; an MCP session issued to one user is refused
for another; an explicit ``principal_resolver=None`` opts out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pytest
import redis
import requests
from flask import Flask, request, session
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import make_server

from remember_sync.integrations.flask import RememberSync, get_plugin, remember
from remember_sync.mcp import McpServer
from remember_sync.mcp.auth import host_auth
from tests.conftest import TEST_SECRET
from tests.mcp_client import error_code, run, structured
from tests.mcp_wire import ACCEPT, INIT, call

TOKENS = {"token-carol-0123456789": "carol"}


def _views(app: Flask) -> None:
    @app.get("/mine")
    def mine() -> dict[str, Any]:
        return {"notes": {k: e.value for k, e in remember.entries(scope="user").items()}}


def _with_memory(app: Flask, redis_url: str, **config: Any) -> Flask:
    """RememberSync on *app* (Redis, the test secret, tools on) and the ``/mine`` view."""
    app.config.update(
        REMEMBER_STORE="redis",
        REMEMBER_REDIS_URL=redis_url,
        REMEMBER_SECRET=TEST_SECRET,
        REMEMBER_TOOLS={"enabled": True},
        REMEMBER_OPTIONS={"skip_legacy_purge": True},
        **config,
    )
    RememberSync(app)
    _views(app)
    return app


def remote_user_app(redis_url: str, **config: Any) -> Any:
    """REMOTE_USER from a trusted auth layer in front (here: the X-Test-User header)."""
    app = _with_memory(Flask("remote_user_app"), redis_url, **config)
    # The mount exactly as docs/integrations.rst shows it.
    app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, {"/mcp": McpServer(get_plugin(app), path=None)}
    )

    def auth_layer(environ: dict[str, Any], start_response: Any) -> Any:
        environ.pop("REMOTE_USER", None)
        user = environ.get("HTTP_X_TEST_USER")
        if user:
            environ["REMOTE_USER"] = user
        return app(environ, start_response)

    auth_layer.flask_app = app  # type: ignore[attr-defined]
    return auth_layer


def login_app(redis_url: str) -> Flask:
    """Users sign in with a form; Flask's signed session cookie remembers them."""
    app = Flask("login_app")
    app.secret_key = "flask-login-session-test-key"
    _with_memory(app, redis_url, REMEMBER_USER_LOADER=lambda: session.get("user"))

    @app.post("/login")
    def login() -> dict[str, Any]:
        session["user"] = request.form["user"]
        return {"ok": True}

    # The other shown way: the MCP server returned from a route of the app itself.
    mcp = McpServer(get_plugin(app), path=None)
    app.add_url_rule("/mcp", "mcp", lambda: mcp, methods=["POST", "GET", "DELETE"])
    return app


@contextmanager
def served(app: Any) -> Iterator[str]:
    """*app* on a threaded werkzeug server on 127.0.0.1; yields the base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def mcp_call(url: str, headers: dict[str, str], body: Callable[[Client], Any]) -> Any:
    """Connect the official client with *headers* and run *body* on it."""

    async def main() -> Any:
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(20)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return await body(client)

    return run(main)


def remember_color(client: Client) -> Any:
    return structured(
        client, "remember_this", {"key": "color", "value": "blue", "scope": "user"}
    )


def anonymous_user_scope(client: Client) -> Any:
    return error_code(client, "remember_this", {"key": "k", "value": 1, "scope": "user"})


@pytest.fixture
def clean_redis(redis_client: redis.Redis, redis_url: str) -> str:
    return redis_url


def test_remote_user_mount_shares_user_memory(clean_redis: str) -> None:
    """REMOTE_USER: the model's user memory is the signed-in user's view; others see none."""
    app = remote_user_app(clean_redis)
    with served(app) as base:
        mcp_call(f"{base}/mcp", {"X-Test-User": "alice"}, remember_color)
        mine = requests.get(f"{base}/mine", headers={"X-Test-User": "alice"}, timeout=10)
        assert mine.json() == {"notes": {"color": "blue"}}
        other = requests.get(f"{base}/mine", headers={"X-Test-User": "bob"}, timeout=10)
        assert other.json() == {"notes": {}}
        assert mcp_call(f"{base}/mcp", {}, anonymous_user_scope) == "REMEMBER_IDENTITY_REQUIRED"
    app.flask_app.extensions["remember_sync"].close()


def test_remote_user_session_is_bound_to_its_user(clean_redis: str) -> None:
    """An MCP session issued to alice is refused (404) when bob presents it."""
    app = remote_user_app(clean_redis)
    with served(app) as base:
        reply = requests.post(
            f"{base}/mcp", json=INIT, headers={**ACCEPT, "X-Test-User": "alice"}, timeout=10
        )
        sid = reply.headers["Mcp-Session-Id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        for user, status in (("alice", 200), ("bob", 404)):
            headers = {**ACCEPT, "X-Test-User": user, "Mcp-Session-Id": sid}
            answer = requests.post(f"{base}/mcp", json=listing, headers=headers, timeout=10)
            assert answer.status_code == status, (user, answer.text)
    app.flask_app.extensions["remember_sync"].close()


def test_login_session_app_shares_user_memory(clean_redis: str) -> None:
    """A Flask login session (cookie) is the MCP caller's user too; logged-out is anonymous."""
    app = login_app(clean_redis)
    with served(app) as base:
        alice, bob = requests.Session(), requests.Session()
        alice.post(f"{base}/login", data={"user": "alice"}, timeout=10).raise_for_status()
        bob.post(f"{base}/login", data={"user": "bob"}, timeout=10).raise_for_status()
        cookie = f"session={alice.cookies['session']}"
        mcp_call(f"{base}/mcp", {"Cookie": cookie}, remember_color)
        assert alice.get(f"{base}/mine", timeout=10).json() == {"notes": {"color": "blue"}}
        assert bob.get(f"{base}/mine", timeout=10).json() == {"notes": {}}
        assert mcp_call(f"{base}/mcp", {}, anonymous_user_scope) == "REMEMBER_IDENTITY_REQUIRED"
    app.extensions["remember_sync"].close()


def test_token_verifier_is_inherited_beside_remote_user(clean_redis: str) -> None:
    """With REMEMBER_TOKEN_VERIFIER the mount takes tokens too: no user, no token -> 401."""
    app = remote_user_app(clean_redis, REMEMBER_TOKEN_VERIFIER=TOKENS.get)
    with served(app) as base:
        token = {"Authorization": "Bearer token-carol-0123456789"}
        mcp_call(f"{base}/mcp", token, remember_color)
        assert requests.get(f"{base}/mine", headers=token, timeout=10).json() == {
            "notes": {"color": "blue"}
        }
        # A REMOTE_USER still wins in views and at the MCP endpoint alike.
        both = {**token, "X-Test-User": "alice"}
        assert requests.get(f"{base}/mine", headers=both, timeout=10).json() == {"notes": {}}
        reply = requests.post(f"{base}/mcp", json=INIT, headers=ACCEPT, timeout=10)
        assert reply.status_code == 401
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    app.flask_app.extensions["remember_sync"].close()


def test_explicit_none_opts_out(redis_url: str) -> None:
    """``principal_resolver=None`` ignores the host's users; the default takes them."""
    app = remote_user_app(redis_url).flask_app
    plugin = get_plugin(app)
    found = host_auth(plugin)
    assert found is not None and found.host == "Flask app 'remote_user_app'"
    environ = {"REMOTE_USER": "alice"}
    assert McpServer(plugin).principal_resolver(environ) == "alice"  # type: ignore[misc]
    assert McpServer(plugin, principal_resolver=None).principal_resolver is None
    plugin.close()


def test_a_plugin_shared_by_two_apps_needs_an_explicit_resolver(redis_url: str) -> None:
    """Two Flask apps on one plugin: nothing says whose users MCP takes, so it refuses."""
    from remember_sync.errors import RememberConfigurationError

    first = remote_user_app(redis_url).flask_app
    plugin = get_plugin(first)
    second = Flask("second")
    second.config.update(REMEMBER_PLUGIN=plugin, REMEMBER_USER_LOADER=lambda: None)
    RememberSync(second)
    with pytest.raises(RememberConfigurationError, match="explicitly"):
        McpServer(plugin)
    assert McpServer(plugin, principal_resolver=None, token_verifier=None).token_verifier is None
    plugin.close()


def test_flask_test_client_sees_the_same_principal(clean_redis: str) -> None:
    """With Flask's own test client: MCP ``user`` memory is the REMOTE_USER's view."""
    app = remote_user_app(clean_redis).flask_app
    client = app.test_client()
    alice = {"REMOTE_USER": "alice"}
    reply = client.post("/mcp", json=INIT, headers=ACCEPT, environ_base=alice)
    sid = reply.headers["Mcp-Session-Id"]
    remember = call("remember_this", {"key": "color", "value": "blue", "scope": "user"}, 2)
    headers = {**ACCEPT, "Mcp-Session-Id": sid}
    answer = client.post("/mcp", json=remember, headers=headers, environ_base=alice)
    assert answer.get_json()["result"]["isError"] is False
    assert client.get("/mine", environ_base=alice).get_json() == {"notes": {"color": "blue"}}
    assert client.get("/mine", environ_base={"REMOTE_USER": "bob"}).get_json() == {"notes": {}}
    get_plugin(app).close()
