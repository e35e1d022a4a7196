"""One principal for a Django site and its MCP endpoint (issue 20, items 1 and 2).

A real Django project (``tests/django_host``: ``django.contrib.auth`` users in
SQLite, database sessions, CSRF, the remember middleware, ``mcp_view``) runs in
a subprocess on a threaded wsgiref server on 127.0.0.1, against a real Redis.
Pins, through the official ``mcp`` client: the model's ``user`` memory is what
the signed-in user's own view reads, for session users, for token holders, and
for both set up together (the combined resolver: users keep working when a
``token_verifier`` is set); another user sees none of it; an anonymous caller
gets ``REMEMBER_IDENTITY_REQUIRED`` (session users only) or ``401`` (when
tokens are configured, the MCP endpoint asks for one).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import TEST_SECRET
from tests.mcp_client import error_code, run, structured

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0
CAROL = {"Authorization": "Bearer token-carol-0123456789"}
DAVE = {"Authorization": "Bearer token-dave-0123456789ab"}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def start_site(mode: str, redis_url: str, tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    """The test project in *mode*; returns the process and its base URL once it listens."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HOST_TEST_MODE": mode,
        "HOST_TEST_DB": str(tmp_path / "db.sqlite3"),
        "HOST_TEST_REDIS_URL": redis_url,
        "HOST_TEST_SECRET": TEST_SECRET,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.django_host.serve"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + START_TIMEOUT
    line = ""
    while time.monotonic() < deadline and not line:
        if selector.select(timeout=deadline - time.monotonic()):
            line = proc.stdout.readline()
            if not line:
                break  # the child exited
    selector.close()
    if not line.startswith("READY "):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"the Django test site did not start: {line!r}\n{err[-3000:]}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


@pytest.fixture
def site(
    request: pytest.FixtureRequest, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> Iterator[str]:
    proc, base = start_site(request.param, redis_url, tmp_path)
    try:
        yield base
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def signed_in(base: str, name: str) -> requests.Session:
    browser = requests.Session()
    reply = browser.post(
        f"{base}/login", data={"username": name, "password": f"{name}-password"}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    return browser


def cookie_of(browser: requests.Session) -> dict[str, str]:
    return {"Cookie": f"sessionid={browser.cookies['sessionid']}"}


def mcp(base: str, headers: dict[str, str], op: str) -> Any:
    """Connect the official client with *headers*: store ``color`` or try anonymous user scope."""

    async def main() -> Any:
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(20)) as http:
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                if op == "remember":
                    args = {"key": "color", "value": "blue", "scope": "user"}
                    return await structured(client, "remember_this", args)
                return await error_code(client, "remember_this", {"key": "k", "value": 1})

    return run(main)


def notes(base: str, who: requests.Session | dict[str, str]) -> dict[str, Any]:
    if isinstance(who, requests.Session):
        reply = who.get(f"{base}/mine", timeout=10)
    else:
        reply = requests.get(f"{base}/mine", headers=who, timeout=10)
    result: dict[str, Any] = reply.json()
    return result


@pytest.mark.parametrize("site", ["session"], indirect=True)
def test_session_users(site: str) -> None:
    """Session users: the model's user memory is the signed-in user's; anonymous is refused."""
    alice, bob = signed_in(site, "alice"), signed_in(site, "bob")
    mcp(site, cookie_of(alice), "remember")
    assert notes(site, alice)["notes"] == {"color": "blue"}
    assert notes(site, bob)["notes"] == {}
    assert mcp(site, {}, "anonymous") == "REMEMBER_IDENTITY_REQUIRED"


@pytest.mark.parametrize("site", ["session"], indirect=True)
def test_session_bound_to_the_user(site: str) -> None:
    """An MCP session issued to alice is refused (404) for bob."""
    alice, bob = signed_in(site, "alice"), signed_in(site, "bob")
    headers = {**ACCEPT, **cookie_of(alice)}
    reply = requests.post(f"{site}/mcp", json=INIT, headers=headers, timeout=10)
    sid = reply.headers["Mcp-Session-Id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for browser, status in ((alice, 200), (bob, 404)):
        headers = {**ACCEPT, **cookie_of(browser), "Mcp-Session-Id": sid}
        answer = requests.post(f"{site}/mcp", json=listing, headers=headers, timeout=10)
        assert answer.status_code == status, answer.text


@pytest.mark.parametrize("site", ["token"], indirect=True)
def test_tokens(site: str) -> None:
    """Tokens only: a token's memory is its holder's view; no token at MCP is 401."""
    mcp(site, CAROL, "remember")
    assert notes(site, CAROL) == {"user": "carol", "notes": {"color": "blue"}}
    assert notes(site, DAVE) == {"user": "dave", "notes": {}}
    reply = requests.post(f"{site}/mcp", json=INIT, headers=ACCEPT, timeout=10)
    assert reply.status_code == 401 and reply.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("site", ["both"], indirect=True)
def test_users_and_tokens_together(site: str) -> None:
    """Users and tokens together: each is its own principal, in views and over MCP alike."""
    alice, bob = signed_in(site, "alice"), signed_in(site, "bob")
    mcp(site, cookie_of(alice), "remember")
    mcp(site, CAROL, "remember")
    alice_notes = notes(site, alice)
    assert alice_notes["notes"] == {"color": "blue"} and alice_notes["user"] != "carol"
    assert notes(site, CAROL) == {"user": "carol", "notes": {"color": "blue"}}
    assert notes(site, bob)["notes"] == {}
    assert notes(site, DAVE)["notes"] == {}
    # A refused token is no one: the view's user scope is a JSON 403, the MCP endpoint a 401.
    bad = {"Authorization": "Bearer not-a-token-0123456789"}
    assert notes(site, bad)["error"]["code"] == "REMEMBER_IDENTITY_REQUIRED"
    reply = requests.post(f"{site}/mcp", json=INIT, headers={**ACCEPT, **bad}, timeout=10)
    assert reply.status_code == 401
