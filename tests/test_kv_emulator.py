"""The Upstash-REST emulator: its protocol, its fault injection, and its fidelity.

Fidelity is checked with the official ``upstash-redis`` client: what it does
through the emulator must match what redis-py sees in the backing Redis.
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import requests
from upstash_redis import Redis as UpstashRedis
from upstash_redis.errors import UpstashError

from remember_sync.testing.kv_emulator import KVEmulator
from remember_sync.testing.redis_server import RedisServer, free_port
from tests.conftest import run_threads
from tests.fixtures_kv import KV_TEST_TOKEN

AUTH = {"Authorization": f"Bearer {KV_TEST_TOKEN}"}
B64 = {**AUTH, "Upstash-Encoding": "base64"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


@pytest.fixture
def http(kv_redis: redis.Redis) -> Iterator[requests.Session]:
    """A raw HTTP session (the database is flushed by ``kv_redis``)."""
    session = requests.Session()
    yield session
    session.close()


@pytest.fixture
def upstash(kv_emulator: KVEmulator, kv_redis: redis.Redis) -> Iterator[UpstashRedis]:
    """The official upstash-redis client pointed at the emulator."""
    client = UpstashRedis(
        kv_emulator.url, KV_TEST_TOKEN, allow_telemetry=False, rest_retries=0
    )
    yield client
    client.close()


def post(http: requests.Session, url: str, body: Any, headers: dict[str, str] = B64) -> Any:
    return http.post(url, json=body, headers=headers, timeout=5)


# -- the protocol ---------------------------------------------------------------------------


def test_single_command_replies_result_with_base64_strings(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """POST / runs one command; the status OK stays plain, bulk strings are base64."""
    r = post(http, kv_emulator.url, ["SET", "k", "h\u00e9 \U0001f389"])
    assert (r.status_code, r.json()) == (200, {"result": "OK"})
    assert kv_redis.get("k") == "h\u00e9 \U0001f389".encode()
    r = post(http, kv_emulator.url, ["GET", "k"])
    assert r.json() == {"result": b64("h\u00e9 \U0001f389")}
    assert r.headers["Content-Type"] == "application/json"
    assert post(http, kv_emulator.url, ["GET", "absent"]).json() == {"result": None}


def test_base64_applies_recursively_except_the_ok_status(
    http: requests.Session, kv_emulator: KVEmulator
) -> None:
    """Nested arrays, PONG and a bulk-string "OK" are encoded; numbers and nil are not."""
    script = "return {1, 'a', {2, 'b', false}, redis.status_reply('OK')}"
    r = post(http, kv_emulator.url, ["EVAL", script, "0"])
    assert r.json() == {"result": [1, b64("a"), [2, b64("b"), None], "OK"]}
    assert post(http, kv_emulator.url, ["PING"]).json() == {"result": b64("PONG")}
    post(http, kv_emulator.url, ["SET", "v", "OK"])
    assert post(http, kv_emulator.url, ["GET", "v"]).json() == {"result": b64("OK")}
    assert post(http, kv_emulator.url, ["INCR", "n"]).json() == {"result": 1}


def test_scan_cursor_is_a_string(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """SCAN answers [cursor, keys] with the cursor as a (base64) string, "0" at the end."""
    kv_redis.mset({f"s:{i}": "v" for i in range(50)})
    cursor, seen = "0", set()
    while True:
        result = post(http, kv_emulator.url, ["SCAN", cursor, "MATCH", "s:*", "COUNT", "10"])
        encoded_cursor, keys = result.json()["result"]
        assert isinstance(encoded_cursor, str)
        cursor = base64.b64decode(encoded_cursor).decode()
        seen.update(base64.b64decode(k).decode() for k in keys)
        if cursor == "0":
            break
    assert seen == {f"s:{i}" for i in range(50)}


def test_without_encoding_header_strings_are_plain_text(
    http: requests.Session, kv_emulator: KVEmulator
) -> None:
    """Without Upstash-Encoding the result strings are the UTF-8 text itself."""
    post(http, kv_emulator.url, ["SET", "k", "\u2713 \"q\" \\"], headers=AUTH)
    r = post(http, kv_emulator.url, ["MGET", "k", "none"], headers=AUTH)
    assert r.json() == {"result": ["\u2713 \"q\" \\", None]}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KV_TEST_TOKEN}"}],
    ids=["missing", "wrong", "not-bearer"],
)
def test_wrong_or_missing_token_is_401_and_runs_nothing(
    http: requests.Session,
    kv_emulator: KVEmulator,
    kv_redis: redis.Redis,
    headers: dict[str, str],
) -> None:
    """Anything but the right bearer token gets 401 {"error": "Unauthorized"}."""
    r = post(http, kv_emulator.url, ["SET", "k", "v"], headers=headers)
    assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})
    assert kv_redis.exists("k") == 0
    assert kv_emulator.requests[-1].authorized is False


def test_redis_errors_are_http_400_with_redis_text(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """A Redis error reply becomes HTTP 400 with Redis's own message, prefix included."""
    r = post(http, kv_emulator.url, ["NOSUCHCOMMAND", "x"])
    assert r.status_code == 400
    assert r.json()["error"].startswith("ERR unknown command")
    kv_redis.hset("h", "f", "v")
    r = post(http, kv_emulator.url, ["GET", "h"])
    assert r.status_code == 400
    assert r.json()["error"].startswith("WRONGTYPE ")


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"cmd": "GET"}', b"[]", b'["SET", "k", true]', b'["SET", "k", {"a": 1}]'],
    ids=["not-json", "object", "empty", "bool-arg", "object-arg"],
)
def test_malformed_commands_are_400(
    http: requests.Session, kv_emulator: KVEmulator, body: bytes
) -> None:
    """A body that is not an array of strings and numbers is refused with HTTP 400."""
    r = http.post(kv_emulator.url, data=body, headers=B64, timeout=5)
    assert r.status_code == 400
    assert r.json()["error"].startswith("ERR ")


def test_numbers_are_accepted_as_arguments(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """JSON numbers are sent to Redis as their decimal text (as Upstash does)."""
    post(http, kv_emulator.url, ["SET", "k", 12, "PX", 60000])
    assert kv_redis.get("k") == b"12"
    assert 0 < kv_redis.pttl("k") <= 60000


def test_transaction_commands_are_refused_on_the_single_endpoint(
    http: requests.Session, kv_emulator: KVEmulator
) -> None:
    """Raw MULTI/WATCH/SELECT/SUBSCRIBE would corrupt a pooled connection: refused."""
    for name in ("MULTI", "watch", "SELECT", "SUBSCRIBE"):
        r = post(http, kv_emulator.url, [name, "1"])
        assert r.status_code == 400
        assert "not available" in r.json()["error"]
    assert post(http, kv_emulator.url, ["PING"]).status_code == 200


def test_pipeline_runs_in_order_with_per_command_errors(
    http: requests.Session, kv_emulator: KVEmulator
) -> None:
    """/pipeline answers one {result}/{error} object per command, in order, HTTP 200."""
    body = [["SET", "k", "1"], ["INCR", "k"], ["HGET", "k", "f"], ["GET", "k"]]
    r = post(http, f"{kv_emulator.url}/pipeline", body)
    assert r.status_code == 200
    out = r.json()
    assert out[:2] == [{"result": "OK"}, {"result": 2}]
    assert out[2]["error"].startswith("WRONGTYPE")
    assert out[3] == {"result": b64("2")}


def test_multi_exec_is_atomic_and_aborts_on_queue_errors(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """/multi-exec runs between MULTI and EXEC; a queue-time error applies nothing."""
    r = post(http, f"{kv_emulator.url}/multi-exec", [["SET", "a", "1"], ["NOSUCH"]])
    assert r.status_code == 400
    assert r.json()["error"].startswith("EXECABORT")
    assert kv_redis.exists("a") == 0
    r = post(http, f"{kv_emulator.url}/multi-exec", [["SET", "a", "x"], ["INCR", "a"]])
    assert r.status_code == 200
    first, second = r.json()
    assert first == {"result": "OK"}
    assert second["error"].startswith("ERR value is not an integer")
    assert kv_redis.get("a") == b"x"  # runtime errors do not roll back (Redis semantics)


def test_multi_exec_is_isolated_from_concurrent_writers(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """No other client's command runs between the commands of one /multi-exec."""
    kv_redis.set("c", "0")
    stop = threading.Event()

    def writer() -> None:
        w = requests.Session()
        while not stop.is_set():
            post(w, kv_emulator.url, ["SET", "c", "intruder"])
        w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(50):
            r = post(http, f"{kv_emulator.url}/multi-exec", [["SET", "c", "mine"], ["GET", "c"]])
            assert r.json()[1] == {"result": b64("mine")}
    finally:
        stop.set()
        thread.join()


def test_path_form_and_token_query_parameter(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """/set/key/value and GET /get/key?_token=... work as on Upstash."""
    r = http.post(f"{kv_emulator.url}/set/greeting/hello%20world", headers=AUTH, timeout=5)
    assert r.json() == {"result": "OK"}
    r = http.post(f"{kv_emulator.url}/set/body-key", data="from body", headers=AUTH, timeout=5)
    assert kv_redis.get("body-key") == b"from body"
    r = http.get(f"{kv_emulator.url}/get/greeting?_token={KV_TEST_TOKEN}", timeout=5)
    assert r.json() == {"result": "hello world"}
    assert http.get(f"{kv_emulator.url}/get/greeting?_token=bad", timeout=5).status_code == 401


def test_keep_alive_with_nagle_disabled(
    http: requests.Session, kv_emulator: KVEmulator
) -> None:
    """Twenty requests on one session reuse one TCP connection, which has TCP_NODELAY."""
    kv_emulator.reset_log()
    for i in range(20):
        assert post(http, kv_emulator.url, ["SET", f"k{i}", "v"]).status_code == 200
    assert kv_emulator.connections_accepted == 1
    assert kv_emulator.nodelay_connections == 1
    assert len(kv_emulator.requests) == 20


def test_request_log_keeps_json_types(
    http: requests.Session, kv_emulator: KVEmulator
) -> None:
    """The log records commands as sent, so tests can check argument types."""
    kv_emulator.reset_log()
    post(http, kv_emulator.url, ["SCAN", "0", "COUNT", 10])
    post(http, f"{kv_emulator.url}/pipeline", [["GET", "a"], ["GET", "b"]])
    first, second = kv_emulator.requests
    assert first.commands == (("SCAN", "0", "COUNT", 10),)
    assert (first.path, first.encoding, first.authorized) == ("/", "base64", True)
    assert second.path == "/pipeline"
    assert second.commands == (("GET", "a"), ("GET", "b"))


def test_a_request_is_recorded_before_its_answer_leaves(
    http: requests.Session,
    kv_emulator: KVEmulator,
    kv_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However slow the record, a client holding its reply finds its request in the log."""
    reply_read = threading.Event()
    record = kv_emulator._record

    def slow_record(request: Any) -> None:
        # Recording after the answer would let the client look first: the
        # client signals once it has looked, so a late record is seen missing.
        reply_read.wait(0.3)
        record(request)

    # A reply larger than the handler's 64 KiB write buffer leaves before the
    # handler returns (smaller ones are flushed only after it).
    kv_redis.set("big", "x" * 200_000)
    monkeypatch.setattr(kv_emulator, "_record", slow_record)
    kv_emulator.reset_log()
    assert post(http, kv_emulator.url, ["GET", "big"]).status_code == 200
    seen = kv_emulator.requests
    reply_read.set()
    assert [r.commands for r in seen] == [(("GET", "big"),)]
    for fault in ({"status": 503}, {"malformed": True}, {"body": b"[]"}):
        kv_emulator.inject(**fault)  # type: ignore[arg-type]
        post(http, kv_emulator.url, ["PING"])
        assert kv_emulator.requests[-1].fault is not None
    kv_emulator.inject(close_connection=True)
    with pytest.raises(requests.ConnectionError):
        post(http, kv_emulator.url, ["PING"])
    assert kv_emulator.requests[-1].status is None


def test_request_log_is_complete_after_every_reply_under_load(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """8 threads x 100 large reads: after each reply the log already holds that request."""
    kv_emulator.reset_log()
    missing: list[str] = []
    big = "y" * 70_000

    def client(n: int) -> None:
        with requests.Session() as session:
            for i in range(100):
                key = f"t{n}:{i}"
                # A value whose reply outgrows the 64 KiB write buffer (see above).
                assert post(session, kv_emulator.url, ["SET", key, big]).status_code == 200
                assert post(session, kv_emulator.url, ["GET", key]).status_code == 200
                if not any(r.commands == (("GET", key),) for r in kv_emulator.requests[-64:]):
                    missing.append(key)

    run_threads(client, 8)
    assert missing == []
    assert len(kv_emulator.requests) == 8 * 100 * 2


def test_wait_idle_waits_for_a_request_its_client_gave_up_on(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """A delayed request whose client timed out is recorded (and run) before wait_idle returns."""
    kv_emulator.reset_log()
    kv_emulator.inject(delay=30)
    with requests.Session() as session, pytest.raises(requests.Timeout):
        session.post(kv_emulator.url, json=["SET", "late", "v"], headers=B64, timeout=0.2)
    deadline = time.monotonic() + 5
    while not kv_emulator._busy and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: the request is read on the server thread
    assert kv_emulator.wait_idle(0.05) is False  # still inside its delay
    kv_emulator.clear_faults()
    assert kv_emulator.wait_idle() is True
    assert [r.commands for r in kv_emulator.requests] == [(("SET", "late", "v"),)]
    assert kv_redis.get("late") == b"v"


# -- fault injection ----------------------------------------------------------------------


def test_inject_status_applies_to_the_next_n_requests_only(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """inject(status=500, times=2): two 500s that run nothing, then normal service."""
    kv_emulator.inject(status=500, times=2)
    assert post(http, kv_emulator.url, ["SET", "k", "1"]).status_code == 500
    r = post(http, kv_emulator.url, ["SET", "k", "2"])
    assert (r.status_code, r.json()) == (500, {"error": "ERR injected fault"})
    assert kv_redis.exists("k") == 0
    assert post(http, kv_emulator.url, ["SET", "k", "3"]).status_code == 200
    assert kv_redis.get("k") == b"3"
    assert [r.fault for r in kv_emulator.requests] == ["status=500", "status=500", None]


def test_inject_close_connection_drops_without_an_answer(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """inject(close_connection=True) closes the socket with no reply and no command run."""
    kv_emulator.inject(close_connection=True)
    with pytest.raises(requests.ConnectionError):
        post(http, kv_emulator.url, ["SET", "k", "v"])
    assert kv_redis.exists("k") == 0
    assert kv_emulator.requests[-1].status is None
    assert post(http, kv_emulator.url, ["PING"]).status_code == 200


def test_inject_malformed_sends_a_truncated_body(
    http: requests.Session, kv_emulator: KVEmulator
) -> None:
    """inject(malformed=True) answers 200 with a body that is not valid JSON."""
    kv_emulator.inject(malformed=True)
    r = post(http, kv_emulator.url, ["PING"])
    assert r.status_code == 200
    with pytest.raises(ValueError):
        r.json()


def test_inject_delay_answers_late_and_clear_faults_cuts_it_short(
    http: requests.Session, kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """A delayed request still runs after the delay; clear_faults() ends a long delay."""
    kv_emulator.inject(delay=0.2)
    start = time.monotonic()
    assert post(http, kv_emulator.url, ["SET", "k", "v"]).json() == {"result": "OK"}
    assert time.monotonic() - start >= 0.2
    kv_emulator.inject(delay=30, times=None)
    timer = threading.Timer(0.2, kv_emulator.clear_faults)
    timer.start()
    start = time.monotonic()
    assert post(http, kv_emulator.url, ["GET", "k"]).json() == {"result": b64("v")}
    assert time.monotonic() - start < 5
    timer.join()


def test_inject_forever_until_cleared(http: requests.Session, kv_emulator: KVEmulator) -> None:
    """times=None keeps failing every request until clear_faults()."""
    kv_emulator.inject(status=503, times=None)
    assert [post(http, kv_emulator.url, ["PING"]).status_code for _ in range(5)] == [503] * 5
    kv_emulator.clear_faults()
    assert post(http, kv_emulator.url, ["PING"]).status_code == 200


def test_inject_rejects_empty_faults(kv_emulator: KVEmulator) -> None:
    """inject() without any fault, or times=0, is a mistake in the test."""
    with pytest.raises(ValueError):
        kv_emulator.inject()
    with pytest.raises(ValueError):
        kv_emulator.inject(status=500, times=0)


# -- lifecycle ---------------------------------------------------------------------------------


def test_unreachable_redis_gives_http_500(http: requests.Session) -> None:
    """When the backing Redis is down the emulator answers 500 with an error object."""
    with KVEmulator(f"redis://127.0.0.1:{free_port()}/0", "t") as emulator:
        r = http.post(emulator.url, json=["PING"], headers={"Authorization": "Bearer t"})
        assert r.status_code == 500
        assert r.json()["error"].startswith("ERR ")


def test_stop_is_prompt_with_idle_keep_alive_clients(kv_redis_server: RedisServer) -> None:
    """stop() returns quickly even while a client holds a keep-alive connection open."""
    emulator = KVEmulator(kv_redis_server.url, "t").start()
    host, port = emulator.url.rsplit(":", 1)
    session = requests.Session()
    assert session.post(emulator.url, json=["PING"], headers={"Authorization": "Bearer t"}).ok
    start = time.monotonic()
    emulator.stop()
    assert time.monotonic() - start < 2
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
    session.close()


def test_emulator_listens_on_loopback_only(kv_emulator: KVEmulator) -> None:
    """The default bind address is 127.0.0.1 on a free port (never a well-known one)."""
    assert kv_emulator.url.startswith("http://127.0.0.1:")
    assert int(kv_emulator.url.rsplit(":", 1)[1]) not in (80, 443, 6379, 8080)


# -- fidelity with the official upstash-redis client ------------------------------------------


def test_upstash_client_set_get_agree_with_redis(
    upstash: UpstashRedis, kv_redis: redis.Redis
) -> None:
    """Values written by upstash-redis read back identically through redis-py, and back."""
    text = "h\u00e9llo \u2713 \U0001f389 \"q\" \\ \x01\x7f\n OK"
    assert upstash.set("a", text) is True
    assert kv_redis.get("a") == text.encode("utf-8")
    kv_redis.set("b", "OK")
    assert upstash.get("b") == "OK"
    assert upstash.mget("a", "b", "c") == [text, "OK", None]
    assert upstash.set("a", "other", nx=True) is False  # the client casts nil to False
    assert kv_redis.get("a") == text.encode("utf-8")
    assert upstash.set("t", "v", px=60_000) is True
    assert 0 < kv_redis.pttl("t") <= 60_000
    assert upstash.delete("a", "b", "zz") == 2
    assert kv_redis.exists("a", "b") == 0


def test_upstash_client_scan_matches_redis_scan(
    upstash: UpstashRedis, kv_redis: redis.Redis
) -> None:
    """A SCAN loop through upstash-redis visits the same cursors and keys as redis-py."""
    kv_redis.mset({f"scan:{i}": "v" for i in range(700)})
    kv_redis.mset({f"other:{i}": "v" for i in range(100)})

    upstash_cursors, upstash_keys = [], []
    cursor = 0
    while True:
        cursor, keys = upstash.scan(cursor, match="scan:*", count=50)
        upstash_cursors.append(cursor)
        upstash_keys.extend(keys)
        if cursor == 0:
            break

    redis_cursors, redis_keys = [], []
    cursor = 0
    while True:
        cursor, raw = kv_redis.scan(cursor, match="scan:*", count=50)
        redis_cursors.append(cursor)
        redis_keys.extend(k.decode() for k in raw)
        if cursor == 0:
            break

    assert upstash_cursors == redis_cursors
    assert upstash_keys == redis_keys
    assert set(upstash_keys) == {f"scan:{i}" for i in range(700)}


def test_upstash_client_pipeline_and_transaction_agree_with_redis(
    upstash: UpstashRedis, kv_redis: redis.Redis
) -> None:
    """Pipelines and MULTI through upstash-redis give redis-py's results, in order."""
    pipe = upstash.pipeline()
    pipe.set("p", "1")
    pipe.incr("p")
    pipe.get("p")
    pipe.delete("p")
    pipe.get("p")
    upstash_results = pipe.exec()

    rpipe = kv_redis.pipeline(transaction=False)
    rpipe.set("p", "1").incr("p").get("p").delete("p").get("p")
    redis_results = [v.decode() if isinstance(v, bytes) else v for v in rpipe.execute()]
    assert upstash_results == redis_results == [True, 2, "2", 1, None]

    tx = upstash.multi()
    tx.set("m", "a")
    tx.append("m", "b")
    tx.get("m")
    assert tx.exec() == [True, 2, "ab"]
    assert kv_redis.get("m") == b"ab"


def test_upstash_client_sees_redis_errors_and_scripts(
    upstash: UpstashRedis, kv_redis: redis.Redis
) -> None:
    """Redis errors reach upstash-redis as UpstashError; EVAL results match redis-py's."""
    kv_redis.set("s", "text")
    with pytest.raises(redis.ResponseError) as redis_err:
        kv_redis.incr("s")
    with pytest.raises(UpstashError) as upstash_err:
        upstash.incr("s")
    assert str(upstash_err.value).endswith(str(redis_err.value))
    script = "return {KEYS[1], ARGV[1], 7}"
    through_upstash = upstash.eval(script, keys=["k\u00e9"], args=["\U0001f389"])
    assert through_upstash == ["k\u00e9", "\U0001f389", 7]
    assert kv_redis.eval(script, 1, "k\u00e9", "\U0001f389") == [
        "k\u00e9".encode(),
        "\U0001f389".encode(),
        7,
    ]


def test_upstash_client_with_wrong_token_is_refused(
    kv_emulator: KVEmulator, kv_redis: redis.Redis
) -> None:
    """upstash-redis with a wrong token gets the Unauthorized error and writes nothing."""
    client = UpstashRedis(kv_emulator.url, "wrong", allow_telemetry=False, rest_retries=0)
    try:
        with pytest.raises(UpstashError, match="Unauthorized"):
            client.set("k", "v")
    finally:
        client.close()
    assert kv_redis.exists("k") == 0
