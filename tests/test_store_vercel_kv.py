"""VercelKVStore beyond the conformance suite: configuration, errors, retries, round trips.

Everything runs against the Upstash-REST emulator (tests/fixtures_kv.py) in
front of a real redis-server; faults are injected in the emulator.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
import requests
import requests.exceptions

from remember_sync import (
    Identity,
    RememberConfigurationError,
    RememberInputError,
    RememberPlugin,
    RememberStoreError,
)
from remember_sync.stores.base import Store
from remember_sync.stores.vercel_kv import EXCEPTION_MAP, VercelKVStore
from remember_sync.testing.kv_emulator import KVEmulator
from remember_sync.testing.redis_server import free_port
from tests.conftest import TEST_SECRET, scan_items
from tests.fixtures_kv import KV_TEST_TOKEN

ALICE = Identity(user_id="alice")


def kv_env(emulator: KVEmulator, token: str = KV_TEST_TOKEN) -> dict[str, str]:
    return {"KV_REST_API_URL": emulator.url, "KV_REST_API_TOKEN": token}


def command_names(emulator: KVEmulator) -> list[str]:
    """The first command name of every recorded request, in order."""
    return [str(r.commands[0][0]).upper() if r.commands else "" for r in emulator.requests]


@pytest.fixture
def make_store(kv_emulator: KVEmulator, kv_redis: redis.Redis) -> Iterator[type[VercelKVStore]]:
    """Build extra stores on the emulator (closed at the end)."""
    made: list[VercelKVStore] = []

    class Factory(VercelKVStore):
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs.setdefault("environ", {})
            if not args and "url" not in kwargs:
                args = (kv_emulator.url, KV_TEST_TOKEN)
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield Factory
    for store in made:
        store.close()


def kv_plugin(**options: object) -> RememberPlugin:
    options.setdefault("skip_legacy_purge", True)
    options.setdefault("encryption", {"secrets": [TEST_SECRET]})
    plugin = RememberPlugin.init(**options)
    if plugin.index_backfill is not None:  # its requests are done before a test counts any
        assert plugin.index_backfill.wait(30)
    return plugin


# -- configuration ------------------------------------------------------------------------


def test_url_and_token_come_from_environ(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """Without arguments the store reads KV_REST_API_URL / KV_REST_API_TOKEN from environ."""
    store = VercelKVStore(environ=kv_env(kv_emulator))
    try:
        assert store.set("k", "v") is True
        assert kv_redis.get("k") == b"v"
    finally:
        store.close()


def test_arguments_fill_in_per_field(kv_emulator: KVEmulator, kv_redis: redis.Redis) -> None:
    """An explicit url with the token from the environment (and vice versa) is complete."""
    for store in (
        VercelKVStore(kv_emulator.url, environ={"KV_REST_API_TOKEN": KV_TEST_TOKEN}),
        VercelKVStore(token=KV_TEST_TOKEN, environ={"KV_REST_API_URL": kv_emulator.url}),
    ):
        try:
            assert store.get("nothing") is None
        finally:
            store.close()


def test_neither_url_nor_token_says_what_to_set() -> None:
    """No URL and no token: a configuration error naming both variables."""
    with pytest.raises(RememberConfigurationError) as err:
        VercelKVStore(environ={})
    assert "KV_REST_API_URL" in err.value.message
    assert "KV_REST_API_TOKEN" in err.value.message


@pytest.mark.parametrize(
    ("environ", "missing"),
    [
        ({"KV_REST_API_URL": "https://db.upstash.io"}, "KV_REST_API_TOKEN"),
        ({"KV_REST_API_TOKEN": "secret-token-xyz"}, "KV_REST_API_URL"),
        (
            {"KV_REST_API_URL": "https://db.upstash.io", "KV_REST_API_TOKEN": ""},
            "KV_REST_API_TOKEN",
        ),
    ],
)
def test_only_one_of_url_and_token_is_a_configuration_error(
    environ: dict[str, str], missing: str
) -> None:
    """Exactly one of the two available: a configuration error naming the missing one."""
    with pytest.raises(RememberConfigurationError) as err:
        VercelKVStore(environ=environ)
    assert err.value.message.startswith(f"Vercel KV: {missing} is not set")
    assert "secret-token-xyz" not in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"url": "ftp://db.upstash.io"}, "KV_REST_API_URL"),
        ({"url": "db.upstash.io"}, "KV_REST_API_URL"),
        ({"token": "has space-secret"}, "KV_REST_API_TOKEN"),
        ({"token": "newline\nsecret"}, "KV_REST_API_TOKEN"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"retries": -1}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"backoff": -0.1}, "backoff"),
        ({"pool_size": 0}, "pool_size"),
    ],
)
def test_invalid_settings_are_configuration_errors(kwargs: dict[str, object], named: str) -> None:
    """A bad URL, token, timeout, retry count or back-off is refused, naming it."""
    args: dict[str, object] = {"url": "https://db.upstash.io", "token": "tok", "environ": {}}
    args.update(kwargs)
    with pytest.raises(RememberConfigurationError) as err:
        VercelKVStore(**args)  # type: ignore[arg-type]
    assert named in err.value.message
    assert "secret" not in str(err.value)


def test_repr_shows_the_host_but_never_the_token(vercel_kv_store: VercelKVStore) -> None:
    """repr() names the host (for logs and notebooks) and hides the token."""
    text = repr(vercel_kv_store)
    assert text.startswith("VercelKVStore(host='127.0.0.1:")
    assert KV_TEST_TOKEN not in text
    assert isinstance(vercel_kv_store, Store)


def test_url_credentials_are_not_shown() -> None:
    """A user:password@ part of the URL stays out of repr too."""
    store = VercelKVStore("https://user:pw-secret@db.upstash.io/", "tok", environ={})
    assert repr(store) == "VercelKVStore(host='db.upstash.io')"
    store.close()


def test_every_request_carries_the_protocol_headers(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator
) -> None:
    """Each request is a POST / with the bearer token and Upstash-Encoding: base64."""
    vercel_kv_store.set("k", "v", ttl_ms=60_000)
    vercel_kv_store.get("k")
    vercel_kv_store.get_many(["k", "x"])
    vercel_kv_store.compare_and_set("k", "v", "w")
    list(vercel_kv_store.scan("*"))
    vercel_kv_store.delete("k")
    requests_seen = kv_emulator.requests
    assert command_names(kv_emulator) == ["SET", "GET", "MGET", "EVAL", "SCAN", "UNLINK"]
    for r in requests_seen:
        assert (r.method, r.path, r.status) == ("POST", "/", 200)
        assert (r.encoding, r.authorized) == ("base64", True)
        assert all(isinstance(arg, str) for arg in r.commands[0])


# -- errors -------------------------------------------------------------------------------


def test_wrong_token_is_a_configuration_error_naming_the_variable(
    make_store: type[VercelKVStore], kv_emulator: KVEmulator
) -> None:
    """HTTP 401 → RememberConfigurationError naming KV_REST_API_TOKEN, never the token; no retry."""
    wrong = "wrong-token-Zq8v"
    store = make_store(kv_emulator.url, wrong)
    with pytest.raises(RememberConfigurationError) as err:
        store.get("k")
    assert "KV_REST_API_TOKEN" in err.value.message
    rendered = "".join(traceback.format_exception(err.value))
    for text in (str(err.value), repr(err.value), rendered):
        assert wrong not in text
        assert KV_TEST_TOKEN not in text
    assert len(kv_emulator.requests) == 1


def test_forbidden_is_a_configuration_error(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator
) -> None:
    """HTTP 403 (e.g. a read-only token writing) is a configuration error too."""
    kv_emulator.inject(status=403, error="NOPERM this user has no permissions")
    with pytest.raises(RememberConfigurationError, match="KV_REST_API_TOKEN"):
        vercel_kv_store.set("k", "v")


def test_server_errors_carry_the_server_message_and_are_not_retried(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """A Redis error (HTTP 400) is a RememberStoreError with the server's text, sent once."""
    kv_redis.hset("h", "f", "v")
    with pytest.raises(RememberStoreError, match="WRONGTYPE Operation against a key"):
        vercel_kv_store.get("h")
    assert len(kv_emulator.requests) == 1


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (301, b"", "HTTP 301 \\(a redirect\\): set KV_REST_API_URL"),
        (404, b"<html>Not Found</html>", "HTTP 404 with a body that is not JSON.*KV_REST_API_URL"),
    ],
)
def test_answers_that_are_not_the_rest_api_fail_once_naming_the_url(
    make_store: type[VercelKVStore], status: int, body: bytes, expected: str
) -> None:
    """A redirect (never followed: the POST would become a GET) or an HTML 404 is raised at once."""
    seen: list[str] = []

    class NotUpstash(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.command)
            self.send_response(status)
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotUpstash)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        store = make_store(f"http://127.0.0.1:{server.server_address[1]}", "tok")
        with pytest.raises(RememberStoreError, match=expected):
            store.get("k")
        assert seen == ["POST"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _nested(
    depth: int, inner: bytes = b"", *, opening: bytes = b"[", closing: bytes = b"]"
) -> bytes:
    """*inner* wrapped in *depth* levels of *opening* ... *closing*."""
    return opening * depth + inner + closing * depth


_DEEP = 100_000
_HOSTILE_REPLIES: dict[str, tuple[str, int, bytes]] = {
    # name: (operation, HTTP status, body)
    "deep_result_arrays": ("get", 200, b'{"result":' + _nested(_DEEP) + b"}"),
    "deep_result_objects": (
        "get", 200, b'{"result":' + _nested(_DEEP, b"1", opening=b'{"a":', closing=b"}") + b"}"
    ),
    "deep_reply_itself": ("get", 200, _nested(_DEEP)),
    "deep_error": ("get", 400, b'{"error":' + _nested(_DEEP) + b"}"),
    "deep_error_5xx": ("get", 503, b'{"error":' + _nested(_DEEP) + b"}"),
    "error_not_text": ("set", 400, b'{"error":' + _nested(300, b'"x"') + b"}"),
    "result_arrays_deeper_than_any_command": ("scan", 200, b'{"result":' + _nested(50) + b"}"),
    "not_json": ("get", 200, b"<html>gateway</html>"),
    "not_utf8": ("get", 200, b'{"result":"\xff\xfe"}'),
    "huge_integer": ("delete", 200, b'{"result":' + b"9" * 5000 + b"}"),
    "infinite_float": ("delete", 200, b'{"result":1e999}'),
    "result_true": ("get", 200, b'{"result":true}'),
    "result_object": ("get", 200, b'{"result":{"a":"YQ=="}}'),
    "result_float": ("get", 200, b'{"result":1.5}'),
    "no_result_no_error": ("get", 200, b"{}"),
    "reply_is_an_array": ("get", 200, b"[]"),
    "reply_is_null": ("get", 200, b"null"),
    "reply_is_a_string": ("get", 200, b'"YQ=="'),
    "not_base64": ("get", 200, b'{"result":"not base64!"}'),
    "mget_too_short": ("get_many", 200, b'{"result":["YQ=="]}'),
    "mget_nested_value": ("get_many", 200, b'{"result":[["YQ=="],null]}'),
    "scan_cursor_only": ("scan", 200, b'{"result":["MA=="]}'),
    "scan_cursor_number": ("scan", 200, b'{"result":[0,[]]}'),
    "scan_script_lengths_differ": ("scan_pages", 200, b'{"result":["MA==",["YQ=="],[]]}'),
    "scan_script_key_not_text": ("scan_pages", 200, b'{"result":["MA==",[1],["YQ=="]]}'),
    "set_answered_with_a_number": ("set", 200, b'{"result":1}'),
    "unlink_answered_with_text": ("delete", 200, b'{"result":"MQ=="}'),
    "cas_answered_with_two": ("cas", 200, b'{"result":2}'),
}  # fmt: skip
_HOSTILE_OPERATIONS = {
    "get": lambda s: s.get("k"),
    "get_many": lambda s: s.get_many(["k", "l"]),
    "scan": lambda s: list(s.scan("*")),
    "scan_pages": lambda s: list(s.scan_pages("*")),
    "set": lambda s: s.set("k", "v"),
    "delete": lambda s: s.delete("k"),
    "cas": lambda s: s.compare_and_set("k", "v", "w"),
}


@pytest.mark.parametrize("reply", list(_HOSTILE_REPLIES))
def test_every_malformed_or_hostile_reply_is_a_store_error(
    make_store: type[VercelKVStore], kv_emulator: KVEmulator, reply: str
) -> None:
    """Deep nesting, wrong types and shapes, bad base64: RememberStoreError, never another error."""
    operation, status, body = _HOSTILE_REPLIES[reply]
    store = make_store(retries=0)
    kv_emulator.inject(body=body, status=status, times=None)
    with pytest.raises(RememberStoreError) as err:
        _HOSTILE_OPERATIONS[operation](store)
    assert len(str(err.value)) < 1000  # a hostile body is never echoed at length
    assert KV_TEST_TOKEN not in str(err.value)
    kv_emulator.clear_faults()
    assert store.set("k", "v") is True and store.get("k") == "v"  # the store still works


# -- retries and timeouts -----------------------------------------------------------------------


def test_two_500s_then_success_are_retried_transparently(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """An emulator answering 500 twice, then normally, costs the caller nothing but time."""
    kv_redis.set("k", "v")
    kv_emulator.inject(status=500, times=2)
    assert vercel_kv_store.get("k") == "v"
    assert [r.status for r in kv_emulator.requests] == [500, 500, 200]
    kv_emulator.inject(status=502, times=2)
    assert vercel_kv_store.set("k", "w", ttl_ms=60_000) is True
    assert kv_redis.get("k") == b"w"


@pytest.mark.parametrize("fault", ["status", "close_connection", "malformed"])
def test_reads_are_retried_after_any_ambiguous_failure(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis, fault: str
) -> None:
    """5xx, a dropped connection and a non-JSON reply are retried for idempotent commands."""
    kv_redis.mset({"a": "1", "b": "2"})
    kv_emulator.inject(**{fault: 503 if fault == "status" else True})  # type: ignore[arg-type]
    assert vercel_kv_store.get_many(["a", "b", "c"]) == ["1", "2", None]
    assert len(kv_emulator.requests) == 2


@pytest.mark.parametrize("operation", ["set_nx", "compare_and_set"])
@pytest.mark.parametrize("fault", ["status", "close_connection", "malformed"])
def test_non_idempotent_writes_are_not_retried_blindly(
    vercel_kv_store: VercelKVStore,
    kv_emulator: KVEmulator,
    kv_redis: redis.Redis,
    operation: str,
    fault: str,
) -> None:
    """SET NX and the CAS EVAL are sent once when the outcome is unknown, then fail loudly."""
    kv_redis.set("cas", "old")
    kv_emulator.inject(**{fault: 500 if fault == "status" else True})  # type: ignore[arg-type]
    with pytest.raises(RememberStoreError):
        if operation == "set_nx":
            vercel_kv_store.set("nx", "v", only_if_absent=True)
        else:
            vercel_kv_store.compare_and_set("cas", "old", "new")
    assert len(kv_emulator.requests) == 1
    assert kv_redis.exists("nx") == 0
    assert kv_redis.get("cas") == b"old"


def test_retries_give_up_with_a_store_error(
    make_store: type[VercelKVStore], kv_emulator: KVEmulator
) -> None:
    """A server that keeps failing: retries+1 attempts, then RememberStoreError saying so."""
    store = make_store(retries=2, backoff=0.01)
    kv_emulator.inject(status=500, times=None, error="ERR the disk is on fire")
    with pytest.raises(RememberStoreError) as err:
        store.get("k")
    assert len(kv_emulator.requests) == 3
    assert "after 3 attempts" in err.value.message
    assert "HTTP 500: ERR the disk is on fire" in err.value.message


def test_a_server_that_never_answers_fails_within_the_timeout(
    make_store: type[VercelKVStore], kv_emulator: KVEmulator
) -> None:
    """timeout bounds the whole operation: a silent server fails in ~timeout, not N×timeout."""
    store = make_store(timeout=0.5, retries=3, backoff=0.05)
    kv_emulator.inject(delay=10, times=None)
    for operation in (lambda: store.get("k"), lambda: store.set("k", "v")):
        start = time.monotonic()
        with pytest.raises(RememberStoreError, match="no answer within") as err:
            operation()
        elapsed = time.monotonic() - start
        assert 0.45 <= elapsed < 0.5 + 0.3, elapsed
        cause = err.value.__cause__
        assert isinstance(cause, requests.Timeout)
        assert cause.request is not None
        assert cause.request.headers["Authorization"] == "Bearer <redacted>"


def test_timeout_budget_caps_the_number_of_retries(
    make_store: type[VercelKVStore], kv_emulator: KVEmulator
) -> None:
    """With many retries allowed, back-off stops once it would overrun the timeout."""
    store = make_store(timeout=0.4, retries=50, backoff=0.05)
    kv_emulator.inject(status=500, times=None)
    start = time.monotonic()
    with pytest.raises(RememberStoreError):
        store.get("k")
    assert time.monotonic() - start < 0.4 + 0.2
    assert 2 <= len(kv_emulator.requests) < 10


@pytest.mark.parametrize("operation", ["get", "set_nx", "compare_and_set"])
def test_connection_refused_is_retried_for_every_command(
    make_store: type[VercelKVStore], operation: str
) -> None:
    """A request that never left (refused) is safe to resend, even SET NX and EVAL."""
    store = make_store(f"http://127.0.0.1:{free_port()}", "tok", retries=2, backoff=0.05)
    start = time.monotonic()
    with pytest.raises(RememberStoreError, match="after 3 attempts"):
        if operation == "get":
            store.get("k")
        elif operation == "set_nx":
            store.set("k", "v", only_if_absent=True)
        else:
            store.compare_and_set("k", "a", "b")
    assert time.monotonic() - start >= 0.05 + 0.1  # both back-off sleeps happened


def test_the_token_never_reaches_logs_or_errors(
    make_store: type[VercelKVStore],
    kv_emulator: KVEmulator,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Retries, failures and refusals log and raise without the token anywhere."""
    caplog.set_level(logging.DEBUG)
    store = make_store(timeout=0.3, retries=2, backoff=0.01)
    errors: list[BaseException] = []
    kv_emulator.inject(status=500, times=1)
    store.get("k")
    kv_emulator.inject(close_connection=True, times=None)
    with pytest.raises(RememberStoreError) as err:
        store.get("k")
    errors.append(err.value)
    kv_emulator.clear_faults()
    kv_emulator.inject(delay=5, times=None)
    with pytest.raises(RememberStoreError) as err:
        store.get("k")
    errors.append(err.value)
    kv_emulator.clear_faults()
    assert any("retry" in r.getMessage() for r in caplog.records)
    for record in caplog.records:
        assert KV_TEST_TOKEN not in record.getMessage()
    for exc in errors:
        assert KV_TEST_TOKEN not in "".join(traceback.format_exception(exc))


# -- round trips --------------------------------------------------------------------------------


def test_entries_over_100_keys_costs_one_request(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator
) -> None:
    """entries() of 100 keys is ONE request: the scan script returns keys and values."""
    plugin = kv_plugin(store=vercel_kv_store)
    mem = plugin.accessor(ALICE)
    for i in range(100):
        mem.set(f"note:{i}", {"i": i}, scope="user", brand="state")
    kv_emulator.reset_log()
    found = mem.entries(scope="user")
    assert {k: e.value for k, e in found.items()} == {f"note:{i}": {"i": i} for i in range(100)}
    # At COUNT 1000 one SCAN page covers this small database.
    assert command_names(kv_emulator) == ["EVAL"]
    plugin.close()


SCRIPT_REFUSED = "ERR Lua scripts without any input keys are not supported"


def test_a_refused_scan_script_falls_back_to_scan_and_mget_once_and_for_all(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that refuses the script (an error reply) gets SCAN + MGET, with the same result."""
    plugin = kv_plugin(store=vercel_kv_store, listing="scan")  # the scanning read path
    mem = plugin.accessor(ALICE)
    for i in range(100):
        mem.set(f"note:{i}", i, scope="user")
    expected = {f"note:{i}": i for i in range(100)}
    kv_emulator.reset_log()
    kv_emulator.inject(status=400, error=SCRIPT_REFUSED)
    with caplog.at_level(logging.INFO, logger="remember_sync"):
        found = mem.entries(scope="user")
    assert {k: e.value for k, e in found.items()} == expected
    # The refused EVAL (not repeated: a refusal is not retried), then the page again.
    assert command_names(kv_emulator) == ["EVAL", "SCAN", "MGET"]
    assert [r.message for r in caplog.records if "refused the scan script" in r.message]
    kv_emulator.reset_log()
    assert mem.list(scope="user") == sorted(expected)
    assert command_names(kv_emulator) == ["SCAN", "MGET"]
    plugin.close()


def test_a_failing_scan_script_is_retried_and_then_reported_not_abandoned(
    make_store: type[VercelKVStore], kv_emulator: KVEmulator
) -> None:
    """5xx answers are an outage, not a refusal: retried, then RememberStoreError; no fallback."""
    store = make_store(retries=1, backoff=0.01)
    assert store.set("remember:a", "1") is True
    kv_emulator.reset_log()
    kv_emulator.inject(status=500, times=None)
    with pytest.raises(RememberStoreError, match="HTTP 500"):
        list(scan_items(store, "remember:*"))
    kv_emulator.clear_faults()
    assert command_names(kv_emulator) == ["EVAL", "EVAL"]
    kv_emulator.reset_log()
    assert list(scan_items(store, "remember:*")) == [("remember:a", "1")]
    assert command_names(kv_emulator) == ["EVAL"]


def test_scan_pages_pages_larger_than_one_mget_chunk(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """A page of 2,500 keys (COUNT 5000) is read in MGET chunks inside the script."""
    kv_redis.mset({f"remember:big:{i}": f"v{i}" for i in range(2500)})
    kv_redis.set("remember:other:x", "no")
    kv_redis.hset("remember:big:hash", "f", "a hash is not a value")
    kv_emulator.reset_log()
    found = dict(scan_items(vercel_kv_store, "remember:big:*", count=5000))
    assert found == {f"remember:big:{i}": f"v{i}" for i in range(2500)}
    assert command_names(kv_emulator) == ["EVAL"]


def test_forget_many_deletes_with_one_unlink(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """forget_many over 100 keys: one read (it deletes only what it read) + one delete.

    Scan mode: the scan script's page + ``UNLINK``; index mode: the index page's
    script + the indexed delete's script (``UNLINK`` + ``ZREM``), which empties
    the index too.
    """
    for listing, expected in (("scan", {"EVAL": 1, "UNLINK": 1}), ("index", {"EVAL": 2})):
        plugin = kv_plugin(store=vercel_kv_store, listing=listing)
        mem = plugin.accessor(ALICE)
        for i in range(100):
            mem.set(f"tmp:{i}", i, scope="user")
        kv_emulator.reset_log()
        assert mem.forget_many(scope="user", pattern="tmp:*") == 100
        assert Counter(command_names(kv_emulator)) == Counter(expected)
        assert [k for k in kv_redis.keys("*") if not k.startswith(b"remember:__indexed")] == []
        plugin.close()


def test_get_many_and_delete_are_one_request_each(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """get_many and delete cost one HTTP request whatever the number of keys; none when empty."""
    keys = [f"k:{i}" for i in range(1000)]
    kv_redis.mset({k: k for k in keys[::2]})
    kv_emulator.reset_log()
    assert vercel_kv_store.get_many(keys) == [k if i % 2 == 0 else None for i, k in enumerate(keys)]
    assert vercel_kv_store.delete(*keys) == 500
    assert vercel_kv_store.get_many([]) == []
    assert vercel_kv_store.delete() == 0
    assert command_names(kv_emulator) == ["MGET", "UNLINK"]


def test_scan_over_5000_keys_follows_the_string_cursor_to_zero(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """SCAN sends string cursors, visits redis's own cursor sequence and stops at "0"."""
    wanted = {f"big:{i}" for i in range(5000)}
    pipe = kv_redis.pipeline(transaction=False)
    for key in wanted:
        pipe.set(key, "v")
    pipe.mset({f"other:{i}": "v" for i in range(500)})
    pipe.execute()

    kv_emulator.reset_log()
    found = list(vercel_kv_store.scan("big:*", count=100))
    assert len(found) == 5000
    assert set(found) == wanted

    expected_cursors, cursor = [0], 0
    while True:
        cursor, _ = kv_redis.scan(cursor, match="big:*", count=100)
        if cursor == 0:
            break
        expected_cursors.append(cursor)
    sent = [r.commands[0] for r in kv_emulator.requests]
    assert all(c[0] == "SCAN" and isinstance(c[1], str) for c in sent)
    assert [int(c[1]) for c in sent] == expected_cursors  # one request per page, none after "0"
    assert all(c[2:] == ("MATCH", "big:*", "COUNT", "100") for c in sent)


def test_scan_is_lazy_and_validates_count(vercel_kv_store: VercelKVStore) -> None:
    """scan() rejects a bad count up front; no request is made until iteration."""
    with pytest.raises(RememberInputError):
        vercel_kv_store.scan("*", count=0)
    assert list(vercel_kv_store.scan("none:*")) == []


# -- values -----------------------------------------------------------------------------------


def all_scalar_values(chunk: int = 65_536) -> Iterator[str]:
    """Every Unicode scalar value (no surrogates), in chunks."""
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), chunk):
        yield "".join(map(chr, points[start : start + chunk]))


def test_every_unicode_scalar_value_round_trips(
    vercel_kv_store: VercelKVStore, kv_redis: redis.Redis
) -> None:
    """All 1,112,064 scalar values, control characters included, come back exactly."""
    values = list(all_scalar_values())
    keys = [f"u:{i}" for i in range(len(values))]
    for key, value in zip(keys, values):
        assert vercel_kv_store.set(key, value) is True
        assert kv_redis.get(key) == value.encode("utf-8")  # stored as the UTF-8 bytes
    assert vercel_kv_store.get_many(keys) == values
    assert vercel_kv_store.get(keys[0]) == values[0]
    assert vercel_kv_store.compare_and_set(keys[0], values[0], values[-1]) is True
    assert vercel_kv_store.get(keys[0]) == values[-1]


TRICKY = [
    "",
    "OK",
    "MA==",
    "T0s=",
    "null",
    "0",
    '{"result":"x"}',
    '{"error":"ERR"}',
    "+OK\r\n",
    "-ERR x\r\n",
    "$-1\r\n",
    "\x00",
    "\x00\x01\x1f\x7f",
    '"',
    "\\",
    "\\u0000",
    "\u2028\u2029",
    "\ufeff",
    "\ufffd",
    "\U0001f389\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\U0010ffff",
    " leading and trailing ",
    "a" * 200_000,
]


@pytest.mark.parametrize("value", TRICKY, ids=range(len(TRICKY)))
def test_tricky_values_round_trip_through_every_operation(
    vercel_kv_store: VercelKVStore, value: str
) -> None:
    """Values that look like protocol (OK, base64, JSON, RESP) survive set/get/MGET/CAS."""
    assert vercel_kv_store.set("k", value) is True
    assert vercel_kv_store.get("k") == value
    assert vercel_kv_store.get_many(["k", "none"]) == [value, None]
    assert vercel_kv_store.compare_and_set("k", value, value + "!") is True
    assert vercel_kv_store.compare_and_set("k", value, "never") is False
    assert vercel_kv_store.get("k") == value + "!"


def test_keys_with_any_text_round_trip_through_scan(vercel_kv_store: VercelKVStore) -> None:
    """Keys containing quotes, control characters and emoji are scanned back as written."""
    keys = [f"odd:{v}" for v in TRICKY[:-1]]
    for key in keys:
        vercel_kv_store.set(key, "v")
    assert sorted(vercel_kv_store.scan("odd:*")) == sorted(keys)
    assert vercel_kv_store.delete(*keys) == len(keys)


def test_text_that_is_not_unicode_is_refused_before_sending(
    vercel_kv_store: VercelKVStore, kv_emulator: KVEmulator
) -> None:
    """A lone surrogate cannot travel as UTF-8: RememberInputError (ValueError), no request."""
    with pytest.raises(RememberInputError):
        vercel_kv_store.set("k", "bad \ud800")
    with pytest.raises(ValueError):
        vercel_kv_store.get("\udfff")
    assert kv_emulator.requests == []


def test_ttl_must_be_positive_milliseconds(vercel_kv_store: VercelKVStore) -> None:
    """ttl_ms <= 0 or not an int is refused instead of reaching Redis."""
    for bad in (0, -5, 1.5, True):
        with pytest.raises(RememberInputError):
            vercel_kv_store.set("k", "v", ttl_ms=bad)  # type: ignore[arg-type]
        with pytest.raises(RememberInputError):
            vercel_kv_store.compare_and_set("k", "v", "w", ttl_ms=bad)  # type: ignore[arg-type]


# -- lifecycle --------------------------------------------------------------------------------


def test_close_releases_its_own_session_but_not_a_given_one(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """close() ends the store (later use raises); a session passed in stays usable."""
    session = requests.Session()
    store = VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, session=session, environ={})
    assert store.set("k", "v") is True
    store.close()
    store.close()  # idempotent
    with pytest.raises(RememberStoreError, match="closed"):
        store.get("k")
    r = session.post(
        kv_emulator.url, json=["GET", "k"], headers={"Authorization": f"Bearer {KV_TEST_TOKEN}"}
    )
    assert r.json() == {"result": "v"}
    session.close()


# -- the plugin ---------------------------------------------------------------------------------


def test_plugin_type_vercel_kv_with_url_and_token(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """type="vercel-kv" with url/token builds a VercelKVStore; entries land in the backing Redis."""
    with kv_plugin(type="vercel-kv", url=kv_emulator.url, token=KV_TEST_TOKEN) as plugin:
        assert isinstance(plugin.store, VercelKVStore)
        mem = plugin.accessor(ALICE)
        mem.set("theme", "dark", scope="user")
        assert mem.get("theme", scope="user") == "dark"
        assert kv_redis.keys("remember:v2:user:alice:*") == [b"remember:v2:user:alice:theme"]
        store = plugin.store
    with pytest.raises(RememberStoreError, match="closed"):
        store.get("x")  # the plugin created the store, so closing the plugin closed it


def test_plugin_type_vercel_kv_from_environ(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """type="vercel-kv" without url/token reads the two variables from environ=."""
    with kv_plugin(type="vercel-kv", environ=kv_env(kv_emulator)) as plugin:
        assert isinstance(plugin.store, VercelKVStore)
        plugin.accessor(ALICE).set("k", 1, scope="global")
        assert kv_redis.exists("remember:global:k") == 1


def test_plugin_vercel_kv_with_nothing_configured_says_what_to_set() -> None:
    """type="vercel-kv" with no url/token anywhere: configuration error naming the variables."""
    with pytest.raises(RememberConfigurationError, match="KV_REST_API_URL and KV_REST_API_TOKEN"):
        kv_plugin(type="vercel-kv", environ={"UNRELATED": "1"})


def test_plugin_global_store_uses_kv_variables(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """type="global-store" without REDIS_URL resolves KV_REST_API_URL/TOKEN from environ=."""
    with kv_plugin(type="global-store", environ=kv_env(kv_emulator)) as plugin:
        assert isinstance(plugin.store, VercelKVStore)
        plugin.accessor(ALICE).set("k", "v", scope="user", ttl=60)
        assert kv_redis.exists("remember:v2:user:alice:k") == 1
        assert 0 < kv_redis.pttl("remember:v2:user:alice:k") <= 60_000


def test_plugin_with_wrong_token_fails_on_first_use_with_configuration_error(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """A wrong KV_REST_API_TOKEN surfaces as a configuration error through the accessor."""
    with kv_plugin(type="vercel-kv", environ=kv_env(kv_emulator, "nope-token")) as plugin:
        with pytest.raises(RememberConfigurationError, match="KV_REST_API_TOKEN"):
            plugin.accessor(ALICE).get("k", scope="user")


# -- every driver exception is mapped (STYLE 13) -----------------------------------------------


def test_every_requests_exception_is_mapped() -> None:
    """Each exception class of requests.exceptions has its own row in the store's map."""
    defined = {
        cls
        for _, cls in inspect.getmembers(requests.exceptions, inspect.isclass)
        if issubclass(cls, BaseException)
    }
    assert defined, "requests' exceptions were not found"
    assert sorted(c.__name__ for c in defined - set(EXCEPTION_MAP)) == []


class _Raising(requests.Session):
    """A session whose every request raises *exc* (nothing is sent)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    def post(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        raise self.exc


RAISED = [(cls, kind) for cls, kind in EXCEPTION_MAP.items() if kind is not None]


@pytest.mark.parametrize(
    ("driver_error", "remember_error"), RAISED, ids=[cls.__name__ for cls, _ in RAISED]
)
def test_each_mapped_exception_becomes_its_remember_error(
    driver_error: type[requests.RequestException], remember_error: type[Exception]
) -> None:
    """The store raises the mapped remember error, with the driver's exception as cause."""
    args = ("boom", "{", 0) if driver_error is requests.exceptions.JSONDecodeError else ("boom",)
    exc = driver_error(*args)
    store = VercelKVStore("https://kv.invalid", "t0ken", session=_Raising(exc), retries=0)
    with pytest.raises(remember_error, match="^Vercel KV GET at kv.invalid") as info:
        store.get("k")
    assert type(info.value) is remember_error
    assert info.value.__cause__ is exc
