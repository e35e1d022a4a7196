"""A writer process SIGKILLed at a random moment, again and again, with the default audit
settings: every write that returned has its event once the intents the killed writers
left are moved, and the trail verifies."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

from remember_sync import Identity, RememberPlugin
from remember_sync._audit import AUDIT_HEAD, AuditTrail
from tests.audit_crash_writer import crash_store
from tests.conftest import TEST_SECRET

#: Kills per store (the test stops earlier when its time budget is spent).
KILLS = int(os.environ.get("REMEMBER_CRASH_KILLS", "100"))
BUDGET_S = float(os.environ.get("REMEMBER_CRASH_BUDGET_S", "60"))
#: The writers' lease on their intents: a killed writer's are moved this long after.
LEASE_MS = 400


def _kill_writers(kind: str, url: str) -> tuple[list[int], int]:
    """(the writes that returned, kills) of writers killed until KILLS or the budget."""
    returned: list[int] = []
    start, kills = 0, 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    deadline = time.monotonic() + BUDGET_S
    while kills < KILLS and time.monotonic() < deadline:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.audit_crash_writer", kind, url, str(start), "{}",
             str(LEASE_MS)], stdout=subprocess.PIPE, text=True, cwd=root, env=env,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # running: one write returned
        assert first.strip(), "the writer did not start"
        time.sleep(random.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        # Through the same buffered reader as the first line (communicate() would read
        # the pipe beneath it and miss what readline() had buffered).
        out = first + proc.stdout.read()
        proc.wait(timeout=30)
        done = [int(line) for line in out.split()]
        returned += done
        start = max(done) + 1
        kills += 1
    return returned, kills


def _plugin(kind: str, url: str, audit: object) -> RememberPlugin:
    return RememberPlugin.init(
        store=crash_store(kind, url), encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True, audit=audit,
    )


def _intents_left(trail: AuditTrail) -> list[str]:
    return list(trail.store.scan(f"{trail.prefix}{AUDIT_HEAD}i:*"))


def _check_after_kills(kind: str, url: str) -> None:
    returned, kills = _kill_writers(kind, url)
    plugin = _plugin(kind, url, True)
    try:
        trail = plugin.audit
        assert trail is not None
        # The last writer's lease has to expire before its intents are anyone's to move.
        deadline = time.monotonic() + 10 * LEASE_MS / 1000 + 5
        while _intents_left(trail) and time.monotonic() < deadline:
            trail.recover()
            time.sleep(0.05)
        assert _intents_left(trail) == []
        events = trail.events()
        recorded = [e.key_hash for e in events if e.op == "set"]
        missing = [i for i in returned if trail.hash_text("key", f"k{i}") not in recorded]
        unreturned = len(recorded) - len(returned)
        print(f"{kind}: {kills} kills, {len(returned)} writes returned, {len(missing)} "
              f"without an event, {unreturned} events of writes that never returned")
        assert kills >= 10 and len(returned) > kills
        assert missing == []
        # A write killed after its intent was stored and before it returned (its key is
        # written again by the next writer): at most one per kill.
        result = trail.verify()
        assert result.ok, result.problems
        assert 0 <= unreturned <= kills
    finally:
        plugin.close()


def test_no_returned_write_loses_its_event_on_redis(redis_url: str, redis_client: Any) -> None:
    _check_after_kills("redis", redis_url)


def test_no_returned_write_loses_its_event_on_vercel_kv(kv_emulator: Any, kv_redis: Any) -> None:
    _check_after_kills("kv", kv_emulator.url)


def test_no_returned_write_loses_its_event_on_the_cluster(
    redis_cluster: Any, redis_cluster_client: Any
) -> None:
    nodes = ",".join(f"{host}:{port}" for host, port in redis_cluster.startup_nodes)
    _check_after_kills("redis", f"redis+cluster://{nodes}")


def _unflushed(redis_url: str) -> tuple[RememberPlugin, AuditTrail]:
    """A plugin on Redis whose buffer is flushed only when asked."""
    plugin = _plugin("redis", redis_url, {"flush_ms": 600_000})
    assert plugin.audit is not None
    return plugin, plugin.audit


def _cli_verify(redis_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEMBER_")}
    env["REMEMBER_SECRET"] = TEST_SECRET
    return subprocess.run(
        [sys.executable, "-m", "remember_sync", "audit", "verify", "--redis-url", redis_url,
         *extra], env=env, capture_output=True, text=True, check=False, timeout=120,
    )


def test_verify_reports_intents_of_a_stopped_process_and_repair_moves_them(
    redis_url: str, redis_client: Any
) -> None:
    plugin, trail = _unflushed(redis_url)
    mem = plugin.accessor(Identity("s-1", "alice", "notes"))
    mem.set("k0", 0)
    trail.flush()
    for i in range(1, 4):
        mem.set(f"k{i}", i)
    # The process stops: its buffer is gone, its lease expires.
    trail._pending.clear()
    assert redis_client.delete(f"{trail.prefix}{AUDIT_HEAD}l:{trail._origin}") == 1
    assert len(_intents_left(trail)) == 3

    broken = _cli_verify(redis_url)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "3 event(s) of stopped processes" in broken.stdout + broken.stderr

    repaired = _cli_verify(redis_url, "--repair", "--json")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert json.loads(repaired.stdout)["events"] == 4
    assert "moved 3 event(s)" in repaired.stderr
    assert _intents_left(trail) == []
    # A second pass finds nothing left to move, and nothing is appended twice.
    assert _cli_verify(redis_url, "--repair").returncode == 0
    events = trail.events()
    assert [e.key_hash for e in events] == [trail.hash_text("key", f"k{i}") for i in range(4)]
    assert {(e.principal, e.session, e.tool) for e in events} == {("alice", "s-1", "notes")}
    plugin.close()


def test_intents_of_events_already_in_the_chain_are_not_appended_again(
    redis_url: str, redis_client: Any
) -> None:
    # A process killed between appending its events and deleting their intents.
    plugin, trail = _unflushed(redis_url)
    mem = plugin.accessor(Identity("s-1", "alice"))
    for i in range(3):
        mem.set(f"k{i}", i)
    left = {key: redis_client.get(key) for key in _intents_left(trail)}
    assert len(left) == 3
    trail.flush()
    assert _intents_left(trail) == []
    redis_client.mset(left)
    redis_client.delete(f"{trail.prefix}{AUDIT_HEAD}l:{trail._origin}")
    plugin.close()

    other = _plugin("redis", redis_url, True)
    assert other.audit is not None
    assert other.audit.recover() == 0
    assert _intents_left(other.audit) == []
    assert len(other.audit.events()) == 3
    assert other.audit.verify().ok
    other.close()


def test_the_memory_store_keeps_no_intents() -> None:
    # It lives and dies with the process: an intent there would outlive nothing.
    plugin = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]},
                                 skip_legacy_purge=True, audit={"flush_ms": 600_000})
    trail = plugin.audit
    assert trail is not None
    plugin.accessor(Identity("s-1", "alice")).set("k0", 0)
    assert _intents_left(trail) == []
    assert len(trail.events()) == 1
    plugin.close()
