"""One principal rule: the quota charges, and the rate limiter counts, the same principal.

For every kind of caller a real :class:`~remember_sync.mcp.McpServer` (memory store, a
quota and a rate limit, on the threaded server over HTTP) sees -- a static token's
principal, a host's signed-in user, an OAuth ``sub`` (a local issuer), an anonymous
caller's session -- the writes are
charged to the ledger of :func:`~remember_sync.identity.principal_of` and the requests are
counted under that very name; an anonymous caller is also counted by its address, for
every request (opening sessions adds no budget).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.util import find_spec
from typing import Any

import pytest

from remember_sync import RememberPlugin
from remember_sync.identity import principal_of
from remember_sync.mcp import McpServer
from remember_sync.mcp.auth import StaticTokenVerifier
from tests.conftest import TEST_SECRET, require_component
from tests.test_rate_limit import Running, call

LIMIT = 1000
WRITES = 3
TOKEN = "alice-token-0123456789"


def _counted(app: McpServer, caller: str) -> int:
    """How many requests the rate limiter holds for *caller* in the current window."""
    limiter = app.rate_limiter
    assert limiter is not None
    stats = limiter._limiter.get_window_stats(limiter.item, limiter._key(caller))
    return LIMIT - int(stats.remaining)


def _charged(app: McpServer, principal: str) -> int:
    """How many entries the quota has charged to *principal*."""
    owners = app.plugin._core.charges
    assert owners is not None
    entries, _ = app.plugin.store.owner_usage(owners.tag(principal))  # type: ignore[attr-defined]
    return int(entries)


@pytest.fixture
def server() -> Iterator[Callable[..., Running]]:
    """``server(**McpServer options)``: memory store, quota of 50 entries, 1000/minute."""
    started: list[Running] = []

    def start(**options: Any) -> Running:
        plugin = RememberPlugin.init(
            encryption={"secrets": [TEST_SECRET]}, tools={"enabled": True},
            skip_legacy_purge=True, quota={"entries": 50},
        )  # fmt: skip
        app = McpServer(plugin, rate_limit=f"{LIMIT}/minute", owns_plugin=True, **options)
        running = Running(app)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()
        running.app.close()


def _writes(running: Running, headers: dict[str, str]) -> None:
    for n in range(WRITES):
        args = {"key": f"k{n}", "value": "v", "scope": "session"}
        status, _, body = running.post(call(n + 2, "remember_this", **args), headers)
        assert status == 200 and body["result"]["isError"] is False, body


@pytest.mark.parametrize(
    ("kind", "options", "user"),
    [
        ("token", {"token_verifier": StaticTokenVerifier({TOKEN: "alice"})}, "alice"),
        ("host user", {"principal_resolver": lambda environ: "carol"}, "carol"),
    ],
)
def test_a_signed_in_caller_is_one_principal_for_quota_and_rate_limit(
    server: Callable[..., Running], kind: str, options: dict[str, Any], user: str
) -> None:
    """Token principal, host user: both charged and counted as ``user\\x00<name>``, across
    sessions."""
    running = server(**options)
    token = TOKEN if kind == "token" else None
    for _ in range(2):  # two sessions: one principal
        _writes(running, running.session(token))
    expected = principal_of(user, "any session")
    assert expected == "user\x00" + user
    assert _charged(running.app, expected) == 2 * WRITES
    assert _counted(running.app, expected) == 2 * (1 + WRITES)  # initialize counts too


def test_an_oauth_sub_is_one_principal_for_quota_and_rate_limit(
    server: Callable[..., Running],
) -> None:
    """An OAuth access token's ``sub`` (a local issuer) is charged and counted as its user."""
    require_component("oauth extra", find_spec("jwt") is not None, "pip install PyJWT")
    from remember_sync.mcp.oauth import OAuthVerifier
    from tests.test_oauth import AUDIENCE, Issuer

    issuer = Issuer()
    try:
        running = server(token_verifier=OAuthVerifier(issuer.url, AUDIENCE))
        _writes(running, running.session(issuer.token("dana")))
        expected = principal_of("dana", None)
        assert _charged(running.app, expected) == WRITES
        assert _counted(running.app, expected) == 1 + WRITES
    finally:
        issuer.stop()


def test_an_anonymous_caller_is_its_session_for_quota_and_rate_limit(
    server: Callable[..., Running],
) -> None:
    """An anonymous caller is charged and counted as its verified session (every session
    is a principal of its own); every request of it, ``initialize`` included, is counted by
    its address as well, so opening sessions adds no budget."""
    running = server()
    sessions = [running.session(), running.session()]
    _writes(running, sessions[0])
    for n, session in enumerate(sessions):
        expected = principal_of(None, session["Mcp-Session-Id"])
        assert expected == "session\x00" + session["Mcp-Session-Id"]
        assert _charged(running.app, expected) == (WRITES if n == 0 else 0)
        assert _counted(running.app, expected) == (WRITES if n == 0 else 0)
    # The two initialize requests and the writes.
    assert _counted(running.app, "address\x00127.0.0.1") == 2 + WRITES
    assert principal_of(None, None) is None and principal_of("anon:x", None) is None


def test_the_rate_limiter_never_counts_an_unverified_session_as_the_caller(
    server: Callable[..., Running],
) -> None:
    """An anonymous request naming a session it cannot have (forged) is counted by address."""
    running = server()
    forged = {"Mcp-Session-Id": "rs2.forged.0.AAAA", "MCP-Protocol-Version": "2025-11-25"}
    status, _, _ = running.post(call(2), forged)
    assert status == 404
    assert _counted(running.app, "address\x00127.0.0.1") == 1


def test_every_anonymous_caller_shares_one_group_and_each_user_has_its_own() -> None:
    """The unit of fair sharing (eviction, the ended-session table): a user is its own,
    every anonymous session and the sessionless caller share ``"anonymous"``."""
    from remember_sync.identity import sharing_group

    alice, bob = principal_of("alice", "s-1"), principal_of("bob", None)
    assert sharing_group(alice) == alice != sharing_group(bob) == bob
    sessions = {sharing_group(principal_of(None, f"s-{n}")) for n in range(5)}
    assert sessions == {sharing_group(None)} == {sharing_group(principal_of("anon:x", None))}
    assert sessions == {"anonymous"}
