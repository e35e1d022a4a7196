"""Fork safety: real forked workers (as gunicorn ``--preload`` or ``multiprocessing`` fork them).

Threat: co-hosted worker processes forked from one parent that already used a
store.  Whatever the parent left in a connection pool must never be shared by
two processes: a shared keep-alive connection hands one worker another
worker's reply.  Each test makes the parent use the store first (so a pooled
connection exists), forks real children that hammer the store at the same
moment, and checks every reply a child got is its own.  Values are written
unencrypted at the store level, so a crossed reply shows up as someone else's
value rather than as a decryption failure.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from remember_sync import Identity, RememberConfigurationError, RememberPlugin
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from remember_sync.stores.vercel_kv import VercelKVStore
from remember_sync.testing.kv_emulator import KVEmulator
from remember_sync.types import Namespace
from tests.conftest import TEST_SECRET
from tests.fixtures_kv import KV_TEST_TOKEN

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    # The test process runs the emulator's threads; forking it is the point.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

WORKERS = 6
ROUNDS = 150
CHILD_DEADLINE = 90.0


def run_forked(
    tmp_path: Path,
    workers: int,
    work: Callable[[int], dict[str, Any]],
    child_deadline: float = CHILD_DEADLINE,
) -> list[dict[str, Any]]:
    """Fork *workers* children that start *work(i)* at the same moment; return their reports.

    A child reports through a JSON file (an exception becomes ``{"crashed": ...}``);
    one that has not exited by the deadline is killed and reported as hung.
    """
    go_read, go_write = os.pipe()
    pids: dict[int, int] = {}
    for i in range(workers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its file
            code = 1
            try:
                os.close(go_write)
                os.read(go_read, 1)  # blocks until the parent closes the pipe: all start together
                try:
                    report = work(i)
                except BaseException:  # noqa: BLE001 - report everything to the parent
                    report = {"crashed": traceback.format_exc()}
                (tmp_path / f"worker-{i}.json").write_text(json.dumps(report))
                code = 0
            finally:
                os._exit(code)
        pids[i] = pid
    os.close(go_read)
    os.close(go_write)  # go
    deadline = time.monotonic() + child_deadline
    reports: list[dict[str, Any]] = []
    for i, pid in pids.items():
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = -1
                break
            time.sleep(0.02)  # poll the child's exit with a deadline
        path = tmp_path / f"worker-{i}.json"
        if status == -1:
            reports.append({"crashed": f"worker {i} hung for {child_deadline} s and was killed"})
        elif not path.exists():
            reports.append({"crashed": f"worker {i} exited with status {status} and no report"})
        else:
            reports.append(json.loads(path.read_text()))
    return reports


def hammer(store: Store, worker: int, rounds: int = ROUNDS) -> dict[str, Any]:
    """set/get/get_many distinct keys with distinct values; list every reply that is not ours."""
    foreign: list[str] = []
    errors: list[str] = []
    for j in range(rounds):
        key, value = f"fork:w{worker}:k{j}", f"worker-{worker}-value-{j}-{os.getpid()}"
        try:
            store.set(key, value)
            got = store.get(key)
            if got != value:
                foreign.append(f"get {key} -> {got!r}")
            many = store.get_many([key, f"fork:w{worker}:absent"])
            if many != [value, None]:
                foreign.append(f"get_many {key} -> {many!r}")
        except Exception as exc:  # noqa: BLE001 - a crossed reply may also fail to parse
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
    return {"pid": os.getpid(), "foreign": foreign[:5], "n_foreign": len(foreign),
            "errors": errors[:5], "n_errors": len(errors)}  # fmt: skip


def assert_all_own(reports: list[dict[str, Any]]) -> None:
    problems = [r for r in reports if r.get("crashed") or r["n_foreign"] or r["n_errors"]]
    assert problems == [], json.dumps(problems, indent=1)[:4000]


# -- Vercel KV --------------------------------------------------------------------------------


@pytest.fixture
def kv_store(kv_emulator: KVEmulator, kv_redis: redis.Redis) -> Iterator[VercelKVStore]:
    """A store the parent has used: its pool holds one idle keep-alive connection."""
    store = VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, environ={}, timeout=5.0)
    assert store.get("parent:warm-up") is None
    yield store
    store.close()


def test_vercel_kv_forked_workers_never_read_each_others_replies(
    kv_store: VercelKVStore, kv_emulator: KVEmulator, kv_redis: redis.Redis, tmp_path: Path
) -> None:
    """6 forked workers x 150 set/get on a used store: every reply a worker gets is its own."""
    kv_store.set("parent:key", "parent value")
    connections_before = kv_emulator.connections_accepted
    reports = run_forked(tmp_path, WORKERS, lambda i: hammer(kv_store, i))
    assert_all_own(reports)
    # Each worker opened a connection of its own ...
    assert kv_emulator.connections_accepted >= connections_before + WORKERS
    # ... and the parent's keep-alive connection was neither used nor closed by them.
    connections_after = kv_emulator.connections_accepted
    assert kv_store.get("parent:key") == "parent value"
    assert kv_emulator.connections_accepted == connections_after
    for i in range(WORKERS):
        assert kv_redis.get(f"fork:w{i}:k{ROUNDS - 1}") is not None


def test_vercel_kv_forked_workers_through_the_plugin_lose_no_acknowledged_write(
    kv_emulator: KVEmulator, kv_redis: redis.Redis, tmp_path: Path
) -> None:
    """Encrypted writes by forked workers after the parent's layout-marker read all read back."""
    store = VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, environ={}, timeout=5.0)
    plugin = RememberPlugin.init(store=store, encryption={"secrets": [TEST_SECRET]})
    try:
        # The purge worker reads (and writes) the layout marker on the parent's session.
        assert plugin.legacy_purge.wait(10) and plugin.legacy_purge.state == "armed"

        def work(i: int) -> dict[str, Any]:
            memory = plugin.accessor(Identity(user_id=f"user-{i}"))
            acknowledged, wrong = 0, []
            for j in range(60):
                memory.set(f"n{j}", {"worker": i, "n": j}, scope="user")
                acknowledged += 1
                got = memory.get(f"n{j}", scope="user")
                if got != {"worker": i, "n": j}:
                    wrong.append(f"n{j} -> {got!r}")
            return {"acknowledged": acknowledged, "wrong": wrong[:5]}

        reports = run_forked(tmp_path, WORKERS, work)
        assert [r.get("crashed") for r in reports] == [None] * WORKERS, reports
        assert [(r["acknowledged"], r["wrong"]) for r in reports] == [(60, [])] * WORKERS
        for i in range(WORKERS):
            memory = plugin.accessor(Identity(user_id=f"user-{i}"))
            assert [memory.get(f"n{j}", scope="user") for j in range(60)] == [
                {"worker": i, "n": j} for j in range(60)
            ]
    finally:
        plugin.close()


def test_vercel_kv_given_session_refuses_to_run_in_a_forked_child(
    kv_emulator: KVEmulator, kv_redis: redis.Redis, tmp_path: Path
) -> None:
    """A caller's session cannot be replaced in a child: use there is a configuration error."""
    session = requests.Session()
    store = VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, environ={}, session=session)
    try:
        store.set("k", "parent")

        def work(i: int) -> dict[str, Any]:
            try:
                store.get("k")
            except RememberConfigurationError as exc:
                return {"refused": str(exc)}
            return {"refused": None}

        (report,) = run_forked(tmp_path, 1, work)
        assert report.get("refused"), report
        assert "session=" in report["refused"] and "after forking" in report["refused"]
        assert store.get("k") == "parent"  # the parent's session is untouched
    finally:
        store.close()
        session.close()


def test_vercel_kv_close_in_a_child_leaves_the_parents_connection_alone(
    kv_store: VercelKVStore, kv_emulator: KVEmulator, tmp_path: Path
) -> None:
    """A child closing its copy of the store does not close or use the parent's connection."""
    connections = kv_emulator.connections_accepted

    def work(i: int) -> dict[str, Any]:
        kv_store.close()
        return {"closed": repr(kv_store)}

    assert run_forked(tmp_path, 2, work) == [{"closed": repr(kv_store)[:-1] + ", closed)"}] * 2
    assert kv_store.get("parent:warm-up") is None
    assert kv_emulator.connections_accepted == connections  # still the first connection


# -- Redis --------------------------------------------------------------------------------------


def test_redis_store_works_in_forked_children_after_the_parent_used_it(
    redis_store: RedisStore, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """redis-py's pool is per process: forked workers on a used store each get their own replies."""
    redis_store.set("parent:key", "parent value")
    assert redis_store.get("parent:key") == "parent value"
    reports = run_forked(tmp_path, WORKERS, lambda i: hammer(redis_store, i))
    assert_all_own(reports)
    assert redis_store.get("parent:key") == "parent value"
    assert len(set(r["pid"] for r in reports)) == WORKERS


def test_redis_cluster_store_works_in_forked_children_after_the_parent_used_it(
    redis_cluster_store: RedisStore, tmp_path: Path
) -> None:
    """The same on Redis Cluster: per-node pools are rebuilt per process by redis-py."""
    redis_cluster_store.set("parent:key", "parent value")
    assert redis_cluster_store.get_many(["parent:key", "x", "y"]) == ["parent value", None, None]
    reports = run_forked(tmp_path, WORKERS, lambda i: hammer(redis_cluster_store, i, rounds=80))
    assert_all_own(reports)
    assert redis_cluster_store.get("parent:key") == "parent value"


# -- the legacy purge timer ----------------------------------------------------------------------


def purge_threads() -> set[threading.Thread]:
    """The live legacy-purge timer threads of this process (the worker names its timers)."""
    return {t for t in threading.enumerate() if t.name == "remember-legacy-purge" and t.is_alive()}


class MarkerReads:
    """A store that notes which process and thread read the layout marker (all else passes)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.reads: list[tuple[int, int]] = []

    def get(self, key: str) -> str | None:
        if key.endswith("__layout__"):
            self.reads.append((os.getpid(), threading.get_ident()))
        return self.inner.get(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("kind", ["redis", "vercel_kv"])
def test_legacy_purge_rearms_once_in_each_forked_child_and_not_again_in_the_parent(
    kind: str,
    redis_url: str,
    redis_client: redis.Redis,
    kv_emulator: KVEmulator,
    kv_redis: redis.Redis,
    tmp_path: Path,
) -> None:
    """Each child arms exactly one purge timer of its own on a real store; the parent keeps one."""
    inner: Store
    if kind == "redis":
        inner = RedisStore.from_url(redis_url)
    else:
        inner = VercelKVStore(kv_emulator.url, KV_TEST_TOKEN, environ={})
    store = MarkerReads(inner)
    # Another test's plugin left unclosed may still have a timer waiting: count only ours.
    others = purge_threads()
    plugin = RememberPlugin.init(store=store, encryption={"secrets": [TEST_SECRET]})
    purge = plugin.legacy_purge
    try:
        assert purge is not None and purge.wait(10) and purge.state == "armed"
        parent_pid, parent_timers = os.getpid(), purge_threads() - others
        assert len(parent_timers) == 1 and len(store.reads) == 1

        def work(i: int) -> dict[str, Any]:
            settled = purge.wait(10)
            # One step, on a timer thread of the child's own, re-read the marker through the
            # child's own connection and armed the wait again: one timer, not one per wake.
            mine = [thread for pid, thread in store.reads if pid == os.getpid()]
            return {
                "settled": settled,
                "state": purge.state,
                "waiting": purge.next_wake_ms is not None,
                "reads": len(mine),
                "on_a_timer": all(thread != threading.get_ident() for thread in mine),
                "timers": any(thread.daemon for thread in purge_threads()),
                "marker": purge.marker is not None,
            }

        expected = {"settled": True, "state": "armed", "waiting": True, "reads": 1,
                    "on_a_timer": True, "timers": True, "marker": True}  # fmt: skip
        assert run_forked(tmp_path, 3, work) == [expected] * 3
        assert purge_threads() - others == parent_timers  # the parent's timer, untouched
        assert store.reads == [(parent_pid, store.reads[0][1])]
    finally:
        plugin.close()


# -- IVs ------------------------------------------------------------------------------------------

_IV = re.compile(r'"iv":"([A-Za-z0-9_-]{16})"')


def test_forked_workers_never_reuse_an_iv(
    redis_store: RedisStore, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Parent and forked children, encrypting under the same key, never produce the same IV."""
    plugin = RememberPlugin.init(
        store=redis_store, encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True
    )
    memory = plugin.accessor(Identity(user_id="shared"))
    memory.set("parent-0", "x", scope="user")  # the parent has drawn IVs before the fork

    def work(i: int) -> dict[str, Any]:
        for j in range(200):
            memory.set(f"w{i}-{j}", "x", scope="user")
        return {"ok": True}

    assert run_forked(tmp_path, WORKERS, work) == [{"ok": True}] * WORKERS
    for j in range(1, 200):
        memory.set(f"parent-{j}", "x", scope="user")
    ivs = [
        found.group(1)
        for key in redis_client.scan_iter(count=1000)
        if not key.startswith(b"remember:__")  # listing indexes, the reindex record
        and (found := _IV.search(redis_client.get(key).decode()))  # type: ignore[union-attr]
    ]
    assert len(ivs) == 200 * (WORKERS + 1)
    assert len(set(ivs)) == len(ivs)
    plugin.close()


# -- locks held by another thread at the fork -------------------------------------------------


def test_children_forked_while_other_threads_hold_the_locks_never_hang(tmp_path: Path) -> None:
    """A child forked while parent threads hold the keyring/store locks finishes its own work."""
    plugin = RememberPlugin.init(
        store=MemoryStore(), encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True
    )
    stop = threading.Event()
    turns = [0, 0, 0]
    keyring, store = plugin.keyring, plugin.store
    assert keyring is not None

    def churn(n: int) -> None:
        # Tight loops that spend most of their time inside a lock: a new namespace each
        # turn (a key derivation under the keyring lock), a store write, a full accessor call.
        while not stop.is_set():
            turn = turns[n] = turns[n] + 1
            if n == 0:
                keyring.key(Namespace("user", user=f"parent-{turn}"))
            elif n == 1:
                store.set(f"parent:{turn % 500}", "v")
            else:
                plugin.accessor(Identity(user_id=f"parent-{turn}")).set("k", "v", scope="user")

    threads = [threading.Thread(target=churn, args=(n,), daemon=True) for n in range(3)]
    for thread in threads:
        thread.start()

    def work(i: int) -> dict[str, Any]:
        memory = plugin.accessor(Identity(user_id=f"child-{i}"))
        memory.set("k", f"value-{i}", scope="user")
        return {"got": memory.get("k", scope="user")}

    try:
        deadline = time.monotonic() + 10
        while min(turns) < 20 and time.monotonic() < deadline:  # both threads are working
            time.sleep(0.005)
        reports = run_forked(tmp_path, 100, work, child_deadline=30.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        plugin.close()
    assert min(turns) >= 20
    assert reports == [{"got": f"value-{i}"} for i in range(100)]
