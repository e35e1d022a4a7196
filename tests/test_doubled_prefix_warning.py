"""1.8.0's doubled-prefix data is never silently invisible.

A store holding the keys 1.8.0's Redis store wrote (``P + P + "v2:..."``), read
by a plugin without ``read_doubled_prefix=True``: the entries are absent, and
the background reindex used to log "indexed 0 older entries" and nothing else.
Now the plugin's background work logs one WARNING naming the option and
``rotate --read-doubled-prefix`` (never from the constructor's thread or a
request), and ``doctor`` reports the keys.  Real 1.8.0 bytes, real Redis.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from remember_sync import RememberPlugin
from remember_sync.stores.redis import RedisStore
from tests.vectors import VECTORS, vector_identity

REPO = Path(__file__).resolve().parent.parent
OLD_SECRET = VECTORS[0]["secret"]
#: 1.8.0 Redis vectors under the default prefix, sealed with the first secret, without expiry.
LIVE = [
    v for v in VECTORS
    if v["store"] == "redis" and v["encrypted"] and v["keyPrefix"] == "remember:"
    and v["secret"] == OLD_SECRET and "expiresAt" not in v["plaintext"]
    and v["rawRedisKey"].startswith("remember:remember:")
]


def _seed(client: redis.Redis) -> int:
    """Every live vector under the key 1.8.0 wrote, with the bytes 1.8.0 sent."""
    for v in LIVE:
        client.set(v["rawRedisKey"], v["rawStoredValue"])
    return len(LIVE)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records
        if r.levelno == logging.WARNING and "doubled-prefix" in r.getMessage()
    ]


def test_a_plugin_that_skips_doubled_keys_warns_once_from_the_background(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """One WARNING, from the background thread, naming the option and the rotate command."""
    assert len(LIVE) >= 3, "the interop vectors hold too few live 1.8.0 Redis entries"
    seeded = _seed(redis_client)
    store = RedisStore.from_url(redis_url)
    caplog.set_level(logging.INFO, logger="remember_sync")
    plugin = RememberPlugin.init(store=store, encryption={"secrets": [OLD_SECRET]})
    again = RememberPlugin.init(store=store, encryption={"secrets": [OLD_SECRET]})
    try:
        v = LIVE[0]
        # The data is invisible to this plugin (the point of the warning).
        assert plugin.accessor(vector_identity(v)).get(v["key"], scope=v["scope"]) is None
        # Wait for every piece of background work the plugins started.
        for started in (plugin, again):
            for work in (started.index_backfill, getattr(started, "_doubled_check", None)):
                assert work is None or work.wait(30)
    finally:
        again.close()
        plugin.close()
        store.close()
    found = _warnings(caplog)
    assert len(found) == 1, [r.getMessage() for r in found]
    record = found[0]
    assert record.threadName != threading.main_thread().name
    message = record.getMessage()
    assert f"{seeded} entries" in message
    assert "read_doubled_prefix=True" in message
    assert "remember-sync rotate --read-doubled-prefix" in message


def test_no_warning_when_the_plugin_reads_them_or_none_exist(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """read_doubled_prefix=True reads them (no warning); a store without any: no warning."""
    caplog.set_level(logging.INFO, logger="remember_sync")
    empty = RedisStore.from_url(redis_url)
    plugin = RememberPlugin.init(store=empty, encryption={"secrets": [OLD_SECRET]})
    check = plugin._doubled_check
    assert check is not None and check.wait(30) and check.count == 0
    plugin.close()
    empty.close()
    _seed(redis_client)
    store = RedisStore.from_url(redis_url)
    reader = RememberPlugin.init(
        store=store, encryption={"secrets": [OLD_SECRET]}, read_doubled_prefix=True,
        skip_legacy_purge=True,
    )
    try:
        assert reader._doubled_check is None
        v = LIVE[0]
        assert reader.accessor(vector_identity(v)).get(v["key"], scope=v["scope"]) == v["value"]
    finally:
        reader.close()
        store.close()
    assert _warnings(caplog) == []


def test_doctor_names_the_option_and_the_rotate_command(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """doctor: a 'doubled' finding (attention) without the flag, a note with it."""
    seeded = _seed(redis_client)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMEMBER_", "REDIS_URL"))}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        REMEMBER_SECRET=OLD_SECRET,
    )

    def doctor(*extra: str) -> dict[str, dict[str, object]]:
        result = subprocess.run(
            [sys.executable, "-m", "remember_sync", "doctor", "--redis-url", redis_url,
             "--json", *extra],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL,
        )
        report = json.loads(result.stdout)
        return {c["name"]: c for c in report["checks"]}

    blind = doctor()["doubled"]
    assert blind["status"] == "attention" and blind["doubled_unread"] == seeded
    assert "read_doubled_prefix=True" in str(blind["message"])
    assert "remember-sync rotate --read-doubled-prefix" in str(blind["message"])
    reading = doctor("--read-doubled-prefix")["doubled"]
    assert reading["status"] == "note" and reading["doubled"] == seeded
    assert "rotate --read-doubled-prefix" in str(reading["message"])
