"""Verified mode's two-step writes on a real 3-node Redis Cluster, with real processes.

A writer stopped (``SIGSTOP``) between its steps past its lease, then resumed,
never overwrites the value another writer wrote and returned meanwhile; a
writer killed (``SIGKILL``) before its final commit leaves a record that the
next read settles once the lease has run out, after which the previous
ciphertext is refused again.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from remember_sync import RememberIntegrityError, RememberPlugin, identity
from remember_sync._clock import FakeClock
from remember_sync._manifest import LEASE_MS
from remember_sync._ops.verify import verify_store
from remember_sync.errors import RememberConflictError, RememberStoreError
from remember_sync.stores.base import Store
from tests.integrity_raw import RawStore
from tests.test_integrity import kill_at_entry_write, killed_writer

Factory = Callable[..., RememberPlugin]
ALICE = "alice"
ENTRY = "remember:v2:user:alice:"
CONFLICT_EXIT = 7


@pytest.fixture
def store_kind() -> str:
    return "redis_cluster"


def test_a_stalled_writer_never_overwrites_a_newer_acknowledged_value(
    redis_cluster_store: Store, make_plugin: Factory, clock: FakeClock
) -> None:
    """Writer A stops after its intent; B writes past A's lease and returns; A resumes:
    A's write is refused (a conflict), B's value stays, the namespace stays readable."""
    plugin = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        plugin.remember.set("approval", "old", scope="user")
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            child = make_plugin(store=redis_cluster_store, integrity="verified")
            kill_at_entry_write(redis_cluster_store, signal.SIGSTOP)
            with identity(user_id=ALICE):
                child.remember.set("approval", "stale-A", scope="user")
            code = 0
        except RememberConflictError:
            code = CONFLICT_EXIT
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, os.WUNTRACED)
    try:
        assert os.WIFSTOPPED(status)
        clock.advance(LEASE_MS + 1)  # A's lease has run out
        writer_b = make_plugin(store=redis_cluster_store, integrity="verified")
        with identity(user_id=ALICE):
            writer_b.remember.set("approval", "revoked-B", scope="user")
    finally:
        os.kill(pid, signal.SIGCONT)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == CONFLICT_EXIT
    reader = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        assert reader.remember.get("approval", scope="user") == "revoked-B"
        assert reader.remember.entries(scope="user")["approval"].value == "revoked-B"


def killed_before_commit(make_plugin: Factory, store: Store, key: str, value: object) -> int:
    """The wait status of a forked writer of Alice's *key* killed after writing the
    entry, before the commit that drops the version it replaced."""
    pid = os.fork()
    if pid == 0:
        try:
            child = make_plugin(store=store, integrity="verified")
            verifier: Any = child._core.verifier
            verifier.settle = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
            with identity(user_id=ALICE):
                child.remember.set(key, value, scope="user")
        finally:
            os._exit(3)
    return os.waitpid(pid, 0)[1]


def test_a_killed_writer_is_settled_and_the_old_ciphertext_refused(
    redis_cluster_store: Store, make_plugin: Factory, clock: FakeClock,
    redis_cluster_client: Any,
) -> None:
    """Writer killed after writing the entry, before its commit: the new value reads;
    once the lease ran out the next read settles the record, and the previous
    ciphertext put back is refused; verify finds nothing unfinished."""
    raw = RawStore(redis_cluster_client)
    plugin = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        plugin.remember.set("approval", "granted", scope="user")
    granted = raw.get(ENTRY + "approval")
    status = killed_before_commit(make_plugin, redis_cluster_store, "approval", "revoked")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    core = plugin._core
    assert verify_store(redis_cluster_store, "remember:", core.codec,
                        clock=core.clock).pending == 1
    reader = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        assert reader.remember.get("approval", scope="user") == "revoked"  # lease runs
        clock.advance(LEASE_MS + 1)
        assert reader.remember.get("approval", scope="user") == "revoked"  # settles
        found = verify_store(redis_cluster_store, "remember:", core.codec, clock=core.clock)
        assert (found.pending, found.violation_count) == (0, 0)
        raw.set(ENTRY + "approval", granted or "")
        for p in (reader, make_plugin(store=redis_cluster_store, integrity="verified")):
            with pytest.raises(RememberIntegrityError, match="not the version"):
                p.remember.get("approval", scope="user")


def test_a_listing_settles_a_killed_writers_record(
    redis_cluster_store: Store, make_plugin: Factory, clock: FakeClock
) -> None:
    """entries() settles too: a writer killed before its entry write rolls back to the
    old version once its lease ran out."""
    plugin = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        plugin.remember.set("a", "old", scope="user")
    status = killed_writer(make_plugin, redis_cluster_store, "a", "new")
    assert os.WIFSIGNALED(status)
    clock.advance(LEASE_MS + 1)
    with identity(user_id=ALICE):
        assert plugin.remember.entries(scope="user")["a"].value == "old"
    core = plugin._core
    found = verify_store(redis_cluster_store, "remember:", core.codec, clock=core.clock)
    assert (found.pending, found.violation_count) == (0, 0)


def test_a_read_that_cannot_settle_is_answered_and_warns(
    redis_cluster_store: Store, make_plugin: Factory, clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A reader whose settling write the store refuses (a read-only user, say) still gets
    its value, and the failure is logged; a later reader settles."""
    plugin = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        plugin.remember.set("a", "old", scope="user")
    assert os.WIFSIGNALED(killed_writer(make_plugin, redis_cluster_store, "a", "new"))
    clock.advance(LEASE_MS + 1)

    def refused(*args: Any, **kwargs: Any) -> bool:
        raise RememberStoreError("NOPERM this user has no permissions to run 'evalsha'")

    with monkeypatch.context() as patched:
        patched.setattr(redis_cluster_store, "compare_and_set", refused)
        with identity(user_id=ALICE), caplog.at_level("WARNING", logger="remember_sync"):
            assert plugin.remember.get("a", scope="user") == "old"
    assert "settling an unfinished write failed" in caplog.text
    with identity(user_id=ALICE):
        assert plugin.remember.get("a", scope="user") == "old"
    core = plugin._core
    assert verify_store(redis_cluster_store, "remember:", core.codec,
                        clock=core.clock).pending == 0
