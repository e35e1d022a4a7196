"""Encryption at rest (SPEC section 4): vectors, envelopes, binding, tampering, rotation."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import string
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st

from remember_sync import Identity, RememberDecryptionError, RememberPlugin
from remember_sync._codec import EntryCodec, entry_fields
from remember_sync._crypto import IV_BYTES, Keyring, derive_key, parse_envelope, random_iv, seal
from remember_sync._keys import storage_key
from remember_sync.identity import resolve_namespace
from remember_sync.stores.base import Store
from remember_sync.types import Namespace, RememberEntry
from tests.conftest import TEST_SECRET
from tests.vectors import VECTORS, vector_identity, vector_tool_name

ENCRYPTED = [v for v in VECTORS if v["encrypted"]]
ALICE = Identity("s-1", "alice", "t1")


def vector_namespace(vector: dict) -> Namespace:
    ident = vector_identity(vector)
    scope = vector["scope"]
    if scope == "user":
        return Namespace("user", user=vector["resolvedUserId"])
    if scope == "global":
        return Namespace("global")
    session = ident.session_id or f"stateless-user:{ident.user_id}"
    if scope == "session":
        return Namespace("session", session=session)
    return Namespace("tool", session=session, tool=vector_tool_name(vector))


def b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def reference_decrypt(stored: str, secret: str, ikm: str, info: str) -> bytes:
    """The reference read path only: HKDF as documented, AES-GCM without AAD."""
    blob = json.loads(stored)
    assert blob["alg"] == "A256GCM"
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"remember-plugin-v1", info=info.encode()
    ).derive(ikm.encode())
    return AESGCM(key).decrypt(b64url(blob["iv"]), b64url(blob["data"]) + b64url(blob["tag"]), None)


@pytest.mark.parametrize("vector", ENCRYPTED, ids=[v["name"] for v in ENCRYPTED])
def test_vector_derived_key(vector: dict) -> None:
    """HKDF of each vector's secret and identity equals its derivedKeyHex."""
    assert derive_key(vector["secret"], vector_namespace(vector)).hex() == vector["derivedKeyHex"]


@pytest.mark.parametrize("vector", ENCRYPTED, ids=[v["name"] for v in ENCRYPTED])
def test_vector_decrypts_to_plaintext(vector: dict) -> None:
    """Every 1.8.0 envelope opens to its exact plaintext entry through our codec."""
    ns = vector_namespace(vector)
    codec = EntryCodec(Keyring([vector["secret"]], source="test"), prefix=vector["keyPrefix"])
    entry = codec.decode(vector["rawStoredValue"], ns, vector["storageKey"])
    expected = json.loads(vector["plaintext"])
    assert entry.value == vector["value"] == expected["value"]
    assert entry.created_at == expected["createdAt"]
    assert entry.expires_at == expected.get("expiresAt")
    assert entry.brand == expected.get("brand")
    assert entry.metadata == expected.get("metadata")
    plaintext, _, _ = codec.keyring.open(vector["rawStoredValue"], ns, None)  # type: ignore[union-attr]
    assert plaintext.decode("utf-8") == vector["plaintext"]


def test_unencrypted_vector_reads_with_encryption_disabled() -> None:
    """The encryption-disabled vector is the plaintext entry JSON, read as is."""
    vector = next(v for v in VECTORS if not v["encrypted"])
    codec = EntryCodec(None, prefix="remember:")
    entry = codec.decode(vector["rawStoredValue"], vector_namespace(vector), vector["storageKey"])
    assert entry.value == vector["value"]


def test_our_plaintext_entry_json_matches_reference_bytes(
    make_plugin: Callable[..., RememberPlugin], store: Store, clock
) -> None:
    """encryption disabled stores the entry JSON in the reference's key order, compact."""
    plain = make_plugin(encryption={"enabled": False}).accessor(Identity("sess-123"))
    plain.set(
        "last_query", {"q": "weather", "n": 3}, ttl=600, brand="cache", metadata={"source": "api"}
    )
    raw = store.get("remember:v2:session:sess-123:last_query")
    t = clock.now
    assert raw == (
        '{"value":{"q":"weather","n":3},"brand":"cache",'
        f'"createdAt":{t},"updatedAt":{t},"expiresAt":{t + 600_000},"metadata":{{"source":"api"}}}}'
    )


def test_frontmcp_compatible_readable_by_reference_algorithm(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """frontmcp_compatible=True writes the plain envelope that the reference read path opens."""
    secret = "compat-secret-0123456789abcdef0123"
    plugin = make_plugin(encryption={"secrets": [secret], "frontmcp_compatible": True})
    mem = plugin.accessor(Identity("sess-9", "alice", "search:web"))
    mem.set("theme", {"x": "\u00e9"}, scope="user", brand="preference")
    mem.set("q", 1, scope="tool")
    raw_user = store.get("remember:v2:user:alice:theme")
    assert raw_user is not None
    assert list(json.loads(raw_user)) == ["alg", "iv", "tag", "data"]
    entry = json.loads(reference_decrypt(raw_user, secret, secret + "alice", "remember:user:alice"))
    assert entry["value"] == {"x": "\u00e9"} and entry["brand"] == "preference"
    raw_tool = store.get("remember:v2:tool:search%3Aweb:sess-9:q")
    assert raw_tool is not None
    tool_entry = reference_decrypt(
        raw_tool, secret, secret + "sess-9", "remember:tool:search:web:sess-9"
    )
    assert json.loads(tool_entry)["value"] == 1


def test_default_envelope_has_kid_and_binds_key(plugin: RememberPlugin, store: Store) -> None:
    """Our default envelope carries kid and aad:key; the reference path cannot open it."""
    plugin.accessor(ALICE).set("k", "v", scope="user")
    raw = store.get("remember:v2:user:alice:k")
    assert raw is not None
    blob = json.loads(raw)
    assert list(blob) == ["alg", "kid", "aad", "iv", "tag", "data"]
    assert blob["aad"] == "key" and blob["kid"] == plugin.keyring.primary_kid  # type: ignore[union-attr]
    with pytest.raises(Exception):
        reference_decrypt(raw, TEST_SECRET, TEST_SECRET + "alice", "remember:user:alice")


@pytest.mark.parametrize("compatible", [False, True])
def test_reads_both_envelope_forms(
    make_plugin: Callable[..., RememberPlugin], compatible: bool
) -> None:
    """Either writer's envelopes are read by either reader."""
    writer = make_plugin(encryption={"frontmcp_compatible": compatible}).accessor(ALICE)
    reader = make_plugin(encryption={"frontmcp_compatible": not compatible}).accessor(ALICE)
    writer.set("k", [1, "two"], scope="session")
    assert reader.get("k") == [1, "two"]


def _moved(store: Store, source: str, target: str) -> None:
    raw = store.get(source)
    assert raw is not None
    store.set(target, raw)


def test_value_copied_to_another_key_fails_logged_and_counted(
    plugin: RememberPlugin, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A bound envelope copied to another key of the same identity does not open there."""
    mem = plugin.accessor(ALICE)
    mem.set("secret", "s3cr3t", scope="user")
    _moved(store, "remember:v2:user:alice:secret", "remember:v2:user:alice:public")
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        assert mem.get("public", scope="user", default="absent") == "absent"
        assert mem.get("public", scope="user", default="absent") == "absent"
    assert plugin.stats()["unreadable"] == 1  # keys, not reads
    warnings = [r for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(warnings) == 1  # one warning per key
    # Named by scope, bare key and a hash of the namespace: never the identity in clear.
    assert "user entry 'public' (namespace #" in warnings[0].getMessage()
    assert "alice" not in warnings[0].getMessage()
    assert mem.get("secret", scope="user") == "s3cr3t"


@pytest.mark.parametrize("field", ["tag", "data", "iv"])
def test_tampered_envelope_fails_logged_and_counted(
    plugin: RememberPlugin, store: Store, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Flipping a bit in tag, data or iv makes the entry unreadable, loudly."""
    mem = plugin.accessor(ALICE)
    mem.set("k", "value-123")
    skey = "remember:v2:session:s-1:k"
    blob = json.loads(store.get(skey) or "")
    raw = bytearray(b64url(blob[field]))
    raw[0] ^= 1
    blob[field] = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    store.set(skey, json.dumps(blob))
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        assert mem.get("k") is None
        assert mem.knows("k") is False
        assert mem.list() == []
    assert plugin.stats()["unreadable"] == 1  # one key, read three times
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 1


def test_wrong_secret_fails_logged_and_counted(
    make_plugin: Callable[..., RememberPlugin], caplog: pytest.LogCaptureFixture
) -> None:
    """An entry sealed under another secret is unreadable, logged and counted."""
    make_plugin(encryption={"secrets": ["secret-A-0123456789abcdef0123"]}).accessor(ALICE).set(
        "k", 1
    )
    other = make_plugin(encryption={"secrets": ["secret-B-0123456789abcdef0123"]})
    with caplog.at_level(logging.WARNING, logger="remember_sync"):
        assert other.accessor(ALICE).get("k", default="x") == "x"
    assert other.stats()["unreadable"] == 1
    assert any("unreadable" in r.getMessage() for r in caplog.records)


def test_on_decrypt_error_raise(make_plugin: Callable[..., RememberPlugin]) -> None:
    """on_decrypt_error='raise' raises RememberDecryptionError instead of hiding the entry."""
    make_plugin(encryption={"secrets": ["secret-A-0123456789abcdef0123"]}).accessor(ALICE).set(
        "k", 1
    )
    strict = make_plugin(
        encryption={"secrets": ["secret-B-0123456789abcdef0123"]}, on_decrypt_error="raise"
    )
    with pytest.raises(RememberDecryptionError) as info:
        strict.accessor(ALICE).get("k")
    assert info.value.code == "REMEMBER_DECRYPTION_FAILED"
    with pytest.raises(RememberDecryptionError):
        strict.accessor(ALICE).update("k", 2)


@pytest.mark.parametrize(
    "garbage",
    ["not json", "{}", '{"alg":"A128GCM","iv":"","tag":"","data":""}', "[1]", '{"value":1}'],
)
def test_non_envelopes_are_unreadable_never_plaintext(
    plugin: RememberPlugin, store: Store, garbage: str
) -> None:
    """A value that does not look encrypted is unreadable, never returned as plaintext."""
    store.set("remember:v2:session:s-1:k", garbage)
    assert plugin.accessor(ALICE).get("k", default="absent") == "absent"
    assert plugin.stats()["unreadable"] == 1


def test_rotation_reads_old_writes_new(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """secrets=[new, old]: old entries read, new writes sealed under the new secret."""
    old, new = "old-secret-0123456789abcdef01234", "new-secret-0123456789abcdef01234"
    make_plugin(encryption={"secrets": [old]}).accessor(ALICE).set("k", "from-old")
    rotated = make_plugin(encryption={"secrets": [new, old]})
    mem = rotated.accessor(ALICE)
    assert mem.get("k") == "from-old"
    assert mem.update("k", "from-new")
    blob = json.loads(store.get("remember:v2:session:s-1:k") or "")
    assert blob["kid"] == rotated.keyring.primary_kid  # type: ignore[union-attr]
    only_new = make_plugin(encryption={"secrets": [new]}).accessor(ALICE)
    assert only_new.get("k") == "from-new"
    only_old = make_plugin(encryption={"secrets": [old]}).accessor(ALICE)
    assert only_old.get("k", default="unreadable") == "unreadable"


def test_rotation_from_environment(
    make_plugin: Callable[..., RememberPlugin], monkeypatch: pytest.MonkeyPatch
) -> None:
    """REMEMBER_SECRET plus REMEMBER_PREVIOUS_SECRETS: first encrypts, all decrypt."""
    make_plugin(encryption={"secrets": ["env-old-0123456789abcdef0123456"]}).accessor(ALICE).set(
        "k", 1
    )
    monkeypatch.setenv("REMEMBER_SECRET", "env-new-0123456789abcdef0123456")
    monkeypatch.setenv("REMEMBER_PREVIOUS_SECRETS", " env-x , env-old-0123456789abcdef0123456,")
    plugin = make_plugin(encryption={"secrets": None})
    assert plugin.keyring.source == "env:REMEMBER_SECRET"  # type: ignore[union-attr]
    assert plugin.accessor(ALICE).get("k") == 1


def test_custom_key_replaces_secret(
    make_plugin: Callable[..., RememberPlugin], store: Store
) -> None:
    """custom_key is the master secret when set (1.8.0 ignored it)."""
    custom = "custom-key-0123456789abcdef012345"
    plugin = make_plugin(encryption={"custom_key": custom, "frontmcp_compatible": True})
    plugin.accessor(ALICE).set("k", "v", scope="global")
    raw = store.get("remember:global:k") or ""
    assert json.loads(reference_decrypt(raw, custom, custom, "remember:global"))["value"] == "v"


def test_raw_values_hold_no_plaintext(plugin: RememberPlugin, store: Store) -> None:
    """No store holds the value or metadata in clear."""
    mem = plugin.accessor(ALICE)
    mem.set("k", "PLAINTEXT-VALUE-MARKER", metadata={"m": "PLAINTEXT-META-MARKER"}, brand="state")
    mem.set("u", {"deep": ["PLAINTEXT-VALUE-MARKER"]}, scope="user")
    # Bookkeeping keys (listing indexes, the reindex record) hold no values of ours.
    keys = [k for k in store.scan("*") if not k.startswith("remember:__")]
    assert len(keys) == 2
    for raw in store.get_many(keys):
        assert raw is not None
        assert "PLAINTEXT" not in raw and "state" not in raw


def test_one_hkdf_per_namespace(plugin: RememberPlugin) -> None:
    """Repeated operations on one (scope, identity) derive its key once."""
    mem = plugin.accessor(ALICE)
    for i in range(50):
        mem.set(f"k{i}", i)
        mem.get(f"k{i}")
        mem.update(f"k{i}", i + 1)
    mem.list()
    assert plugin.stats()["key_derivations"] == 1
    for scope in ("user", "tool", "global"):
        for _ in range(20):
            mem.set("x", 1, scope=scope)  # type: ignore[arg-type]
    assert plugin.stats()["key_derivations"] == 4


def test_seal_is_deterministic_with_injected_iv() -> None:
    """With an injected IV, seal reproduces a 1.8.0 vector byte for byte."""
    vector = VECTORS[0]
    blob = json.loads(vector["rawStoredValue"])
    key = bytes.fromhex(vector["derivedKeyHex"])
    assert (
        seal(vector["plaintext"].encode(), key, iv=b64url(blob["iv"])) == vector["rawStoredValue"]
    )


def test_namespace_of_vector_matches_scope_rules() -> None:
    """The namespaces used above are the ones our scope rules produce."""
    for vector in ENCRYPTED:
        if vector["name"] in ("user-anon-clientid-accepted", "tool-no-flow-defaults-unknown"):
            continue
        ns = resolve_namespace(vector_identity(vector), vector["scope"])
        assert ns == vector_namespace(vector)
        assert storage_key(vector["keyPrefix"], ns, vector["key"]) == vector["storageKey"]


# -- the one envelope parser and the entry grammar, against their definitions ---------------

NS = Namespace("session", session="s-1")
KEY = "remember:v2:session:s-1:k"
AAD = KEY[len("remember:") :].encode()
NOISE = st.sampled_from(list('{}[]",:=+/-_\\ aZ09\u00e9\x01\n'))


def _outcome(fn: Any, *args: Any) -> tuple[str, str]:
    try:
        return "ok", repr(fn(*args))
    except Exception as exc:  # noqa: BLE001 - the kind and text are what is compared
        return type(exc).__name__, str(exc)


def _mutate(text: str, data: st.DataObject) -> str:
    chars = list(text)
    for _ in range(data.draw(st.integers(0, 3))):
        chars[data.draw(st.integers(0, len(chars) - 1))] = data.draw(NOISE)
    return "".join(chars)


def _envelope_by_definition(stored: str) -> tuple[bytes, bytes, bytes, str | None, bool]:
    """SPEC section 4 read literally: JSON, A256GCM, base64url iv (12 B) / tag (16 B) / data."""
    try:
        obj = json.loads(stored)
    except ValueError as exc:
        raise RememberDecryptionError("not JSON") from exc
    if not isinstance(obj, dict) or obj.get("alg") != "A256GCM":
        raise RememberDecryptionError("not an envelope")
    fields = [obj.get(name) for name in ("iv", "tag", "data")]
    kid, aad = obj.get("kid"), obj.get("aad")
    if not all(isinstance(f, str) for f in fields) or aad not in (None, "key"):
        raise RememberDecryptionError("bad fields")
    if kid is not None and not isinstance(kid, str):
        raise RememberDecryptionError("bad kid")
    try:
        iv, tag, data = (base64.urlsafe_b64decode(_strict_b64url(f)) for f in fields)
    except ValueError as exc:
        raise RememberDecryptionError("not base64url") from exc
    if len(iv) != 12 or len(tag) != 16:
        raise RememberDecryptionError("wrong lengths")
    return iv, tag, data, kid, aad == "key"


def _strict_b64url(text: str) -> str:
    bare = text.rstrip("=")
    if any(c not in string.ascii_letters + string.digits + "-_" for c in bare):
        raise ValueError("alphabet")
    if len(bare) % 4 == 1:
        raise ValueError("length")
    return bare + "=" * (-len(bare) % 4)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), bound=st.booleans(), kid=st.booleans(), size=st.integers(0, 40))
def test_envelope_grammar_is_exactly_the_spec(
    data: st.DataObject, bound: bool, kid: bool, size: int
) -> None:
    """parse_envelope accepts what the SPEC's JSON envelope allows, with its fields, only."""
    keyring = Keyring(["current-secret"], source="test")
    stored = _mutate(
        seal(
            os.urandom(size),
            keyring.key(NS),
            kid=keyring.primary_kid if kid else None,
            aad=AAD if bound else None,
        ),
        data,
    )
    ours, spec = _outcome(parse_envelope, stored), _outcome(_envelope_by_definition, stored)
    assert ours[0] == "ok" or ours[0] == "RememberDecryptionError"
    assert (ours[0] == "ok") == (spec[0] == "ok"), (stored, ours, spec)
    if ours[0] == "ok":
        env = parse_envelope(stored)
        assert (env.iv, env.tag, env.data, env.kid, env.aad) == _envelope_by_definition(stored)


_HEAD = (
    '{"alg":"A256GCM","kid":"d1dHah47","aad":"key",'
    '"iv":"JvP-uA4yCPgAAJij","tag":"A8h1Dbfhl4cCFAXCDjfLJQ",'
)


@pytest.mark.parametrize(
    "stored",
    [
        _HEAD + '"data":"}',  # the data's opening quote is no closing one
        _HEAD + '"data":""}',
        _HEAD + '"data":"AAAA"}',
        _HEAD + '"data":"AA=="}',  # padded: base64url, but not the canonical spelling
        _HEAD + '"data":"AA+/"}',  # standard base64, not base64url
        _HEAD + '"data":"AA\\u0041"}',  # a JSON escape
        _HEAD + '"data":"AAAAA"}',  # 4n+1 characters
        _HEAD + '"data":"AA","x":"BB"}',  # another member after the data
        _HEAD + '"data":"AA\u00e9A"}',  # not ASCII
        _HEAD + '"data":"AA\nA"}',
        _HEAD + '"data":"AAAA"} ',
        _HEAD + '"data":"AAAA"}}',
    ],
)
def test_envelope_edge_spellings_read_as_the_spec_reads_them(stored: str) -> None:
    """The canonical shortcut of the one parser agrees with the JSON reading at its edges."""
    ours, spec = _outcome(parse_envelope, stored), _outcome(_envelope_by_definition, stored)
    assert (ours[0] == "ok") == (spec[0] == "ok"), (stored, ours, spec)
    if ours[0] == "ok":
        env = parse_envelope(stored)
        assert (env.iv, env.tag, env.data, env.kid, env.aad) == _envelope_by_definition(stored)
    else:
        assert ours[0] == "RememberDecryptionError"


def test_a_key_that_is_not_utf8_seals_and_opens_bound_to_its_bytes() -> None:
    """A storage key read back from a store with bytes that are not UTF-8 (U+DC80..U+DCFF)
    binds the same bytes when sealed (rotate re-seals what it read) as when opened."""
    codec = EntryCodec(Keyring(["s"], source="t"), prefix="remember:")
    key = "remember:v2:session:s-1:k\udcff"
    entry = RememberEntry({"a": 1}, None, 1, 2, None, None)
    stored = codec.encode(entry, NS, key)
    assert codec.decode(stored, NS, key) == entry
    with pytest.raises(RememberDecryptionError):
        codec.decode(stored, NS, "remember:v2:session:s-1:k\u00ff")


def test_open_tries_every_secret() -> None:
    """An envelope of an older secret, or with its kid rewritten, opens; no secret of it fails."""
    old = Keyring(["older-secret"], source="test")
    both = Keyring(["current-secret", "older-secret"], source="test")
    stored = seal(b'{"value":1}', old.key(NS), kid=old.primary_kid, aad=AAD)
    assert both.open(stored, NS, AAD) == (b'{"value":1}', 1, True)
    relabelled = stored.replace(old.primary_kid, both.primary_kid)
    assert both.open(relabelled, NS, AAD)[1] == 1
    with pytest.raises(RememberDecryptionError):
        Keyring(["another"], source="t").open(stored, NS, AAD)
    with pytest.raises(RememberDecryptionError):
        both.open(stored, NS, b"v2:session:s-1:other")  # bound to another key


def test_seal_refuses_an_iv_of_the_wrong_length() -> None:
    """An injected IV must be 12 bytes: the envelope grammar reads no other."""
    with pytest.raises(ValueError, match="12 bytes"):
        seal(b"x", os.urandom(32), iv=bytes(16))


def test_codec_round_trip_through_every_form() -> None:
    """Sealed entries decode to themselves with and without key binding and encryption."""
    entry = RememberEntry({"a": [1, "\u00e9"]}, "cache", 1, 2, 3, {"m": True})
    for keyring in (Keyring(["s"], source="t"), None):
        for bind in (True, False):
            codec = EntryCodec(keyring, prefix="remember:", bind_key=bind)
            assert codec.decode(codec.encode(entry, NS, KEY), NS, KEY) == entry


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


def _entry_by_definition(text: str | bytes) -> tuple[Any, ...]:
    """The entry grammar read literally: json.loads, then the field checks."""
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

    def ms(value: Any, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise RememberDecryptionError(f"entry field {name} is not a finite number")
        if value in (float("inf"), float("-inf")):
            raise RememberDecryptionError(f"entry field {name} is not a finite number")
        return int(value)

    expires = obj.get("expiresAt")
    return (
        obj["value"],
        brand,
        ms(obj.get("createdAt"), "createdAt"),
        ms(obj.get("updatedAt"), "updatedAt"),
        None if expires is None else ms(expires, "expiresAt"),
        metadata,
    )


@pytest.mark.parametrize("text", ENTRY_TEXTS)
@pytest.mark.parametrize("form", ["str", "utf-8", "utf-16", "bom", "bad-utf-8"])
def test_entry_grammar_is_json_loads_and_the_field_checks(text: str, form: str) -> None:
    """entry_fields accepts and refuses exactly what json.loads and the field checks do."""
    raw: str | bytes = text
    if form == "utf-8":
        raw = text.encode("utf-8", "surrogatepass")
    elif form == "utf-16":
        raw = text.encode("utf-16")
    elif form == "bom":
        raw = b"\xef\xbb\xbf" + text.encode()
    elif form == "bad-utf-8":
        raw = text.encode() + b"\xff"
    assert _outcome(entry_fields, raw) == _outcome(_entry_by_definition, raw)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_damaged_entries_follow_the_grammar(data: st.DataObject) -> None:
    """Random damage to an entry is accepted or refused exactly as the grammar says."""
    text = _mutate(
        '{"value":{"a":[1,2,"x"]},"brand":"cache","createdAt":1,"updatedAt":2,'
        '"expiresAt":3,"metadata":{"k":"v"}}',
        data,
    )
    for raw in (text, text.encode("utf-8", "surrogatepass")):
        assert _outcome(entry_fields, raw) == _outcome(_entry_by_definition, raw)


# -- AES-GCM IVs stay unique when a signal handler encrypts in the middle of an encryption
#
# A ``random_iv`` that reads a per-thread offset, calls ``os.getpid()`` and only
# then stores the next offset hands a signal handler sealing in that gap the same IV
# under the same key (two ciphertexts XOR to the XOR of their plaintexts).  These
# tests run the attack with a real interval timer and a real Python signal handler.


IV_NS = Namespace("user", user="alice")
IV_AAD = b"user:alice:k"

needs_itimer = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="needs signal.setitimer (POSIX)"
)


def _seal_as_a_set(keyring: Keyring, plaintext: bytes) -> str:
    """The real write path of every set: the primary secret's key, its kid, the key bound."""
    return seal(plaintext, keyring.key(IV_NS), kid=keyring.primary_kid, aad=IV_AAD)


@pytest.fixture
def itimer() -> Iterator[None]:
    """Restore SIGALRM's handler and stop the timer whatever the test does."""
    previous = signal.getsignal(signal.SIGALRM)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _ivs_under_signal_storm(seconds: float) -> tuple[list[bytes], int]:
    """Seal in a loop while a 50 us interval timer's handler seals too; return IVs and calls."""
    keyring = Keyring([TEST_SECRET], source="explicit")
    keyring.key(IV_NS)  # derive outside the storm
    ivs: list[bytes] = []
    handled = [0]
    busy = [False]

    def handler(signum: int, frame: FrameType | None) -> None:
        # A handler that writes memory: the real write path of every set.  The
        # timer may fire again inside the handler; one level of re-entry is the attack.
        if busy[0]:
            return
        busy[0] = True
        try:
            ivs.append(parse_envelope(_seal_as_a_set(keyring, b"from the handler")).iv)
            handled[0] += 1
        finally:
            busy[0] = False

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            for _ in range(200):
                ivs.append(random_iv())
                ivs.append(parse_envelope(_seal_as_a_set(keyring, b"main loop")).iv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return ivs, handled[0]


@needs_itimer
def test_signal_handler_sealing_mid_seal_never_reuses_an_iv(itimer: None) -> None:
    """A real SIGALRM handler sealing between every few bytecodes of a seal loop gets fresh IVs."""
    ivs, handled = _ivs_under_signal_storm(1.5)
    assert handled >= 200, f"the timer fired only {handled} times; the attack did not run"
    assert all(len(iv) == IV_BYTES for iv in ivs)
    repeats = len(ivs) - len(set(ivs))
    assert repeats == 0, f"{repeats} IVs of {len(ivs)} were handed out twice"


@needs_itimer
def test_threads_and_handler_never_share_an_iv(itimer: None) -> None:
    """Four threads sealing while the main thread's signal handler seals: every IV is distinct."""
    keyring = Keyring([TEST_SECRET], source="explicit")
    stop = threading.Event()
    per_thread: list[list[bytes]] = [[] for _ in range(4)]

    def worker(out: list[bytes]) -> None:
        while not stop.is_set():
            out.append(parse_envelope(seal(b"thread", keyring.key(IV_NS), aad=IV_AAD)).iv)

    threads = [threading.Thread(target=worker, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    try:
        ivs, handled = _ivs_under_signal_storm(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    everything = ivs + [iv for out in per_thread for iv in out]
    assert handled > 0 and all(per_thread)
    repeats = len(everything) - len(set(everything))
    assert repeats == 0, f"{repeats} IVs of {len(everything)} were handed out twice"


def test_forked_child_draws_different_ivs() -> None:
    """A forked child's IVs never repeat the parent's, before or after the fork."""
    before = [random_iv() for _ in range(50)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.write(write, b"".join(random_iv() for _ in range(50)))
        finally:
            os._exit(0)
    os.close(write)
    after = [random_iv() for _ in range(50)]
    with os.fdopen(read, "rb") as fh:
        child_bytes = fh.read()
    os.waitpid(pid, 0)
    child = [child_bytes[i : i + IV_BYTES] for i in range(0, len(child_bytes), IV_BYTES)]
    assert len(child) == 50
    everything = before + after + child
    assert len(set(everything)) == len(everything)
