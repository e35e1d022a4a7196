"""Nothing the library or the operator's CLI does deletes or hides data it could not read.

Written as users hit the problems: a *second process* holding another secret
runs ``forget_many`` against a real Redis and the Vercel KV emulator; an
operator runs ``remember-sync rotate`` over a store holding 1.8.0's
doubled-prefix entries and then drops the old secret; ``list``/``get``/
``stats``/``export``/``doctor`` meet an entry they cannot read; someone with
write access to the store copies an unbound (1.8.0) envelope over another key.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import Identity, RememberPlugin
from remember_sync.errors import (
    RememberConfigurationError,
    RememberDecryptionError,
    RememberInputError,
)
from remember_sync.identity import is_anonymous
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from remember_sync.stores.vercel_kv import VercelKVStore
from remember_sync.testing.kv_emulator import KVEmulator
from tests.conftest import FakeClock, stored_key
from tests.fixtures_kv import KV_TEST_TOKEN
from tests.test_cli import child_env, run_cli
from tests.vectors import VECTORS, vector_identity, vector_tool_name

REPO = Path(__file__).resolve().parent.parent
SECRET_APP = "app-secret-0123456789abcdef0123456789ab"
SECRET_OTHER = "other-secret-0123456789abcdef012345678"
SECRET_NEW = "new-secret-0123456789abcdef0123456789abc"
#: A session id as an anonymous MCP session carries it: it grants that session's memory.
SESSION = "anon-sess-7d41c0ffee9b4e2f8a11b5c3d2e1f0a9"
TIMEOUT = 60

# -- forget_many from a second process with the wrong secret ------------------------------

#: The second process: a cron job built on the library, holding its own secret.
_FORGET_CHILD = textwrap.dedent(
    """
    import json, logging, sys
    from remember_sync import Identity, RememberPlugin
    from remember_sync.stores.redis import RedisStore
    from remember_sync.stores.vercel_kv import VercelKVStore

    kind, url, token, secret, include, session = sys.argv[1:7]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    store = RedisStore.from_url(url) if kind == "redis" else VercelKVStore(url, token, environ={})
    plugin = RememberPlugin.init(
        store=store, encryption={"secrets": [secret]}, skip_legacy_purge=True
    )
    mem = plugin.accessor(Identity(session_id=session, user_id="alice"))
    before = mem.list(scope="session")
    deleted = mem.forget_many(scope="session", pattern="*", include_unreadable=include == "1")
    print(json.dumps({"listed": before, "deleted": deleted, "stats": plugin.stats()}))
    plugin.close()
    store.close()
    """
)


@pytest.fixture(params=["redis", "vercel_kv"])
def shared_store(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str, Store]]:
    """(kind, url, token, store): a real store two processes share, emptied first."""
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        request.getfixturevalue("redis_client")  # flushed
        store: Store = RedisStore.from_url(url)
        yield "redis", url, "", store
    else:
        emulator: KVEmulator = request.getfixturevalue("kv_emulator")
        request.getfixturevalue("kv_redis")  # flushed
        store = VercelKVStore(emulator.url, KV_TEST_TOKEN, environ={})
        yield "vercel", emulator.url, KV_TEST_TOKEN, store
    store.close()


def _forget_in_child(
    shared: tuple[str, str, str, Store], secret: str, *, include: bool
) -> tuple[dict[str, Any], str]:
    kind, url, token, _ = shared
    done = subprocess.run(
        [sys.executable, "-c", _FORGET_CHILD, kind, url, token, secret, "1" if include else "0",
         SESSION],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_forget_many_in_a_process_with_another_secret_keeps_what_it_cannot_read(
    shared_store: tuple[str, str, str, Store],
) -> None:
    """forget_many('*') in a process with a wrong secret deletes nothing, warns per key, counts."""
    store = shared_store[3]
    app = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_APP]},
                              skip_legacy_purge=True)
    mem = app.accessor(Identity(session_id=SESSION, user_id="alice"))
    mem.set("draft", {"title": "Q3"})
    mem.set("notes", ["a", "b"])

    result, stderr = _forget_in_child(shared_store, SECRET_OTHER, include=False)
    assert result["listed"] == []  # it could not read them...
    assert result["deleted"] == 0  # ...so it deleted none of them
    assert result["stats"]["unreadable"] == 2  # two keys (each read twice: list, forget_many)
    per_key = [line for line in stderr.splitlines() if "is unreadable" in line]
    assert len(per_key) == 2, stderr
    assert "kept 2 unreadable entries" in stderr
    assert SESSION not in stderr  # the session id grants the session: never logged
    assert mem.list() == ["draft", "notes"]

    erased, stderr = _forget_in_child(shared_store, SECRET_OTHER, include=True)
    assert erased["deleted"] == 2
    assert "deleted 2 unreadable entries" in stderr
    assert SESSION not in stderr
    assert mem.list() == []
    app.close()


def test_forget_many_deletes_only_readable_entries_of_the_brand(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """Readable entries go, unreadable ones stay; brand with include_unreadable is refused."""
    ident = Identity(session_id="s-1")
    mine = make_plugin().accessor(ident)
    theirs = make_plugin(encryption={"secrets": [SECRET_OTHER]}).accessor(ident)
    mine.set("a", 1, brand="cache")
    mine.set("b", 2)
    theirs.set("c", 3, brand="cache")
    with pytest.raises(RememberInputError, match="include_unreadable"):
        mine.forget_many(pattern="*", brand="cache", include_unreadable=True)
    assert mine.forget_many(pattern="*", brand="cache") == 1
    assert store.get("remember:v2:session:s-1:c") is not None
    assert mine.forget_many(pattern="*") == 1  # b; c is kept
    assert theirs.list() == ["c"]
    assert mine.forget_many(pattern="*", include_unreadable=True) == 1
    assert theirs.list() == []


def test_forget_many_counts_only_live_entries(
    make_plugin: Callable[..., RememberPlugin], store: Store, clock: FakeClock
) -> None:
    """forget_many counts only live entries; an expired one still stored is deleted, not counted."""
    ident = Identity(session_id="s-1")
    mine = make_plugin().accessor(ident)
    theirs = make_plugin(encryption={"secrets": [SECRET_OTHER]}).accessor(ident)
    mine.set("d1", 1, ttl=60)  # expired below by the plugin's clock, still in the store
    clock.advance(s=61)
    mine.set("d2", 2)
    theirs.set("d3", 3)
    assert store.get("remember:v2:session:s-1:d1") is not None
    assert mine.forget_many(pattern="d*") == 1  # d2; d3 is kept
    assert store.get("remember:v2:session:s-1:d1") is None  # cleaned up all the same
    mine.set("d4", 4, ttl=60)
    clock.advance(s=61)
    assert mine.forget_many(pattern="d*", include_unreadable=True) == 1  # d3, not d4
    assert list(store.scan("remember:v2:session:s-1:*")) == []


def test_forget_many_in_raise_mode_deletes_nothing(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """on_decrypt_error='raise': an unreadable entry makes forget_many raise before any delete."""
    ident = Identity(session_id=SESSION)
    strict = make_plugin(on_decrypt_error="raise").accessor(ident)
    make_plugin(encryption={"secrets": [SECRET_OTHER]}).accessor(ident).set("theirs", 1)
    strict.set("mine", 2)
    with pytest.raises(RememberDecryptionError, match="deleted nothing") as info:
        strict.forget_many(pattern="*")
    assert SESSION not in str(info.value)
    assert strict.get("mine") == 2


def test_unreadable_counts_distinct_keys_not_reads(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """stats()['unreadable'] counts each unreadable key once, however often it is read."""
    ident = Identity(session_id="s-1")
    make_plugin(encryption={"secrets": [SECRET_OTHER]}).accessor(ident).set("k", 1)
    plugin = make_plugin()
    mem = plugin.accessor(ident)
    for _ in range(50):
        assert mem.get("k") is None
    assert mem.list() == []
    assert plugin.stats()["unreadable"] == 1


# -- rotate over 1.8.0's doubled-prefix layout ------------------------------------------------


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env=child_env(**env), stdin="")


#: The 1.8.0 Redis vectors that stay live (no deadline): written as 1.8.0 wrote them.
LIVE_VECTORS = [
    v for v in VECTORS
    if v["encrypted"] and v["keyPrefix"] == "remember:" and "expiresAt" not in v["plaintext"]
    and v["secret"] == VECTORS[0]["secret"]
    and not (v["scope"] == "user" and is_anonymous(v.get("resolvedUserId")))  # refused by us
]
OLD_SECRET = VECTORS[0]["secret"]


def _sealed_by_1_8_0(
    secret: str, ident: Identity, scope: str, key: str, value: Any
) -> tuple[str, str]:
    """The stored key and value of an entry sealed as 1.8.0 seals it: a ``frontmcp_compatible``
    writer's unbound reference envelope; set at ``"remember:" + key`` it is 1.8.0's doubled
    layout."""
    writer = RememberPlugin.init(
        store=MemoryStore(), skip_legacy_purge=True,
        encryption={"secrets": [secret], "frontmcp_compatible": True},
    )
    try:
        writer.accessor(ident).set(key, value, scope=scope)  # type: ignore[arg-type]
        skey = stored_key(writer, key, scope)
        sealed = writer.store.get(skey)
        assert sealed is not None and '"kid"' not in sealed and '"aad"' not in sealed
        return skey, sealed
    finally:
        writer.close()


def _seed_doubled(client: redis.Redis) -> dict[Identity, list[tuple[str, str, Any]]]:
    """Every live 1.8.0 vector under its doubled key, as 1.8.0 sent it; what the app should read."""
    wanted: dict[Identity, list[tuple[str, str, Any]]] = {}
    for v in LIVE_VECTORS:
        client.set(v["rawRedisKey"], v["rawStoredValue"])
        ident = vector_identity(v)
        if v["scope"] == "tool":  # 1.8.0 said "unknown" outside a flow
            ident = dataclasses.replace(ident, tool_name=vector_tool_name(v))
        wanted.setdefault(ident, []).append((v["scope"], v["key"], v["value"]))
    # And entries sealed the way 1.8.0 seals (unbound reference envelope, doubled key).
    ident = Identity(session_id=SESSION)
    for i in range(30):
        skey, sealed = _sealed_by_1_8_0(OLD_SECRET, ident, "session", f"note-{i}", {"n": i})
        client.set("remember:" + skey, sealed)
        wanted.setdefault(ident, []).append(("session", f"note-{i}", {"n": i}))
    return wanted


def _app_reads_everything(
    url: str, wanted: dict[Identity, list[tuple[str, str, Any]]], secrets: list[str]
) -> list[str]:
    """What the application (read_doubled_prefix=True) fails to read, by key."""
    store = RedisStore.from_url(url)
    app = RememberPlugin.init(store=store, encryption={"secrets": secrets},
                              read_doubled_prefix=True, skip_legacy_purge=True)
    missing = []
    for ident, items in wanted.items():
        mem = app.accessor(ident)
        listed = {scope: mem.list(scope=scope) for scope in {s for s, _, _ in items}}
        for scope, key, value in items:
            if mem.get(key, scope=scope, default="<missing>") != value or key not in listed[scope]:
                missing.append(f"{scope}:{key}")
    app.close()
    store.close()
    return missing


def test_rotate_walks_the_doubled_prefix_layout_so_the_old_secret_can_go(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """rotate --read-doubled-prefix moves 1.8.0 entries to the new secret; the old can go."""
    wanted = _seed_doubled(redis_client)
    total = sum(len(v) for v in wanted.values())
    assert len(LIVE_VECTORS) >= 8 and not _app_reads_everything(redis_url, wanted, [OLD_SECRET])
    secrets = {"REMEMBER_SECRET": SECRET_NEW, "REMEMBER_PREVIOUS_SECRETS": OLD_SECRET}

    # Without the flag the walk cannot know the application reads that layout: it says so.
    blind = _cli("rotate", "--redis-url", redis_url, "--json", cwd=tmp_path, **secrets)
    assert blind.returncode == 1, blind.stdout + blind.stderr
    assert json.loads(blind.stdout)["doubled_unread"] == total
    assert _app_reads_everything(redis_url, wanted, [SECRET_NEW])  # not yet safe

    done = _cli("rotate", "--redis-url", redis_url, "--read-doubled-prefix", "--json",
                cwd=tmp_path, **secrets)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["moved"] == total and report["unreadable"] == 0
    assert not redis_client.keys("remember:remember:*")  # every one moved, none left behind

    # The old secret is dropped: the application reads every entry.
    assert _app_reads_everything(redis_url, wanted, [SECRET_NEW]) == []
    again = _cli("rotate", "--redis-url", redis_url, "--read-doubled-prefix", "--json",
                 cwd=tmp_path, REMEMBER_SECRET=SECRET_NEW)
    assert again.returncode == 0 and json.loads(again.stdout)["rotated"] == 0


def test_rotate_leaves_a_shadowed_doubled_entry_and_an_unreadable_one(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A shadowed doubled entry is left alone; an unreadable one is reported (exit 1), untouched."""
    ident = Identity(user_id="alice")
    store = RedisStore.from_url(redis_url)
    app = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_NEW]},
                              read_doubled_prefix=True, skip_legacy_purge=True)
    app.accessor(ident).set("theme", "light", scope="user")
    single, old = _sealed_by_1_8_0(OLD_SECRET, ident, "user", "theme", "dark")
    redis_client.set("remember:" + single, old)
    lost, nobodys = _sealed_by_1_8_0("a-secret-nobody-has-0123456", ident, "user", "lost", "dark")
    redis_client.set("remember:" + lost, nobodys)
    done = _cli("rotate", "--redis-url", redis_url, "--read-doubled-prefix", "--json",
                cwd=tmp_path, REMEMBER_SECRET=SECRET_NEW, REMEMBER_PREVIOUS_SECRETS=OLD_SECRET)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["shadowed"] == 1 and report["unreadable"] == 1
    assert report["unreadable_keys"] == ["remember:" + lost]
    assert redis_client.exists("remember:" + single, "remember:" + lost) == 2  # both untouched
    assert app.accessor(ident).get("theme", scope="user") == "light"
    app.close()
    store.close()


def test_rotate_reseals_a_shadowed_doubled_copy_so_the_old_secret_can_go(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A doubled copy shadowed by its twin is re-sealed in place: after the twin goes and the
    old secret is dropped, the application still reads it (never an unreadable entry)."""
    ident = Identity(user_id="alice")
    single, old = _sealed_by_1_8_0(OLD_SECRET, ident, "user", "theme", "dark")
    redis_client.set("remember:" + single, old)
    store = RedisStore.from_url(redis_url)
    app = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_NEW, OLD_SECRET]},
                              read_doubled_prefix=True, skip_legacy_purge=True)
    app.accessor(ident).set("theme", "light", scope="user")  # the twin; the copy stays
    done = _cli("rotate", "--redis-url", redis_url, "--read-doubled-prefix", "--json",
                cwd=tmp_path, REMEMBER_SECRET=SECRET_NEW, REMEMBER_PREVIOUS_SECRETS=OLD_SECRET)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["shadowed"] == 1 and report["unreadable"] == 0
    app.close()
    # The old secret is dropped; then the twin is forgotten: the copy is what is read.
    app = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_NEW]},
                              read_doubled_prefix=True, skip_legacy_purge=True,
                              on_decrypt_error="raise")
    memory = app.accessor(ident)
    assert memory.get("theme", scope="user") == "light"
    redis_client.delete(single)
    assert memory.get("theme", scope="user") == "dark"  # readable, not lost
    assert app.stats()["unreadable"] == 0
    app.close()
    store.close()


def test_stats_export_doctor_walk_the_doubled_prefix_layout(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """stats, export, doctor read doubled-prefix entries with the flag and flag them without it."""
    wanted = _seed_doubled(redis_client)
    total = sum(len(v) for v in wanted.values())
    env = {"REMEMBER_SECRET": OLD_SECRET}
    url = ["--redis-url", redis_url]

    stats = _cli("stats", *url, "--read-doubled-prefix", "--json", cwd=tmp_path, **env)
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert data["entries"] == total and data["doubled"] == total and data["other"] == 0
    assert data["unbound"] == total  # 1.8.0 envelopes bind nothing
    blind = _cli("stats", *url, "--json", cwd=tmp_path, **env)
    assert blind.returncode == 1 and json.loads(blind.stdout)["doubled_unread"] == total

    exported = _cli("export", *url, "--read-doubled-prefix", cwd=tmp_path, **env)
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(records) == total
    assert all(r["storageKey"].startswith(("v2:", "global:")) for r in records)
    assert _cli("export", *url, cwd=tmp_path, **env).returncode == 1

    doctor = _cli("doctor", *url, "--read-doubled-prefix", "--json", cwd=tmp_path, **env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["entries"]["entries"] == total and checks["entries"]["status"] != "attention"
    assert checks["unbound"]["unbound"] == total
    blind_doctor = _cli("doctor", *url, "--json", cwd=tmp_path, **env)
    assert blind_doctor.returncode == 1
    checks = {c["name"]: c for c in json.loads(blind_doctor.stdout)["checks"]}
    assert checks["doubled"]["status"] == "attention"
    assert checks["doubled"]["doubled_unread"] == total


# -- CLI exit codes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["list", "--scope", "user", "--user", "alice"],
        ["get", "alien", "--scope", "user", "--user", "alice"],
        ["stats"],
        ["export"],
        ["doctor"],
    ],
    ids=lambda c: c[0],
)
def test_cli_exit_codes_match_the_docs(
    command: list[str], redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """list/get/stats/export/doctor exit 0 on a readable store, 1 once an entry cannot be read."""
    store = RedisStore.from_url(redis_url)
    ident = Identity(user_id="alice")
    app = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_APP]},
                              skip_legacy_purge=True)
    app.accessor(ident).set("alien", "mine", scope="user")
    app.accessor(ident).set("theme", "dark", scope="user")
    # The layout marker a running application writes (doctor wants to see one).
    redis_client.set("remember:__layout__", '{"version":2,"firstSeenAt":1700000000000}')
    run = _cli(*command, "--redis-url", redis_url, cwd=tmp_path, REMEMBER_SECRET=SECRET_APP)
    assert run.returncode == 0, run.stdout + run.stderr
    other = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_OTHER]},
                                skip_legacy_purge=True)
    other.accessor(ident).set("alien", "theirs", scope="user")  # now unreadable with the app's
    run = _cli(*command, "--redis-url", redis_url, cwd=tmp_path, REMEMBER_SECRET=SECRET_APP)
    assert run.returncode == 1, run.stdout + run.stderr
    if command[0] == "list":
        assert run.stdout == "theme\n" and "1 entries" in run.stderr
    app.close()
    other.close()
    store.close()


# -- unbound envelopes swapped by someone with write access --------------------------------


def test_a_swapped_unbound_envelope_is_refused_with_accept_unbound_false() -> None:
    """An unbound envelope copied over another key opens with accept_unbound=True, never False."""
    store = MemoryStore()
    ident = Identity(user_id="alice")
    legacy = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_APP],
                                 "frontmcp_compatible": True}, skip_legacy_purge=True)
    legacy.accessor(ident).set("limit", 10, scope="user")
    legacy.accessor(ident).set("role", "reader", scope="user")
    head = "remember:v2:user:alice:"
    store.set(head + "role", store.get(head + "limit") or "")  # the attacker's copy

    lenient = RememberPlugin.init(store=store, encryption={"secrets": [SECRET_APP]},
                                  skip_legacy_purge=True)
    assert lenient.accessor(ident).get("role", scope="user") == 10  # documented compatibility
    strict = RememberPlugin.init(store=store, skip_legacy_purge=True,
                                 encryption={"secrets": [SECRET_APP], "accept_unbound": False})
    mem = strict.accessor(ident)
    assert mem.get("role", scope="user", default="refused") == "refused"
    assert mem.entries(scope="user") == {}  # the batched read path refuses them too
    assert strict.stats()["unreadable"] == 2
    mem.set("fresh", 1, scope="user")  # bound envelopes still open
    assert mem.get("fresh", scope="user") == 1
    with pytest.raises(RememberConfigurationError, match="accept_unbound"):
        RememberPlugin.init(store=store, skip_legacy_purge=True, encryption={
            "secrets": [SECRET_APP], "accept_unbound": False, "frontmcp_compatible": True})
    for p in (legacy, lenient, strict):
        p.close()


def test_the_1_8_0_vectors_open_by_default_and_are_refused_when_locked_down() -> None:
    """Every encrypted 1.8.0 vector decrypts with the default; accept_unbound=False refuses each."""
    for v in VECTORS:
        if not v["encrypted"] or (v["scope"] == "user" and is_anonymous(v.get("resolvedUserId"))):
            continue  # plaintext has no envelope; anonymous user scope is refused by us
        for accept in (True, False):
            store = MemoryStore()
            store.set(v["storageKey"], v["rawStoredValue"])
            plugin = RememberPlugin.init(
                store=store, key_prefix=v["keyPrefix"], skip_legacy_purge=True,
                encryption={"secrets": [v["secret"]], "accept_unbound": accept},
                on_decrypt_error="raise", clock=lambda: 0,  # before every vector's deadline
            )
            scope = v["scope"]
            ident = vector_identity(v)
            if scope == "tool":
                ident = dataclasses.replace(ident, tool_name=vector_tool_name(v))
            mem = plugin.accessor(ident)
            if accept:
                entry = mem.get_entry(v["key"], scope=scope)
                assert entry is not None and entry.value == v["value"], v["name"]
            else:
                with pytest.raises(RememberDecryptionError, match="accept_unbound"):
                    mem.get_entry(v["key"], scope=scope)
            plugin.close()


def test_lock_down_recipe_rotate_doctor_then_refuse_unbound(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Recipe: doctor counts unbound, rotate binds them, then accept_unbound=False reads all."""
    store = RedisStore.from_url(redis_url)
    ident = Identity(user_id="alice")
    legacy = RememberPlugin.init(store=store, skip_legacy_purge=True, encryption={
        "secrets": [SECRET_APP], "frontmcp_compatible": True})
    for i in range(12):
        legacy.accessor(ident).set(f"k{i}", i, scope="user")
    env = {"REMEMBER_SECRET": SECRET_APP}
    url = ["--redis-url", redis_url]

    def unbound() -> int:
        doctor = _cli("doctor", *url, "--json", cwd=tmp_path, **env)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        return int(checks["unbound"]["unbound"])

    assert unbound() == 12
    done = _cli("rotate", *url, "--json", cwd=tmp_path, **env)
    assert done.returncode == 0 and json.loads(done.stdout)["rotated"] == 12
    assert unbound() == 0
    strict = RememberPlugin.init(store=store, skip_legacy_purge=True, encryption={
        "secrets": [SECRET_APP], "accept_unbound": False})
    assert strict.accessor(ident).entries(scope="user").keys() == {f"k{i}" for i in range(12)}
    assert strict.stats()["unreadable"] == 0
    legacy.close()
    strict.close()
    store.close()
