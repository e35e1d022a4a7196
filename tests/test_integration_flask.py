"""The Flask extension with Flask's own test client against a real Redis store.

Pins: ``REMEMBER_*`` config to a plugin in ``app.extensions``; identities of
two users never mix; session scope without a verified session or a user is a
JSON 403 (not a 500 traceback); forged or foreign session headers are never
bound; nothing stays bound after the response, on this thread or another;
``global-store`` resolves from the app's config, and only for that app.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from flask import Flask, Response, request, stream_with_context

from remember_sync import RememberPlugin, current_identity
from remember_sync.errors import RememberConfigurationError
from remember_sync.integrations.flask import (
    RememberSync,
    get_plugin,
    issue_session,
    options_from_config,
    remember,
    request_identity,
)
from remember_sync.mcp import McpServer
from remember_sync.stores.redis import RedisStore
from remember_sync.types import Identity
from tests.conftest import TEST_SECRET

TOKENS = {"token-alice-0123456789": "alice", "token-bob-0123456789ab": "bob"}


def build_app(**config: Any) -> Flask:
    """A small app using ``remember`` in its views."""
    app = Flask(__name__)
    app.config.update(
        REMEMBER_SECRET=TEST_SECRET, REMEMBER_OPTIONS={"skip_legacy_purge": True}, **config
    )
    RememberSync(app)
    seen: list[Identity] = []
    app.config["SEEN"] = seen

    @app.put("/mem/<scope>/<key>")
    def put(scope: str, key: str) -> dict[str, Any]:
        remember.set(key, request.get_json()["value"], scope=scope)  # type: ignore[arg-type]
        return {"ok": True}

    @app.get("/mem/<scope>/<key>")
    def get(scope: str, key: str) -> dict[str, Any]:
        return {"value": remember.get(key, scope=scope)}  # type: ignore[arg-type]

    @app.get("/whoami")
    def whoami() -> dict[str, Any]:
        ident = current_identity()
        seen.append(ident)
        assert ident == request_identity()
        return {"session_id": ident.session_id, "user_id": ident.user_id}

    @app.post("/session")
    def session() -> dict[str, Any]:
        return {"session_id": issue_session()}

    @app.get("/stream")
    def stream() -> Response:
        def chunks() -> Iterator[str]:
            for _ in range(3):
                yield f"{current_identity().user_id};"

        return Response(stream_with_context(chunks()))

    return app


@pytest.fixture
def make_app(redis_client: redis.Redis, redis_url: str) -> Iterator[Callable[..., Flask]]:
    """Apps over the flushed real Redis (their plugins closed at the end)."""
    apps: list[Flask] = []

    def factory(**config: Any) -> Flask:
        config.setdefault("REMEMBER_STORE", "redis")
        config.setdefault("REMEMBER_REDIS_URL", redis_url)
        app = build_app(**config)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        RememberSync.close(app)


def as_user(name: str | None) -> dict[str, Any]:
    return {"environ_overrides": {"REMOTE_USER": name}} if name else {}


def test_config_builds_a_redis_plugin_in_app_extensions(make_app: Callable[..., Flask]) -> None:
    """REMEMBER_STORE/REDIS_URL/DEFAULT_TTL/KEY_PREFIX land in the plugin in app.extensions."""
    app = make_app(REMEMBER_DEFAULT_TTL=60, REMEMBER_KEY_PREFIX="app1:")
    plugin = app.extensions["remember_sync"]
    assert isinstance(plugin, RememberPlugin) and plugin is get_plugin(app)
    assert isinstance(plugin.store, RedisStore)
    assert plugin.key_prefix == "app1:"
    memory = plugin.accessor(Identity(user_id="alice"))
    memory.set("k", 1, scope="user")  # no ttl=: the default applies
    entry = memory.get_entry("k", scope="user")
    assert entry is not None and entry.expires_at == entry.updated_at + 60_000
    assert plugin.keyring is not None and plugin.keyring.source == "explicit:secrets"


def test_two_users_never_mix(make_app: Callable[..., Flask], redis_client: redis.Redis) -> None:
    """alice and bob write the same key in user and session scope and read only their own."""
    client = make_app().test_client()
    for who, value in (("alice", "red"), ("bob", "blue")):
        for scope in ("user", "session"):
            r = client.put(f"/mem/{scope}/color", json={"value": value}, **as_user(who))
            assert r.status_code == 200, r.get_data(as_text=True)
    for who, value in (("alice", "red"), ("bob", "blue")):
        for scope in ("user", "session"):
            assert client.get(f"/mem/{scope}/color", **as_user(who)).json == {"value": value}
    keys = sorted(k.decode() for k in redis_client.keys("remember:[^_]*"))
    assert keys == [
        "remember:v2:session:stateless-user%3Aalice:color",
        "remember:v2:session:stateless-user%3Abob:color",
        "remember:v2:user:alice:color",
        "remember:v2:user:bob:color",
    ]
    # Encrypted at rest: the plaintext value is not in Redis.
    assert b"red" not in redis_client.get("remember:v2:user:alice:color")  # type: ignore[operator]


@pytest.mark.parametrize("scope", ["session", "user", "tool"])
def test_anonymous_without_session_gets_json_403(
    make_app: Callable[..., Flask], redis_client: redis.Redis, scope: str
) -> None:
    """No verified session and no user: a JSON 403 REMEMBER_IDENTITY_REQUIRED, nothing written."""
    client = make_app().test_client()
    r = client.put(f"/mem/{scope}/k", json={"value": 1})
    assert r.status_code == 403
    assert r.is_json and r.json is not None
    assert r.json["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"
    assert r.json["error"]["status"] == 403
    assert "without" in r.json["error"]["message"]
    assert "Traceback" not in r.get_data(as_text=True)
    assert redis_client.keys("remember:[^_]*") == []  # the listing index's record stays


def test_global_scope_works_for_anonymous_callers(make_app: Callable[..., Flask]) -> None:
    """Global scope needs no identity."""
    client = make_app().test_client()
    assert client.put("/mem/global/motd", json={"value": "hi"}).status_code == 200
    assert client.get("/mem/global/motd").json == {"value": "hi"}


def test_issued_session_is_bound_and_isolates_anonymous_clients(
    make_app: Callable[..., Flask],
) -> None:
    """A session the app issued is bound; two anonymous sessions see their own session memory."""
    client = make_app().test_client()
    s1 = client.post("/session").json["session_id"]  # type: ignore[index]
    s2 = client.post("/session").json["session_id"]  # type: ignore[index]
    assert s1 != s2
    assert client.get("/whoami", headers={"Mcp-Session-Id": s1}).json == {
        "session_id": s1,
        "user_id": None,
    }
    client.put("/mem/session/cart", json={"value": [1]}, headers={"Mcp-Session-Id": s1})
    client.put("/mem/session/cart", json={"value": [2]}, headers={"Mcp-Session-Id": s2})
    assert client.get("/mem/session/cart", headers={"Mcp-Session-Id": s1}).json == {"value": [1]}
    assert client.get("/mem/session/cart", headers={"Mcp-Session-Id": s2}).json == {"value": [2]}


@pytest.mark.parametrize(
    "forged",
    [
        "s-1",
        "__stateless__",
        "rs1.AAAA.18c0a5f3e00.AAAA",
        "rs1.a.b.c.d",
    ],
)
def test_forged_session_header_is_not_bound(make_app: Callable[..., Flask], forged: str) -> None:
    """An unsigned or malformed session header is ignored: no session, session scope refused."""
    client = make_app().test_client()
    assert client.get("/whoami", headers={"Mcp-Session-Id": forged}).json == {
        "session_id": None,
        "user_id": None,
    }
    r = client.put("/mem/session/k", json={"value": 1}, headers={"Mcp-Session-Id": forged})
    assert r.status_code == 403 and r.json["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"  # type: ignore[index]


def test_session_of_another_principal_or_secret_is_not_bound(
    make_app: Callable[..., Flask],
) -> None:
    """bob's session presented by alice, or one signed with another secret, is not bound."""
    client = make_app().test_client()
    bobs = client.post("/session", **as_user("bob")).json["session_id"]  # type: ignore[index]
    assert client.get("/whoami", headers={"Mcp-Session-Id": bobs}, **as_user("bob")).json == {
        "session_id": bobs,
        "user_id": "bob",
    }
    assert client.get("/whoami", headers={"Mcp-Session-Id": bobs}, **as_user("alice")).json == {
        "session_id": None,
        "user_id": "alice",
    }
    assert client.get("/whoami", headers={"Mcp-Session-Id": bobs}).json == {
        "session_id": None,
        "user_id": None,
    }
    tampered = bobs[:-2] + ("AA" if not bobs.endswith("AA") else "BB")
    assert client.get("/whoami", headers={"Mcp-Session-Id": tampered}, **as_user("bob")).json == {
        "session_id": None,
        "user_id": "bob",
    }
    other = RememberPlugin.init(encryption={"secrets": ["another-secret-0123456789abcdef"]})
    try:
        foreign = McpServer(other).session_signer.issue(None)
    finally:
        other.close()
    assert client.get("/whoami", headers={"Mcp-Session-Id": foreign}).json == {
        "session_id": None,
        "user_id": None,
    }


def test_reject_unverified_session_answers_404(make_app: Callable[..., Flask]) -> None:
    """REMEMBER_REJECT_UNVERIFIED_SESSION turns an unverified session header into a JSON 404."""
    client = make_app(REMEMBER_REJECT_UNVERIFIED_SESSION=True).test_client()
    r = client.get("/whoami", headers={"Mcp-Session-Id": "forged"})
    assert r.status_code == 404 and r.json["error"]["code"] == "REMEMBER_SESSION_NOT_FOUND"  # type: ignore[index]
    assert client.get("/whoami").status_code == 200


def test_bearer_token_verifier_sets_the_principal(make_app: Callable[..., Flask]) -> None:
    """REMEMBER_TOKEN_VERIFIER: the token's principal is the user; a bad token is anonymous."""
    client = make_app(REMEMBER_TOKEN_VERIFIER=TOKENS.get).test_client()

    def auth(token: str) -> dict[str, Any]:
        return {"headers": {"Authorization": f"Bearer {token}"}}

    assert client.get("/whoami", **auth("token-alice-0123456789")).json["user_id"] == "alice"  # type: ignore[index]
    assert client.get("/whoami", **auth("token-bob-0123456789ab")).json["user_id"] == "bob"  # type: ignore[index]
    assert client.get("/whoami", **auth("wrong")).json["user_id"] is None  # type: ignore[index]
    client.put("/mem/user/x", json={"value": "A"}, **auth("token-alice-0123456789"))
    assert client.get("/mem/user/x", **auth("token-bob-0123456789ab")).json == {"value": None}
    assert client.get("/mem/user/x", **auth("token-alice-0123456789")).json == {"value": "A"}


def test_context_is_unbound_after_the_response(make_app: Callable[..., Flask]) -> None:
    """After a (streamed) response is read and closed, nothing is bound in the caller's context."""
    app = make_app()
    client = app.test_client()
    assert current_identity() == Identity()
    r = client.get("/whoami", **as_user("alice"))
    assert r.json == {"session_id": None, "user_id": "alice"}
    r.close()
    assert current_identity() == Identity()

    r = client.get("/stream", **as_user("carol"))
    assert r.get_data(as_text=True) == "carol;carol;carol;"  # bound while the body streams
    assert current_identity() == Identity()
    r.close()
    assert current_identity() == Identity()


def test_no_leak_across_threads(make_app: Callable[..., Flask]) -> None:
    """Concurrent requests each see their own identity; worker threads keep nothing bound."""
    app = make_app()
    barrier = threading.Barrier(2)
    inside = app.view_functions["whoami"]

    def slow_whoami() -> Any:
        barrier.wait(timeout=10)  # both requests are inside their views at once
        return inside()

    app.view_functions["whoami"] = slow_whoami

    def call(user: str) -> Any:
        with app.test_client() as client:
            body = client.get("/whoami", **as_user(user)).json
        return body, current_identity()

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(call, ["alice", "bob"]))
        # The same worker threads run a plain function afterwards: nothing bound there.
        after = [f.result() for f in [pool.submit(current_identity) for _ in range(4)]]
    assert [body["user_id"] for body, _ in results] == ["alice", "bob"]
    assert all(ident == Identity() for _, ident in results)
    assert after == [Identity()] * 4
    assert current_identity() == Identity()
    assert sorted(i.user_id or "" for i in app.config["SEEN"]) == ["alice", "bob"]


def test_remember_proxy_outside_a_request_uses_the_context(make_app: Callable[..., Flask]) -> None:
    """In an app context without a request, `remember` follows the identity bound in context."""
    from remember_sync import identity

    app = make_app()
    with app.app_context(), identity(user_id="cron"):
        remember.set("k", 1, scope="user")
        assert get_plugin().accessor(Identity(user_id="cron")).get("k", scope="user") == 1
    with pytest.raises(RuntimeError, match="application context"):
        remember.get("k", scope="global")


def test_global_store_resolves_from_app_config(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REMEMBER_STORE='global-store' uses the app's REMEMBER_REDIS_URL, not the environment."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("KV_REST_API_URL", raising=False)
    app = build_app(REMEMBER_STORE="global-store", REMEMBER_REDIS_URL=redis_url)
    try:
        plugin = get_plugin(app)
        assert isinstance(plugin.store, RedisStore)
        client = app.test_client()
        assert client.put("/mem/user/g", json={"value": 1}, **as_user("u")).status_code == 200
        assert redis_client.keys("remember:v2:user:u:g") == [b"remember:v2:user:u:g"]
        # The app's options, passed explicitly, name the same store.
        with RememberPlugin.init(**options_from_config(app.config)) as other:
            assert isinstance(other.store, RedisStore)
    finally:
        RememberSync.close(app)
    # Outside any app (and with no REDIS_URL / KV env) there is nothing to resolve.
    with pytest.raises(RememberConfigurationError) as info:
        RememberPlugin.init(type="global-store")
    assert info.value.code == "GLOBAL_CONFIG_NOT_FOUND"


def test_flask_config_does_not_leak_into_a_later_global_store(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Flask app's REMEMBER_REDIS_URL is that app's: no process-global registry carries it
    into a later plain ``RememberPlugin.init(type="global-store")``, even in its app context."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("KV_REST_API_URL", raising=False)
    app = build_app(REMEMBER_STORE="global-store", REMEMBER_REDIS_URL=redis_url)
    try:
        assert isinstance(get_plugin(app).store, RedisStore)
        for context in (app.app_context(), app.test_request_context()):
            with context, pytest.raises(RememberConfigurationError) as info:
                RememberPlugin.init(type="global-store", environ={}, skip_legacy_purge=True)
            assert info.value.code == "GLOBAL_CONFIG_NOT_FOUND"
    finally:
        RememberSync.close(app)


def test_config_translation_and_errors() -> None:
    """options_from_config maps keys, merges the secret into encryption, and names bad keys."""
    assert options_from_config({}) == {"type": "memory"}
    opts = options_from_config(
        {
            "REMEMBER_STORE": "vercel-kv",
            "REMEMBER_KV_URL": "http://127.0.0.1:1",
            "REMEMBER_KV_TOKEN": "t",
            "REMEMBER_SECRET": ["new", "old"],
            "REMEMBER_ENCRYPTION": {"frontmcp_compatible": True},
            "REMEMBER_TOOLS": {"enabled": True},
        }
    )
    assert opts == {
        "type": "vercel-kv",
        "url": "http://127.0.0.1:1",
        "token": "t",
        "encryption": {"frontmcp_compatible": True, "secrets": ["new", "old"]},
        "tools": {"enabled": True},
    }
    with pytest.raises(RememberConfigurationError, match="REMEMBER_REDIS_URL"):
        options_from_config({"REMEMBER_STORE": "redis"})
    with pytest.raises(RememberConfigurationError, match="REMEMBER_KV_TOKEN"):
        options_from_config({"REMEMBER_KV_URL": "http://x"})
    with pytest.raises(RememberConfigurationError, match="REMEMBER_SECRET"):
        options_from_config({"REMEMBER_SECRET": ""})
    app = Flask(__name__)
    app.config["REMEMBER_DEFAULT_TTL"] = -1
    with pytest.raises(RememberConfigurationError, match="default_ttl"):
        RememberSync(app)
    assert "remember_sync" not in app.extensions


def test_given_plugin_is_used_and_not_closed() -> None:
    """REMEMBER_PLUGIN is used as is, and closing the extension leaves it open."""
    plugin = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True)
    try:
        app = Flask(__name__)
        app.config["REMEMBER_PLUGIN"] = plugin
        ext = RememberSync()
        ext.init_app(app)
        assert get_plugin(app) is plugin
        with pytest.raises(RuntimeError, match="already initialised"):
            ext.init_app(app)
        RememberSync.close(app)
        plugin.accessor(Identity(user_id="x")).set("still", "open", scope="user")
    finally:
        plugin.close()


def test_a_verifier_that_cannot_decide_gives_503_not_an_anonymous_caller() -> None:
    """An OAuth issuer that is down: the app's own views answer 503, never anonymous."""
    from remember_sync.errors import RememberUnavailableError

    def issuer_down(token: str) -> str | None:
        raise RememberUnavailableError("the issuer's keys could not be fetched", retry_after_s=5)

    app = build_app(REMEMBER_TOKEN_VERIFIER=issuer_down)
    client = app.test_client()
    r = client.get("/whoami", headers={"Authorization": "Bearer some-token-0123456789"})
    assert r.status_code == 503
    assert r.json["error"]["code"] == "REMEMBER_UNAVAILABLE"  # type: ignore[index]
    assert app.config["SEEN"] == []  # the view never ran
    # Without a token the verifier is not asked: the view runs, anonymous.
    assert client.get("/whoami").status_code == 200
