"""Many principals on one server: the two attacks of a shared deployment, over real HTTP.

* Fair eviction defeated by opening sessions: Mallory makes 150 x (``initialize``
  + one small ``remember_this``) against ``serve --max-entries 150``; Alice's 10
  user notes must all stay (the store evicts by principal, not by namespace).
  With ``--quota-entries`` Mallory is refused with ``REMEMBER_QUOTA_EXCEEDED``
  instead, and nobody is evicted.
* One caller stopping everyone from ending sessions: Mallory ends her own
  sessions until her share of the ended-session table is full; Alice's
  ``DELETE`` still answers 204.

Real ``remember-sync serve`` processes (memory store), the threaded server
``serve`` runs (for a table small enough to fill in seconds) and a real gunicorn
with 4 workers on a throw-away redis-server, all driven with raw MCP requests
(``initialize``, ``tools/call``, ``DELETE``) as a client sends them.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from remember_sync import Identity, RememberConfigurationError, RememberQuotaError
from remember_sync.mcp import create_app
from tests.conftest import TEST_SECRET, require_component
from tests.served import REPO, write_tokens
from tests.test_gunicorn_workers import START_SECONDS, Gunicorn, worker_pids
from tests.test_mcp_sessions import threaded
from tests.test_memory_bounds import Caller, start_serve  # noqa: F401 - the fixture, by name

ALICE, MALLORY = "alice-token-0123456789", "mallory-token-0123456789"
QUOTA = "REMEMBER_QUOTA_EXCEEDED"


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path / "tokens", {ALICE: "alice", MALLORY: "mallory"})


def _error_code(result: dict[str, Any]) -> str | None:
    """The code of a tool error result (``"<CODE>: <message>"``), ``None`` on success."""
    if not result["isError"]:
        return None
    code: str = result["content"][0]["text"].partition(": ")[0]
    return code


def _one_session_write(url: str, token: str, key: str) -> str | None:
    """initialize + one small remember_this in session scope; the error code or ``None``."""
    caller = Caller(url, token)
    try:
        return _error_code(caller.tool("remember_this", {"key": key, "value": "junk"}))
    finally:
        caller.close()


def _delete_answer(url: str, session_id: str, token: str) -> tuple[int, str, str | None]:
    """DELETE *session_id*; the status, the body text and the Retry-After header."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(
            "DELETE", parts.path,
            headers={"Mcp-Session-Id": session_id, "Authorization": f"Bearer {token}"},
        )  # fmt: skip
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        return response.status, body, response.getheader("Retry-After")
    finally:
        conn.close()


def _delete(url: str, session_id: str, token: str) -> int:
    return _delete_answer(url, session_id, token)[0]


def _alice_notes(url: str) -> Caller:
    alice = Caller(url, ALICE)
    for i in range(10):
        alice.remember(f"note-{i}", f"alice-{i}", "user")
    return alice


def _assert_alice_kept_her_notes(url: str) -> None:
    alice = Caller(url, ALICE)  # a new session: user scope is hers across sessions
    try:
        for i in range(10):
            assert alice.recall(f"note-{i}", "user") == f"alice-{i}"
    finally:
        alice.close()


def test_opening_sessions_does_not_defeat_fair_eviction(
    request: pytest.FixtureRequest, tokens_file: Path
) -> None:
    """serve --max-entries 150: Mallory's 150 sessions evict her own notes, never Alice's."""
    start = request.getfixturevalue("start_serve")
    served = start("--auth-tokens", str(tokens_file), "--max-entries", "150")
    _alice_notes(served.url).close()
    for n in range(150):
        assert _one_session_write(served.url, MALLORY, f"junk-{n}") is None
    _assert_alice_kept_her_notes(served.url)


def test_quota_refuses_mallory_and_keeps_alices_notes(
    request: pytest.FixtureRequest, tokens_file: Path
) -> None:
    """serve --quota-entries 20: Mallory's 21st note is a REMEMBER_QUOTA_EXCEEDED tool error;
    Alice keeps all hers and may still write."""
    served = request.getfixturevalue("start_serve")(
        "--auth-tokens", str(tokens_file), "--max-entries", "150", "--quota-entries", "20"
    )
    alice = _alice_notes(served.url)
    codes = [_one_session_write(served.url, MALLORY, f"junk-{n}") for n in range(30)]
    assert codes == [None] * 20 + [QUOTA] * 10
    _assert_alice_kept_her_notes(served.url)
    alice.remember("note-10", "alice-10", "user")
    alice.close()


def _fill_mallorys_share_then_alice_ends_hers(url: str, share: int) -> None:
    """Mallory ends *share* sessions of her own (204), then is refused (503, her session stays
    live); Alice's DELETE still answers 204 and her session is gone (404)."""
    for n in range(share):
        mallory = Caller(url, MALLORY)
        assert _delete(url, mallory.headers["Mcp-Session-Id"], MALLORY) == 204, n
        mallory.close()
    refused = Caller(url, MALLORY)
    status, body, retry_after = _delete_answer(url, refused.headers["Mcp-Session-Id"], MALLORY)
    assert (status, retry_after) == (503, "60"), body
    assert "REMEMBER_ENDED_SESSIONS_FULL" not in body  # the documented message, no code
    assert f"already has {share} ended sessions" in body and "not ended" in body, body
    # Her session stays live (she was told it was not ended).
    assert refused.tool("recall", {"key": "k"})["isError"] is False
    refused.close()
    alice = Caller(url, ALICE)
    sid = alice.headers["Mcp-Session-Id"]
    assert _delete(url, sid, ALICE) == 204
    alice.close()
    again = Caller(url, ALICE)
    again.headers["Mcp-Session-Id"] = sid
    status, _, _ = again._post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert status == 404  # ended for good
    assert _delete(url, sid, ALICE) == 404  # and cannot be ended twice
    again.close()


def test_filling_ones_share_of_ended_sessions_never_stops_another_caller(
    request: pytest.FixtureRequest, tokens_file: Path
) -> None:
    """serve --max-ended-sessions 40 --max-ended-per-principal 10 (a real process): Mallory
    fills her share and gets 503; Alice's DELETE is 204 and ends her session."""
    served = request.getfixturevalue("start_serve")(
        "--auth-tokens", str(tokens_file),
        "--max-ended-sessions", "40", "--max-ended-per-principal", "10",
    )  # fmt: skip
    _fill_mallorys_share_then_alice_ends_hers(served.url, 10)


def test_many_principals_never_fill_the_ended_session_table_for_another(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """serve --max-ended-sessions 50 --max-ended-per-principal 10: Mallory, with 20 tokens,
    ends 200 sessions (10 per principal, each 204); the full table makes room from the
    principal holding the most, so every DELETE of Alice's in between is 204 (never 503)
    and the session she ended last stays ended."""
    mallories = {f"mallory-{n:02d}-token-0123456789": f"mallory-{n:02d}" for n in range(20)}
    tokens = write_tokens(tmp_path / "many-tokens", {ALICE: "alice", **mallories})
    served = request.getfixturevalue("start_serve")(
        "--auth-tokens", str(tokens),
        "--max-ended-sessions", "50", "--max-ended-per-principal", "10",
    )  # fmt: skip
    ended_by_alice = []
    for n in range(200):
        token = list(mallories)[n % 20]
        mallory = Caller(served.url, token)
        assert _delete(served.url, mallory.headers["Mcp-Session-Id"], token) == 204, n
        mallory.close()
        if n % 40 == 39:
            alice = Caller(served.url, ALICE)
            sid = alice.headers["Mcp-Session-Id"]
            assert _delete(served.url, sid, ALICE) == 204, n
            alice.close()
            ended_by_alice.append(sid)
    assert len(ended_by_alice) == 5
    assert _delete(served.url, ended_by_alice[-1], ALICE) == 404


def test_serve_reads_the_ended_session_caps_from_the_environment(
    request: pytest.FixtureRequest, tokens_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REMEMBER_MAX_ENDED_PER_PRINCIPAL=5 gives every principal a share of 5 ended sessions."""
    monkeypatch.setenv("REMEMBER_MAX_ENDED_SESSIONS", "40")
    monkeypatch.setenv("REMEMBER_MAX_ENDED_PER_PRINCIPAL", "5")
    served = request.getfixturevalue("start_serve")("--auth-tokens", str(tokens_file))
    _fill_mallorys_share_then_alice_ends_hers(served.url, 5)


def test_create_app_reads_the_ended_session_caps(
    monkeypatch: pytest.MonkeyPatch, tokens_file: Path
) -> None:
    """create_app: the variables, overridden by McpServer arguments (a threaded server)."""
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    env = {"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_MAX_ENDED_PER_PRINCIPAL": "3"}
    app = create_app(auth_tokens=str(tokens_file), environ=env)
    try:
        assert (app._ended.max_local, app._ended.max_per_principal) == (100_000, 3)
    finally:
        app.close()
    app = create_app(auth_tokens=str(tokens_file), environ=env, max_ended_per_principal=4)
    with threaded(app) as client:
        _fill_mallorys_share_then_alice_ends_hers(client.url, 4)


def test_ended_session_caps_are_refused_with_a_shared_store(redis_url: str) -> None:
    """On Redis the ended sessions live in the store with no cap: asking for one is an error
    (serve exits 1 naming the flag; create_app raises naming the variable)."""
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", "--redis-url",
         redis_url, "--max-ended-per-principal", "10"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "REMEMBER_SECRET": TEST_SECRET},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "--max-ended-per-principal" in done.stderr and "memory store" in done.stderr
    env = {"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_MAX_ENDED_SESSIONS": "10"}
    with pytest.raises(RememberConfigurationError, match="REMEMBER_MAX_ENDED_SESSIONS"):
        create_app(environ=env, redis_url=redis_url)


@pytest.fixture
def gunicorn_quota(
    tmp_path: Path, redis_url: str, redis_client: Any, tokens_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """gunicorn -w 4 --threads 8 on Redis with REMEMBER_QUOTA_ENTRIES=20 and two tokens."""
    require_component("gunicorn", find_spec("gunicorn") is not None, "pip install gunicorn")
    monkeypatch.setenv("REMEMBER_QUOTA_ENTRIES", "20")
    monkeypatch.setenv("REMEMBER_AUTH_TOKENS", str(tokens_file))
    server = Gunicorn(tmp_path, redis_url)
    try:
        server.wait_ready(START_SECONDS)
        worker_pids(server.port)
        yield server
    finally:
        server.close()
    assert "Traceback" not in server.output, server.output


def test_four_gunicorn_workers_on_redis_share_each_quota(gunicorn_quota: Any) -> None:
    """40 concurrent one-note sessions of Mallory over 4 workers: exactly 20 land, the rest
    are REMEMBER_QUOTA_EXCEEDED; Alice keeps her notes; ending sessions never blocks her."""
    url = f"http://127.0.0.1:{gunicorn_quota.port}/mcp"
    alice = _alice_notes(url)
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda n: _one_session_write(url, MALLORY, f"junk-{n}"), range(40)))
    assert codes.count(None) == 20 and codes.count(QUOTA) == 20, codes
    _assert_alice_kept_her_notes(url)
    alice.remember("note-10", "alice-10", "user")
    for _ in range(30):  # Mallory ends many sessions of her own
        mallory = Caller(url, MALLORY)
        assert _delete(url, mallory.headers["Mcp-Session-Id"], MALLORY) == 204
        mallory.close()
    assert _delete(url, alice.headers["Mcp-Session-Id"], ALICE) == 204
    alice.close()
    # Every worker sees the same ledger: Mallory is still refused wherever she lands.
    with ThreadPoolExecutor(8) as pool:
        late = list(pool.map(lambda n: _one_session_write(url, MALLORY, f"late-{n}"), range(16)))
    assert late == [QUOTA] * 16


# -- configuration -------------------------------------------------------------------------------


def test_create_app_reads_the_quota_from_the_environment_and_arguments() -> None:
    """REMEMBER_QUOTA_ENTRIES / _BYTES give every principal a quota; arguments override them."""
    env = {"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_QUOTA_ENTRIES": " 2 ",
           "REMEMBER_QUOTA_BYTES": "100000"}  # fmt: skip
    for options, allowed in (({}, 2), ({"quota_entries": 3}, 3)):
        app = create_app(environ=env, **options)
        try:
            mem = app.plugin.accessor(Identity(session_id="s", user_id="u"))
            for i in range(allowed):
                mem.set(f"k{i}", i, scope="user")
            with pytest.raises(RememberQuotaError):
                mem.set("one-more", 1, scope="user")
        finally:
            app.close()


@pytest.mark.parametrize(
    ("env", "named"),
    [({"REMEMBER_QUOTA_ENTRIES": "0"}, "REMEMBER_QUOTA_ENTRIES"),
     ({"REMEMBER_QUOTA_BYTES": "lots"}, "REMEMBER_QUOTA_BYTES"),
     ({"REMEMBER_MAX_ENDED_SESSIONS": "0"}, "REMEMBER_MAX_ENDED_SESSIONS"),
     ({"REMEMBER_MAX_ENDED_PER_PRINCIPAL": "many"}, "REMEMBER_MAX_ENDED_PER_PRINCIPAL")],
)
def test_create_app_rejects_a_bad_quota_or_cap(env: dict[str, str], named: str) -> None:
    """A bad quota or ended-session cap variable raises naming it."""
    with pytest.raises(RememberConfigurationError, match=named):
        create_app(environ={"REMEMBER_SECRET": TEST_SECRET, **env})


@pytest.mark.parametrize(
    "flag",
    ["--quota-entries", "--quota-bytes", "--max-ended-sessions", "--max-ended-per-principal"],
)
def test_serve_rejects_a_bad_quota_flag(tmp_path: Path, flag: str) -> None:
    """serve --quota-entries 0 (or a cap of 0) is a usage error naming the flag; nothing
    starts."""
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", flag, "0"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "REMEMBER_SECRET": TEST_SECRET},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert flag in done.stderr
