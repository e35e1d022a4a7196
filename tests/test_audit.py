"""audit=True: one tamper-evident event per write, never the value; verify catches tampering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remember_sync import (
    Identity,
    RememberConfigurationError,
    RememberError,
    RememberPlugin,
)
from remember_sync.cli import main
from remember_sync.stores.base import Store
from tests.conftest import TEST_SECRET

BLOCKS = "__audit__:b:"


def _blocks(plugin: RememberPlugin) -> list[str]:
    return sorted(plugin.store.scan(plugin.key_prefix + BLOCKS + "*"))


def _trail(plugin: RememberPlugin) -> Any:
    trail = plugin.audit
    assert trail is not None
    return trail


# -- exactly one event per operation, counted against a model ----------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["set", "update", "modify", "increment", "forget", "forget_many", "erase", "bad_set",
             "get", "list"]
        ),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["session", "user", "tool"]),
    ),
    max_size=25,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_every_operation_emits_exactly_one_event(
    make_plugin: Callable[..., RememberPlugin], ops: list[tuple[str, str, str]]
) -> None:
    """A random sequence of writes (and reads): one event per write, in order, right outcome."""
    plugin = make_plugin(audit={"batch": 7}, key_prefix=f"m{os.urandom(4).hex()}:")
    mem = plugin.accessor(Identity("s-1", "alice", "notes"))
    model: dict[tuple[str, str], Any] = {}
    expected: list[tuple[str, str, str | None]] = []
    for op, key, scope in ops:
        slot = (scope, key)
        if op == "set":
            mem.set(key, 1, scope=scope)  # type: ignore[arg-type]
            model[slot] = 1
            expected.append(("set", "written", scope))
        elif op == "update":
            found = mem.update(key, 2, scope=scope)  # type: ignore[arg-type]
            assert found == (slot in model)
            if found:
                model[slot] = 2
            expected.append(("update", "updated" if found else "missing", scope))
        elif op == "modify":
            mem.modify(key, lambda v: 5, scope=scope, default=0)  # type: ignore[arg-type]
            model[slot] = 5
            expected.append(("modify", "written", scope))
        elif op == "increment":
            model[slot] = mem.increment(key, scope=scope)  # type: ignore[arg-type]
            expected.append(("increment", "written", scope))
        elif op == "forget":
            found = mem.forget(key, scope=scope)  # type: ignore[arg-type]
            assert found == (model.pop(slot, None) is not None)
            expected.append(("forget", "deleted" if found else "absent", scope))
        elif op == "forget_many":
            count = mem.forget_many(scope=scope, pattern="*")  # type: ignore[arg-type]
            assert count == sum(1 for s, _ in model if s == scope)
            model = {k: v for k, v in model.items() if k[0] != scope}
            expected.append(("forget_many", "deleted", scope))
        elif op == "erase":
            plugin.erase(user_id="alice")
            model.clear()
            expected.append(("erase", "erased", None))
        elif op == "bad_set":
            with pytest.raises(RememberError):
                mem.set(key, float("nan"), scope=scope)  # type: ignore[arg-type]
            expected.append(("set", "error:REMEMBER_INVALID_INPUT", scope))
        elif op == "get":
            mem.get(key, scope=scope)  # type: ignore[arg-type]
        else:
            mem.list(scope=scope)  # type: ignore[arg-type]
    events = _trail(plugin).events()
    assert [(e.op, e.outcome, e.scope) for e in events] == expected
    assert all(e.principal == ("alice" if e.op != "erase" else None) for e in events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert _trail(plugin).verify().ok


def test_tools_writes_are_recorded_with_the_tool_name(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """The memory tools record their writes with the tool's name."""
    plugin = make_plugin(audit=True, tools={"enabled": True})
    who = Identity("s-9", "bob")
    plugin.call_tool("remember_this", {"key": "k", "value": "v"}, identity=who)
    plugin.call_tool("recall", {"key": "k"}, identity=who)
    plugin.call_tool("forget", {"key": "k"}, identity=who)
    events = _trail(plugin).events()
    assert [(e.op, e.outcome, e.tool) for e in events] == [
        ("set", "written", "remember_this"),
        ("forget", "deleted", "forget"),
    ]
    assert events[0].principal == "bob" and events[0].session == "s-9"
    assert _trail(plugin).events(key="k", principal="bob", scope="session") == events
    assert _trail(plugin).events(limit=1) == events[-1:]
    assert _trail(plugin).events(since=events[0].at, until=events[0].at) == []


@pytest.mark.parametrize("store_kind", ["redis", "vercel_kv"])
def test_cli_rotate_and_import_extend_the_trail(
    make_plugin: Callable[..., RememberPlugin],
    store_kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``remember-sync rotate`` and ``import`` on a store holding a trail record one event
    each, with no tool, after the application's own events; the chain verifies."""
    plugin = make_plugin(audit=True)
    plugin.accessor(Identity("s-9", "bob")).set("k", "v")
    _trail(plugin).flush()
    monkeypatch.setenv("REMEMBER_SECRET", TEST_SECRET)
    if store_kind == "vercel_kv":
        from tests.fixtures_kv import KV_TEST_TOKEN

        monkeypatch.setenv("KV_REST_API_URL", request.getfixturevalue("kv_emulator").url)
        monkeypatch.setenv("KV_REST_API_TOKEN", KV_TEST_TOKEN)
        where = ["--vercel-kv"]
    else:
        where = ["--redis-url", request.getfixturevalue("redis_url")]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert main(["rotate", *where]) == 0, capsys.readouterr()
    assert main(["import", str(empty), *where]) == 0, capsys.readouterr()
    events = _trail(plugin).events()
    assert [(e.op, e.outcome, e.tool) for e in events] == [
        ("set", "written", None),
        ("rotate", "rotated", None),
        ("import", "imported", None),
    ]
    assert _trail(plugin).verify().ok


# -- never the value ------------------------------------------------------------------------


def test_no_event_holds_values_or_identities_in_clear(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """Search the raw store's trail for every value, metadata, user and session id written."""
    plugin = make_plugin(audit={"batch": 3})
    secrets_written = []
    for i in range(20):
        value = f"VALUE-MARKER-{i}-{os.urandom(4).hex()}"
        user, session = f"user-marker-{i}", f"session-marker-{i}"
        mem = plugin.accessor(Identity(session, user, "tool-x"))
        mem.set(f"key-marker-{i}", value, metadata={"m": f"META-MARKER-{i}"}, scope="user")
        mem.update(f"key-marker-{i}", value + "-2", scope="user")
        mem.set("s", {"nested": value}, scope="session")
        secrets_written += [value, f"META-MARKER-{i}", user, session, f"key-marker-{i}"]
    _trail(plugin).flush()
    raw = [store.get(k) or "" for k in store.scan(plugin.key_prefix + "__audit__:*")]
    assert raw and sum(len(r) for r in raw) > 0
    blob = "\n".join(raw)
    for marker in secrets_written:
        assert marker not in blob
    assert "tool-x" in blob  # the tool's name is recorded in clear, as documented


# -- tamper evidence ------------------------------------------------------------------------


def _edit_block(store: Store, key: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    raw = store.get(key)
    assert raw is not None
    block = json.loads(raw)
    change(block["events"])
    store.set(key, json.dumps(block))


def _fill(plugin: RememberPlugin, n: int = 12) -> None:
    mem = plugin.accessor(Identity("s-1", "alice"))
    for i in range(n):
        mem.set(f"k{i}", i)
    _trail(plugin).flush()
    assert _trail(plugin).verify().ok


TAMPERING: dict[str, Callable[[RememberPlugin, Store], None]] = {}


def _tamper(name: str) -> Callable[[Callable[[RememberPlugin, Store], None]], Any]:
    def register(fn: Callable[[RememberPlugin, Store], None]) -> Any:
        TAMPERING[name] = fn
        return fn

    return register


@_tamper("edited")
def _edited(plugin: RememberPlugin, store: Store) -> None:
    def change(events: list[dict[str, Any]]) -> None:
        events[1]["outcome"] = "missing"

    _edit_block(store, _blocks(plugin)[0], change)


@_tamper("deleted-in-block")
def _deleted_in_block(plugin: RememberPlugin, store: Store) -> None:
    _edit_block(store, _blocks(plugin)[0], lambda events: events.pop(2))


@_tamper("deleted-block")
def _deleted_block(plugin: RememberPlugin, store: Store) -> None:
    store.delete(_blocks(plugin)[1])


@_tamper("swapped")
def _swapped(plugin: RememberPlugin, store: Store) -> None:
    def change(events: list[dict[str, Any]]) -> None:
        events[0], events[1] = events[1], events[0]

    _edit_block(store, _blocks(plugin)[0], change)


@_tamper("swapped-blocks")
def _swapped_blocks(plugin: RememberPlugin, store: Store) -> None:
    a, b = _blocks(plugin)[:2]
    va, vb = store.get(a), store.get(b)
    assert va is not None and vb is not None
    store.set(a, vb)
    store.set(b, va)


@_tamper("forged")
def _forged(plugin: RememberPlugin, store: Store) -> None:
    def change(events: list[dict[str, Any]]) -> None:
        fake = dict(events[-1])
        fake["seq"] = events[-1]["seq"] + 1
        fake["op"] = "forget"
        events.append(fake)

    _edit_block(store, _blocks(plugin)[-1], change)


@_tamper("forged-mac")
def _forged_mac(plugin: RememberPlugin, store: Store) -> None:
    import base64
    import hashlib
    import hmac

    def change(events: list[dict[str, Any]]) -> None:
        body = {k: v for k, v in events[0].items() if k != "mac"}
        body["outcome"] = "absent"
        text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        mac = hmac.new(b"guessed-key", b"\x00" + text, hashlib.sha256).digest()
        events[0] = {**body, "mac": base64.urlsafe_b64encode(mac).rstrip(b"=").decode()}

    _edit_block(store, _blocks(plugin)[0], change)


@_tamper("last-removed")
def _last_removed(plugin: RememberPlugin, store: Store) -> None:
    _edit_block(store, _blocks(plugin)[-1], lambda events: events.pop())


@_tamper("last-blocks-removed")
def _last_blocks_removed(plugin: RememberPlugin, store: Store) -> None:
    store.delete(*_blocks(plugin)[-2:])


@_tamper("head-deleted")
def _head_deleted(plugin: RememberPlugin, store: Store) -> None:
    store.delete(plugin.key_prefix + "__audit__:head")


@_tamper("head-forged")
def _head_forged(plugin: RememberPlugin, store: Store) -> None:
    key = plugin.key_prefix + "__audit__:head"
    head = json.loads(store.get(key) or "{}")
    head["seq"] -= 3
    store.set(key, json.dumps(head))
    store.delete(*_blocks(plugin)[-1:])


@pytest.mark.parametrize("kind", sorted(TAMPERING))
def test_verify_detects_tampering(
    make_plugin: Callable[..., RememberPlugin], store: Store, kind: str
) -> None:
    """Edited, deleted, swapped, forged events and removed tails all fail verification."""
    plugin = make_plugin(audit={"batch": 4, "flush_ms": 600_000})
    _fill(plugin)
    assert len(_blocks(plugin)) == 3
    TAMPERING[kind](plugin, store)
    result = _trail(plugin).verify()
    assert not result.ok and result.problems, kind


def test_a_later_append_does_not_hide_tampering(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """After a block is deleted, new appends do not make the trail verify again."""
    plugin = make_plugin(audit={"batch": 4})
    _fill(plugin)
    store.delete(_blocks(plugin)[1])
    _fill_more = plugin.accessor(Identity("s-1", "alice"))
    for i in range(8):
        _fill_more.set(f"z{i}", i)
    assert not _trail(plugin).verify().ok


def test_a_plugin_with_another_secret_cannot_verify_or_read(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """The chain's MACs and the sealed identities need the secret."""
    plugin = make_plugin(audit=True)
    _fill(plugin, 3)
    other = make_plugin(audit=True, encryption={"secrets": ["another-secret-0123456789abcdef"]})
    assert not _trail(other).verify().ok
    assert all(e.principal is None for e in _trail(other).events())
    rotated = make_plugin(audit=True, encryption={"secrets": ["new-secret-0123456789abcdef0123",
                                                              TEST_SECRET]})
    assert _trail(rotated).verify().ok
    assert {e.principal for e in _trail(rotated).events()} == {"alice"}


# -- retention ------------------------------------------------------------------------------


def test_retention_by_count_keeps_the_trail_verifiable(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """Trimming drops old blocks behind a MAC'd checkpoint; verify still passes; bounded."""
    plugin = make_plugin(audit={"batch": 5, "max_events": 20, "flush_ms": 600_000})
    mem = plugin.accessor(Identity("s-1", "alice"))
    for i in range(100):
        mem.set(f"k{i % 7}", i)
    trail = _trail(plugin)
    trail.flush()
    result = trail.verify()
    assert result.ok, result.problems
    # Trimmed on append: within half a block (5 events) of the limit.
    assert 15 < result.events <= 22 and result.last_seq == 100
    assert len(_blocks(plugin)) <= 5
    for i in range(10):
        mem.set("after", i)
    assert trail.verify().ok and trail.verify().last_seq == 110
    # The checkpoint is MAC'd: moving it forward by hand is detected.
    key = plugin.key_prefix + "__audit__:checkpoint"
    checkpoint = json.loads(store.get(key) or "{}")
    checkpoint["block"] += 1
    store.set(key, json.dumps(checkpoint))
    assert not trail.verify().ok


def test_retention_by_age(make_plugin: Callable[..., RememberPlugin], clock: Any) -> None:
    """Events older than retention_days go at the next trim."""
    plugin = make_plugin(audit={"batch": 2, "retention_days": 1, "flush_ms": 600_000})
    mem = plugin.accessor(Identity("s-1", "alice"))
    for i in range(6):
        mem.set("k", i)
    clock.advance(2 * 86_400_000)
    for i in range(4):
        mem.set("k", i)
    trail = _trail(plugin)
    # Trimmed on append: the first append after the clock moved dropped the old blocks.
    assert trail.trim() == 0
    assert [e.seq for e in trail.events()] == [7, 8, 9, 10]
    assert trail.verify().ok


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"audit": {"max_event": 3}}, "max_event"),
        ({"audit": {"batch": 0}}, "audit.batch"),
        ({"audit": "yes"}, "audit"),
        ({"audit": True, "encryption": {"enabled": False}}, "audit"),
    ],
)
def test_bad_audit_options_are_refused(
    make_plugin: Callable[..., RememberPlugin], options: dict[str, Any], named: str
) -> None:
    """A bad audit option: RememberConfigurationError naming it."""
    with pytest.raises(RememberConfigurationError, match=named):
        make_plugin(**options)


def test_remember_audit_environment_turns_it_on(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """REMEMBER_AUDIT=1 when init is not given audit; audit=False wins over it."""
    assert make_plugin(environ={"REMEMBER_AUDIT": "1"}).audit is not None
    assert make_plugin(environ={"REMEMBER_AUDIT": "1"}, audit=False).audit is None
    assert make_plugin(environ={}).audit is None
    with pytest.raises(RememberConfigurationError, match="REMEMBER_AUDIT"):
        make_plugin(environ={"REMEMBER_AUDIT": "maybe"})


# -- many processes -------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    from remember_sync import Identity, RememberPlugin
    from remember_sync.stores.redis import RedisStore
    from remember_sync.stores.vercel_kv import VercelKVStore

    kind, where, token, name, prefix = sys.argv[1:6]
    if kind == "vercel_kv":
        store = VercelKVStore(where, token, environ={})
    elif kind == "redis_cluster":
        import redis.cluster
        store = RedisStore(client=redis.cluster.RedisCluster.from_url(where))
    else:
        store = RedisStore.from_url(where)
    plugin = RememberPlugin.init(store=store, key_prefix=prefix, skip_legacy_purge=True,
                                 background_reindex=False, encryption={"secrets": [sys.argv[6]]},
                                 audit={"batch": int(sys.argv[7])})
    sys.stdin.readline()  # start together
    mem = plugin.accessor(Identity(name, name))
    for i in range(150):
        mem.set(f"k{i % 10}", i)
    plugin.close()
    print("done")
    """
)


def run_together(commands: list[list[str]]) -> None:
    """Start every command, release them at once (a line on their stdin) and wait for each
    to exit 0 having printed ``done``."""
    children = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for argv in commands
    ]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0 and out.strip() == "done", err


@pytest.mark.parametrize("store_kind", ["redis", "redis_cluster", "vercel_kv"])
def test_two_processes_writing_at_once_produce_one_verifiable_trail(
    make_plugin: Callable[..., RememberPlugin], store: Store, store_kind: str, request: Any
) -> None:
    """Two real processes append concurrently: every event is there once and the chain verifies."""
    if store_kind == "vercel_kv":
        emulator = request.getfixturevalue("kv_emulator")
        where, token = emulator.url, "test-token"
        from tests.fixtures_kv import KV_TEST_TOKEN

        token = KV_TEST_TOKEN
    elif store_kind == "redis_cluster":
        where, token = request.getfixturevalue("redis_cluster").url, ""
    else:
        where, token = request.getfixturevalue("redis_url"), ""
    prefix = f"p{os.urandom(3).hex()}:"
    run_together([
        [sys.executable, "-c", _WRITER, store_kind, where, token, f"w{n}", prefix,
         TEST_SECRET, batch]
        for n, batch in enumerate(("1", "3"))
    ])
    plugin = make_plugin(audit=True, key_prefix=prefix)
    result = _trail(plugin).verify()
    assert result.ok, result.problems
    events = _trail(plugin).events()
    assert len(events) == 300
    assert sorted(e.principal for e in events) == ["w0"] * 150 + ["w1"] * 150
    assert [e.seq for e in events] == list(range(1, 301))


# -- the command line -----------------------------------------------------------------------


@pytest.mark.parametrize("store_kind", ["redis"])
def test_cli_audit_tail_verify_export(
    make_plugin: Callable[..., RememberPlugin], store: Store, redis_url: str, store_kind: str,
    tmp_path: Any,
) -> None:
    """``audit tail|verify|export`` print JSON lines; verify exits 1 once the trail is edited;
    a CLI write into a store that has a trail is recorded too."""
    plugin = make_plugin(audit={"batch": 2, "flush_ms": 600_000})
    _fill(plugin, 6)
    env = {**os.environ, "REMEMBER_SECRET": TEST_SECRET}
    base = [sys.executable, "-m", "remember_sync"]
    at = ["--redis-url", redis_url]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *argv], env=env, capture_output=True, text=True, check=False)

    done = run("set", *at, "--scope", "user", "--user", "carol", "k", '"v"')
    assert done.returncode == 0, done.stderr
    tail = run("audit", "tail", *at, "-n", "2")
    assert tail.returncode == 0, tail.stderr
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [line["seq"] for line in lines] == [6, 7]
    assert lines[-1]["principal"] == "carol" and lines[-1]["op"] == "set"
    verify = run("audit", "verify", *at, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"] is True
    out = tmp_path / "trail.jsonl"
    export = run("audit", "export", *at, "-o", str(out))
    assert export.returncode == 0, export.stderr
    assert len(out.read_text().splitlines()) == 7
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    _edit_block(store, _blocks(plugin)[0], lambda events: events.pop())
    broken = run("audit", "verify", *at)
    assert broken.returncode == 1 and "audit:" in broken.stderr
    assert run("audit", "export", *at).returncode == 1


@pytest.mark.parametrize("store_kind", ["redis"])
def test_serve_audit_records_the_models_writes(
    make_plugin: Callable[..., RememberPlugin], redis_url: str, store_kind: str, tmp_path: Any
) -> None:
    """``serve --audit``: a model's remember_this over MCP is an event naming the tool."""
    from tests.mcp_client import connect, structured
    from tests.mcp_client import run as run_async
    from tests.served import serve

    served = serve(tmp_path, "--allow-anonymous", "--redis-url", redis_url, "--audit")
    try:
        url = served.wait_ready()

        async def main() -> None:
            async with connect(url) as client:
                await structured(client, "remember_this", {"key": "colour", "value": "teal"})

        run_async(main)
    finally:
        assert served.stop() == 0, served.output
    plugin = make_plugin(audit=True)
    events = _trail(plugin).events(key="colour")
    assert [(e.op, e.outcome, e.tool, e.scope) for e in events] == [
        ("set", "written", "remember_this", "session")
    ]
    assert events[0].session is not None and _trail(plugin).verify().ok


@pytest.mark.parametrize("store_kind", ["redis"])
def test_cli_forget_is_recorded_and_reads_are_not(
    make_plugin: Callable[..., RememberPlugin], redis_url: str, store_kind: str
) -> None:
    """A store with a trail: the CLI's forget appends its event; list, get and stats do not."""
    plugin = make_plugin(audit={"batch": 1})
    plugin.accessor(Identity(None, "dave")).set("k", 1, scope="user")
    env = {**os.environ, "REMEMBER_SECRET": TEST_SECRET}
    at = ["--redis-url", redis_url]
    for argv in (["get", *at, "--scope", "user", "--user", "dave", "k"],
                 ["list", *at, "--scope", "user", "--user", "dave"], ["stats", *at],
                 ["forget", *at, "--scope", "user", "--user", "dave", "k"]):
        done = subprocess.run([sys.executable, "-m", "remember_sync", *argv], env=env,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, (argv, done.stderr)
    assert [(e.op, e.outcome, e.principal) for e in _trail(plugin).events()] == [
        ("set", "written", "dave"), ("forget", "deleted", "dave"),
    ]


def test_the_legacy_purge_is_recorded(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """The fleet-clock purge's sweep is one audit event with the count it deleted."""
    store.set("remember:session:old:k", '{"value":1,"createdAt":1,"updatedAt":1}')
    store.set("remember:__layout__", '{"version":2,"firstSeenAt":0}')
    plugin = make_plugin(audit=True, skip_legacy_purge=False, legacy_purge_delay_ms=0)
    purge = plugin.legacy_purge
    assert purge is not None and purge.wait(30)
    events = _trail(plugin).events()
    assert [(e.op, e.outcome) for e in events] == [("purge", "purged")]
    assert purge.last_result is not None and purge.last_result.deleted == 1
    assert events[0].count == 1 and store.get("remember:session:old:k") is None


class _DictWitness:
    """A witness kept outside the store: remembers the newest head it was given."""

    def __init__(self) -> None:
        self.head: dict[str, Any] | None = None

    def record_head(self, head: Any) -> None:
        if self.head is None or head["seq"] > self.head["seq"]:
            self.head = dict(head)

    def latest_head(self) -> Any:
        return self.head


def test_a_rolled_back_trail_is_caught_by_a_witness_only(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """An older head copied back over the head, later blocks deleted: the MACs all check out;
    the witness outside the store is what notices (the hook of AuditTrail)."""
    plugin = make_plugin(audit={"batch": 4, "flush_ms": 600_000})
    trail = _trail(plugin)
    witness = _DictWitness()
    trail.witness = witness
    _fill(plugin, 4)
    head_key = plugin.key_prefix + "__audit__:head"
    old_head = store.get(head_key)
    assert old_head is not None
    _fill(plugin, 8)
    store.delete(*_blocks(plugin)[1:])
    store.set(head_key, old_head)
    trail.witness = None
    assert trail.verify().ok  # indistinguishable from a trail of 4 events, without a witness
    trail.witness = witness
    result = trail.verify()
    assert not result.ok and any("witness" in p for p in result.problems)


def test_a_store_refusing_appends_bounds_the_buffer_and_records_the_gap(
    make_plugin: Callable[..., RememberPlugin], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the trail cannot be appended, writes report the store error; the buffer stays
    bounded, and what it dropped is one ``lost`` event once appends work again."""
    from remember_sync import RememberStoreError, _audit
    from remember_sync.stores.memory import MemoryStore

    class Refusing(MemoryStore):
        refuse = False

        def set(self, key: str, value: str, **kw: Any) -> bool:
            if self.refuse and "__audit__" in key:
                raise RememberStoreError("store down")
            return super().set(key, value, **kw)

    monkeypatch.setattr(_audit, "_MAX_BUFFER", 10)
    store = Refusing()
    plugin = make_plugin(store=store, audit={"batch": 2, "flush_ms": 600_000})
    mem = plugin.accessor(Identity("s-1", "alice"))
    mem.set("before", 1)
    _trail(plugin).flush()
    store.refuse = True
    failures = 0
    for i in range(30):
        try:
            mem.set(f"k{i}", i)
        except RememberStoreError:
            failures += 1
        assert len(_trail(plugin)._pending) <= 11
    # The first write only buffers; every later one tries to append and reports the failure.
    assert failures == 29 and mem.get("k29") == 29  # written; its event not yet appended
    store.refuse = False
    events = _trail(plugin).events()
    assert _trail(plugin).verify().ok
    lost = [e for e in events if e.op == "lost"]
    assert len(lost) == 1 and lost[0].count == 20 and lost[0].outcome == "dropped"
    assert len(events) == 1 + 1 + 10  # before, the gap, the last ten writes


@pytest.mark.parametrize("store_kind", ["redis"])
def test_a_forked_child_appends_its_own_events_only(
    make_plugin: Callable[..., RememberPlugin], store_kind: str
) -> None:
    """Fork with events buffered: the child neither appends nor loses the parent's; each
    process's events are in the trail once, and the chain verifies."""
    plugin = make_plugin(audit={"batch": 100, "flush_ms": 600_000})
    mem = plugin.accessor(Identity("s-1", "parent"))
    for i in range(3):
        mem.set(f"p{i}", i)
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            child = plugin.accessor(Identity("s-2", "child"))
            child.set("c0", 0)
            child.set("c1", 1)
            _trail(plugin).flush()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _trail(plugin).flush()
    events = _trail(plugin).events()
    assert sorted(e.principal for e in events) == ["child"] * 2 + ["parent"] * 3
    assert _trail(plugin).verify().ok


def test_equal_but_differently_typed_arguments_are_recorded_as_given(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """``ttl=True`` equals ``ttl=1`` in Python, not in the trail: two calls refused for the
    same reason (an empty key) record the int TTL and no TTL for the bool, whichever comes
    first (events whose fields repeat share their text)."""
    plugin = make_plugin(audit={"batch": 50, "flush_ms": 600_000})
    mem = plugin.accessor(Identity("s-1", "alice"))
    for ttl in (1, True, True, 1):
        with pytest.raises(RememberError):
            mem.set("", 1, ttl=ttl)
    events = _trail(plugin).events()
    assert len({e.outcome for e in events}) == 1 and events[0].outcome.startswith("error:")
    assert [e.ttl for e in events] == [1, None, None, 1]
    assert _trail(plugin).verify().ok
