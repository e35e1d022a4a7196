"""Verified memory: a store writer without the secret cannot delete, replay, insert or roll back.

Every test writes through the library, edits the database behind the store
with plain redis-py (:class:`tests.integrity_raw.RawStore`: the attacker holds
the backing store, not the process, the secret or the witness), then reads
through the library again.  Stores: Redis standalone, Redis Cluster and
Vercel KV (its emulator over a real redis-server); Sentinel in its own test.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import (
    Identity,
    RememberConfigurationError,
    RememberIntegrityError,
    RememberPlugin,
    RememberStoreError,
    identity,
)
from remember_sync._clock import FakeClock
from remember_sync._integrity import FileWitness
from remember_sync._ops.verify import verify_store
from remember_sync.stores.base import Store
from remember_sync.tools.results import error_parts
from tests.conftest import TEST_SECRET, run_threads
from tests.fixtures_redis import SENTINEL_SERVICE
from tests.integrity_raw import RawStore

KINDS = ["redis", "redis_cluster", "vercel_kv"]
RAW_FIXTURE = {"redis": "redis_client", "redis_cluster": "redis_cluster_client",
               "vercel_kv": "kv_redis"}
Factory = Callable[..., RememberPlugin]
ALICE = "alice"
ENTRY = "remember:v2:user:alice:"
MANIFEST = "remember:__manifest__:v2:user:alice:"


#: For a test that picks its stores itself: run it once, not once per kind.
ONE_STORE = pytest.mark.parametrize("store_kind", ["redis"])


@pytest.fixture(params=KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def raw(store_kind: str, store: Store, request: pytest.FixtureRequest) -> RawStore:
    return RawStore(request.getfixturevalue(RAW_FIXTURE[store_kind]))


@pytest.fixture
def verified(make_plugin: Factory) -> Factory:
    def factory(**options: Any) -> RememberPlugin:
        options.setdefault("integrity", "verified")
        return make_plugin(**options)

    return factory


def refused(call: Callable[[], object], match: str) -> None:
    with pytest.raises(RememberIntegrityError, match=match) as info:
        call()
    assert info.value.code == "REMEMBER_INTEGRITY"


def test_every_operation_works_and_keeps_the_manifest(verified: Factory, raw: RawStore) -> None:
    """set/get/update/modify/increment/forget/forget_many/entries behave as in default mode."""
    plugin = verified()
    with identity(user_id=ALICE):
        mem = plugin.remember
        mem.set("a", 1, scope="user")
        mem.set("b", "x", scope="user", brand="approval", metadata={"m": 1})
        mem.set("c", [1], scope="user", ttl=60)
        assert mem.update("a", 2, scope="user") is True
        assert mem.update("zz", 2, scope="user") is False
        assert mem.modify("a", lambda v: v * 10, scope="user") == 20
        assert mem.increment("n", 5, scope="user") == 5
        assert mem.get_entry("b", scope="user").brand == "approval"  # type: ignore[union-attr]
        assert mem.list(scope="user") == ["a", "b", "c", "n"]
        assert set(mem.entries(scope="user", brand="approval")) == {"b"}
        assert mem.forget("c", scope="user") is True
        assert mem.forget("c", scope="user") is False
        assert mem.forget_many(scope="user", pattern="*", brand="approval") == 1
        assert mem.forget_many(scope="user", pattern="a?") == 0
        assert mem.forget_many(scope="user", pattern="a") == 1
        assert mem.list(scope="user") == ["n"]
        assert mem.knows("n", scope="user") and not mem.knows("a", scope="user")
    assert raw.get(MANIFEST) is not None
    assert sorted(raw.keys("remember:v2:*")) == [ENTRY + "n"]
    # Another plugin (another process) with the same secret reads the same state.
    with identity(user_id=ALICE):
        assert verified().remember.get("n", scope="user") == 5


def test_deleting_a_live_entry_is_refused(verified: Factory, raw: RawStore) -> None:
    """T2/T3: an entry the manifest lists as live but missing is an integrity error, not absent."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("opted_out", True, scope="user")
        plugin.remember.set("other", 1, scope="user")
        raw.delete(ENTRY + "opted_out")
        refused(lambda: plugin.remember.get("opted_out", scope="user"), "missing from the store")
        refused(lambda: plugin.remember.entries(scope="user"), "missing from the store")
        refused(lambda: plugin.remember.list(scope="user"), "missing from the store")
        assert plugin.remember.get("other", scope="user") == 1


def test_rolling_back_an_approval_is_refused(verified: Factory, raw: RawStore) -> None:
    """T7 on one key: the older genuine ciphertext of a revoked approval does not come back."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("deploy", "granted", scope="user", brand="approval")
        granted = raw.get(ENTRY + "deploy")
        assert granted is not None
        plugin.remember.set("deploy", "revoked", scope="user", brand="approval")
        raw.set(ENTRY + "deploy", granted)
        refused(lambda: plugin.remember.get("deploy", scope="user"), "not the version")
        refused(lambda: plugin.remember.entries(scope="user"), "not the version")
        refused(lambda: verified().remember.get("deploy", scope="user"), "not the version")


def test_resurrecting_a_forgotten_entry_is_refused(verified: Factory, raw: RawStore) -> None:
    """A forgotten entry's ciphertext put back is refused on get and never listed."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("secret_plan", "x", scope="user")
        plugin.remember.set("keep", 1, scope="user")
        old = raw.get(ENTRY + "secret_plan")
        assert old is not None
        assert plugin.remember.forget("secret_plan", scope="user")
        raw.set(ENTRY + "secret_plan", old)
        refused(lambda: plugin.remember.get("secret_plan", scope="user"), "not in its manifest")
        assert plugin.remember.list(scope="user") == ["keep"]


def test_an_expired_entry_put_back_stays_expired(
    verified: Factory, raw: RawStore, clock: FakeClock
) -> None:
    """An expired entry is absent (not an error) and putting its ciphertext back changes nothing."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("otp", "123", scope="user", ttl=5)
        old = raw.get(ENTRY + "otp")
        assert old is not None
        clock.advance(s=6)
        assert plugin.remember.get("otp", scope="user") is None
        plugin.remember.set("later", 1, scope="user")  # this write drops the expired record
        raw.set(ENTRY + "otp", old)  # back, without a TTL
        assert plugin.remember.get("otp", scope="user") is None
        assert plugin.remember.list(scope="user") == ["later"]


def test_editing_the_index_neither_hides_nor_adds(verified: Factory, raw: RawStore) -> None:
    """Listing reads the manifest: index keys added or removed behind its back change nothing."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        plugin.remember.set("b", 2, scope="user")
        raw.delete(*raw.keys("remember:__index__:*"))
        raw.client.zadd("remember:__index__:v2:user:alice:", {ENTRY + "c": 1})
        assert plugin.remember.list(scope="user") == ["a", "b"]
        raw.delete(ENTRY + "b")
        refused(lambda: plugin.remember.list(scope="user"), "missing from the store")


def test_a_forged_or_moved_entry_is_refused(verified: Factory, raw: RawStore) -> None:
    """T4/T5: a genuine value copied under another key, or any new key, is not in the manifest."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        value = raw.get(ENTRY + "a")
        assert value is not None
        raw.set(ENTRY + "b", value)
        refused(lambda: plugin.remember.get("b", scope="user"), "not in its manifest")
        raw.set(ENTRY + "a", value.replace('"data":"', '"data":"A', 1))
        refused(lambda: plugin.remember.get("a", scope="user"), "not the version")


def test_another_namespaces_manifest_does_not_open(verified: Factory, raw: RawStore) -> None:
    """T6 for manifests: bob's genuine manifest copied over alice's fails its check."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
    with identity(user_id="bob"):
        plugin.remember.set("a", 2, scope="user")
    bobs = raw.get("remember:__manifest__:v2:user:bob:")
    assert bobs is not None
    raw.set(MANIFEST, bobs)
    with identity(user_id=ALICE):
        refused(lambda: verified().remember.get("a", scope="user"), "fails its check")
    # An entry moved between namespaces does not open there either (nor match a digest).
    raw.set(ENTRY + "a", raw.get("remember:v2:user:bob:a") or "")
    with identity(user_id="bob"):
        assert verified().remember.get("a", scope="user") == 2


def test_a_deleted_manifest_is_refused(verified: Factory, raw: RawStore) -> None:
    """Deleting the manifest leaves entries no manifest vouches for: refused, not served."""
    plugin = verified()
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        raw.delete(MANIFEST)
        refused(lambda: verified().remember.get("a", scope="user"), "not in its manifest")


@pytest.mark.parametrize("witness_kind", ["file", "redis"])
def test_a_whole_store_rollback_is_refused_by_the_witness(
    verified: Factory, raw: RawStore, tmp_path: Path, redis_url: str, witness_kind: str
) -> None:
    """T9: a restored snapshot is refused with a witness; without one it reads as current.

    The Redis witness is a database the attacker's snapshot does not cover.
    """
    file = str(tmp_path / "witness.db")
    witness = file if witness_kind == "file" else redis_url.rsplit("/", 1)[0] + "/7"
    if witness_kind == "redis":
        with redis.Redis.from_url(witness) as fresh:
            fresh.flushdb()
    plugin = verified(witness=witness)
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        snap = raw.snapshot("remember:*")
        plugin.remember.set("b", 2, scope="user")
        raw.restore(snap, "remember:*")
        refused(lambda: verified(witness=witness).remember.get("a", scope="user"), "rolled back")
        refused(lambda: plugin.remember.list(scope="user"), "rolled back")
        assert verified().remember.list(scope="user") == ["a"]  # no witness: not detected
    if witness_kind == "file":
        assert oct(os.stat(file).st_mode & 0o777) == "0o600"


def test_the_tools_report_an_integrity_error_never_not_found(
    verified: Factory, raw: RawStore
) -> None:
    """recall of a deleted entry: isError with REMEMBER_INTEGRITY, not found: false."""
    plugin = verified(tools={"enabled": True, "allowed_scopes": ["user"]})
    who = identity(user_id=ALICE)
    with who:
        ok = plugin.call_tool("remember_this", {"key": "k", "value": 1, "scope": "user"})
        assert ok["isError"] is False
        assert plugin.call_tool("recall", {"key": "k", "scope": "user"})["structuredContent"][
            "found"
        ]
        raw.delete(ENTRY + "k")
        code, message = error_parts(plugin.call_tool("recall", {"key": "k", "scope": "user"}))
        assert code == "REMEMBER_INTEGRITY" and "'k'" in message and "alice" not in message
        code, _ = error_parts(plugin.call_tool("list_memories", {"scope": "user"}))
        assert code == "REMEMBER_INTEGRITY"
        # The tools' forget goes through the manifest too.
        plugin.remember.set("j", 1, scope="user")
        assert plugin.call_tool("forget", {"key": "j", "scope": "user"})["isError"] is False
        assert raw.get(ENTRY + "j") is None
        assert json.loads(raw.get(MANIFEST) or "{}")  # still sealed, still there


def test_a_lost_reply_leaves_the_entry_readable(verified: Factory, raw: RawStore) -> None:
    """A commit whose reply is lost (it landed) or that never ran leaves honest entries readable."""
    plugin = verified()
    store: Any = plugin.store
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        atomic = hasattr(store, "commit_manifest") and not store_is_cluster(store)
        target = "commit_manifest" if atomic else "replace_entry"
        real = getattr(store, target)

        def lost(*args: Any, **kwargs: Any) -> Any:
            real(*args, **kwargs)  # it landed; the reply did not come back
            raise RememberStoreError("reply lost")

        setattr(store, target, lost)
        with pytest.raises(RememberStoreError):
            plugin.remember.set("a", 2, scope="user")
        delattr(store, target)
        assert plugin.remember.get("a", scope="user") in (1, 2)
        assert verified().remember.get("a", scope="user") in (1, 2)
        plugin.remember.set("a", 3, scope="user")
        assert verified().remember.get("a", scope="user") == 3


def store_is_cluster(store: Any) -> bool:
    return bool(getattr(store, "is_cluster", False))


def kill_at_entry_write(store: Any, sig: int = signal.SIGKILL) -> None:
    """Make this (forked) process receive *sig* when it is about to write an entry."""
    real = store.replace_entry

    def write(key: str, *args: Any, **kwargs: Any) -> bool:
        if key.startswith(ENTRY):
            os.kill(os.getpid(), sig)
        return bool(real(key, *args, **kwargs))

    store.replace_entry = write


def killed_writer(make_plugin: Factory, store: Store, key: str, value: object) -> int:
    """The wait status of a forked writer of Alice's *key* killed at its entry write
    (after its intent: Redis Cluster's two-step write)."""
    pid = os.fork()
    if pid == 0:
        try:
            child = make_plugin(store=store, integrity="verified")
            kill_at_entry_write(store)
            with identity(user_id=ALICE):
                child.remember.set(key, value, scope="user")
        finally:
            os._exit(3)
    return os.waitpid(pid, 0)[1]


@ONE_STORE
def test_a_cluster_writer_killed_between_steps_leaves_entries_readable(
    redis_cluster_store: Store, make_plugin: Factory, clock: FakeClock
) -> None:
    """A forked writer SIGKILLed after the manifest's intent, before the entry: reads still work.

    The old value reads as before (the write never returned); ``verify --repair``
    settles the record, after which the old value is the only one accepted.
    """
    plugin = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        plugin.remember.set("a", "old", scope="user")
        plugin.remember.set("b", "new-key-target", scope="user")
    status = killed_writer(make_plugin, redis_cluster_store, "a", "new")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    reader = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id=ALICE):
        assert reader.remember.get("a", scope="user") == "old"
        assert reader.remember.entries(scope="user")["b"].value == "new-key-target"
        reader.remember.set("a", "newer", scope="user")  # the next write settles the key
        assert reader.remember.get("a", scope="user") == "newer"


@ONE_STORE
def test_sentinel_uses_the_atomic_script(
    sentinel_set_factory: Callable[..., Any], make_plugin: Factory
) -> None:
    """Through Sentinel's primary: one script per write; deletion behind its back is refused."""
    sentinels = sentinel_set_factory()
    plugin = make_plugin(
        store=None, type="redis",
        config={"sentinels": sentinels.addresses, "service_name": SENTINEL_SERVICE},
        integrity="verified",
    )
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        assert plugin.remember.get("a", scope="user") == 1
        primary = sentinels.primary.client()
        primary.delete(ENTRY + "a")
        refused(lambda: plugin.remember.get("a", scope="user"), "missing from the store")


@ONE_STORE
def test_memory_store_accepts_verified_mode(make_plugin: Factory, memory_store: Store) -> None:
    """Nothing outside the process can edit the memory store: verified mode is accepted as is."""
    plugin = make_plugin(store=memory_store, integrity="verified")
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        assert plugin.remember.get("a", scope="user") == 1


@ONE_STORE
def test_bad_integrity_options_are_refused(make_plugin: Factory, memory_store: Store) -> None:
    """A typo in the mode, a witness without verified mode, verified without a secret."""
    with pytest.raises(RememberConfigurationError, match="integrity"):
        make_plugin(store=memory_store, integrity="verify")
    with pytest.raises(RememberConfigurationError, match="witness"):
        make_plugin(store=memory_store, witness="/tmp/x")
    with pytest.raises(RememberConfigurationError, match="REMEMBER_INTEGRITY"):
        make_plugin(store=memory_store, environ={"REMEMBER_INTEGRITY": "on"})


def test_environment_turns_verified_mode_on(
    make_plugin: Factory, raw: RawStore, tmp_path: Path
) -> None:
    """REMEMBER_INTEGRITY=verified and REMEMBER_WITNESS=<path> configure what the options do."""
    witness = str(tmp_path / "w.db")
    env = {"REMEMBER_INTEGRITY": "verified", "REMEMBER_WITNESS": witness}
    plugin = make_plugin(environ=env)
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
    assert raw.get(MANIFEST) is not None and Path(witness).exists()


@ONE_STORE
def test_default_mode_recall_names_an_unreadable_memory(make_plugin: Factory) -> None:
    """Default mode: recall of an entry under another secret is a tool error naming it, and
    list_memories names it as unreadable instead of leaving it out."""
    writer = make_plugin(tools={"enabled": True, "allowed_scopes": ["user"]})
    reader = make_plugin(
        tools={"enabled": True, "allowed_scopes": ["user"]},
        encryption={"secrets": ["another-secret-0123456789abcdef0123"]},
    )
    with identity(user_id=ALICE):
        writer.call_tool("remember_this", {"key": "k", "value": 1, "scope": "user"})
        code, message = error_parts(reader.call_tool("recall", {"key": "k", "scope": "user"}))
        assert reader.remember.get("k", scope="user", default="d") == "d"  # SPEC section 4
        listed = reader.call_tool("list_memories", {"scope": "user"})["structuredContent"]
        assert listed["keys"] == [] and listed["unreadable"] == ["k"]
        assert "unreadable" not in writer.call_tool(
            "list_memories", {"scope": "user"})["structuredContent"]
    assert code == "REMEMBER_DECRYPTION_FAILED" and "'k'" in message and "not absent" in message
    assert TEST_SECRET not in message


class _ListWitness:
    """A witness of the caller's own making: the pluggable interface, in memory."""

    def __init__(self) -> None:
        self.heads: dict[str, tuple[int, int | None]] = {}
        self.closed = False

    def floor(self, name: str) -> tuple[int, int | None]:
        return self.heads.get(name, (0, None))

    def advance(self, name: str, counter: int, deadline: int | None) -> None:
        if counter > self.floor(name)[0]:
            self.heads[name] = (counter, deadline)

    def close(self) -> None:
        self.closed = True


def test_a_witness_object_is_used_and_left_open(verified: Factory, raw: RawStore) -> None:
    """Any object with floor/advance/close is a witness; the plugin does not close the caller's."""
    witness = _ListWitness()
    plugin = verified(witness=witness)
    with identity(user_id=ALICE):
        plugin.remember.set("a", 1, scope="user")
        snap = raw.snapshot("remember:*")
        plugin.remember.set("a", 2, scope="user")
        raw.restore(snap, "remember:*")
        refused(lambda: verified(witness=witness).remember.get("a", scope="user"), "rolled back")
    assert len(witness.heads) == 1 and "alice" not in next(iter(witness.heads))
    plugin.close()
    assert not witness.closed


def test_reads_of_a_big_manifest_fetch_it_only_when_it_changed(
    verified: Factory, raw: RawStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past FETCH_WHOLE_BYTES a read sends the manifest's token; the checks are the same."""
    import remember_sync._integrity as integrity

    monkeypatch.setattr(integrity, "FETCH_WHOLE_BYTES", 0)
    plugin, other = verified(), verified()
    with identity(user_id=ALICE):
        plugin.remember.set("deploy", "granted", scope="user", brand="approval")
        granted = raw.get(ENTRY + "deploy")
        assert plugin.remember.get("deploy", scope="user") == "granted"  # cached manifest
        other.remember.set("deploy", "revoked", scope="user", brand="approval")
        assert plugin.remember.get("deploy", scope="user") == "revoked"  # changed: refetched
        assert plugin.remember.list(scope="user") == ["deploy"]
        raw.set(ENTRY + "deploy", granted or "")
        refused(lambda: plugin.remember.get("deploy", scope="user"), "not the version")
        refused(lambda: plugin.remember.entries(scope="user"), "not the version")
        raw.delete(MANIFEST)
        # This process saw the manifest: its own floor refuses the absence.
        refused(lambda: plugin.remember.get("deploy", scope="user"), "older state")


def test_concurrent_writers_keep_the_manifest_whole(verified: Factory) -> None:
    """Threads of two plugins writing one namespace: every write lands, increments add up."""
    import threading

    plugins = [verified(), verified()]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(n: int) -> None:
        try:
            mem = plugins[n % 2].accessor(Identity(user_id=ALICE))
            start.wait(10)
            for i in range(15):
                mem.set(f"w{n}-{i}", i, scope="user")
                mem.increment("total", scope="user")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads(work, 4, 120)
    assert not errors, errors
    with identity(user_id=ALICE):
        found = verified().remember.entries(scope="user")
    assert found.pop("total").value == 60
    assert sorted(found) == sorted(f"w{n}-{i}" for n in range(4) for i in range(15))


def test_a_quota_with_verified_mode_is_refused_at_init(
    make_plugin: Factory, redis_store: Store
) -> None:
    """Verified writes commit through the manifest, which charges no owner: a quota there
    would silently not hold, so init refuses the pair, naming the option."""
    with pytest.raises(RememberConfigurationError, match="'quota'.*verified"):
        make_plugin(store=redis_store, integrity="verified", quota={"entries": 5})


@ONE_STORE
def test_cluster_leftovers_are_reported_and_settled(
    redis_cluster_store: Store, make_plugin: Factory
) -> None:
    """A cluster writer SIGKILLed between steps leaves a pending record; a repairing walk
    settles it (``verify --repair`` reaches no cluster: the walk is called directly)."""
    plugin = make_plugin(store=redis_cluster_store, integrity="verified")
    with identity(user_id="alice"):
        plugin.remember.set("a", "old", scope="user")
    status = killed_writer(make_plugin, redis_cluster_store, "a", "new")
    assert os.WIFSIGNALED(status)
    core = plugin._core
    found = verify_store(redis_cluster_store, "remember:", core.codec, clock=core.clock)
    assert found.violation_count == 0 and found.pending == 1
    fixed = verify_store(redis_cluster_store, "remember:", core.codec, clock=core.clock,
                         repair=True)
    assert fixed.repaired == 1
    again = verify_store(redis_cluster_store, "remember:", core.codec, clock=core.clock)
    assert again.pending == 0 and again.violation_count == 0
    with identity(user_id="alice"):
        assert make_plugin(store=redis_cluster_store, integrity="verified").remember.get(
            "a", scope="user") == "old"


# -- the file witness, opened by several processes at once (workers starting together)

WITNESS_ROUNDS = 25
WITNESS_WORKERS = 4


def _open_and_advance(path: str, barrier: multiprocessing.synchronize.Barrier,
                      results: multiprocessing.Queue[str]) -> None:
    barrier.wait()
    try:
        witness = FileWitness(path)
        witness.advance(f"n-{os.getpid()}", 1, None)
        witness.close()
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put(f"{type(exc).__name__}: {exc}")


def test_workers_opening_a_new_witness_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Real forked processes released together open one new witness file: none is refused
    ("database is locked" while another switches it to WAL), and every advance is kept."""
    ctx = multiprocessing.get_context("fork")
    for n in range(WITNESS_ROUNDS):
        path = str(tmp_path / f"witness-{n}.db")
        barrier = ctx.Barrier(WITNESS_WORKERS)
        results: multiprocessing.Queue[str] = ctx.Queue()
        workers = [ctx.Process(target=_open_and_advance, args=(path, barrier, results))
                   for _ in range(WITNESS_WORKERS)]
        for worker in workers:
            worker.start()
        outcomes = [results.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(60)
            assert worker.exitcode == 0
        assert [o for o in outcomes if o != "ok"] == []
        reader = FileWitness(path)
        try:
            assert all(reader.floor(f"n-{w.pid}") == (1, None) for w in workers)
        finally:
            reader.close()
