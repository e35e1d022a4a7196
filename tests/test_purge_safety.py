"""The legacy purge deletes only what it owns, and a wrong secret is reported loudly.

Issue 17, item 5 and the last sentence of "Secrets": the purge decides by the
key's name *and value* (a legacy entry of this plugin, never a hash, set, list,
foreign string or a nested deployment's entry), refuses a ``key_prefix`` that
lies inside another deployment's layout, and a plugin whose secret is not the
one the store's data was written with logs one ERROR and fails ``doctor``.
These run on real servers: the standalone Redis, the 3-node Cluster and the
Vercel KV emulator over redis-server.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import RememberPlugin
from remember_sync._crypto import key_id, seal
from remember_sync._purge import (
    KeyIdCheck,
    LegacyPurge,
    check_key_id,
    is_legacy_value,
    key_id_key,
    nested_key,
    nested_prefix,
    read_key_id,
    sweep_legacy,
)
from remember_sync.errors import RememberConfigurationError
from remember_sync.identity import identity
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.types import Identity
from tests.conftest import FakeClock

P = "remember:"
LOGGER = "remember_sync"
SECRET_A = "fleet-secret-A-0123456789abcdef0123456789"
SECRET_B = "other-secret-B-0123456789abcdef0123456789"
DAY = 86_400_000
TIMEOUT = 60

#: A legacy entry as the reference wrote it (its envelope: no kid, no aad).
LEGACY_VALUE = seal(b'{"value":"old","createdAt":1,"updatedAt":1}', bytes(32))
#: A legacy entry of a deployment with encryption disabled.
LEGACY_PLAIN = '{"value":{"x":1},"createdAt":1796217901332,"updatedAt":1796217901332}'
#: True legacy entries of the default deployment: the only keys a purge of P may delete.
LEGACY = {
    f"{P}session:old-sess:k": LEGACY_VALUE,
    f"{P}tool:search:old-sess:cache": LEGACY_VALUE,
    f"{P}user:bob:theme": LEGACY_PLAIN,
}
#: Another application's strings under the legacy patterns.
FOREIGN_STRINGS = {
    f"{P}session:x": "hello",
    f"{P}session:cart:items": '{"items":[1,2]}',
    f"{P}tool:x:y": '{"alg":"A256GCM","iv":"x","tag":"y","data":"z"}',  # not base64 of 12/16 B
    f"{P}user:carol:n": "42",
}

# Raw clients per store kind (each fixture flushes its database).
RAW = {"redis": "redis_client", "redis_cluster": "redis_cluster_client", "vercel_kv": "kv_redis"}


@pytest.fixture(params=sorted(RAW))
def shared(request: pytest.FixtureRequest) -> tuple[Store, Any]:
    """A store of each real kind and a raw client on the same (flushed) database."""
    raw = request.getfixturevalue(RAW[request.param])
    store: Store = request.getfixturevalue(f"{request.param}_store")
    return store, raw


def _foreign_types(raw: Any) -> dict[str, bytes]:
    """Another application's non-string keys under the legacy patterns; key -> TYPE."""
    raw.hset(f"{P}session:h", mapping={"value": "1", "createdAt": "1"})
    raw.sadd(f"{P}session:s", "a", "b")
    raw.rpush(f"{P}session:l", LEGACY_VALUE)  # even holding an envelope
    raw.zadd(f"{P}user:z", {"m": 1.0})
    raw.xadd(f"{P}tool:stream", {"f": "v"})
    return {
        f"{P}session:h": b"hash",
        f"{P}session:s": b"set",
        f"{P}session:l": b"list",
        f"{P}user:z": b"zset",
        f"{P}tool:stream": b"stream",
    }


def _types(raw: Any, keys: dict[str, bytes]) -> dict[str, bytes]:
    return {k: raw.type(k) for k in keys}


@contextmanager
def _plugin(store: Store, prefix: str, **options: Any) -> Iterator[RememberPlugin]:
    options.setdefault("encryption", {"secrets": [SECRET_A]})
    options.setdefault("skip_legacy_purge", True)
    plugin = RememberPlugin.init(store=store, key_prefix=prefix, **options)
    if plugin.index_backfill is not None:
        assert plugin.index_backfill.wait(30)  # its bookkeeping keys land before any snapshot
    try:
        yield plugin
    finally:
        plugin.close()


def _write_all_scopes(plugin: RememberPlugin, tag: str) -> None:
    with identity(session_id="s1", user_id="alice", tool_name="search"):
        for scope in ("session", "user", "tool", "global"):
            plugin.remember.set(f"k-{tag}", {"tag": tag, "scope": scope}, scope=scope)
    with identity(session_id="session", user_id="session", tool_name="session"):
        # Identities named like a scope: their keys look most like legacy ones.
        for scope in ("session", "user", "tool"):
            plugin.remember.set(f"v2:{tag}", tag, scope=scope)


def _read_all_scopes(plugin: RememberPlugin, tag: str) -> list[Any]:
    out: list[Any] = []
    with identity(session_id="s1", user_id="alice", tool_name="search"):
        out += [plugin.remember.get(f"k-{tag}", scope=s) for s in ("session", "user", "tool")]
        out.append(plugin.remember.get(f"k-{tag}", scope="global"))
    with identity(session_id="session", user_id="session", tool_name="session"):
        out += [plugin.remember.get(f"v2:{tag}", scope=s) for s in ("session", "user", "tool")]
    return out


def _expected(tag: str) -> list[Any]:
    scopes = ("session", "user", "tool", "global")
    return [{"tag": tag, "scope": s} for s in scopes] + [tag] * 3


def _snapshot(raw: Any) -> dict[bytes, Any]:
    """Every key with its type and string value (or TYPE only), for before/after equality."""
    keys = raw.keys("*") if not hasattr(raw, "get_nodes") else raw.keys(target_nodes="primaries")
    out: dict[bytes, Any] = {}
    for key in keys:
        kind = raw.type(key)
        out[key] = (kind, raw.get(key) if kind == b"string" else None)
    return out


# -- what counts as a legacy entry -----------------------------------------------------------


def test_is_legacy_value_accepts_only_the_references_entries() -> None:
    """Reference envelopes and plaintext entries are legacy; kid envelopes and other text not."""
    ours = seal(b'{"value":1,"createdAt":1,"updatedAt":1}', bytes(32), kid="abcdefgh", aad=b"k")
    assert is_legacy_value(LEGACY_VALUE) and is_legacy_value(LEGACY_PLAIN)
    assert is_legacy_value(json.dumps(json.loads(LEGACY_VALUE), indent=1))  # any JSON spacing
    assert not is_legacy_value(ours)
    for text in [*FOREIGN_STRINGS.values(), "", "null", "[]", '{"value":1}', '{"alg":"A256GCM"}']:
        assert not is_legacy_value(text), text


@pytest.mark.parametrize(
    ("prefix", "segment"),
    [
        ("remember:v2:", "v2"), ("remember:user:", "user"), ("remember:session:", "session"),
        ("remember:tool:", "tool"), ("remember:global:", "global"), ("v2:", "v2"),
        ("app:v2:user:alice:", "v2"), ("remember:", None), ("remember:v2", None),
        ("myappv2:", None), ("a[1]*:", None), ("users:", None),
    ],
)
def test_nested_prefix_names_the_segment_inside_another_layout(
    prefix: str, segment: str | None
) -> None:
    """A whole v2/global/session/tool/user segment puts a prefix inside another's layout."""
    assert nested_prefix(prefix) == segment


def test_nested_key_recognises_a_nested_deployments_keys() -> None:
    """Keys of a deployment nested at P+'session:' are not legacy; legacy shapes are."""
    for rest in ["v2:user:alice:k", "v2:session:s:k", "global:flag", "__layout__",
                 "__keyid__", "app:v2:tool:t:s:k", "app:__layout__",
                 # a nested prefix without a trailing colon: remember:session:compat
                 "compatv2:user:bob:profile", "compatv2:session:s1:k", "compatglobal:g",
                 "compat__layout__", "compat__keyid__", "compat__revoked__:abc"]:
        assert nested_key(rest), rest
    for rest in ["s1:theme", "search:s1:cache", "alice:pref", "a:b/c d?:x", "x"]:
        assert not nested_key(rest), rest


# -- the sweep on real servers --------------------------------------------------------------


def test_a_nested_prefix_without_a_trailing_colon_keeps_its_unbound_and_plain_entries() -> None:
    """remember:session:compat (1.8.0 envelopes) and :plain (no encryption) survive the sweep."""
    store = MemoryStore()
    for name, encryption in (
        ("compat", {"secrets": ["b" * 32], "frontmcp_compatible": True}),
        ("plain", {"enabled": False}),
    ):
        nested = RememberPlugin.init(store=store, key_prefix=f"remember:session:{name}",
                                     encryption=encryption, skip_legacy_purge=True)
        nested.accessor(Identity(session_id="s1", user_id="bob")).set("p", "bob", scope="user")
        nested.accessor(Identity(session_id="s1")).set("g", "shared", scope="global")
        nested.close()
    before = sorted(store.scan("*"))
    assert len(before) == 4
    result = sweep_legacy(store, "remember:")
    assert result.deleted == 0
    assert sorted(store.scan("*")) == before


def test_default_purge_keeps_nested_deployments_foreign_types_and_strings(
    shared: tuple[Store, Any],
) -> None:
    """Purging P deletes only its legacy entries: v2 data, nested deployments, hashes... stay."""
    store, raw = shared
    with (
        _plugin(store, P) as default,
        _plugin(store, f"{P}session:", encryption={"frontmcp_compatible": True,
                                                   "secrets": [SECRET_A]}) as nested,
        _plugin(store, f"{P}user:", encryption={"enabled": False}) as plain,
    ):
        _write_all_scopes(default, "default")
        _write_all_scopes(nested, "nested")
        _write_all_scopes(plain, "plain")
        types = _foreign_types(raw)
        for key, value in {**LEGACY, **FOREIGN_STRINGS}.items():
            raw.set(key, value)
        before = _snapshot(raw)

        dry = sweep_legacy(store, P, dry_run=True)
        assert (dry.found, dry.deleted) == (len(LEGACY), 0)
        assert _snapshot(raw) == before

        result = sweep_legacy(store, P, batch=4)
        assert (result.found, result.deleted, result.ok) == (len(LEGACY), len(LEGACY), True)
        assert result.kept > len(types) + len(FOREIGN_STRINGS)  # + the nested deployments'
        after = _snapshot(raw)
        assert set(before) - set(after) == {k.encode() for k in LEGACY}
        assert after == {k: v for k, v in before.items() if k.decode() not in LEGACY}
        assert _types(raw, types) == types
        assert _read_all_scopes(default, "default") == _expected("default")
        assert _read_all_scopes(nested, "nested") == _expected("nested")
        assert _read_all_scopes(plain, "plain") == _expected("plain")


@pytest.mark.parametrize("prefix", ["remember:v2:", "remember:user:", "remember:session:"])
def test_a_nested_prefix_purge_stands_down_and_deletes_nothing(
    redis_client: redis.Redis, redis_url: str, redis_store: Store, prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A deployment at remember:v2:/user:/session: never sweeps the default deployment's keys."""
    # frontmcp_compatible: the default deployment's entries are reference envelopes, which
    # a value check alone could not tell from legacy ones.
    compatible = {"frontmcp_compatible": True, "secrets": [SECRET_A]}
    with _plugin(redis_store, P, encryption=compatible) as default:
        _write_all_scopes(default, "default")
        for key, value in LEGACY.items():  # the default's own legacy: not this prefix's to take
            redis_client.set(key, value)
        redis_client.set(f"{P}user:session:k", LEGACY_VALUE)
        redis_client.set(f"{P}session:session:k", LEGACY_PLAIN)
        before = _snapshot(redis_client)

        with pytest.raises(RememberConfigurationError, match=repr(prefix)):
            sweep_legacy(redis_store, prefix)
        caplog.set_level(logging.DEBUG, logger=LOGGER)
        other = RememberPlugin.init(
            type="redis", config={"url": redis_url}, key_prefix=prefix,
            legacy_purge_delay_ms=0, encryption={"secrets": [SECRET_A]},
        )
        try:
            assert other.legacy_purge.state == "stood-down"
            assert other.key_id_check is not None and other.key_id_check.wait(10)
        finally:
            other.close()
        warnings = [r.getMessage() for r in caplog.records
                    if r.name == LOGGER and r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert repr(prefix) in warnings[0] and "skip_legacy_purge" in warnings[0]
        assert _snapshot(redis_client) == before
        assert _read_all_scopes(default, "default") == _expected("default")


def test_plugin_purge_on_redis_deletes_only_legacy_entries(
    redis_client: redis.Redis, redis_url: str, redis_store: Store
) -> None:
    """The background purge of a real plugin (window 0) follows the same rule as sweep_legacy."""
    store = redis_store
    with _plugin(store, f"{P}session:", encryption={"enabled": False}) as nested:
        _write_all_scopes(nested, "nested")
        types = _foreign_types(redis_client)
        for key, value in {**LEGACY, **FOREIGN_STRINGS}.items():
            redis_client.set(key, value)
        before = _snapshot(redis_client)
        plugin = RememberPlugin.init(
            type="redis", config={"url": redis_url}, legacy_purge_delay_ms=0,
            encryption={"secrets": [SECRET_A]},
        )
        try:
            assert plugin.legacy_purge.wait(30) and plugin.legacy_purge.state == "swept"
            assert plugin.legacy_purge.last_result is not None
            assert plugin.legacy_purge.last_result.deleted == len(LEGACY)
            assert plugin.index_backfill.wait(30) and plugin.index_backfill.state == "indexed"
        finally:
            plugin.close()
        after = _snapshot(redis_client)
        # The layout marker, the key id and the record of the one-time background reindex.
        bookkeeping = {f"{P}__layout__".encode(), f"{P}__keyid__".encode()}
        bookkeeping.add(f"{P}__indexed__".encode())
        assert set(after) - set(before) == bookkeeping
        assert {k: v for k, v in after.items() if k not in bookkeeping} == {
            k: v for k, v in before.items() if k.decode() not in LEGACY
        }
        assert _types(redis_client, types) == types
        assert _read_all_scopes(nested, "nested") == _expected("nested")


# -- the CLI ------------------------------------------------------------------------------------


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REMEMBER_", "MCP_", "KV_REST_")) and k != "REDIS_URL"}
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra)
    return env


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remember_sync", *args], cwd=tmp_path, env=_child_env(**env),
        capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )


def test_cli_purge_legacy_deletes_only_legacy_entries(
    redis_client: redis.Redis, redis_url: str, redis_store: Store, tmp_path: Path
) -> None:
    """`purge-legacy --yes` keeps hashes, sets, lists, foreign strings and nested deployments."""
    store = redis_store
    with _plugin(store, f"{P}user:", encryption={"enabled": False}) as nested:
        _write_all_scopes(nested, "nested")
    types = _foreign_types(redis_client)
    for key, value in {**LEGACY, **FOREIGN_STRINGS}.items():
        redis_client.set(key, value)
    before = _snapshot(redis_client)
    dry = _cli(tmp_path, "purge-legacy", "--redis-url", redis_url, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    counted = json.loads(dry.stdout)
    assert (counted["found"], counted["deleted"]) == (len(LEGACY), 0)
    assert counted["kept"] >= len(types) + len(FOREIGN_STRINGS)
    done = _cli(tmp_path, "purge-legacy", "--redis-url", redis_url, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(LEGACY)} of {len(LEGACY)} legacy" in done.stdout
    assert _snapshot(redis_client) == {
        k: v for k, v in before.items() if k.decode() not in LEGACY
    }
    # doctor counts what the purge would delete, so it no longer asks to run it.
    doctor = _cli(tmp_path, "doctor", "--redis-url", redis_url, "--json",
                  "--legacy-purge-delay-ms", "0", REMEMBER_SECRET=SECRET_A)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["legacy"]["status"] == "ok" and checks["legacy"]["legacy"] == 0
    assert checks["legacy"]["kept"] == counted["kept"]


def test_cli_purge_legacy_refuses_a_nested_prefix(
    redis_client: redis.Redis, redis_url: str, redis_store: Store, tmp_path: Path
) -> None:
    """`purge-legacy --prefix remember:v2:` is a usage error and deletes nothing."""
    compatible = {"frontmcp_compatible": True, "secrets": [SECRET_A]}
    with _plugin(redis_store, P, encryption=compatible) as default:
        _write_all_scopes(default, "default")
    before = _snapshot(redis_client)
    result = _cli(tmp_path, "purge-legacy", "--redis-url", redis_url, "--prefix", "remember:v2:",
                  "--yes")
    assert result.returncode == 2
    assert "argument --prefix" in result.stderr and "'remember:v2:'" in result.stderr
    assert _snapshot(redis_client) == before


# -- the key id record: a secret that does not match the store's ----------------------------


_INSTANCE = r"""
import json, logging, sys
from remember_sync import RememberPlugin
from remember_sync.identity import identity
logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                    format="%(levelname)s %(name)s %(message)s")
url, skip, secrets = sys.argv[1], sys.argv[2] == "1", json.loads(sys.argv[3])
plugin = RememberPlugin.init(type="redis", config={"url": url}, skip_legacy_purge=skip,
                             encryption={"secrets": secrets})
with identity(user_id="alice"):
    plugin.remember.set("theme", "dark", scope="user")
waiter = plugin.key_id_check if skip else plugin.legacy_purge
assert waiter.wait(30), "the key id check did not run"
plugin.close()
print("done")
"""


def _instance(redis_url: str, secrets: list[str], *, skip: bool = False) -> str:
    """Run one application instance in a child process; return its stderr (its log)."""
    proc = subprocess.run(
        [sys.executable, "-c", _INSTANCE, redis_url, "1" if skip else "0", json.dumps(secrets)],
        env=_child_env(), capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    return proc.stderr


def _errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("ERROR")]


def test_a_second_process_with_another_secret_logs_one_error_and_doctor_fails(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """Secret B on a store written with secret A: one ERROR naming both kids; doctor exits 1."""
    first = _instance(redis_url, [SECRET_A])
    assert _errors(first) == []
    record = json.loads(redis_client.get(key_id_key(P)) or b"null")
    assert record["kid"] == key_id(SECRET_A)
    assert redis_client.pttl(key_id_key(P)) == -1

    log = _instance(redis_url, [SECRET_B])
    errors = _errors(log)
    assert len(errors) == 1, log
    assert key_id(SECRET_A) in errors[0] and key_id(SECRET_B) in errors[0]
    assert "does not match" in errors[0]
    assert SECRET_A not in log and SECRET_B not in log
    assert json.loads(redis_client.get(key_id_key(P)) or b"null") == record  # never overwritten

    # skip_legacy_purge runs the same check, read-only.
    skipped = _instance(redis_url, [SECRET_B], skip=True)
    assert len(_errors(skipped)) == 1 and key_id(SECRET_A) in _errors(skipped)[0]

    doctor = _cli(tmp_path, "doctor", "--redis-url", redis_url, REMEMBER_SECRET=SECRET_B)
    assert doctor.returncode == 1
    assert "[attention] key-id" in doctor.stdout and key_id(SECRET_A) in doctor.stdout
    assert SECRET_A not in doctor.stdout + doctor.stderr


def test_the_old_secret_in_the_rotation_list_is_no_mismatch(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """secrets=[B, A] on a store written with A logs no error and doctor's key id check is ok."""
    _instance(redis_url, [SECRET_A])
    for skip in (False, True):
        log = _instance(redis_url, [SECRET_B, SECRET_A], skip=skip)
        assert _errors(log) == [], log
    doctor = _cli(tmp_path, "doctor", "--redis-url", redis_url, "--json",
                  REMEMBER_SECRET=SECRET_B, REMEMBER_PREVIOUS_SECRETS=SECRET_A)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["key-id"]["status"] == "ok", checks["key-id"]
    assert checks["key-id"]["recorded_kid"] == key_id(SECRET_A)


def test_a_complete_rotate_records_the_new_key_id_so_the_old_secret_can_go(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """rotate (B, A) re-records B; then B alone logs no mismatch; dry or incomplete runs do not."""
    _instance(redis_url, [SECRET_A])
    rotating = {"REMEMBER_SECRET": SECRET_B, "REMEMBER_PREVIOUS_SECRETS": SECRET_A}
    dry = _cli(tmp_path, "rotate", "--redis-url", redis_url, "--dry-run", **rotating)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(redis_client.get(key_id_key(P)) or b"null")["kid"] == key_id(SECRET_A)

    # An entry no secret of ours opens makes the run incomplete: the record stays.
    redis_client.set(f"{P}v2:user:carol:x", seal(b'{"value":1,"createdAt":1,"updatedAt":1}',
                                                 b"\x00" * 32))
    blocked = _cli(tmp_path, "rotate", "--redis-url", redis_url, **rotating)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert json.loads(redis_client.get(key_id_key(P)) or b"null")["kid"] == key_id(SECRET_A)

    redis_client.delete(f"{P}v2:user:carol:x")
    done = _cli(tmp_path, "rotate", "--redis-url", redis_url, "--json", **rotating)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["key_id_recorded"] is True
    assert json.loads(redis_client.get(key_id_key(P)) or b"null")["kid"] == key_id(SECRET_B)
    assert redis_client.pttl(key_id_key(P)) == -1
    for skip in (False, True):
        assert _errors(_instance(redis_url, [SECRET_B], skip=skip)) == []
    # The old secret alone is now the mismatch.
    assert len(_errors(_instance(redis_url, [SECRET_A], skip=True))) == 1


def test_doctor_flags_an_unreadable_key_id_record(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """A key id record that is not {"kid": ...} needs attention; the purge never rewrites it."""
    redis_client.set(key_id_key(P), "not json")
    doctor = _cli(tmp_path, "doctor", "--redis-url", redis_url, REMEMBER_SECRET=SECRET_A)
    assert doctor.returncode == 1 and "[attention] key-id" in doctor.stdout
    assert _errors(_instance(redis_url, [SECRET_B])) == []  # unknown is not evidence
    assert redis_client.get(key_id_key(P)) == b"not json"


def test_mismatch_is_logged_once_per_plugin_across_rearmed_wakes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker checks the key id on its first step only: waking again logs nothing more."""
    store = MemoryStore()
    clock = FakeClock()
    check_key_id(store, P, [key_id(SECRET_A)], record=True, now_ms=clock())
    timers: list[Any] = []

    class Timer:
        daemon = False

        def __init__(self, seconds: float, function: Any) -> None:
            self.function = function
            timers.append(self)

        def start(self) -> None:
            pass

        def cancel(self) -> None:
            pass

    caplog.set_level(logging.DEBUG, logger=LOGGER)
    purge = LegacyPurge(store, P, delay_ms=DAY, clock=clock, timer_factory=Timer,
                        kids=[key_id(SECRET_B)]).start()
    for _ in range(3):
        timers[-1].function()
        clock.advance(ms=7 * 3_600_000)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(timers) == 4 and len(errors) == 1
    assert purge.key_status is not None and not purge.key_status.matches
    purge.stop()


def test_encryption_disabled_has_no_key_id_check() -> None:
    """A plaintext plugin neither records nor reads a key id."""
    store = MemoryStore()
    with _plugin(store, P, encryption={"enabled": False}, skip_legacy_purge=False,
                 legacy_purge_delay_ms=0) as plugin:
        assert plugin.legacy_purge.wait(10) and plugin.legacy_purge.state == "swept"
        assert plugin.legacy_purge.key_status is None and plugin.key_id_check is None
    assert read_key_id(store, P) is None
    with _plugin(store, P, encryption={"enabled": False}) as skipped:
        assert skipped.key_id_check is None


def test_key_id_check_is_read_only() -> None:
    """KeyIdCheck (the skip_legacy_purge path) reads the record and never writes one."""
    store = MemoryStore()
    check = KeyIdCheck(store, P, [key_id(SECRET_A)], clock=FakeClock()).start()
    assert check.wait(10) and check.status is not None and check.status.recorded is None
    assert read_key_id(store, P) is None
    store.close()
