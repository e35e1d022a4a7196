"""Secrets never appear in logs, exceptions, ``repr()`` of public objects, HTTP or CLI output.

One scenario runs every layer with known secrets -- the master secret and a
previous one (``REMEMBER_SECRET``, ``REMEMBER_PREVIOUS_SECRETS``), a Redis
password, a Vercel KV token, MCP bearer tokens, plus *wrong* password and
token values used in failing calls -- while capturing:

* every log record of every logger at DEBUG (message, arguments and the
  formatted traceback) and every warning;
* every exception raised along the way (``str``, ``repr``, ``args`` and the
  whole formatted chain, causes included);
* ``repr()`` and ``str()`` of the plugin, accessors, keyring, stores, codec,
  session signer, token verifier, MCP server, entries and errors;
* every HTTP answer of the MCP server (status line, headers, body);
* stdout and stderr of ``remember-sync`` commands run as subprocesses
  (``doctor``, ``set``, ``get``, ``list``, ``stats``, ``rotate``, ``export``,
  ``serve``), successful and failing.

Then each secret is searched for in all of it.  The canaries are random per
run and never written literally in this file, so source lines shown in a
traceback cannot produce a false alarm.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remember_sync import Identity, RememberPlugin, identity
from remember_sync.errors import (
    RememberConfigurationError,
    RememberDecryptionError,
    RememberError,
    RememberStoreError,
)
from remember_sync.mcp import McpServer, StaticTokenVerifier
from remember_sync.mcp.httpd import make_server
from remember_sync.stores.redis import RedisStore
from remember_sync.stores.vercel_kv import VercelKVStore
from remember_sync.testing.kv_emulator import KVEmulator
from remember_sync.testing.redis_server import RedisServer, free_port
from tests.fixtures_redis import redis_binary
from tests.mcp_wire import initialize

REPO = Path(__file__).resolve().parent.parent


def _canary(kind: str) -> str:
    return f"CANARY{kind}{uuid.uuid4().hex}"


class Canaries:
    """Random secret values for one run (alphanumeric: safe in URLs and tokens)."""

    def __init__(self) -> None:
        self.master = _canary("master")
        self.previous = _canary("previous")
        self.redis_password = _canary("redispw")
        self.kv_token = _canary("kvtoken")
        self.mcp_token = _canary("mcptoken")
        self.wrong_password = _canary("wrongpw")
        self.wrong_token = _canary("wrongtoken")
        self.custom_key = _canary("customkey")

    def all(self) -> dict[str, str]:
        return dict(vars(self))


class Capture:
    """Everything the scenario produced that a user or an operator could see."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []
        self.exceptions = 0
        self.reprs = 0
        self.cli_runs = 0
        self.http_answers = 0
        self.log_records = 0
        #: Adds every log record and warning seen so far (set by the fixture).
        self.collect_logs: Callable[[], None] = lambda: None

    def add(self, where: str, text: str) -> None:
        self.texts.append((where, text))

    def show(self, where: str, obj: object) -> None:
        self.reprs += 1
        self.add(f"repr {where}", repr(obj))
        self.add(f"str {where}", str(obj))

    def error(self, where: str, exc: BaseException) -> None:
        """The exception as users see it: formatted, plus repr/args of each chained one.

        The chain is followed as :mod:`traceback`, :mod:`logging` and error trackers
        follow it: ``__cause__``, else ``__context__`` unless ``raise ... from`` suppressed it.
        """
        self.exceptions += 1
        self.add(f"exception {where}", "".join(traceback.format_exception(exc)))
        chained: BaseException | None = exc
        while chained is not None:
            self.add(f"exception {where}", f"{chained!r} {chained.args!r}")
            if chained.__cause__ is not None:
                chained = chained.__cause__
            else:
                chained = None if chained.__suppress_context__ else chained.__context__

    def expect(
        self,
        where: str,
        kinds: type[BaseException] | tuple[type[BaseException], ...],
        call: Callable[[], Any],
    ) -> BaseException:
        with pytest.raises(kinds) as info:
            call()
        self.error(where, info.value)
        return info.value


@pytest.fixture
def canaries(monkeypatch: pytest.MonkeyPatch) -> Canaries:
    values = Canaries()
    monkeypatch.setenv("REMEMBER_SECRET", values.master)
    monkeypatch.setenv("REMEMBER_PREVIOUS_SECRETS", values.previous)
    return values


@pytest.fixture
def locked_redis(canaries: Canaries) -> Iterator[RedisServer]:
    """A private redis-server that requires the canary password."""
    binary = redis_binary()
    server = RedisServer(binary).start()
    # Set after start: start() waits for an unauthenticated PING.
    client = server.client()
    client.config_set("requirepass", canaries.redis_password)
    client.close()
    yield server
    server.cleanup()


@pytest.fixture
def capture_everything(caplog: pytest.LogCaptureFixture) -> Iterator[Capture]:
    """All log records at DEBUG, for every logger (even non-propagating ones), and warnings."""
    caplog.set_level(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)]
    for name in (
        "remember_sync",
        "remember_sync.mcp",
        "remember_sync.mcp.access",
        "redis",
        "urllib3",
        "requests",
    ):
        loggers.append(logging.getLogger(name))
    saved = [(lg, lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
        lg.propagate = True
    capture = Capture()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def collect() -> None:
            for w in caught:
                capture.add("warning", str(w.message))
            for record in caplog.records:
                capture.add(f"log {record.name}", record.getMessage())
                capture.add(f"log-args {record.name}", repr(record.args))
                if record.exc_info:
                    capture.add(
                        f"log-exc {record.name}",
                        "".join(traceback.format_exception(*record.exc_info)),
                    )
            capture.add("log text", caplog.text)
            capture.log_records = len(caplog.records)

        capture.collect_logs = collect
        yield capture
    for lg, level, propagate in saved:
        lg.setLevel(level)
        lg.propagate = propagate


def _child_env(canaries: Canaries, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REMEMBER_", "KV_REST_", "MCP_")) and k != "REDIS_URL"
    }
    env.update(
        PYTHONPATH=str(REPO),
        PYTHONIOENCODING="utf-8",
        REMEMBER_SECRET=canaries.master,
        REMEMBER_PREVIOUS_SECRETS=canaries.previous,
    )
    env.update(extra)
    return env


def _http(port: int, method: str, body: Any, headers: dict[str, str]) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            method,
            "/mcp",
            body=json.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json", **headers},
        )
        response = conn.getresponse()
        head = "\n".join(f"{k}: {v}" for k, v in response.getheaders())
        return f"{response.status} {response.reason}\n{head}\n\n{response.read().decode()}"
    finally:
        conn.close()


def test_no_secret_appears_anywhere_in_a_full_run(
    canaries: Canaries,
    locked_redis: RedisServer,
    kv_redis_server: RedisServer,
    capture_everything: Capture,
    tmp_path: Path,
) -> None:
    """A full run with known secrets: none shows up in logs, errors, reprs, HTTP or CLI output."""
    cap = capture_everything
    port = locked_redis.port
    good_url = f"redis://:{canaries.redis_password}@127.0.0.1:{port}/0"
    wrong_url = f"redis://:{canaries.wrong_password}@127.0.0.1:{port}/0"
    dead_url = f"redis://:{canaries.redis_password}@127.0.0.1:{free_port()}/0"

    # -- Redis, configured three ways, used through every accessor method ------------------------
    plugin = RememberPlugin.init(
        type="redis",
        config={"host": "127.0.0.1", "port": port, "password": canaries.redis_password},
    )
    by_url = RememberPlugin.init(type="redis", config={"url": good_url})
    store = RedisStore.from_url(good_url)
    ident = Identity("s-leak", "alice", "planner")
    mem = plugin.accessor(ident)
    for scope in ("session", "user", "tool", "global"):
        mem.set("k", {"v": scope}, scope=scope, ttl=600, brand="state", metadata={"m": 1})
        assert mem.get("k", scope=scope) == {"v": scope}
        assert mem.update("k", [scope], scope=scope)
        cap.show(f"entry {scope}", mem.get_entry("k", scope=scope))
        cap.add("list", repr(mem.list(scope=scope)) + repr(mem.entries(scope=scope)))
    with identity(session_id="s-ctx", user_id="bob"):
        plugin.remember.set("ctx", 1)
        cap.show("context accessor", plugin.remember)
    assert by_url.accessor(ident).get("k", scope="user") == ["user"]
    for name, obj in [
        ("plugin", plugin),
        ("plugin by url", by_url),
        ("accessor", mem),
        ("keyring", plugin.keyring),
        ("store", plugin.store),
        ("store from url", store),
        ("core", plugin._core),
        ("codec", plugin._core.codec),
        ("stats", plugin.stats()),
        ("signer", McpServer(plugin).session_signer),
        ("identity", ident),
        ("redis client", store.client),
    ]:
        cap.show(name, obj)
    cap.add("html", mem._repr_html_())

    # -- failing Redis configurations
    wrong = RememberPlugin.init(type="redis", config={"url": wrong_url})
    cap.expect(
        "wrong redis password",
        RememberConfigurationError,
        lambda: wrong.accessor(ident).get("k", scope="user"),
    )
    cap.show("plugin with wrong password", wrong)
    dead = RememberPlugin.init(type="redis", config={"url": dead_url, "socket_timeout": 0.5})
    cap.expect("unreachable redis", RememberStoreError, lambda: dead.accessor(ident).set("k", 1))
    for bad in (
        f"redis://:{canaries.wrong_password}@127.0.0.1:notaport/0",
        f"redis://:{canaries.wrong_password}@[::1/0",
        f"ftp://:{canaries.wrong_password}@127.0.0.1/0",
    ):
        cap.expect(
            f"bad url {bad[:5]}", RememberConfigurationError, lambda b=bad: RedisStore.from_url(b)
        )
        cap.expect(
            f"bad url in config {bad[:5]}",
            RememberConfigurationError,
            lambda b=bad: RememberPlugin.init(type="redis", config={"url": b}),
        )
    cap.expect(
        "url and host",
        RememberConfigurationError,
        lambda: RememberPlugin.init(type="redis", config={"url": wrong_url, "host": "127.0.0.1"}),
    )
    cap.expect(
        "password wrong type",
        RememberConfigurationError,
        lambda: RememberPlugin.init(
            type="redis", config={"host": "127.0.0.1", "password": [canaries.wrong_password]}
        ),
    )

    # -- secrets: rotation, wrong secrets, decrypt failures
    rotated = RememberPlugin.init(
        store=store, encryption={"secrets": [canaries.custom_key, canaries.master]}
    )
    assert rotated.accessor(ident).get("k", scope="user") == ["user"]
    cap.show("rotated keyring", rotated.keyring)
    stranger = RememberPlugin.init(store=store, encryption={"custom_key": canaries.wrong_token})
    assert stranger.accessor(ident).get("k", scope="user", default="x") == "x"  # logs a warning
    strict = RememberPlugin.init(
        store=store, on_decrypt_error="raise", encryption={"custom_key": canaries.wrong_token}
    )
    cap.expect(
        "decrypt error",
        RememberDecryptionError,
        lambda: strict.accessor(ident).get("k", scope="user"),
    )
    cap.expect(
        "list decrypt error",
        RememberDecryptionError,
        lambda: strict.accessor(ident).list(scope="user"),
    )
    for bad_encryption in (
        {"secrets": [canaries.custom_key, ""]},
        {"secrets": canaries.custom_key},
        {"custom_key": canaries.custom_key, "secrets": [canaries.custom_key]},
        {"custom_key": ""},
        {"nonsense": canaries.custom_key},
    ):
        cap.expect(
            "bad encryption option",
            RememberConfigurationError,
            lambda e=bad_encryption: RememberPlugin.init(encryption=e),
        )  # type: ignore[misc]

    # -- Vercel KV (emulator), with the right token, a wrong one, and servers echoing it
    with KVEmulator(kv_redis_server.url, canaries.kv_token) as kv:
        kv_plugin = RememberPlugin.init(
            type="vercel-kv", url=kv.url, token=canaries.kv_token, skip_legacy_purge=True
        )
        kv_mem = kv_plugin.accessor(ident)
        kv_mem.set("k", "v", scope="user")
        assert kv_mem.get("k", scope="user") == "v"
        assert kv_mem.list(scope="user") == ["k"]
        cap.show("kv plugin", kv_plugin)
        cap.show("kv store", kv_plugin.store)
        cap.show("kv session auth", kv_plugin.store._auth)  # type: ignore[attr-defined]
        wrong_kv = RememberPlugin.init(
            type="vercel-kv", url=kv.url, token=canaries.wrong_token, skip_legacy_purge=True
        )
        cap.expect(
            "wrong kv token",
            RememberConfigurationError,
            lambda: wrong_kv.accessor(ident).get("k", scope="user"),
        )
        # Closed now: the faults below are for kv_plugin's store alone (a store can only
        # scrub its own token from what a server echoes).
        wrong_kv.close()
        for status in (500, 400):
            kv.inject(status=status, times=None, error=f"ERR bad token {canaries.kv_token}")
            cap.expect(
                f"kv echoing the token {status}",
                RememberStoreError,
                lambda: kv_mem.get("k", scope="user"),
            )
            kv.clear_faults()
        kv.inject(close_connection=True, times=None)
        cap.expect(
            "kv dropping connections",
            RememberStoreError,
            lambda: kv_mem.set("k", "v", scope="user"),
        )
        kv.clear_faults()
        cap.expect(
            "kv token with whitespace",
            RememberConfigurationError,
            lambda: VercelKVStore(kv.url, f"{canaries.wrong_token} x", environ={}),
        )
        cap.expect(
            "kv only token",
            RememberConfigurationError,
            lambda: VercelKVStore(environ={"KV_REST_API_TOKEN": canaries.kv_token}),
        )
        for p in (kv_plugin, wrong_kv):
            p.close()

    # -- the MCP server over HTTP
    tools_plugin = RememberPlugin.init(store=store, tools={"enabled": True})
    verifier = StaticTokenVerifier({canaries.mcp_token: "alice"})
    server = McpServer(tools_plugin, token_verifier=verifier)
    cap.show("mcp server", server)
    cap.show("token verifier", verifier)
    cap.show("server signer", server.session_signer)
    httpd = make_server("127.0.0.1", 0, server)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        auth = {"Authorization": f"Bearer {canaries.mcp_token}", "Accept": "application/json"}
        init = initialize(client="leak")
        answer = _http(httpd.server_port, "POST", init, auth)
        cap.add("http initialize", answer)
        session = next(
            line.split(": ", 1)[1]
            for line in answer.splitlines()
            if line.lower().startswith("mcp-session-id")
        )
        with_session = {**auth, "Mcp-Session-Id": session}
        for call in (
            {"name": "remember_this", "arguments": {"key": "k", "value": 1}},
            {"name": "recall", "arguments": {"key": "k"}},
            {"name": "list_memories", "arguments": {"scope": "user"}},
            {"name": "recall", "arguments": {"key": "", "scope": "nope"}},
            {"name": "nope", "arguments": {}},
        ):
            cap.add(
                "http call",
                _http(
                    httpd.server_port,
                    "POST",
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
                    with_session,
                ),
            )
        for headers in (
            {"Authorization": f"Bearer {canaries.wrong_token}"},
            {"Authorization": f"Basic {canaries.mcp_token}"},
            {**auth, "Mcp-Session-Id": canaries.wrong_token},
        ):
            cap.add(
                "http refused",
                _http(
                    httpd.server_port,
                    "POST",
                    {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                    headers,
                ),
            )
        cap.http_answers += 10
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)

    for p in (plugin, by_url, wrong, dead, rotated, stranger, strict, tools_plugin):
        p.close()
    store.close()

    # -- the CLI, as operators run it
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{canaries.mcp_token} alice\n")
    tokens.chmod(0o600)
    who = ["--scope", "user", "--user", "alice"]
    runs: list[tuple[list[str], dict[str, str]]] = [
        (["doctor", "--redis-url", good_url], {}),
        (["set", "cli-key", '"cli-value"', *who, "--redis-url", good_url], {}),
        (["get", "cli-key", *who, "--redis-url", good_url, "--json"], {}),
        (["list", *who], {"REMEMBER_REDIS_URL": good_url}),
        (["stats", "--redis-url", good_url], {}),
        (["export", "--redis-url", good_url], {}),
        (["rotate", "--dry-run", "--redis-url", good_url], {}),
        (["doctor", "--redis-url", wrong_url], {}),
        (["get", "cli-key", *who, "--redis-url", dead_url], {}),
        (["get", "cli-key", *who], {"REMEMBER_REDIS_URL": wrong_url}),
        (["doctor", "--redis-url", f"redis://:{canaries.wrong_password}@127.0.0.1:bad/0"], {}),
        (["list", *who, "--redis-url", f"http://:{canaries.wrong_password}@x/"], {}),
        (
            ["doctor", "--vercel-kv"],
            {"KV_REST_API_URL": "http://127.0.0.1:1", "KV_REST_API_TOKEN": canaries.kv_token},
        ),
        (["doctor", "--vercel-kv"], {"KV_REST_API_TOKEN": canaries.kv_token}),
        (["serve", "--port", "0", "--redis-url", wrong_url], {}),
    ]
    codes = []
    for argv, extra in runs:
        result = subprocess.run(
            [sys.executable, "-m", "remember_sync", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env=_child_env(canaries, **extra),
        )
        cap.cli_runs += 1
        codes.append(result.returncode)
        cap.add(f"cli {argv[0]} stdout", result.stdout)
        cap.add(f"cli {argv[0]} stderr", result.stderr)
        if argv[0] == "get" and result.returncode == 0:
            assert "cli-value" in result.stdout
    # The good commands worked and the bad ones failed: their error paths really ran.
    assert codes[:7] == [0] * 7, codes
    assert all(code != 0 for code in codes[7:]), codes

    # `serve` with a password in the URL, bearer tokens and -v: startup line, access log, stop.
    served = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remember_sync",
            "serve",
            "--port",
            "0",
            "-v",
            "--redis-url",
            good_url,
            "--auth-tokens",
            str(tokens),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(canaries),
    )
    try:
        assert served.stdout is not None
        first = served.stdout.readline()
        cap.add("serve startup", first)
        serve_port = int(first.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        cap.add("serve http", _http(serve_port, "POST", init, auth))
        cap.add(
            "serve http refused",
            _http(serve_port, "POST", init, {"Authorization": f"Bearer {canaries.wrong_token}"}),
        )
    finally:
        served.send_signal(signal.SIGTERM)
        out, err = served.communicate(timeout=30)
        cap.add("serve stdout", out)
        cap.add("serve stderr", err)
        cap.cli_runs += 1

    # -- the search
    cap.collect_logs()
    leaks = [
        f"{name} in {where}: ...{text[max(0, text.find(value) - 80) : text.find(value) + 40]!r}..."
        for name, value in canaries.all().items()
        for where, text in cap.texts
        if value in text
    ]
    print(
        f"\n[secrets] texts={len(cap.texts)} exceptions={cap.exceptions} reprs={cap.reprs} "
        f"cli_runs={cap.cli_runs} http_answers={cap.http_answers} log_records={cap.log_records} "
        f"canaries={len(canaries.all())}"
    )
    assert leaks == [], "\n".join(leaks)
    # The capture really saw the scenario (the search is not over empty text).
    assert cap.exceptions >= 20 and cap.cli_runs == len(runs) + 1
    assert any("unreadable" in t for w, t in cap.texts if w.startswith("log"))
    assert any("MCP server listening" in t for _, t in cap.texts)


def test_the_search_finds_a_planted_leak(canaries: Canaries, capture_everything: Capture) -> None:
    """Control: a secret in an exception cause or a debug log line is found by the same capture."""
    cap = capture_everything
    try:
        try:
            raise ValueError(f"driver said {canaries.redis_password}")
        except ValueError as cause:
            raise RememberError("store failed") from cause
    except RememberError as exc:
        cap.error("planted", exc)
    logging.getLogger("some.library").debug("token=%s", canaries.kv_token)
    cap.collect_logs()
    texts = [text for _, text in cap.texts]
    assert any(canaries.redis_password in text for text in texts)
    assert any(canaries.kv_token in text for text in texts)


def test_kv_token_echoed_by_a_server_is_not_kept_in_any_chained_exception(
    kv_redis_server: RedisServer,
) -> None:
    """Even suppressed context exceptions hold no token a misbehaving server echoed back."""
    token = _canary("kvtoken")
    with KVEmulator(kv_redis_server.url, token) as kv:
        store = VercelKVStore(kv.url, token, environ={}, backoff=0.001)
        kv.inject(status=500, times=None, error=f"ERR bad token {token}")
        with pytest.raises(RememberStoreError) as info:
            store.get("k")
        store.close()
    seen = []
    chained: BaseException | None = info.value
    while chained is not None:
        seen.append(f"{chained!r} {chained.args!r}")
        chained = chained.__cause__ or chained.__context__
    assert not any(token in text for text in seen), seen


def _chain_text(exc: BaseException) -> str:
    """str, repr and the whole formatted chain of *exc* (causes and contexts included)."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) + repr(exc)


def test_session_ids_never_appear_in_logs_or_errors(
    redis_url: str, redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A live session id (it grants the session's memory) is in no log line or exception message."""
    session = _canary("sessid")
    ident = Identity(session_id=session, user_id="u-1", tool_name="planner")
    store = RedisStore.from_url(redis_url)
    writer = RememberPlugin.init(store=store, encryption={"secrets": [_canary("writer")]},
                                 skip_legacy_purge=True)
    for scope in ("session", "tool"):
        for key in ("a", "b"):
            writer.accessor(ident).set(key, 1, scope=scope)  # sealed with a secret the readers lack
    errors: list[str] = []
    with caplog.at_level(logging.DEBUG):
        for mode in ("warn", "raise"):
            reader = RememberPlugin.init(
                store=store, encryption={"secrets": [_canary("reader")]},
                skip_legacy_purge=True, on_decrypt_error=mode,
            )
            mem = reader.accessor(ident)
            for scope in ("session", "tool"):
                calls: list[Callable[[], object]] = [
                    lambda s=scope: mem.get("a", scope=s),
                    lambda s=scope: mem.get_entry("a", scope=s),
                    lambda s=scope: mem.list(scope=s),
                    lambda s=scope: mem.entries(scope=s),
                    lambda s=scope: mem.update("a", 2, scope=s),
                    lambda s=scope: mem.forget_many(scope=s, pattern="*"),
                ]
                for call in calls:
                    try:
                        call()
                    except RememberError as exc:
                        errors.append(_chain_text(exc))
            assert reader.stats()["unreadable"] == 4  # 2 keys x 2 scopes, however often read
            reader.close()
        # A store failure: the server is gone.
        dead = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}/0", retries=0)
        broken = RememberPlugin.init(store=dead, encryption={"secrets": [_canary("x")]},
                                     skip_legacy_purge=True)
        for call in (lambda: broken.accessor(ident).get("a"),
                     lambda: broken.accessor(ident).forget_many(pattern="*")):
            with pytest.raises(RememberStoreError) as info:
                call()
            errors.append(_chain_text(info.value))
        broken.close()
        dead.close()
    assert len(errors) >= 12  # raise mode: every call above raised
    assert any("is unreadable" in r.getMessage() for r in caplog.records)
    logged = "\n".join(
        r.getMessage() + (repr(r.args) if r.args else "") for r in caplog.records
    )
    assert session not in logged
    for text in errors:
        assert session not in text
    writer.close()
    store.close()
