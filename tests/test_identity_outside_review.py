"""Outside review of the identity work (issue 20): defects found by attacking it.

* The issuer's discovery document and JWKS are fetched over ``https://`` only
  (``http://`` only on a loopback host) -- but ``urllib`` followed any redirect,
  so an issuer answer (or anything on its path for a loopback ``http`` issuer)
  could send the verifier to a URL that rule refuses and have its keys trusted.
* A JWKS trickled one byte at a time never hit the per-read timeout: one fetch
  could hold the fetch lock (and every caller waiting for fresh keys) for ever.
* A plugin two hosts registered lost its "ambiguous" mark when the first host
  registered again (Django rebuilds its runtime on a settings change): an
  ``McpServer`` built for the other host then silently took the wrong users.
* With only a platform variable (``REDIS_URL``, ``KV_REST_API_*``) set, the
  writing CLI commands (``set``, ``forget``, ``import``, ``rotate``) now act on
  that store; they must say which store they changed.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import jwt
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric import rsa

from remember_sync import RememberConfigurationError, RememberPlugin
from remember_sync.errors import RememberUnavailableError
from remember_sync.mcp import McpServer
from remember_sync.mcp.auth import host_auth, register_host_auth
from remember_sync.mcp.oauth import OAuthVerifier
from tests.conftest import TEST_SECRET
from tests.local_http import LocalHttp
from tests.test_cli import child_env, run_cli
from tests.test_oauth import AUDIENCE, Issuer, _jwk


class _Side(LocalHttp):
    """A small HTTP server on *host* answering GET with what *respond* says."""

    def __init__(self, host: str, respond: Any) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                respond(self)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, host)
        self.hits = 0


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        yield running


def test_a_redirect_to_a_url_the_https_rule_refuses_is_not_followed(issuer: Issuer) -> None:
    """jwks_url on the loopback issuer redirects to http://127.0.0.2 (not a loopback *name*
    _check_url accepts, like any plain-http host): the rogue keys there must not be trusted."""
    rogue_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rogue_jwks = json.dumps({"keys": [_jwk(rogue_key, "rogue", "RS256")]}).encode()

    def rogue(handler: BaseHTTPRequestHandler) -> None:
        target.hits += 1
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(rogue_jwks)))
        handler.end_headers()
        handler.wfile.write(rogue_jwks)

    target = _Side("127.0.0.2", rogue)

    def redirect(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", target.url + "/jwks")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    hop = _Side("127.0.0.1", redirect)
    try:
        verifier = OAuthVerifier(issuer.url, AUDIENCE, jwks_url=hop.url + "/jwks")
        forged = jwt.encode(issuer.claims("alice"), rogue_key, algorithm="RS256",
                            headers={"kid": "rogue"})
        with pytest.raises(RememberUnavailableError, match="redirect"):
            verifier(forged)
        assert target.hits == 0
    finally:
        hop.stop()
        target.stop()


def test_a_trickled_jwks_is_cut_off_by_the_timeout(issuer: Issuer) -> None:
    """One byte every 0.1 s never trips a 0.5 s per-read timeout; the whole fetch must."""
    stop = threading.Event()

    def trickle(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "200")
        handler.end_headers()
        try:
            for _ in range(200):
                if stop.is_set():
                    return
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.1)  # the slow server under test, not synchronisation
        except OSError:
            return

    slow = _Side("127.0.0.1", trickle)
    try:
        verifier = OAuthVerifier(issuer.url, AUDIENCE, jwks_url=slow.url + "/jwks", timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(RememberUnavailableError, match="timed out"):
            verifier(issuer.token("alice"))
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        slow.stop()


def test_two_hosts_stay_ambiguous_when_the_first_registers_again() -> None:
    """Django registers, a Flask app registers the same plugin, Django rebuilds: still
    ambiguous (the Flask app's McpServer must not silently take Django's users)."""
    plugin = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]})
    try:
        def django_user(environ: Any) -> str | None:
            return None

        register_host_auth(plugin, "django", principal_resolver=django_user, host="Django")
        register_host_auth(plugin, object(), principal_resolver=lambda e: "x", host="Flask")
        register_host_auth(plugin, "django", principal_resolver=django_user, host="Django")
        with pytest.raises(RememberConfigurationError, match="explicitly"):
            host_auth(plugin)
        with pytest.raises(RememberConfigurationError, match="explicitly"):
            McpServer(plugin)
    finally:
        plugin.close()


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=child_env(REMEMBER_SECRET=TEST_SECRET, **env))


def test_writing_commands_name_a_store_chosen_by_a_platform_variable(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """REDIS_URL alone (a platform's, maybe the app's production Redis): set and forget
    say on stderr which store they changed and which variable chose it, without the
    password; an explicit --redis-url (the user's own choice) adds nothing."""
    with_password = redis_url.replace("redis://", "redis://:not-the-pw-9d1@", 1)
    redis_client.config_set("requirepass", "not-the-pw-9d1")
    try:
        for command in (["set", "k", "1", "--scope", "global"],
                        ["forget", "k", "--scope", "global"]):
            done = _cli(*command, REDIS_URL=with_password)
            assert done.returncode == 0, done.stderr
            assert "REDIS_URL" in done.stderr and "127.0.0.1" in done.stderr, done.stderr
            assert "not-the-pw-9d1" not in done.stderr + done.stdout
        flag = _cli("set", "k", "1", "--scope", "global", "--redis-url", with_password)
        assert flag.returncode == 0 and flag.stderr == "", flag.stderr
        listed = _cli("list", "--scope", "global", REDIS_URL=with_password)
        assert listed.returncode == 0 and "REDIS_URL" not in listed.stderr  # reads stay quiet
    finally:
        redis.Redis.from_url(with_password).config_set("requirepass", "")
