"""Outside review of the Redis work (issue 22): the defects found, each pinned by a test.

* A password holding ``/``, ``?`` or ``#`` without percent-encoding (base64
  passwords hold ``/``) was repeated, whole or in part, in the "invalid Redis
  url" error -- and so on the CLI's stderr.
* A sentinel host written as bare IPv6 (``::1``) or with an unclosed ``[`` was
  silently misparsed instead of refused.
* With every sentinel frozen (SIGSTOP), a call that needed a new connection
  took about 10 s: each sentinel's reply was awaited for ``socket_timeout``,
  the sentinels were probed again, and the "no master" error was retried
  although it came from timeouts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from remember_sync.errors import RememberConfigurationError, RememberStoreError
from remember_sync.stores.redis import RedisStore, redacted_url
from tests.fixtures_redis import SENTINEL_SERVICE, SentinelSet

LEAKY_URLS = [
    "redis://:ab/cdSECRET@127.0.0.1:1/0",
    "redis://app:ab/cdSECRET@127.0.0.1:1/0",
    "rediss://app:ab?cdSECRET@127.0.0.1:1/0",
    "redis+sentinel://:ab/cdSECRET@127.0.0.1:1/svc",
    "redis+sentinel://app:ab/cdSECRET@127.0.0.1:1,127.0.0.1:2/svc/0",
    "rediss+sentinel://app:ab#cdSECRET@127.0.0.1:1/svc",
]


@pytest.mark.parametrize("url", LEAKY_URLS)
def test_unencoded_reserved_characters_in_the_password_never_reach_the_message(url: str) -> None:
    """The error says to percent-encode the password, and repeats no part of it."""
    assert "SECRET" not in redacted_url(url)
    assert "ab" not in redacted_url(url).partition("@")[0]
    with pytest.raises(RememberConfigurationError) as info:
        RedisStore.from_url(url)
    message = str(info.value)
    assert "SECRET" not in message
    assert "'ab" not in message and ":ab" not in message
    assert "percent-encode" in message


def test_encoded_passwords_still_work_and_stay_hidden() -> None:
    """``%2F`` etc. are accepted; the redaction hides the encoded form (the decoding itself:
    tests/test_redis_tls_causes.py)."""
    assert "SECRET" not in redacted_url("redis://app:ab%2FcdSECRET@h:1/0")
    store = RedisStore.from_url("redis://app:ab%2FcdSECRET@127.0.0.1:1/0")
    store.close()


def test_cli_stderr_does_not_repeat_an_unencoded_password() -> None:
    """``doctor`` and ``serve`` refuse the URL without echoing the password."""
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "REMEMBER_SECRET": "k" * 40,
    }
    for argv in (
        ["doctor", "--redis-url", "redis://:abc/defSECRETx@127.0.0.1:1/0"],
        ["serve", "--redis-url", "redis+sentinel://u:abc/defSECRETx@127.0.0.1:1/svc"],
    ):
        done = subprocess.run(  # noqa: S603 - our own module and arguments
            [sys.executable, "-m", "remember_sync", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode != 0, argv
        output = done.stdout + done.stderr
        assert "percent-encode" in output, output
        assert "SECRET" not in output and "abc" not in output, output


@pytest.mark.parametrize(
    "url",
    ["redis+sentinel://::1/svc", "redis+sentinel://[::1/svc", "redis+sentinel://::1:26379/svc"],
)
def test_ipv6_sentinel_without_brackets_is_refused(url: str) -> None:
    """Bare or half-bracketed IPv6 is refused, not read as host ``:`` port ``1``."""
    with pytest.raises(RememberConfigurationError, match=r"\[::1\]"):
        RedisStore.from_url(url)


def test_all_sentinels_frozen_fails_within_the_bound(
    sentinel_set_factory: Callable[..., SentinelSet],
) -> None:
    """Every sentinel SIGSTOPped: a call needing a new connection fails within 2.5 s."""
    sentinels = sentinel_set_factory()
    stopped: list[int] = []
    try:
        for proc in sentinels.sentinels:
            os.kill(proc.pid, signal.SIGSTOP)
            stopped.append(proc.pid)
        store = RedisStore(sentinels=sentinels.addresses, service_name=SENTINEL_SERVICE)
        try:
            started = time.monotonic()
            with pytest.raises(RememberStoreError) as info:
                store.get("remember:k")
            elapsed = time.monotonic() - started
            assert elapsed < 2.5, f"took {elapsed:.2f} s"
            assert "did not answer" in str(info.value)
        finally:
            store.close()
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped.clear()
        # Thawed: the same settings find the primary again, no restart.
        store = RedisStore(sentinels=sentinels.addresses, service_name=SENTINEL_SERVICE)
        try:
            assert store.set("remember:k", "v")
            assert store.get("remember:k") == "v"
        finally:
            store.close()
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


def test_a_url_that_turns_certificate_checks_off_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """rediss://...?ssl_cert_reqs=none works (providers suggest it) but never silently."""
    from remember_sync.stores.redis import RedisStore

    with caplog.at_level("WARNING", logger="remember_sync"):
        store = RedisStore.from_url("rediss://127.0.0.1:1/0?ssl_cert_reqs=none")
        store.close()
    assert any("NOT verified" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="remember_sync"):
        RedisStore.from_url("rediss://127.0.0.1:1/0").close()
    assert not any("NOT verified" in r.getMessage() for r in caplog.records)
