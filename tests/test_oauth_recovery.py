"""An OAuth issuer outage: ``serve`` answers 503 while the issuer is down and 200 within 5 s of
its return; the unknown-``kid`` refetch limit still holds while it is up.

The issuer is the local one of ``tests/test_oauth.py`` (discovery document and JWKS on
127.0.0.1), stopped and started again on the same port; the server is a real ``python -m
remember_sync serve --oauth-issuer ...`` subprocess.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.local_http import serve_in_thread
from tests.test_oauth import INIT, Issuer, _rogue_key, _serve, bearer, send

#: The promise: back within this long after the issuer is.
RECOVERY_S = 5.0


class RestartableIssuer(Issuer):
    """The test issuer, stoppable and startable again on the same port with the same keys."""

    def start_again(self) -> None:
        port = int(self.url.rsplit(":", 1)[1])
        handler = self.httpd.RequestHandlerClass
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.thread = serve_in_thread(self.httpd)


@pytest.fixture
def issuer() -> Iterator[RestartableIssuer]:
    with RestartableIssuer() as running:
        yield running


def _until_not_503(base: str, token: str, limit_s: float) -> tuple[int, float]:
    """Poll every 0.1 s until a reply is not 503 (bounded); its status and when it came."""
    deadline = time.monotonic() + limit_s
    while True:
        reply = send(base, "POST", "/mcp", INIT, bearer(token))
        if reply.status != 503 or time.monotonic() > deadline:
            return reply.status, time.monotonic()
        assert 1 <= int(reply.headers["Retry-After"]) <= 5, reply.headers
        time.sleep(0.1)


def test_serve_recovers_within_5_s_of_the_issuers_return(
    issuer: RestartableIssuer, tmp_path: Path
) -> None:
    """Issuer down from the start: 503 (with a short Retry-After) for as long as it is down,
    also after several failed fetches; started again: 200 within 5 s."""
    token = issuer.token("hana")
    issuer.stop()
    served = _serve(tmp_path, "--oauth-issuer", issuer.url, "--oauth-audience", "remember-mcp-test")
    try:
        base = served.url.rsplit("/", 1)[0]
        down_until = time.monotonic() + 6  # long enough for the backoff to reach its ceiling
        refused = 0
        while time.monotonic() < down_until:
            reply = send(base, "POST", "/mcp", INIT, bearer(token))
            assert reply.status == 503, reply.body
            refused += 1
            time.sleep(0.1)
        issuer.start_again()
        back = time.monotonic()
        status, when = _until_not_503(base, token, limit_s=30)
        assert status == 200
        assert when - back <= RECOVERY_S, f"503 for {when - back:.1f} s after the issuer returned"
    finally:
        assert served.stop() == 0, served.output
    # While it was down the fetches were spaced out (0.5, 1, 2, 4 s): one warning per fetch.
    failed_fetches = sum(
        line.startswith("warning: cannot fetch the signing keys of the OAuth issuer")
        for line in served.output.splitlines()
    )
    assert refused >= 20 and 1 <= failed_fetches <= 8, (refused, failed_fetches, served.output)


def test_unknown_kids_still_refetch_at_most_once_per_cooldown_after_a_recovery(
    issuer: RestartableIssuer, tmp_path: Path
) -> None:
    """Once the issuer answered again, a flood of made-up kids costs it no further fetch."""
    token = issuer.token("ida")
    issuer.stop()
    served = _serve(tmp_path, "--oauth-issuer", issuer.url, "--oauth-audience", "remember-mcp-test")
    try:
        base = served.url.rsplit("/", 1)[0]
        assert send(base, "POST", "/mcp", INIT, bearer(token)).status == 503
        issuer.start_again()
        status, _ = _until_not_503(base, token, limit_s=30)
        assert status == 200
        fetched = issuer.jwks_hits
        for n in range(30):
            made_up = bearer(_rogue_key(issuer, f"made-up-{n}"))
            assert send(base, "POST", "/mcp", INIT, made_up).status == 401
        assert issuer.jwks_hits == fetched
    finally:
        assert served.stop() == 0, served.output
