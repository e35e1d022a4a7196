"""The memory store of ``serve`` and ``create_app`` is bounded, and fair when full.

Attacks kept as tests (issue 18, item 4): anonymous HTTP callers writing
large values must not grow a real ``remember-sync serve`` past its
``--max-bytes`` (its resident memory is read from ``/proc``), and one
principal filling the store with long-lived entries must not evict another
principal's memory.  Plus the defaults and the configuration errors of
``serve --max-bytes/--max-entries`` and ``REMEMBER_MAX_BYTES`` /
``REMEMBER_MAX_ENTRIES``.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from remember_sync import RememberConfigurationError
from remember_sync.mcp import create_app
from remember_sync.mcp.app import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES
from remember_sync.stores.memory import MemoryStore
from tests.conftest import TEST_SECRET
from tests.served import REPO, serving, write_tokens

MiB = 1024 * 1024
LEGACY = "2025-11-25"
YEAR = 365 * 86_400
ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
#: Nearly the largest value a tool call may carry (bodies up to 1,000,000 bytes).
BIG = 900_000


class Caller:
    """One MCP session over raw HTTP (keep-alive), optionally with a bearer token."""

    def __init__(self, url: str, token: str | None = None) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.path = parts.path
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        status, headers, _ = self._post(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": LEGACY,
                    "capabilities": {},
                    "clientInfo": {"name": "bounds-test", "version": "1"},
                },
            }
        )
        assert status == 200
        self.headers["Mcp-Session-Id"] = headers["mcp-session-id"]

    def _post(self, message: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        self.conn.request("POST", self.path, json.dumps(message), self.headers)
        response = self.conn.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(body)

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a tool; return its ``CallToolResult``."""
        status, _, body = self._post(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        )
        assert status == 200, body
        result: dict[str, Any] = body["result"]
        return result

    def remember(self, key: str, value: str, scope: str, ttl: int | None = None) -> None:
        """remember_this, which must succeed."""
        args: dict[str, Any] = {"key": key, "value": value, "scope": scope}
        if ttl is not None:
            args["ttl"] = ttl
        result = self.tool("remember_this", args)
        assert result["isError"] is False, result

    def recall(self, key: str, scope: str) -> Any:
        """The value recalled, or ``None`` when not found."""
        result = self.tool("recall", {"key": key, "scope": scope})
        assert result["isError"] is False, result
        content = result["structuredContent"]
        return content["value"] if content.get("found") else None

    def close(self) -> None:
        self.conn.close()


def rss_mib(pid: int) -> float:
    """Resident memory of process *pid* in MiB (``VmRSS`` in ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")  # pragma: no cover


@pytest.fixture
def start_serve(tmp_path: Path) -> Iterator[Any]:
    """Start ``remember-sync serve --port 0 ARGS`` as a real process; stopped at teardown."""
    # These callers are anonymous on purpose unless they name a tokens file.
    with serving(tmp_path, anonymous_unless=("--auth-tokens",)) as start:
        yield start


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    return write_tokens(tmp_path / "tokens", {ALICE: "alice", BOB: "bob"})


def test_anonymous_writes_do_not_grow_serve_past_max_bytes(start_serve: Any) -> None:
    """200 anonymous 900 KB writes leave serve's RSS within --max-bytes plus a fixed slack."""
    bound = 32 * MiB
    served = start_serve("--max-bytes", str(bound))
    callers = [Caller(served.url) for _ in range(4)]
    try:
        callers[0].remember("warm-up", "w" * BIG, "session", ttl=YEAR)
        before = rss_mib(served.proc.pid)
        for i in range(400):
            callers[i % 4].remember(f"k{i}", chr(97 + i % 26) * BIG, "session", ttl=YEAR)
            if i == 199:
                halfway = rss_mib(served.proc.pid)
        grown, late = rss_mib(served.proc.pid) - before, rss_mib(served.proc.pid) - halfway
        # Each 900 KB value is ~1.2 MB encrypted: unbounded, 200 of them grow it by ~240 MiB
        # and 400 by ~480 MiB.  Bounded, the store holds at most 32 MiB; the allocator's
        # arenas and free lists add a roughly constant amount on top (measured 34-64 MiB in
        # all after 200 writes, varying between runs), and the second 200 writes, made once
        # the store is full, add next to nothing.
        assert grown < 2 * bound / MiB + 32, f"serve grew by {grown:.0f} MiB"
        assert late < 16, f"serve kept growing: {late:.0f} MiB over the last 200 writes"
        assert callers[399 % 4].recall("k399", "session") == chr(97 + 399 % 26) * BIG
        assert callers[0].recall("k0", "session") is None  # evicted to stay in bound
    finally:
        for caller in callers:
            caller.close()


def test_one_principal_filling_the_store_does_not_evict_another(
    start_serve: Any, tokens_file: Path
) -> None:
    """Alice filling serve with long-TTL entries evicts her own; Bob's older entries all stay."""
    served = start_serve("--max-bytes", str(16 * MiB), "--auth-tokens", str(tokens_file))
    bob, alice = Caller(served.url, BOB), Caller(served.url, ALICE)
    try:
        # Written first, least recently used, with the earliest deadlines: what an
        # unfair (whole-store) eviction would take first.
        for i in range(5):
            bob.remember(f"note{i}", f"bob-{i}-" + "b" * 100_000, "user", ttl=3_600)
            bob.remember(f"draft{i}", f"bob-{i}-" + "d" * 100_000, "session")
        for i in range(40):
            alice.remember(f"big{i}", "a" * BIG, "user", ttl=YEAR)  # every write succeeds
        for i in range(5):
            assert bob.recall(f"note{i}", "user") == f"bob-{i}-" + "b" * 100_000
            assert bob.recall(f"draft{i}", "session") == f"bob-{i}-" + "d" * 100_000
        assert alice.recall("big39", "user") == "a" * BIG
        assert alice.recall("big0", "user") is None
    finally:
        bob.close()
        alice.close()


# -- defaults and configuration ---------------------------------------------------------------


def _memory_store(app: Any) -> MemoryStore:
    store = app.plugin.store
    assert isinstance(store, MemoryStore)
    return store


def test_create_app_bounds_its_memory_store_by_default() -> None:
    """create_app's memory store holds at most 256 MiB and 100,000 entries unless told."""
    app = create_app(environ={"REMEMBER_SECRET": TEST_SECRET})
    try:
        store = _memory_store(app)
        assert (store.max_bytes, store.max_entries) == (DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES)
        assert DEFAULT_MAX_BYTES <= 256 * MiB
    finally:
        app.close()


def test_create_app_reads_the_bounds_from_the_environment_and_arguments() -> None:
    """REMEMBER_MAX_BYTES / REMEMBER_MAX_ENTRIES set the bounds; arguments override them."""
    env = {"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_MAX_BYTES": " 1048576 ",
           "REMEMBER_MAX_ENTRIES": "500"}
    app = create_app(environ=env)
    try:
        assert (_memory_store(app).max_bytes, _memory_store(app).max_entries) == (MiB, 500)
    finally:
        app.close()
    app = create_app(environ=env, max_bytes=2 * MiB, max_entries=7)
    try:
        assert (_memory_store(app).max_bytes, _memory_store(app).max_entries) == (2 * MiB, 7)
    finally:
        app.close()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"REMEMBER_MAX_BYTES": "lots"}, "REMEMBER_MAX_BYTES"),
        ({"REMEMBER_MAX_BYTES": "0"}, "REMEMBER_MAX_BYTES"),
        ({"REMEMBER_MAX_ENTRIES": "-3"}, "REMEMBER_MAX_ENTRIES"),
        ({"REMEMBER_MAX_ENTRIES": "1.5"}, "REMEMBER_MAX_ENTRIES"),
        ({"REMEMBER_MAX_BYTES": "1000", "REMEMBER_REDIS_URL": "redis://127.0.0.1:1/0"},
         "max_bytes"),
    ],
)
def test_create_app_rejects_bad_bounds(env: dict[str, str], named: str) -> None:
    """A bad bound, or one given for Redis, raises naming the variable or option."""
    with pytest.raises(RememberConfigurationError, match=named):
        create_app(environ={"REMEMBER_SECRET": TEST_SECRET, **env})


@pytest.mark.parametrize(
    ("args", "code", "named"),
    [
        (["--max-bytes", "0"], 2, "--max-bytes"),
        (["--max-bytes", "32MiB"], 2, "--max-bytes"),
        (["--max-entries", "-1"], 2, "--max-entries"),
        (["--max-bytes", "1000", "--redis-url", "redis://127.0.0.1:1/0"], 1, "max_bytes"),
    ],
)
def test_serve_rejects_bad_bounds(tmp_path: Path, args: list[str], code: int, named: str) -> None:
    """serve refuses a bad --max-bytes/--max-entries (or one with Redis) naming it."""
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", *args],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "REMEMBER_SECRET": TEST_SECRET},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    assert named in done.stderr


def test_serve_startup_line_names_the_bounds(start_serve: Any) -> None:
    """serve says on start how much its memory store may hold."""
    served = start_serve("--max-bytes", "1000000", "--max-entries", "42")
    assert "memory (in-process; lost on exit; at most 1000000 bytes, 42 entries)" in (
        served.lines[0]
    )
