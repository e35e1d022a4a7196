"""The audit trail's head anchored in verified mode's witness: a rolled-back store is caught.

The attacker holds the database behind the store (plain redis-py through
:class:`tests.integrity_raw.RawStore`: DUMP/RESTORE of every key, deletes, writes) but
neither the process, the secret nor the witness (a local SQLite file, or another Redis
database the snapshot does not cover).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from remember_sync import Identity, RememberPlugin
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET
from tests.integrity_raw import RawStore
from tests.test_audit import run_together

Factory = Callable[..., RememberPlugin]
TRAIL = "remember:__audit__:"
#: A trail buffered until flushed (the test decides when events reach the store).
HELD = {"batch": 10_000, "flush_ms": 600_000}

pytestmark = pytest.mark.parametrize("store_kind", ["redis"])


@pytest.fixture(params=["file", "redis"])
def witness(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> str:
    """A witness spec: a SQLite file, or a Redis database the store's snapshot leaves out."""
    if request.param == "file":
        return str(tmp_path / "witness.db")
    url = redis_url.rsplit("/", 1)[0] + "/9"
    with redis.Redis.from_url(url) as fresh:
        fresh.flushdb()
    return url


@pytest.fixture
def raw(redis_client: redis.Redis, store: Store) -> RawStore:
    return RawStore(redis_client)


def _write(plugin: RememberPlugin, n: int, start: int = 0, session: str = "s-1") -> None:
    mem = plugin.accessor(Identity(session, "alice", "notes"))
    for i in range(start, start + n):
        mem.set(f"k{i}", i)
    trail = plugin.audit
    assert trail is not None
    trail.flush()


def _problems(plugin: RememberPlugin) -> tuple[str, ...]:
    trail = plugin.audit
    assert trail is not None
    return trail.verify().problems


def _cli_verify(redis_url: str, *extra: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "audit", "verify", "--redis-url", redis_url,
         *extra],
        env={**os.environ, "REMEMBER_SECRET": TEST_SECRET, **(env or {})},
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode


def test_a_whole_database_rollback_is_caught_with_a_witness_only(
    make_plugin: Factory, raw: RawStore, witness: str, redis_url: str, store_kind: str
) -> None:
    """DUMP every key, more audited writes, RESTORE: ``verify`` and ``audit verify`` (exit 1)
    report it with the witness; without one the restored trail verifies (documented)."""
    plugin = make_plugin(integrity="verified", witness=witness, audit=HELD)
    _write(plugin, 5)
    snap = raw.snapshot("remember:*")
    _write(plugin, 5, start=5)
    raw.restore(snap, "remember:*")

    assert any("rolled back" in p for p in _problems(plugin))
    assert any("rolled back" in p for p in _problems(
        make_plugin(integrity="verified", witness=witness, audit=True)))
    assert not _problems(make_plugin(audit=True))  # no witness: indistinguishable
    assert _cli_verify(redis_url) == 0
    assert _cli_verify(redis_url, "--witness", witness) == 1
    assert _cli_verify(redis_url, env={"REMEMBER_INTEGRITY": "verified",
                                       "REMEMBER_WITNESS": witness}) == 1


def test_writes_after_a_rollback_do_not_hide_it(
    make_plugin: Factory, raw: RawStore, witness: str, store_kind: str
) -> None:
    """After the restore the application goes on writing (in a session the snapshot does not
    hold: verified mode refuses the rolled-back one), past the sequence the witness recorded:
    the first append notices the trail is behind its witness and records it, so the rollback
    stays reported (and only once)."""
    plugin = make_plugin(integrity="verified", witness=witness, audit=HELD)
    _write(plugin, 4)
    snap = raw.snapshot("remember:*")
    _write(plugin, 6, start=4)
    raw.restore(snap, "remember:*")
    for round_ in range(5):  # five appends, 20 events: past the witness's 10
        _write(plugin, 4, start=4 * round_, session="s-2")
    problems = _problems(plugin)
    assert len(problems) == 1 and "rolled back" in problems[0], problems
    trail = plugin.audit
    assert trail is not None
    events = trail.events()
    rollbacks = [e for e in events if e.op == "rollback"]
    assert [(e.seq, e.outcome, e.count) for e in rollbacks] == [(5, "detected", 10)]
    assert events[-1].seq == 25


@pytest.mark.parametrize("cut", ["old_head", "whole_trail", "last_block_and_head"])
def test_a_truncated_trail_is_caught_with_a_witness(
    make_plugin: Factory, raw: RawStore, witness: str, cut: str, store_kind: str
) -> None:
    """The tail removed together with the head (an older head copied back), the head and its
    last block deleted, or the whole trail deleted: each is reported."""
    plugin = make_plugin(integrity="verified", witness=witness, audit=HELD)
    _write(plugin, 3)
    old_head = raw.get(TRAIL + "head")
    assert old_head is not None
    _write(plugin, 3, start=3)
    blocks = raw.keys(TRAIL + "b:*")
    assert len(blocks) == 2
    if cut == "old_head":
        raw.delete(blocks[-1])
        raw.set(TRAIL + "head", old_head)
    elif cut == "last_block_and_head":
        raw.delete(blocks[-1], TRAIL + "head")
    else:
        raw.delete(*raw.keys(TRAIL + "*"))
    assert any("witness" in p for p in _problems(plugin))
    assert any("witness" in p for p in _problems(
        make_plugin(integrity="verified", witness=witness, audit=True)))


def test_retention_and_an_honest_trail_verify_with_a_witness(
    make_plugin: Factory, witness: str, store_kind: str
) -> None:
    """Trimming drops the event the witness names: no false alarm; nor on an intact trail."""
    plugin = make_plugin(integrity="verified", witness=witness,
                         audit={**HELD, "max_events": 5})
    for round_ in range(6):
        _write(plugin, 3, start=3 * round_)
    trail = plugin.audit
    assert trail is not None
    assert trail.trim() > 0
    result = trail.verify()
    assert result.ok, result.problems
    assert result.last_seq == 18 and result.first_seq > 1


_WRITER = textwrap.dedent(
    """
    import sys
    from remember_sync import Identity, RememberPlugin
    url, witness, name, secret, batch = sys.argv[1:6]
    plugin = RememberPlugin.init(
        type="redis", config={"url": url}, encryption={"secrets": [secret]},
        skip_legacy_purge=True, background_reindex=False, integrity="verified",
        witness=witness, audit={"batch": int(batch)},
    )
    mem = plugin.accessor(Identity("s-" + name, name))
    sys.stdin.readline()
    for i in range(120):
        mem.set(f"k{i % 10}", i)
    plugin.close()
    print("done")
    """
)


def test_two_processes_sharing_a_witness_leave_a_verifiable_trail(
    make_plugin: Factory, witness: str, redis_url: str, store_kind: str
) -> None:
    """Two real processes append at once and advance one witness: no false rollback."""
    run_together([
        [sys.executable, "-c", _WRITER, redis_url, witness, f"w{n}", TEST_SECRET, batch]
        for n, batch in enumerate(("1", "3"))
    ])
    plugin = make_plugin(integrity="verified", witness=witness, audit=True)
    trail = plugin.audit
    assert trail is not None
    result = trail.verify()
    assert result.ok, result.problems
    events = trail.events()
    assert len(events) == 240 and not [e for e in events if e.op == "rollback"]
