"""Crypto-shredding: ``encryption={"subject_keys": True}`` with a ``keystore=``.

A copy of the whole database taken before ``erase`` and restored after it must
yield no readable entry of the erased person, while everyone else's read back.
Real components: every store kind of the matrix (the Redis ones copied by
``DUMP``/``RESTORE`` of every key of the underlying Redis), a keystore in a
file and in a second store, a second redis-server that is stopped.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from remember_sync import ErasureReceipt, Identity, RememberPlugin
from remember_sync._clock import FakeClock
from remember_sync._crypto import open_sealed, parse_envelope, seal
from remember_sync._keys import parse_storage_key
from remember_sync._ops.rotate import rotate
from remember_sync._shred import RECHECK_MS
from remember_sync.errors import (
    RememberConfigurationError,
    RememberDecryptionError,
    RememberStoreError,
)
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.redis_server import RedisServer
from tests.conftest import TEST_SECRET
from tests.test_erasure import ALICE_SESSIONS as SESSIONS
from tests.test_erasure import _is_alice

OLD_SECRET = "old-secret-0123456789abcdef0123456789"


def _populate(plugin: RememberPlugin) -> dict[str, Any]:
    """Alice (user scope, three sessions she owns, tool scope, stateless) and Bob; a global
    entry and an anonymous session.  Returns what Bob and the others wrote, by storage key."""
    for session in SESSIONS:
        mem = plugin.accessor(Identity(session, "alice", "notes"))
        mem.set("theme", f"alice-{session}")
        mem.set("draft", {"text": f"alice-tool-{session}"}, scope="tool")
        mem.increment("visits")
    alice = plugin.accessor(Identity(None, "alice", "notes"))
    alice.set("name", "Alice A.", scope="user")
    alice.set("stateless", "alice-stateless")
    for session in ("sb-1", "sb-2"):
        mem = plugin.accessor(Identity(session, "bob", "notes"))
        mem.set("theme", f"bob-{session}")
        mem.set("draft", "bob-tool", scope="tool")
    plugin.accessor(Identity(None, "bob")).set("name", "Bob B.", scope="user")
    plugin.accessor(Identity()).set("motd", "hello", scope="global")
    plugin.accessor(Identity("anon-session")).set("k", "anonymous")
    return {k: v for k, v in _entries(plugin).items() if not _is_alice(plugin, k)}


def _entries(plugin: RememberPlugin) -> dict[str, Any]:
    """Every entry under the prefix: its value, or the decryption error (a raw decrypt)."""
    core = plugin._core
    out: dict[str, Any] = {}
    for key in plugin.store.scan(plugin.key_prefix + "*"):
        parsed = parse_storage_key(plugin.key_prefix, key)
        if parsed is None:
            continue
        raw = plugin.store.get(key)
        if raw is None:
            continue
        try:
            out[key] = core.codec.decode(raw, parsed.namespace, key).value
        except RememberDecryptionError as exc:
            out[key] = exc
    return out


# -- copying the whole database ------------------------------------------------------------


def _raw_client(store_kind: str, request: pytest.FixtureRequest) -> Any:
    """The Redis under the store (None for the memory store)."""
    name = {"redis": "redis_client", "redis_cluster": "redis_cluster_client",
            "vercel_kv": "kv_redis"}.get(store_kind)
    return None if name is None else request.getfixturevalue(name)


def _backup(store: Store, client: Any) -> dict[Any, Any]:
    """DUMP of every key of the underlying Redis; the memory store's every key and value."""
    if client is None:
        keys = list(store.scan("*"))
        return dict(zip(keys, store.get_many(keys), strict=True))
    return {key: client.dump(key) for key in client.scan_iter("*")}


def _restore(store: Store, client: Any, copy: dict[Any, Any]) -> None:
    """RESTORE ... REPLACE every key of *copy* (the memory store: set every key)."""
    for key, value in copy.items():
        if value is None:
            continue
        if client is None:
            store.set(key, value)
        else:
            client.restore(key, 0, value, replace=True)


@pytest.fixture(params=["file", "second-store"])
def keystore(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A keystore apart from the data: an SQLite file, or a second (memory) store."""
    if request.param == "file":
        yield str(tmp_path / "keys.sqlite")
        return
    second = MemoryStore()
    yield second
    second.close()


def _shredding(make_plugin: Callable[..., RememberPlugin], keystore: object,
               **options: Any) -> RememberPlugin:
    encryption = options.pop("encryption", {})
    return make_plugin(encryption={"subject_keys": True, **encryption}, keystore=keystore,
                       **options)


def _assert_alice_gone(
    plugin: RememberPlugin, bob: dict[str, Any], make_plugin: Callable[..., RememberPlugin],
    keystore: object,
) -> None:
    """Through accessor reads and a raw decrypt of every key: nothing of Alice opens;
    every other entry reads back intact.  A strict reader is told why."""
    entries = _entries(plugin)
    alice = {k: v for k, v in entries.items() if _is_alice(plugin, k)}
    assert alice, "the restored copy holds Alice's entries"
    for key, value in alice.items():
        assert isinstance(value, RememberDecryptionError), key
        assert "subject key" in value.message
    assert {k: v for k, v in entries.items() if not _is_alice(plugin, k)} == bob
    for session in SESSIONS:
        mem = plugin.accessor(Identity(session, "alice", "notes"))
        assert mem.get("theme") is None
        assert mem.get("draft", scope="tool") is None
    raising = _shredding(make_plugin, keystore, on_decrypt_error="raise")
    for session in SESSIONS:
        with pytest.raises(RememberDecryptionError, match="subject key was erased"):
            raising.accessor(Identity(session, "alice")).get("theme")
    assert plugin.accessor(Identity(None, "alice")).get("name", scope="user") is None
    assert plugin.accessor(Identity(None, "alice")).get("stateless") is None
    assert plugin.accessor(Identity("sb-1", "bob")).get("theme") == "bob-sb-1"
    assert plugin.accessor(Identity(None, "bob")).get("name", scope="user") == "Bob B."


def test_a_backup_restored_after_erase_yields_nothing_of_the_person(
    make_plugin: Callable[..., RememberPlugin],
    store: Store,
    store_kind: str,
    keystore: object,
    request: pytest.FixtureRequest,
) -> None:
    """DUMP every key, erase Alice, RESTORE every key (REPLACE): none of hers opens, with
    the live secrets and the live keystore; Bob and the others read back intact."""
    plugin = _shredding(make_plugin, keystore)
    bob = _populate(plugin)
    client = _raw_client(store_kind, request)
    copy = _backup(store, client)
    assert len(copy) >= 12

    receipt = plugin.erase(user_id="alice")
    assert receipt.keys_destroyed == 1 and plugin.verify_receipt(receipt)
    assert receipt.total == 3 * 3 + 1 + 1

    _restore(store, client, copy)
    _assert_alice_gone(plugin, bob, make_plugin, keystore)
    # A plugin that never saw Alice's key (another process, a fresh start) neither.
    _assert_alice_gone(_shredding(make_plugin, keystore), bob, make_plugin, keystore)


def test_entries_name_their_subject_key_and_nothing_else_does(
    make_plugin: Callable[..., RememberPlugin], store: Store, keystore: object
) -> None:
    """Alice's envelopes record the id of the key that sealed them (no master kid, no user
    id); a global or anonymous entry is sealed as without subject keys."""
    plugin = _shredding(make_plugin, keystore)
    _populate(plugin)
    skids: set[str | None] = set()
    for key in plugin.store.scan(plugin.key_prefix + "v2:*"):
        raw = store.get(key)
        assert raw is not None
        envelope = parse_envelope(raw)
        if _is_alice(plugin, key):
            assert envelope.skid is not None and envelope.kid is None and envelope.aad
            assert "alice" not in raw
            skids.add(envelope.skid)
        elif ":global:" in key or "anon-session" in key:
            assert envelope.skid is None and envelope.kid is not None
    assert len(skids) == 1  # one key per person


def test_memory_tools_seal_the_signed_in_users_entries_under_their_key(
    make_plugin: Callable[..., RememberPlugin], store: Store, keystore: object
) -> None:
    """remember_this by a signed-in user, in session and tool scope: sealed under their
    key, unreadable after erase; an anonymous caller's entry is not theirs."""
    plugin = _shredding(make_plugin, keystore, tools={"enabled": True})
    alice, anonymous = Identity("st-1", "alice", "notes"), Identity("st-2", None, "notes")
    for scope in ("session", "tool"):
        done = plugin.call_tool("remember_this", {"key": "k", "value": scope, "scope": scope},
                                identity=alice)
        assert not done.get("isError"), done
    plugin.call_tool("remember_this", {"key": "k", "value": "anon"}, identity=anonymous)
    keys = {k: store.get(k) or "" for k in store.scan("remember:v2:*")}
    sealed = {k: parse_envelope(v).skid for k, v in keys.items()}
    assert [k for k, skid in sealed.items() if skid is None] == ["remember:v2:session:st-2:k"]
    copy = _backup(store, None)
    assert plugin.erase(user_id="alice").keys_destroyed == 1
    _restore(store, None, copy)
    recall = plugin.call_tool("recall", {"key": "k"}, identity=alice)
    # Unreadable, said so (never "not found"), and left unchanged.
    assert recall["isError"] and "could not be read" in recall["content"][0]["text"]
    assert "structuredContent" not in recall
    assert plugin.call_tool("recall", {"key": "k"}, identity=anonymous)[
        "structuredContent"]["value"] == "anon"


def test_erase_then_the_same_user_writes_again_under_a_new_key(
    make_plugin: Callable[..., RememberPlugin],
    store: Store,
    keystore: object,
) -> None:
    """After erase, Alice's next write gets a new key id; the restored old entries stay
    unreadable, her new one reads."""
    plugin = _shredding(make_plugin, keystore)
    bob = _populate(plugin)
    copy = _backup(store, None)
    old = parse_envelope(
        store.get(plugin.key_prefix + "v2:user:alice:name") or ""
    ).skid
    plugin.erase(user_id="alice")
    mem = plugin.accessor(Identity(None, "alice"))
    mem.set("fresh", "new life", scope="user")
    new = parse_envelope(store.get(plugin.key_prefix + "v2:user:alice:fresh") or "").skid
    assert new is not None and old is not None and new != old
    _restore(store, None, copy)
    assert mem.get("fresh", scope="user") == "new life"
    assert mem.get("name", scope="user") is None
    assert _entries(plugin)[plugin.key_prefix + "v2:user:alice:fresh"] == "new life"
    # A read-modify-write of a restored entry refuses (never "absent, start from 0") and
    # leaves it as it was.
    visits = plugin.key_prefix + "v2:session:sa-1:visits"
    with pytest.raises(RememberDecryptionError, match="subject key was erased"):
        plugin.accessor(Identity("sa-1", "alice", "notes")).increment("visits")
    assert store.get(visits) == copy[visits]
    assert mem.forget("fresh", scope="user")
    _assert_alice_gone(plugin, bob, make_plugin, keystore)
    # The keystore remembers the erasure (a tombstone: subject hash and time).
    assert plugin._core.codec.keyring.subjects.erased_at("alice") is not None  # type: ignore[union-attr]


def test_rotation_rewraps_the_keystore_then_erase_still_shreds(
    make_plugin: Callable[..., RememberPlugin], store: Store, keystore: object, clock: FakeClock
) -> None:
    """Rotate to a new secret (the keystore's keys rewrapped, entries untouched), retire
    the old secret, then erase: the copy from before the rotation opens nothing of Alice."""
    first = _shredding(make_plugin, keystore, encryption={"secrets": [OLD_SECRET]})
    bob = _populate(first)
    copy = _backup(store, None)
    both = _shredding(make_plugin, keystore, encryption={"secrets": [TEST_SECRET, OLD_SECRET]})
    result = rotate(both._core)
    assert result.complete
    assert result.rewrapped == 2  # Alice's and Bob's keys
    # Only the new secret from now on: everything still reads.
    new = _shredding(make_plugin, keystore)
    assert new.accessor(Identity("sa-1", "alice")).get("theme") == "alice-sa-1"
    assert new.accessor(Identity(None, "bob")).get("name", scope="user") == "Bob B."
    # Rotation rewrote no entry of a person: their envelopes name the same subject keys.
    alice = [k for k in copy if k.startswith("remember:v2:") and _is_alice(first, k)]
    assert len(alice) == 11 and all(store.get(k) == copy[k] for k in alice)
    receipt = new.erase(user_id="alice")
    assert receipt.keys_destroyed == 1
    _restore(store, None, copy)
    # Even holding the old secret too, the copy from before the rotation opens nothing
    # of Alice (and everything else, sealed by the old secret, reads) -- once `both`,
    # which read her key during the rotation, asks the keystore again.
    clock.advance(RECHECK_MS)
    _assert_alice_gone(both, bob, make_plugin, keystore)


def test_another_process_forgets_a_destroyed_key_within_the_recheck_time(
    make_plugin: Callable[..., RememberPlugin], store: Store, keystore: object, clock: FakeClock
) -> None:
    """A plugin that read Alice's key before another erased her trusts its copy for at
    most RECHECK_MS (docs/audit.rst), then reads her restored entries as unreadable."""
    eraser = _shredding(make_plugin, keystore)
    reader = _shredding(make_plugin, keystore)
    bob = _populate(eraser)
    copy = _backup(store, None)
    assert reader.accessor(Identity("sa-1", "alice")).get("theme") == "alice-sa-1"
    eraser.erase(user_id="alice")
    _restore(store, None, copy)
    clock.advance(RECHECK_MS - 1)
    assert reader.accessor(Identity("sa-1", "alice")).get("theme") == "alice-sa-1"
    clock.advance(1)
    assert reader.accessor(Identity("sa-1", "alice")).get("theme") is None
    _assert_alice_gone(reader, bob, make_plugin, keystore)


def test_keystore_failure_is_a_store_error_on_write_and_read(
    make_plugin: Callable[..., RememberPlugin],
) -> None:
    """The keystore's redis-server stopped: writing and reading a person's entry raise
    RememberStoreError (never "not found"); entries with no person still work."""
    server = RedisServer().start()
    try:
        keystore = RedisStore.from_url(server.url, socket_timeout=1, retries=0)
        plugin = _shredding(make_plugin, keystore)
        alice = plugin.accessor(Identity("sa-1", "alice"))
        alice.set("k", "v")
        server.stop()
        with pytest.raises(RememberStoreError):
            plugin.accessor(Identity("sa-1", "carol")).set("k", "v")
        reader = _shredding(make_plugin, keystore)  # nothing cached: must ask the keystore
        with pytest.raises(RememberStoreError):
            reader.accessor(Identity("sa-1", "alice")).get("k")
        with pytest.raises(RememberStoreError):
            reader.erase(user_id="alice")
        reader.accessor(Identity()).set("motd", "up", scope="global")
        assert reader.accessor(Identity()).get("motd", scope="global") == "up"
        keystore.close()
    finally:
        server.cleanup()


def test_a_file_keystore_is_private(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path
) -> None:
    """Created 0600; an existing file others can read is refused at init."""
    path = tmp_path / "keys.sqlite"
    _shredding(make_plugin, str(path)).accessor(Identity(None, "a")).set("k", 1, scope="user")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o640)
    with pytest.raises(RememberConfigurationError, match="keystore"):
        _shredding(make_plugin, str(path))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"encryption": {"subject_keys": True}}, "keystore"),
        ({"encryption": {"subject_keys": "yes"}, "keystore": "k.db"}, "encryption.subject_keys"),
        ({"encryption": {"subject_keys": False}, "keystore": "k.db"}, "keystore"),
        ({"keystore": 42}, "keystore"),
        ({"keystore": ""}, "keystore"),
        ({"keystore": {"type": "file"}}, "keystore"),
        ({"keystore": "k.db", "encryption": {"enabled": False}}, "encryption.subject_keys"),
        ({"keystore": "k.db", "encryption": {"frontmcp_compatible": True}},
         "encryption.subject_keys"),
        ({"keystore": "k.db", "read_doubled_prefix": True}, "encryption.subject_keys"),
        ({"keystore": "/nonexistent-dir/k.db"}, "keystore"),
    ],
)
def test_bad_keystore_options_are_refused_at_init(
    make_plugin: Callable[..., RememberPlugin],
    options: dict[str, Any],
    named: str,
    tmp_path: Path,
) -> None:
    """Each bad combination is a RememberConfigurationError naming the option."""
    if options.get("keystore") == "k.db":
        options["keystore"] = str(tmp_path / "k.db")
    with pytest.raises(RememberConfigurationError, match=f"'{named}'"):
        make_plugin(**options)


def test_the_data_store_itself_is_refused_as_keystore(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """A keystore inside the data it protects would be in every backup of it."""
    with pytest.raises(RememberConfigurationError, match="'keystore'"):
        make_plugin(encryption={"subject_keys": True}, keystore=store)


def test_keystore_from_the_environment(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path
) -> None:
    """REMEMBER_KEYSTORE (a file path) turns subject keys on, as the CLI and serve use it."""
    path = str(tmp_path / "env-keys.sqlite")
    plugin = make_plugin(environ={"REMEMBER_KEYSTORE": path})
    plugin.accessor(Identity(None, "alice")).set("k", 1, scope="user")
    raw = plugin.store.get(plugin.key_prefix + "v2:user:alice:k")
    assert raw is not None and parse_envelope(raw).skid is not None
    assert plugin.erase(user_id="alice").keys_destroyed == 1


def test_a_second_redis_as_keystore_survives_a_restored_data_redis(
    redis_store: RedisStore, redis_client: redis.Redis, clock: FakeClock
) -> None:
    """The data in one Redis, the keys in another (named by URL): the restore of the data
    Redis does not touch the keystore, so the erasure holds; the keystore holds no user id."""
    server = RedisServer().start()
    made: list[RememberPlugin] = []

    def factory(**options: Any) -> RememberPlugin:
        encryption = {"secrets": [TEST_SECRET], **options.pop("encryption", {})}
        made.append(RememberPlugin.init(
            store=redis_store, clock=clock, skip_legacy_purge=True, encryption=encryption,
            background_reindex=False, **options,
        ))
        return made[-1]

    try:
        plugin = _shredding(factory, server.url)
        bob = _populate(plugin)
        copy = _backup(redis_store, redis_client)
        assert plugin.erase(user_id="alice").keys_destroyed == 1
        _restore(redis_store, redis_client, copy)
        _assert_alice_gone(plugin, bob, factory, server.url)
        client = server.client()
        keys = list(client.scan_iter("*"))
        assert keys
        for key in keys:
            assert b"alice" not in key and b"alice" not in (client.get(key) or b"")
        client.close()
    finally:
        for made_plugin in made:
            made_plugin.close()
        server.cleanup()


def test_offline_cli_tools_find_the_keystore_in_the_environment(
    redis_store: RedisStore, redis_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """``export`` and ``erase`` with REMEMBER_KEYSTORE: the envelopes name their subject key,
    so the CLI opens them without knowing whose they are; after ``erase`` (keys destroyed,
    said in the receipt) an export of Alice's restored entries reports them unreadable."""
    path = str(tmp_path / "keys.sqlite")
    plugin = RememberPlugin.init(
        store=redis_store, clock=clock, skip_legacy_purge=True, background_reindex=False,
        encryption={"secrets": [TEST_SECRET]}, keystore=path,
    )
    try:
        _populate(plugin)
        copy = {k: redis_store.get(k) for k in redis_store.scan("remember:v2:*")}
        env = {"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_KEYSTORE": path, "PATH": "/usr/bin:/bin",
               "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        base = [sys.executable, "-m", "remember_sync"]
        export = [*base, "export", "--redis-url", redis_url, "--decrypted"]
        before = subprocess.run(export, env=env, capture_output=True, text=True, check=False)
        assert before.returncode == 0, before.stderr
        assert "alice-sa-2" in before.stdout and "Alice A." in before.stdout
        erase = [*base, "erase", "--redis-url", redis_url, "--user", "alice", "--json"]
        done = subprocess.run(erase, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        receipt = json.loads(done.stdout)
        assert receipt["keys_destroyed"] == 1
        assert plugin.verify_receipt(ErasureReceipt(**receipt))
        for key, value in copy.items():
            assert value is not None
            redis_store.set(key, value)
        after = subprocess.run(export, env=env, capture_output=True, text=True, check=False)
        assert after.returncode == 1
        assert "alice" not in after.stdout.lower() and "Bob B." in after.stdout
        assert "11 entries do not decrypt" in after.stderr
    finally:
        plugin.close()


def test_export_without_the_keystore_names_it(
    redis_store: RedisStore, redis_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    """``export`` without REMEMBER_KEYSTORE on entries sealed with subject keys says the
    keystore is missing (their envelopes name a ``skid``), not only "do not decrypt"."""
    plugin = RememberPlugin.init(
        store=redis_store, clock=clock, skip_legacy_purge=True, background_reindex=False,
        encryption={"secrets": [TEST_SECRET]}, keystore=str(tmp_path / "keys.sqlite"),
    )
    try:
        _populate(plugin)
        sealed = sum(
            '"skid":"' in (redis_store.get(k) or "") for k in redis_store.scan("remember:v2:*")
        )
        assert sealed > 0
        env = {"REMEMBER_SECRET": TEST_SECRET, "PATH": "/usr/bin:/bin",
               "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        export = [sys.executable, "-m", "remember_sync", "export", "--redis-url", redis_url]
        done = subprocess.run(export, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 1, done.stderr
        assert f"{sealed} of them are sealed with a person's own key" in done.stderr
        assert "set REMEMBER_KEYSTORE" in done.stderr
        # With the keystore, nothing is reported missing.
        env["REMEMBER_KEYSTORE"] = str(tmp_path / "keys.sqlite")
        done = subprocess.run(export, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert "REMEMBER_KEYSTORE" not in done.stderr
    finally:
        plugin.close()


def test_serve_keystore_flag_reaches_init(tmp_path: Path) -> None:
    """``serve --keystore FILE`` builds the plugin with it: a file others can read is
    refused at start, naming the option; nothing starts."""
    path = tmp_path / "keys.sqlite"
    path.write_bytes(b"")
    os.chmod(path, 0o644)
    done = subprocess.run(
        [sys.executable, "-m", "remember_sync", "serve", "--port", "0", "--keystore", str(path)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
             "REMEMBER_SECRET": TEST_SECRET},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "'keystore'" in done.stderr and "readable by others" in done.stderr


def test_writers_racing_for_a_first_key_agree_on_one(
    make_plugin: Callable[..., RememberPlugin], keystore: object
) -> None:
    """Eight processes' plugins (no shared cache) write Dana's first entries at once: one
    key wins, every entry reads, and erase destroys that one key."""
    plugins = [_shredding(make_plugin, keystore) for _ in range(8)]
    barrier = threading.Barrier(len(plugins))
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            barrier.wait(10)
            plugins[index].accessor(Identity(None, "dana")).set(f"k{index}", index, scope="user")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(plugins))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    store = plugins[0].store
    skids = {parse_envelope(store.get(f"remember:v2:user:dana:k{i}") or "").skid
             for i in range(len(plugins))}
    assert len(skids) == 1
    reader = _shredding(make_plugin, keystore)
    dana = reader.accessor(Identity(None, "dana"))
    assert [dana.get(f"k{i}", scope="user") for i in range(len(plugins))] == list(range(8))
    assert reader.erase(user_id="dana").keys_destroyed == 1
    assert _shredding(make_plugin, keystore).accessor(Identity(None, "dana")).get(
        "k0", scope="user") is None


def test_the_skid_envelope_grammar() -> None:
    """``skid`` only with the key binding, base64url and at most 64 characters; the
    canonical spelling and any other JSON spelling parse alike."""
    sealed = seal(b'{"value":1}', bytes(32), skid="AAAAAAAAAAAAAAAA", aad=b"k")
    assert sealed.startswith('{"alg":"A256GCM","skid":"AAAAAAAAAAAAAAAA","aad":"key","iv":"')
    canonical = parse_envelope(sealed)
    respelled = json.dumps(dict(reversed(list(json.loads(sealed).items()))), indent=1)
    assert parse_envelope(respelled) == canonical and canonical.skid == "AAAAAAAAAAAAAAAA"
    obj = json.loads(sealed)
    for bad in ({"aad": None}, {"skid": ""}, {"skid": "x" * 65}, {"skid": "a/b"}, {"skid": 7}):
        forged = {k: v for k, v in {**obj, **bad}.items() if v is not None}
        for text in (json.dumps(forged, separators=(",", ":")), json.dumps(forged)):
            with pytest.raises(RememberDecryptionError):
                parse_envelope(text)


@pytest.mark.parametrize("garbage", ["not json", "[]", '{"subject":"x","wrapped":"y"}', "{}"])
def test_a_damaged_key_record_reads_as_unreadable(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path, garbage: str
) -> None:
    """A key record someone edited: the person's entries are unreadable (said so), never a
    crash; rotate counts the record and leaves it; erase still destroys it."""
    path = str(tmp_path / "keys.sqlite")
    _shredding(make_plugin, path).accessor(Identity(None, "eve")).set("k", 1, scope="user")
    with sqlite3.connect(path) as db:
        assert db.execute("UPDATE records SET value = ? WHERE name LIKE 'key:%'",
                          (garbage,)).rowcount == 1
    reader = _shredding(make_plugin, path, on_decrypt_error="raise")
    with pytest.raises(RememberDecryptionError):
        reader.accessor(Identity(None, "eve")).get("k", scope="user")
    result = rotate(reader._core)
    assert result.keys_unreadable == 1 and not result.complete
    # Not recognisably hers any more (it opens for nobody): left, not counted; her
    # pointer goes, so her next write gets a new key.
    assert reader.erase(user_id="eve").keys_destroyed == 0
    reader.accessor(Identity(None, "eve")).set("k2", 2, scope="user")
    assert reader.accessor(Identity(None, "eve")).get("k2", scope="user") == 2


def test_the_warning_for_an_erased_key_says_so(
    make_plugin: Callable[..., RememberPlugin], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry whose key was erased is logged as such, not as a secret mismatch."""
    path = str(tmp_path / "keys.sqlite")
    plugin = _shredding(make_plugin, path)
    mem = plugin.accessor(Identity(None, "fay"))
    mem.set("k", 1, scope="user")
    raw = plugin.store.get("remember:v2:user:fay:k")
    assert raw is not None
    plugin.erase(user_id="fay")
    plugin.store.set("remember:v2:user:fay:k", raw)  # restored from a backup
    with caplog.at_level("WARNING", logger="remember_sync"):
        assert mem.get("k", scope="user") is None
    assert "its subject key was erased" in caplog.text
    assert "REMEMBER_SECRET" not in caplog.text


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_uses_the_file_keystore_on_its_own_connection(
    memory_store: Store, tmp_path: Path
) -> None:
    """A plugin built before a fork: the child writes a new person's entry (creating a key
    in the SQLite file over its own connection); the parent reads it and can erase it."""
    path = str(tmp_path / "keys.sqlite")
    with RememberPlugin.init(
        store=memory_store, skip_legacy_purge=True, encryption={"secrets": [TEST_SECRET]},
        keystore=path,
    ) as plugin:
        plugin.accessor(Identity(None, "gus")).set("before", 1, scope="user")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                plugin.accessor(Identity(None, "hal")).set("k", "from-child", scope="user")
                code = 0 if plugin.accessor(Identity(None, "gus")).get(
                    "before", scope="user") == 1 else 2
                raw = plugin.store.get("remember:v2:user:hal:k") or ""
                os.write(write, raw.encode())
            finally:
                os._exit(code)
        os.close(write)
        child_raw = b""
        while chunk := os.read(read, 65536):
            child_raw += chunk
        os.close(read)
        assert os.waitpid(pid, 0)[1] == 0
        # The memory store is the parent's own: the child's write is shown through the pipe.
        plugin.store.set("remember:v2:user:hal:k", child_raw.decode())
        assert plugin.accessor(Identity(None, "hal")).get("k", scope="user") == "from-child"
        assert plugin.erase(user_id="hal").keys_destroyed == 1


def test_the_data_database_through_another_client_is_refused(
    make_plugin: Callable[..., RememberPlugin], redis_store: RedisStore, redis_url: str
) -> None:
    """A keystore that is the data's own Redis database behind another client is found out
    on the first key it would create: a configuration error naming the option, no key
    left in it and no entry written."""
    other = RedisStore.from_url(redis_url)
    try:
        plugin = make_plugin(store=redis_store, keystore=other)
        with pytest.raises(RememberConfigurationError, match="'keystore'.*same database"):
            plugin.accessor(Identity(None, "ivy")).set("k", 1, scope="user")
        left = list(redis_store.scan("*"))
        assert not [k for k in left if "keystore" in k or ":v2:" in k], left
    finally:
        other.close()


# -- erasure leaves no copy of the destroyed key ------------------------------------------


def _key_records(keystore: object, tmp_path: Path) -> dict[str, str]:
    """Every ``key:`` record in the keystore, by name."""
    if isinstance(keystore, str):
        db = sqlite3.connect(keystore)
        try:
            rows = db.execute("SELECT name, value FROM records WHERE name LIKE 'key:%'")
            return {str(n): str(v) for n, v in rows}
        finally:
            db.close()
    assert isinstance(keystore, Store)
    keys = list(keystore.scan("*keystore:key:*"))
    return {k: v for k, v in zip(keys, keystore.get_many(keys), strict=True) if v is not None}


def _needles(record: str) -> list[bytes]:
    """The wrapped key's bytes, in every spelling a file could hold: the record's text,
    the sealed envelope's ciphertext and tag as text, and the ciphertext's raw bytes."""
    envelope = json.loads(json.loads(record)["wrapped"])
    data = envelope["data"]
    raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    return [record.encode(), data[:40].encode(), envelope["tag"].encode(), raw[:32]]


def test_a_file_keystore_keeps_no_byte_of_a_destroyed_key(
    make_plugin: Callable[..., RememberPlugin], store: Store, tmp_path: Path
) -> None:
    """After erase: no byte sequence of Alice's wrapped key in any file of the keystore's
    directory (``-wal`` and ``-shm`` included); a copy of those files taken after the erase,
    with a backup of the data taken before it, opens nothing of hers."""
    path = str(tmp_path / "keys" / "keys.sqlite")
    os.makedirs(os.path.dirname(path), mode=0o700)
    plugin = _shredding(make_plugin, path)
    bob = _populate(plugin)
    before = _key_records(path, tmp_path)
    assert len(before) == 2  # Alice's and Bob's
    copy = _backup(store, None)
    assert plugin.erase(user_id="alice").keys_destroyed == 1
    after = _key_records(path, tmp_path)
    (alice_record,) = [v for v in before.values() if v not in after.values()]
    files = sorted(os.listdir(os.path.dirname(path)))
    assert "keys.sqlite" in files
    for name in files:
        data = (Path(os.path.dirname(path)) / name).read_bytes()
        for needle in _needles(alice_record):
            assert needle not in data, (name, needle[:20])
    # Bob's key is still there (the scan would find it: the test can fail).
    (bob_record,) = after.values()
    assert any(_needles(bob_record)[1] in (Path(os.path.dirname(path)) / n).read_bytes()
               for n in files)
    # A copy of the keystore's files, taken now, with the data as it was before the erase.
    copied = tmp_path / "copied"
    copied.mkdir(mode=0o700)
    for name in files:
        (copied / name).write_bytes((Path(os.path.dirname(path)) / name).read_bytes())
        os.chmod(copied / name, 0o600)
    restored = MemoryStore()
    _restore(restored, None, copy)
    fresh = make_plugin(store=restored, encryption={"subject_keys": True},
                        keystore=str(copied / "keys.sqlite"))
    entries = _entries(fresh)
    alice = {k: v for k, v in entries.items() if _is_alice(fresh, k)}
    assert len(alice) >= 10
    assert all(isinstance(v, RememberDecryptionError) for v in alice.values()), alice
    assert {k: v for k, v in entries.items() if not _is_alice(fresh, k)} == bob


@pytest.mark.parametrize("store_kind", ["redis"])
def test_a_redis_keystore_keeps_no_copy_of_a_destroyed_key(
    make_plugin: Callable[..., RememberPlugin], store: Store, store_kind: str
) -> None:
    """A second redis-server as keystore: after erase, a raw scan of every key there
    finds no byte of Alice's wrapped key in any key's name or value."""
    server = RedisServer().start()
    try:
        plugin = _shredding(make_plugin, server.url)
        _populate(plugin)
        client = server.client()

        def everything() -> list[bytes]:
            out = []
            for key in client.scan_iter("*"):
                out.append(key)
                kind = client.type(key)
                if kind == b"string":
                    out.append(client.get(key) or b"")
                elif kind == b"hash":
                    out.extend(b"%s=%s" % kv for kv in client.hgetall(key).items())
                else:
                    out.append(client.dump(key) or b"")
            return out

        before = {v for v in everything() if b'"wrapped"' in v}
        assert len(before) == 2
        assert plugin.erase(user_id="alice").keys_destroyed == 1
        after = everything()
        (gone,) = [v for v in before if v not in after]
        needles = _needles(gone.decode())
        for blob in after:
            for needle in needles:
                assert needle not in blob
        client.close()
    finally:
        server.cleanup()


def test_after_erase_the_trail_verifies_and_no_event_names_the_person(
    make_plugin: Callable[..., RememberPlugin], store: Store, keystore: object
) -> None:
    """Under subject keys the identities in audit events are sealed with the person's key:
    after erase the trail verifies, and no sealed field of any event opens to Alice's ids
    with the master secret; Bob's still read back."""
    from remember_sync._audit import _SEAL_INFO

    plugin = _shredding(make_plugin, keystore, audit={"batch": 4, "flush_ms": 600_000})
    _populate(plugin)
    trail = plugin.audit
    assert trail is not None
    before = {e.principal for e in trail.events()}
    assert {"alice", "bob"} <= before
    plugin.erase(user_id="alice")
    result = trail.verify()
    assert result.ok, result.problems
    after = trail.events()
    assert "alice" not in {e.principal for e in after} and "bob" in {e.principal for e in after}
    # A fresh plugin (nothing cached) neither.
    fresh = _shredding(make_plugin, keystore, audit=True)
    assert fresh.audit is not None and fresh.audit.verify().ok
    assert "alice" not in {e.principal for e in fresh.audit.events()}
    # Every sealed field of every block, opened with every key the master secret gives.
    master_keys = [*trail.keyring.purpose_keys(_SEAL_INFO)]
    needles = ["alice", *SESSIONS]
    opened_fields = 0
    for key in store.scan(plugin.key_prefix + "__audit__:b:*"):
        block = json.loads(store.get(key) or "{}")
        if "who" not in block:
            continue
        aad = b"remember:audit-who:" + str(block["events"][0]["seq"]).encode()
        table = json.loads(open_sealed(block["who"], master_keys, aad))
        opened_fields += 1
        for entry in table:
            text = json.dumps(entry)
            assert not any(n in text for n in needles), text
            if isinstance(entry, dict):
                with pytest.raises(RememberDecryptionError):
                    open_sealed(entry["sealed"], master_keys, aad)
    assert opened_fields > 0
