"""The WSGI middleware, driven as a PEP 3333 server drives it and on a real threaded server.

Pins: principals from ``REMOTE_USER`` or a bearer-token verifier; a session
header bound only when signed for the same principal (the MCP server's ids
included); the identity bound during the call, every body step and
``close()``, and nowhere else (not between steps, not after, not even when a
server forgets ``close()``); RememberErrors become JSON responses.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.util import FileWrapper, setup_testing_defaults

import pytest
import requests

from remember_sync import RememberPlugin, current_identity, identity
from remember_sync.errors import RememberIdentityError, RememberInputError, RememberStoreError
from remember_sync.integrations.wsgi import (
    ENVIRON_IDENTITY,
    ENVIRON_SESSION_REJECTED,
    RememberMiddleware,
    bearer_token,
    bearer_token_resolver,
    error_payload,
    remote_user_resolver,
    session_signer,
)
from remember_sync.types import Identity
from tests.conftest import TEST_SECRET
from tests.mcp_wire import INIT

App = Callable[[dict[str, Any], Any], Iterable[bytes]]


@pytest.fixture
def plugin() -> Iterator[RememberPlugin]:
    """A memory-store plugin with the test secret."""
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True) as made:
        yield made


class Recorder:
    """A WSGI app recording the identity bound at each point of its work."""

    def __init__(self, chunks: int = 2) -> None:
        self.events: list[tuple[str, Identity]] = []
        self.chunks = chunks

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.events.append(("call", current_identity()))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return self._body()

    def _body(self) -> Iterator[bytes]:
        try:
            for i in range(self.chunks):
                self.events.append((f"chunk{i}", current_identity()))
                yield f"{current_identity().user_id};".encode()
        finally:
            self.events.append(("close", current_identity()))


def drive(
    app: App, *, close: bool = True, between: list[Identity] | None = None, **environ: Any
) -> tuple[str, dict[str, str], bytes]:
    """Run one request the way a PEP 3333 server does: call, iterate, close."""
    env: dict[str, Any] = dict(environ)
    setup_testing_defaults(env)
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if exc_info is not None and started and started[-1][2]:
            raise exc_info[1].with_traceback(exc_info[2])
        started.append((status, headers, False))
        return lambda data: None

    result = app(env, start_response)
    body = b""
    try:
        for chunk in result:
            body += chunk
            if between is not None:
                between.append(current_identity())
    finally:
        if close and hasattr(result, "close"):
            result.close()
    status, headers, _ = started[-1]
    return status, dict(headers), body


def test_remote_user_is_bound_for_call_body_and_close_only(plugin: RememberPlugin) -> None:
    """The identity is bound in the call, each body step and close(); never between or after."""
    app = Recorder()
    between: list[Identity] = []
    status, _, body = drive(RememberMiddleware(app, plugin), REMOTE_USER="alice", between=between)
    alice = Identity(user_id="alice")
    assert status == "200 OK" and body == b"alice;alice;"
    assert app.events == [("call", alice), ("chunk0", alice), ("chunk1", alice), ("close", alice)]
    assert between == [Identity(), Identity()]
    assert current_identity() == Identity()


def test_closing_early_runs_the_apps_cleanup_bound(plugin: RememberPlugin) -> None:
    """A response closed before its end still runs the app's cleanup with the identity."""
    app = Recorder(chunks=5)
    result = RememberMiddleware(app, plugin)({**_env(), "REMOTE_USER": "bob"}, lambda *a: None)
    assert next(iter(result)) == b"bob;"
    result.close()  # type: ignore[attr-defined]
    assert app.events[-1] == ("close", Identity(user_id="bob"))
    assert current_identity() == Identity()


def test_a_server_that_never_closes_leaks_nothing(plugin: RememberPlugin) -> None:
    """Even if the server forgets close(), the next request on the thread sees no identity."""
    app = Recorder(chunks=3)
    result = RememberMiddleware(app, plugin)(_env(REMOTE_USER="alice"), lambda *a: None)
    assert next(iter(result)) == b"alice;"  # half-read, then abandoned without close()
    assert current_identity() == Identity()
    assert app.events == [
        ("call", Identity(user_id="alice")),
        ("chunk0", Identity(user_id="alice")),
    ]


def test_outer_binding_is_restored(plugin: RememberPlugin) -> None:
    """A binding made outside the middleware is back in place after each step."""
    outer = Identity(user_id="outer")
    with identity(bound=outer):
        app = Recorder()
        drive(RememberMiddleware(app, plugin), REMOTE_USER="inner")
        assert current_identity() == outer
    assert {i.user_id for _, i in app.events} == {"inner"}


def _env(**extra: Any) -> dict[str, Any]:
    env: dict[str, Any] = dict(extra)
    setup_testing_defaults(env)
    return env


def test_session_header_is_bound_only_when_signed_for_the_principal(
    plugin: RememberPlugin,
) -> None:
    """issue_session ids verify for their principal only; forged ones are ignored and flagged."""
    mw = RememberMiddleware(Recorder(), plugin)
    anon = mw.issue_session()
    alices = mw.issue_session("alice")
    assert mw.resolve(_env(HTTP_MCP_SESSION_ID=anon)) == (Identity(session_id=anon), False)
    assert mw.resolve(_env(HTTP_MCP_SESSION_ID=alices, REMOTE_USER="alice")) == (
        Identity(session_id=alices, user_id="alice"),
        False,
    )
    for presented, user in [
        (alices, None),
        (alices, "bob"),
        (anon, "alice"),
        ("s-1", None),
        ("__stateless__", "alice"),
        (alices[:-1] + ("A" if alices[-1] != "A" else "B"), "alice"),
    ]:
        env = _env(HTTP_MCP_SESSION_ID=presented, **({"REMOTE_USER": user} if user else {}))
        assert mw.resolve(env) == (Identity(user_id=user), True)
    app = Recorder()
    env = _env(HTTP_MCP_SESSION_ID="forged")
    RememberMiddleware(app, plugin)(env, lambda *a: None)
    assert env[ENVIRON_IDENTITY] == Identity() and env[ENVIRON_SESSION_REJECTED] is True


def test_custom_session_header(plugin: RememberPlugin) -> None:
    """session_header names the header read (X-Session here)."""
    mw = RememberMiddleware(Recorder(), plugin, session_header="X-Session")
    sid = mw.issue_session()
    assert mw.resolve(_env(HTTP_X_SESSION=sid))[0] == Identity(session_id=sid)
    assert mw.resolve(_env(HTTP_MCP_SESSION_ID=sid))[0] == Identity()


def test_reject_unverified_session_answers_404(plugin: RememberPlugin) -> None:
    """reject_unverified_session=True: an unverified session header gets a JSON 404."""
    app = Recorder()
    status, headers, body = drive(
        RememberMiddleware(app, plugin, reject_unverified_session=True), HTTP_MCP_SESSION_ID="x"
    )
    assert status == "404 Not Found" and headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "REMEMBER_SESSION_NOT_FOUND"
    assert app.events == []


def test_mcp_server_sessions_verify_in_the_middleware(plugin: RememberPlugin) -> None:
    """A session id issued by the MCP server's initialize is bound by the middleware."""
    from remember_sync.mcp import McpServer

    server = McpServer(plugin)
    payload = json.dumps(INIT).encode()
    status, headers, _ = drive(
        server,
        REQUEST_METHOD="POST",
        PATH_INFO="/mcp",
        CONTENT_TYPE="application/json",
        CONTENT_LENGTH=str(len(payload)),
        HTTP_ACCEPT="application/json, text/event-stream",
        **{"wsgi.input": io.BytesIO(payload)},
    )
    assert status.startswith("200"), status
    sid = headers["Mcp-Session-Id"]
    app = Recorder()
    drive(RememberMiddleware(app, plugin), HTTP_MCP_SESSION_ID=sid)
    assert app.events[0] == ("call", Identity(session_id=sid))


def test_bearer_token_resolver(plugin: RememberPlugin, caplog: pytest.LogCaptureFixture) -> None:
    """A verified bearer token names the principal; missing, wrong or crashing: anonymous."""

    def verify(token: str) -> str | None:
        if token == "crash":
            raise RuntimeError("verifier down")
        return {"tok-alice": "alice"}.get(token)

    resolve = bearer_token_resolver(verify)
    assert resolve({"HTTP_AUTHORIZATION": "Bearer tok-alice"}) == "alice"
    assert resolve({"HTTP_AUTHORIZATION": "bearer   tok-alice "}) == "alice"
    assert resolve({"HTTP_AUTHORIZATION": "Basic tok-alice"}) is None
    assert resolve({"HTTP_AUTHORIZATION": "Bearer nope"}) is None
    assert resolve({}) is None
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        assert resolve({"HTTP_AUTHORIZATION": "Bearer crash"}) is None
    assert "verifier raised" in caplog.text
    assert bearer_token("Bearer ") is None and bearer_token(None) is None
    assert remote_user_resolver({"REMOTE_USER": ""}) is None
    app = Recorder()
    drive(
        RememberMiddleware(app, plugin, principal_resolver=resolve),
        HTTP_AUTHORIZATION="Bearer tok-alice",
    )
    assert app.events[0] == ("call", Identity(user_id="alice"))


def test_resolver_returning_an_int_or_another_type(plugin: RememberPlugin) -> None:
    """An int principal is its decimal string; any other non-str type fails loudly, named."""
    mw = RememberMiddleware(Recorder(), plugin, principal_resolver=lambda env: 42)
    assert mw.resolve(_env())[0].user_id == "42"
    mw = RememberMiddleware(Recorder(), plugin, principal_resolver=lambda env: 4.2)  # type: ignore[arg-type,return-value]
    with pytest.raises(RememberInputError, match="principal resolver's result must be"):
        mw.resolve(_env())


def test_remember_errors_become_json_responses(plugin: RememberPlugin) -> None:
    """An identity error from the app is a JSON 403 with its code, even after start_response."""

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/html")])
        plugin.remember.set("k", 1, scope="session")  # anonymous, no session
        return [b"never"]

    status, headers, body = drive(RememberMiddleware(app, plugin))
    assert status == "403 Forbidden" and headers["Content-Type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == "REMEMBER_IDENTITY_REQUIRED" and "without" in error["message"]
    with pytest.raises(RememberIdentityError):
        drive(RememberMiddleware(app, plugin, error_responses=False))
    assert current_identity() == Identity()


def test_server_errors_hide_their_message() -> None:
    """5xx errors carry a generic message (theirs may name hosts) but keep the code."""
    status, payload = error_payload(RememberStoreError("cannot reach 10.0.0.7:6379"))
    assert status == 503 and payload["error"]["code"] == "REMEMBER_STORE_ERROR"
    assert "10.0.0.7" not in json.dumps(payload)


def test_file_wrapper_passes_through(plugin: RememberPlugin) -> None:
    """A wsgi.file_wrapper response is returned as is so the server can sendfile it."""
    wrapped = FileWrapper(io.BytesIO(b"data"))

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [])
        return wrapped

    result = RememberMiddleware(app, plugin)(
        _env(**{"wsgi.file_wrapper": FileWrapper}), lambda *a: None
    )
    assert result is wrapped


def test_signer_follows_the_plugin_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """session_signer uses the plugin's keyring, or the resolved secret without encryption."""
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True) as p:
        sid = session_signer(p).issue("u")
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    with RememberPlugin.init(encryption={"enabled": False}, skip_legacy_purge=True) as plain:
        assert plain.keyring is None
        assert session_signer(plain).verify(sid, "u")


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_real_threaded_server_keeps_requests_apart(plugin: RememberPlugin) -> None:
    """On a real threaded HTTP server, concurrent users each see only their own memory."""
    barrier = threading.Barrier(2)
    seen: list[Identity] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        user = current_identity().user_id
        if environ["PATH_INFO"] == "/together":
            barrier.wait(timeout=10)
        plugin.remember.set("who", user, scope="user")
        seen.append(current_identity())
        start_response("200 OK", [("Content-Type", "application/json")])
        return [
            json.dumps({"user": user, "stored": plugin.remember.get("who", scope="user")}).encode()
        ]

    def resolver(environ: dict[str, Any]) -> str | None:
        return environ.get("HTTP_X_USER")

    server = make_server(
        "127.0.0.1",
        0,
        RememberMiddleware(app, plugin, principal_resolver=resolver),
        server_class=_ThreadingServer,
        handler_class=_Quiet,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/together"
        results: dict[str, Any] = {}

        def get(user: str) -> None:
            results[user] = requests.get(url, headers={"X-User": user}, timeout=10).json()

        workers = [threading.Thread(target=get, args=(u,)) for u in ("alice", "bob")]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=15)
        assert results == {
            "alice": {"user": "alice", "stored": "alice"},
            "bob": {"user": "bob", "stored": "bob"},
        }
        anon = requests.get(url.replace("together", "x"), timeout=10)
        assert anon.status_code == 403
        assert anon.json()["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert sorted(i.user_id or "" for i in seen) == ["alice", "bob"]
