"""The speed-ups of issue 10 change nothing but speed.

Each hot-path shortcut (envelope parsing at fixed offsets, the canonical
envelope pattern, entry JSON through the C scanner, IVs cut from blocks of
``os.urandom``, the lock-free memory-store read) is checked against the
general path it short-cuts, on inputs made to hit the edges.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remember_sync import _crypto as crypto
from remember_sync._codec import EntryCodec, _ms, entry_fields
from remember_sync._crypto import Keyring, random_iv, seal
from remember_sync.errors import RememberDecryptionError
from remember_sync.stores.memory import MemoryStore
from remember_sync.types import Namespace, RememberEntry

NS = Namespace("session", session="s-1")
KEY = "remember:v2:session:s-1:k"
NOISE = st.sampled_from(list('{}[]",:=+/-_\\ aZ09é\x01\n'))


def _outcome(fn: Any, *args: Any) -> tuple[str, str]:
    try:
        return "ok", repr(fn(*args))
    except Exception as exc:  # noqa: BLE001 - the kind and text are what is compared
        return type(exc).__name__, str(exc)


def _mutate(text: str, data: st.DataObject) -> str:
    chars = list(text)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(chars) - 1))
        chars[at] = data.draw(NOISE)
    return "".join(chars)


def _sealed(keyring: Keyring, plaintext: bytes, *, bound: bool, kid: bool) -> str:
    aad = KEY[len("remember:") :].encode() if bound else None
    return seal(plaintext, keyring.key(NS), kid=keyring.primary_kid if kid else None, aad=aad)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), bound=st.booleans(), kid=st.booleans(), size=st.integers(0, 40))
def test_envelope_shortcuts_agree_with_json(
    data: st.DataObject, bound: bool, kid: bool, size: int
) -> None:
    """parse_envelope and open_stored give the JSON path's result or error for any string."""
    keyring = Keyring(["current-secret", "older-secret"], source="test")
    stored = _mutate(_sealed(keyring, os.urandom(size), bound=bound, kid=kid), data)
    assert _outcome(crypto.parse_envelope, stored) == _outcome(
        lambda s: crypto.Envelope(*crypto._envelope_fields_json(s)), stored
    )
    aad = KEY[len("remember:") :].encode()
    assert _outcome(keyring.open_stored, stored, NS, aad) == _outcome(
        keyring._open_stored, stored, NS, aad
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data(), size=st.integers(0, 40))
def test_open_many_opens_only_what_open_stored_opens_the_same_way(
    data: st.DataObject, size: int
) -> None:
    """open_many's plaintexts are open_stored's (current secret, bound); None leaves it to it."""
    keyring = Keyring(["current-secret", "older-secret"], source="test")
    older = Keyring(["older-secret"], source="test")
    aad = KEY[len("remember:") :].encode()
    texts = [
        _mutate(_sealed(keyring, os.urandom(size), bound=True, kid=True), data),
        _sealed(keyring, os.urandom(size), bound=True, kid=True),
        _sealed(keyring, os.urandom(size), bound=False, kid=True),
        _sealed(older, os.urandom(size), bound=True, kid=True),
        _sealed(keyring, os.urandom(size), bound=True, kid=True).replace("-", "+"),
        "{}",
    ]
    for text, opened in zip(texts, keyring.open_many(texts, NS, [aad] * len(texts)), strict=True):
        if opened is not None:
            assert keyring.open_stored(text, NS, aad) == (opened, 0, True)
    # An untouched envelope of the current secret always takes the fast path.
    assert keyring.open_many([texts[1]], NS, [aad]) == [keyring.open_stored(texts[1], NS, aad)[0]]
    # Bound to another key: not opened here, and open_stored refuses it too.
    assert keyring.open_many([texts[1]], NS, [b"v2:session:s-1:other"]) == [None]


def test_decode_many_equals_decode_fields_one_by_one() -> None:
    """decode_many gives decode_fields' fields or its error for every kind of stored value."""
    keyring = Keyring(["current-secret", "older-secret"], source="test")
    codec = EntryCodec(keyring, prefix="remember:")
    older = EntryCodec(Keyring(["older-secret"], source="test"), prefix="remember:")
    plain = EntryCodec(keyring, prefix="remember:", bind_key=False)
    entry = RememberEntry({"a": [1, "é"]}, "cache", 1, 2, 3, {"m": True})
    keys = [f"{KEY}{i}" for i in range(8)]
    stored = [
        codec.encode(entry, NS, keys[0]),
        older.encode(entry, NS, keys[1]),
        plain.encode(entry, NS, keys[2]),
        codec.encode(entry, NS, keys[0]),  # moved to another key: unreadable
        "not an envelope",
        codec.seal_text(b"[1]", NS, keys[5]),  # decrypts, but is not an entry
        codec.seal_text(b'{"value":1,"createdAt":1,"updatedAt":2}', NS, keys[6]),
        EntryCodec(None, prefix="remember:").encode(entry, NS, keys[7]),
    ]
    for decoder in (codec, plain):
        many = decoder.decode_many(stored, NS, keys)
        for text, key, got in zip(stored, keys, many, strict=True):
            expected = _outcome(lambda: decoder.decode_fields(text, NS, key)[0])
            assert _outcome(lambda: got if not isinstance(got, Exception) else _raise(got)) == (
                expected
            )
    fields = codec.decode_many(stored[:1], NS, keys[:1])[0]
    assert not isinstance(fields, Exception)
    assert RememberEntry.from_fields(fields) == RememberEntry(*fields) == entry
    assert repr(RememberEntry.from_fields(fields)) == repr(entry)
    with pytest.raises(dataclasses.FrozenInstanceError):
        RememberEntry.from_fields(fields).value = 2  # type: ignore[misc]
    assert hash(RememberEntry.from_fields((1, None, 1, 2, None, None))) == hash(
        RememberEntry(1, None, 1, 2, None, None)
    )


def _raise(exc: Exception) -> Any:
    raise exc


def test_open_stored_tries_every_secret_after_the_shortcut() -> None:
    """An envelope of an older secret, or with its kid rewritten, still opens by the fallback."""
    old = Keyring(["older-secret"], source="test")
    both = Keyring(["current-secret", "older-secret"], source="test")
    stored = _sealed(old, b'{"value":1}', bound=True, kid=True)
    assert both.open_stored(stored, NS, KEY[len("remember:") :].encode()) == (
        b'{"value":1}',
        1,
        True,
    )
    relabelled = stored.replace(old.primary_kid, both.primary_kid)
    assert both.open_stored(relabelled, NS, KEY[len("remember:") :].encode())[1] == 1
    with pytest.raises(RememberDecryptionError):
        Keyring(["another"], source="t").open_stored(stored, NS, KEY[9:].encode())


ENTRY_TEXTS = [
    '{"value":1,"createdAt":1,"updatedAt":2}',
    ' {"value":1,"createdAt":1,"updatedAt":2}',
    '{"value":1,"createdAt":1,"updatedAt":2} ',
    '{"value":1,"createdAt":1,"updatedAt":2}x',
    '{"value":1,"createdAt":true,"updatedAt":2}',
    '{"value":1,"createdAt":1.5,"updatedAt":2,"expiresAt":3.7}',
    '{"value":"\\ud800","createdAt":1,"updatedAt":2}',
    '{"value":1,"brand":7,"createdAt":1,"updatedAt":2}',
    '{"value":1,"createdAt":1,"updatedAt":2,"metadata":[]}',
    '{"value":[1,{"a":null}],"createdAt":1,"updatedAt":2,"expiresAt":null}',
    "[1]",
    "{",
    "",
]


def _entry_fields_reference(text: str | bytes) -> tuple[Any, ...]:
    """entry_fields as it was before the C-scanner shortcut (json.loads, then checks)."""
    try:
        obj = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise RememberDecryptionError("stored entry is not JSON") from exc
    if not isinstance(obj, dict) or "value" not in obj:
        raise RememberDecryptionError("stored value is not a remember entry")
    brand, metadata = obj.get("brand"), obj.get("metadata")
    if brand is not None and not isinstance(brand, str):
        raise RememberDecryptionError("entry brand is not a string")
    if metadata is not None and not isinstance(metadata, dict):
        raise RememberDecryptionError("entry metadata is not an object")
    expires = obj.get("expiresAt")
    return (
        obj["value"],
        brand,
        _ms(obj.get("createdAt"), "createdAt"),
        _ms(obj.get("updatedAt"), "updatedAt"),
        None if expires is None else _ms(expires, "expiresAt"),
        metadata,
    )


@pytest.mark.parametrize("text", ENTRY_TEXTS)
@pytest.mark.parametrize("form", ["str", "utf-8", "utf-16", "bom", "bad-utf-8"])
def test_entry_parsing_matches_json_loads(text: str, form: str) -> None:
    """entry_fields accepts and refuses exactly what json.loads-based parsing did."""
    raw: str | bytes = text
    if form == "utf-8":
        raw = text.encode("utf-8", "surrogatepass")
    elif form == "utf-16":
        raw = text.encode("utf-16")
    elif form == "bom":
        raw = b"\xef\xbb\xbf" + text.encode()
    elif form == "bad-utf-8":
        raw = text.encode() + b"\xff"
    assert _outcome(entry_fields, raw) == _outcome(_entry_fields_reference, raw)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_entries_parse_like_json_loads(data: st.DataObject) -> None:
    """Random damage to an entry is accepted or refused exactly as json.loads-based parsing."""
    text = _mutate(
        '{"value":{"a":[1,2,"x"]},"brand":"cache","createdAt":1,"updatedAt":2,'
        '"expiresAt":3,"metadata":{"k":"v"}}',
        data,
    )
    for raw in (text, text.encode("utf-8", "surrogatepass")):
        assert _outcome(entry_fields, raw) == _outcome(_entry_fields_reference, raw)


def test_codec_round_trip_through_every_form() -> None:
    """Sealed entries decode to themselves with and without key binding and encryption."""
    entry = RememberEntry({"a": [1, "é"]}, "cache", 1, 2, 3, {"m": True})
    for keyring in (Keyring(["s"], source="t"), None):
        for bind in (True, False):
            codec = EntryCodec(keyring, prefix="remember:", bind_key=bind)
            assert codec.decode(codec.encode(entry, NS, KEY), NS, KEY) == entry


def test_ivs_are_unique_across_threads() -> None:
    """IVs cut from per-thread blocks never repeat, in one thread or across eight."""
    found: list[bytes] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [random_iv() for _ in range(3000)]
        with lock:
            found.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == len(set(found)) == 24_000
    assert all(len(iv) == 12 for iv in found)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_never_reuses_the_parents_ivs() -> None:
    """After fork the child draws a new block: its IVs differ from the parent's next ones."""
    random_iv()  # the parent holds a partly used block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.write(write, b"".join(random_iv() for _ in range(20)))
        finally:
            os._exit(0)
    os.close(write)
    child = b""
    while chunk := os.read(read, 4096):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    parent = b"".join(random_iv() for _ in range(20))
    child_ivs = {child[i : i + 12] for i in range(0, len(child), 12)}
    parent_ivs = {parent[i : i + 12] for i in range(0, len(parent), 12)}
    assert len(child_ivs) == 20 and not child_ivs & parent_ivs


def test_memory_store_reads_without_the_lock_stay_consistent() -> None:
    """Lock-free gets racing sets, deletes and scans see whole values and never fail."""
    store = MemoryStore()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            store.set(f"k{i % 50}", f"v{n}-{i}" * 3, ttl_ms=None if i % 3 else 60_000)
            if i % 7 == 0:
                store.delete(f"k{(i + 3) % 50}")
            i += 1

    def reader() -> None:
        try:
            while not stop.is_set():
                for i in range(50):
                    value = store.get(f"k{i}")
                    assert value is None or (value.startswith("v") and len(value) % 3 == 0)
                list(store.scan("k*"))
                store.get_many([f"k{i}" for i in range(50)])
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    stop.wait(0.8)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_deadlines_written_by_many_threads_are_all_swept() -> None:
    """TTL writes from several threads (deadlines queued outside the lock) all expire."""
    now = [1_000]
    store = MemoryStore(clock=lambda: now[0])

    def write(n: int) -> None:
        for i in range(700):
            store.set(f"t{n}-{i % 300}", "v", ttl_ms=10 + i % 5)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 1200
    now[0] += 14
    store.set("fresh", "v")
    assert len(store) == 1
    assert list(store.scan("*")) == ["fresh"]
    assert len(store._heap) < 200


def test_expired_entry_read_without_the_lock_is_removed() -> None:
    """A get past the deadline returns None and drops the entry, as before."""
    now = [1_000]
    store = MemoryStore(clock=lambda: now[0])
    store.set("k", "v", ttl_ms=10)
    assert store.get("k") == "v"
    now[0] += 10
    assert store.get("k") is None
    assert len(store._data) == 0


def test_seal_bound_writes_what_seal_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyring.seal_bound is byte for byte seal() with the primary kid and the key bound."""
    keyring = Keyring(["current-secret", "older-secret"], source="test")
    iv = bytes(range(12))
    monkeypatch.setattr(crypto, "random_iv", lambda: iv)
    for plaintext in (b"", b"x", b'{"value":1}', os.urandom(301)):
        aad = KEY[len("remember:") :].encode()
        assert keyring.seal_bound(plaintext, NS, aad) == seal(
            plaintext, keyring.key(NS), kid=keyring.primary_kid, aad=aad, iv=iv
        )
