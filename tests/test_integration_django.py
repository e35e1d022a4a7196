"""The Django middleware with Django's own test client against a real Redis store.

Pins: ``settings.REMEMBER`` to one plugin per process; ``request.remember``
per identity; two users never mix; session scope without a verified session
or a user is a JSON 403 (not a 500 traceback); forged or foreign session
headers are never bound; nothing stays bound after the response (also while a
streaming response is suspended and when it is closed), on this thread or
another; ``global-store`` resolves from settings.  This module is its own
ROOT_URLCONF.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import django
import pytest
import redis
from django.conf import settings

from remember_sync import RememberPlugin, current_identity
from remember_sync.errors import RememberConfigurationError, RememberIdentityError
from remember_sync.stores.redis import RedisStore
from remember_sync.types import Identity
from tests.conftest import TEST_SECRET
from tests.mcp_wire import INIT
from tests.mcp_wire import call as tools_call

MIDDLEWARE = "remember_sync.integrations.django.RememberMiddleware"
BASE_REMEMBER = {"encryption": {"secrets": [TEST_SECRET]}, "skip_legacy_purge": True}

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="remember-sync-tests",
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[],
        DATABASES={},
        MIDDLEWARE=[MIDDLEWARE],
        REMEMBER=BASE_REMEMBER,
        USE_TZ=True,
    )
    django.setup()

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

from remember_sync.integrations.django import (  # noqa: E402
    get_plugin,
    issue_session,
    mcp_view,
)
from remember_sync.mcp import McpServer  # noqa: E402

TOKENS = {"token-alice-0123456789": "alice", "token-bob-0123456789ab": "bob"}
STREAM_EVENTS: list[tuple[str, Identity]] = []
BARRIER: list[threading.Barrier] = []


# -- the app under test ------------------------------------------------------------------


def mem(request: HttpRequest, scope: str, key: str) -> JsonResponse:
    if request.method == "PUT":
        import json

        request.remember.set(key, json.loads(request.body)["value"], scope=scope)
        return JsonResponse({"ok": True})
    return JsonResponse({"value": request.remember.get(key, scope=scope)})


def whoami(request: HttpRequest) -> JsonResponse:
    if BARRIER:
        BARRIER[0].wait(timeout=10)  # concurrent requests are inside their views at once
    ident = current_identity()
    assert ident == request.remember_identity == request.remember.identity
    return JsonResponse({"session_id": ident.session_id, "user_id": ident.user_id})


def session(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"session_id": issue_session(request)})


def stream(request: HttpRequest) -> StreamingHttpResponse:
    def chunks() -> Iterator[str]:
        try:
            for _ in range(3):
                STREAM_EVENTS.append(("chunk", current_identity()))
                yield f"{current_identity().user_id};"
        finally:
            STREAM_EVENTS.append(("close", current_identity()))

    return StreamingHttpResponse(chunks())


def boom(request: HttpRequest) -> HttpResponse:
    raise RememberIdentityError("raised by the view")


class FakeAuthMiddleware:
    """Sets request.user from an X-Test-User header (Django auth without a database)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        pk = request.headers.get("X-Test-User")
        request.user = SimpleNamespace(is_authenticated=pk is not None, pk=pk)
        return self.get_response(request)


def mcp(request: HttpRequest) -> HttpResponse:
    # Built per request: override_settings rebuilds the plugin between tests.
    return mcp_view(McpServer(get_plugin(), path=None))(request)


urlpatterns = [
    path("mcp", mcp),
    path("mem/<str:scope>/<str:key>", mem),
    path("whoami", whoami),
    path("session", session),
    path("stream", stream),
    path("boom", boom),
]


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def use_redis(redis_client: redis.Redis, redis_url: str) -> Callable[..., Any]:
    """override_settings(REMEMBER=...) over the flushed real Redis."""

    def override(**extra: Any) -> Any:
        remember = {**BASE_REMEMBER, "type": "redis", "config": {"url": redis_url}, **extra}
        return override_settings(REMEMBER=remember)

    return override


@pytest.fixture
def remote_user(use_redis: Callable[..., Any]) -> Iterator[None]:
    """Principals from REMOTE_USER, store on real Redis."""
    with use_redis(principal_resolver="remember_sync.integrations.django.remote_user_resolver"):
        yield


def body(response: Any) -> Any:
    return response.json()


# -- tests ---------------------------------------------------------------------------------


def test_settings_build_one_redis_plugin(remote_user: None) -> None:
    """settings.REMEMBER builds one RedisStore plugin per process, reused by every request."""
    plugin = get_plugin()
    assert isinstance(plugin, RememberPlugin) and isinstance(plugin.store, RedisStore)
    Client().get("/whoami")
    Client().get("/whoami")
    assert get_plugin() is plugin


def test_two_users_never_mix(remote_user: None, redis_client: redis.Redis) -> None:
    """alice and bob write the same key in user and session scope and read only their own."""
    client = Client()
    for who, value in (("alice", "red"), ("bob", "blue")):
        for scope in ("user", "session"):
            r = client.put(
                f"/mem/{scope}/color", {"value": value}, "application/json", REMOTE_USER=who
            )
            assert r.status_code == 200, r.content
    for who, value in (("alice", "red"), ("bob", "blue")):
        for scope in ("user", "session"):
            assert body(client.get(f"/mem/{scope}/color", REMOTE_USER=who)) == {"value": value}
    assert sorted(k.decode() for k in redis_client.keys("remember:[^_]*")) == [
        "remember:v2:session:stateless-user%3Aalice:color",
        "remember:v2:session:stateless-user%3Abob:color",
        "remember:v2:user:alice:color",
        "remember:v2:user:bob:color",
    ]


@pytest.mark.parametrize("scope", ["session", "user", "tool"])
def test_anonymous_without_session_gets_json_403(
    remote_user: None, redis_client: redis.Redis, scope: str
) -> None:
    """No verified session and no user: a JSON 403 REMEMBER_IDENTITY_REQUIRED, nothing written."""
    r = Client().put(f"/mem/{scope}/k", {"value": 1}, "application/json")
    assert r.status_code == 403 and r["Content-Type"] == "application/json"
    assert body(r)["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"
    assert "without" in body(r)["error"]["message"]
    assert redis_client.keys("remember:[^_]*") == []  # the listing index's record stays


def test_error_from_a_view_is_json(remote_user: None) -> None:
    """process_exception turns any RememberError from a view into JSON with its status."""
    r = Client().get("/boom")
    assert r.status_code == 403
    assert body(r) == {
        "error": {
            "code": "REMEMBER_IDENTITY_REQUIRED",
            "message": "raised by the view",
            "status": 403,
        }
    }
    r = Client().put("/mem/user/k", {"value": float("nan")}, "application/json", REMOTE_USER="a")
    assert r.status_code == 400 and body(r)["error"]["code"] == "REMEMBER_INVALID_INPUT"


def test_issued_session_is_bound_forged_and_foreign_are_not(remote_user: None) -> None:
    """Only a session signed for the same principal is bound; forged or foreign ids are ignored."""
    client = Client()
    mine = body(client.post("/session"))["session_id"]
    bobs = body(client.post("/session", REMOTE_USER="bob"))["session_id"]
    h = {"headers": {"Mcp-Session-Id": mine}}
    assert body(client.get("/whoami", **h)) == {"session_id": mine, "user_id": None}
    assert client.put("/mem/session/k", {"value": 1}, "application/json", **h).status_code == 200
    assert body(client.get("/mem/session/k", **h)) == {"value": 1}
    for forged in ("s-1", "__stateless__", mine[:-2] + "zz", "rs1.a.b.c"):
        hf = {"headers": {"Mcp-Session-Id": forged}}
        assert body(client.get("/whoami", **hf)) == {"session_id": None, "user_id": None}
        r = client.get("/mem/session/k", **hf)
        assert r.status_code == 403 and body(r)["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"
    hb = {"headers": {"Mcp-Session-Id": bobs}}
    assert body(client.get("/whoami", REMOTE_USER="bob", **hb)) == {
        "session_id": bobs,
        "user_id": "bob",
    }
    assert body(client.get("/whoami", REMOTE_USER="alice", **hb)) == {
        "session_id": None,
        "user_id": "alice",
    }


def test_reject_unverified_session(use_redis: Callable[..., Any]) -> None:
    """reject_unverified_session answers an unverified session header with a JSON 404."""
    with use_redis(reject_unverified_session=True):
        r = Client().get("/whoami", headers={"Mcp-Session-Id": "forged"})
        assert r.status_code == 404 and body(r)["error"]["code"] == "REMEMBER_SESSION_NOT_FOUND"
        assert Client().get("/whoami").status_code == 200


def test_default_principal_is_the_authenticated_user(use_redis: Callable[..., Any]) -> None:
    """Without a resolver, the principal is request.user.pk when authenticated."""
    with use_redis(), override_settings(MIDDLEWARE=[f"{__name__}.FakeAuthMiddleware", MIDDLEWARE]):
        client = Client()
        assert body(client.get("/whoami", headers={"X-Test-User": "7"}))["user_id"] == "7"
        assert body(client.get("/whoami"))["user_id"] is None
        assert body(client.get("/whoami", REMOTE_USER="ignored"))["user_id"] is None


def test_token_verifier_sets_the_principal(use_redis: Callable[..., Any]) -> None:
    """settings.REMEMBER['token_verifier']: the bearer token's principal is the user."""
    with use_redis(token_verifier=TOKENS.get):
        client = Client()

        def auth(token: str) -> dict[str, Any]:
            return {"headers": {"Authorization": f"Bearer {token}"}}

        assert body(client.get("/whoami", **auth("token-alice-0123456789")))["user_id"] == "alice"
        assert body(client.get("/whoami", **auth("nope")))["user_id"] is None
        client.put(
            "/mem/user/x", {"value": "A"}, "application/json", **auth("token-alice-0123456789")
        )
        assert body(client.get("/mem/user/x", **auth("token-bob-0123456789ab"))) == {"value": None}


def _issuer_down(token: str) -> str | None:
    from remember_sync.errors import RememberUnavailableError

    raise RememberUnavailableError("the issuer's keys could not be fetched", retry_after_s=5)


def test_a_verifier_that_cannot_decide_gives_503(use_redis: Callable[..., Any]) -> None:
    """An OAuth issuer that is down: 503 from the middleware, never an anonymous view."""
    with use_redis(token_verifier=_issuer_down):
        client = Client()
        r = client.get("/whoami", headers={"Authorization": "Bearer some-token-0123456789"})
        assert r.status_code == 503
        assert json.loads(r.content)["error"]["code"] == "REMEMBER_UNAVAILABLE"
        assert body(client.get("/whoami"))["user_id"] is None  # no token: not asked


def _rpc(client: Client, message: dict[str, Any], **headers: str) -> Any:
    return client.post(
        "/mcp", message, "application/json", headers={"Accept": "application/json", **headers}
    )


def test_users_and_tokens_reach_the_mcp_view(use_redis: Callable[..., Any]) -> None:
    """principal_resolver + token_verifier combine, and mcp_view's server takes the result.

    With Django's own test client: a user (REMOTE_USER here) and a token holder
    each store ``user`` memory through MCP and read it back in a view; nobody
    else sees it; a caller with neither gets 401 from the MCP endpoint.
    """
    resolver = "remember_sync.integrations.django.remote_user_resolver"
    with use_redis(principal_resolver=resolver, token_verifier=TOKENS.get, tools={"enabled": True}):
        client = Client()
        init = INIT
        callers: list[tuple[dict[str, Any], dict[str, str]]] = [
            ({"REMOTE_USER": "carol"}, {}),
            ({}, {"Authorization": "Bearer token-alice-0123456789"}),
        ]
        for extra, headers in callers:
            reply = client.post(
                "/mcp",
                init,
                "application/json",
                headers={"Accept": "application/json", **headers},
                **extra,
            )
            assert reply.status_code == 200, reply.content
            sid = reply["Mcp-Session-Id"]
            remember = tools_call(
                "remember_this", {"key": "color", "value": "blue", "scope": "user"}, 2
            )
            answer = client.post(
                "/mcp",
                remember,
                "application/json",
                headers={"Accept": "application/json", "Mcp-Session-Id": sid, **headers},
                **extra,
            )
            assert answer.json()["result"]["isError"] is False, answer.content
            assert body(client.get("/mem/user/color", headers=headers, **extra)) == {
                "value": "blue"
            }
        bob = {"Authorization": "Bearer token-bob-0123456789ab"}
        assert body(client.get("/mem/user/color", headers=bob)) == {"value": None}
        assert body(client.get("/mem/user/color", REMOTE_USER="dave")) == {"value": None}
        assert _rpc(client, init).status_code == 401


def int_user_pk(request: HttpRequest) -> int | None:
    """A resolver as most Django apps write one: the signed-in user's primary key, an int."""
    pk = request.headers.get("X-User-Pk")
    return None if pk is None else int(pk)


def test_a_principal_resolver_returning_an_int_pk_works(
    use_redis: Callable[..., Any], redis_client: redis.Redis
) -> None:
    """user 42 (an int) is user "42": views and the MCP view work, keyed by the decimal string."""
    with use_redis(principal_resolver=int_user_pk, tools={"enabled": True}):
        client = Client()
        user = {"X-User-Pk": "42"}
        r = client.put("/mem/user/color", {"value": "red"}, "application/json", headers=user)
        assert r.status_code == 200, r.content
        assert body(client.get("/whoami", headers=user))["user_id"] == "42"
        assert redis_client.exists("remember:v2:user:42:color")
        reply = _rpc(client, INIT, **user)
        assert reply.status_code == 200, reply.content
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "recall", "arguments": {"key": "color", "scope": "user"}},
        }
        answer = _rpc(client, call, **{"Mcp-Session-Id": reply["Mcp-Session-Id"], **user})
        assert answer.json()["result"]["structuredContent"]["value"] == "red", answer.content


def test_context_is_unbound_after_the_response(remote_user: None) -> None:
    """Nothing is bound after a response, between streamed chunks, or after closing the stream."""
    client = Client()
    assert body(client.get("/whoami", REMOTE_USER="alice"))["user_id"] == "alice"
    assert current_identity() == Identity()

    STREAM_EVENTS.clear()
    r = client.get("/stream", REMOTE_USER="carol")
    chunks = iter(r.streaming_content)
    assert next(chunks) == b"carol;"
    assert current_identity() == Identity()  # suspended between chunks: the thread is ours
    assert b"".join(chunks) == b"carol;carol;"
    r.close()
    assert current_identity() == Identity()
    carol = Identity(user_id="carol")
    assert STREAM_EVENTS == [("chunk", carol)] * 3 + [("close", carol)]

    # Closed half-way: the generator's cleanup still runs as carol, then nothing is bound.
    STREAM_EVENTS.clear()
    r = client.get("/stream", REMOTE_USER="carol")
    assert next(iter(r.streaming_content)) == b"carol;"
    r.close()
    assert STREAM_EVENTS == [("chunk", carol), ("close", carol)]
    assert current_identity() == Identity()


def test_no_leak_across_threads(remote_user: None) -> None:
    """Concurrent requests each see their own identity; worker threads keep nothing bound."""
    BARRIER.append(threading.Barrier(2))

    def call(user: str) -> tuple[Any, Identity]:
        return body(Client().get("/whoami", REMOTE_USER=user)), current_identity()

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(call, ["alice", "bob"]))
            BARRIER.clear()
            after = [pool.submit(current_identity).result() for _ in range(4)]
    finally:
        BARRIER.clear()
    assert [b["user_id"] for b, _ in results] == ["alice", "bob"]
    assert [ident for _, ident in results] == [Identity(), Identity()]
    assert after == [Identity()] * 4
    assert current_identity() == Identity()


def test_global_store_from_settings(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """type='global-store' resolves REMEMBER['global_store'], then a RedisCache in CACHES."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("KV_REST_API_URL", raising=False)
    resolver = "remember_sync.integrations.django.remote_user_resolver"
    remember = {**BASE_REMEMBER, "type": "global-store", "principal_resolver": resolver}
    with override_settings(REMEMBER={**remember, "global_store": {"redis_url": redis_url}}):
        assert isinstance(get_plugin().store, RedisStore)
        Client().put("/mem/user/g", {"value": 1}, "application/json", REMOTE_USER="u")
        assert redis_client.keys("remember:v2:user:u:*") == [b"remember:v2:user:u:g"]
    caches = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
        }
    }
    with override_settings(REMEMBER=remember, CACHES=caches):
        assert isinstance(get_plugin().store, RedisStore)
        # Nothing is registered process-wide: a plain global-store does not see settings.
        with pytest.raises(RememberConfigurationError) as info:
            RememberPlugin.init(type="global-store", environ={}, skip_legacy_purge=True)
        assert info.value.code == "GLOBAL_CONFIG_NOT_FOUND"
    with override_settings(REMEMBER=remember):
        with pytest.raises(RememberConfigurationError) as info:
            get_plugin()
        assert info.value.code == "GLOBAL_CONFIG_NOT_FOUND"


def test_configuration_errors_show_when_middleware_loads() -> None:
    """A bad settings.REMEMBER fails when Django loads the middleware, naming the option."""
    with override_settings(REMEMBER={"type": "redis"}):
        with pytest.raises(RememberConfigurationError, match="config"):
            Client().get("/whoami")
    with override_settings(REMEMBER={**BASE_REMEMBER, "principal_resolver": "no.such.thing"}):
        with pytest.raises(RememberConfigurationError, match="principal_resolver"):
            Client().get("/whoami")
