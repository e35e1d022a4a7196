"""Encryption at rest: master secrets, HKDF-derived keys and AES-256-GCM envelopes.

Wire format (SPEC section 4), compatible with ``@frontmcp/plugin-remember`` 1.8.0::

    {"alg":"A256GCM","iv":"<b64url 12 B>","tag":"<b64url 16 B>","data":"<b64url ct>"}

Our default envelope adds ``"kid"`` (a short, non-secret id of the master
secret that sealed it) and ``"aad":"key"``: the ciphertext is then bound to
the storage key (without the prefix) as associated data, so a value copied to
another key fails to open.  Both forms are read.

Keys: ``HKDF-SHA256(ikm, salt="remember-plugin-v1", info, 32)`` with the
IKM/info table of :func:`hkdf_inputs`.  The secret is used as *text*; it is
never base64-decoded.  Derived keys are cached in a bounded LRU, so there is
at most one HKDF per (secret, scope, identity) while it stays cached.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import RememberConfigurationError, RememberDecryptionError
from .types import Namespace

__all__ = [
    "HKDF_SALT",
    "Envelope",
    "Keyring",
    "b64url_decode",
    "b64url_encode",
    "derive_key",
    "hkdf_inputs",
    "key_id",
    "open_envelope",
    "parse_envelope",
    "seal",
]

HKDF_SALT = b"remember-plugin-v1"
ALG = "A256GCM"
IV_BYTES = 12
TAG_BYTES = 16


def b64url_encode(data: bytes) -> str:
    """Base64url (RFC 4648 section 5) without ``=`` padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode unpadded (or padded) base64url; raise ``ValueError`` on anything else."""
    if not isinstance(text, str) or "+" in text or "/" in text:
        raise ValueError("not base64url")
    stripped = text.rstrip("=")
    try:
        # validate=True rejects every character outside the alphabet (in C).
        return base64.b64decode(stripped + "=" * (-len(stripped) % 4), b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


def key_id(secret: str) -> str:
    """A short public id of a master secret (a truncated, domain-separated hash)."""
    digest = hashlib.sha256(b"remember_sync key id\x00" + secret.encode("utf-8")).digest()
    return b64url_encode(digest[:6])


def hkdf_inputs(secret: str, ns: Namespace) -> tuple[bytes, bytes]:
    """The HKDF (IKM, info) pair of SPEC section 4 for one namespace."""
    if ns.scope == "global":
        ikm, info = secret, "remember:global"
    elif ns.scope == "user":
        assert ns.user is not None
        ikm, info = secret + ns.user, f"remember:user:{ns.user}"
    elif ns.scope == "session":
        assert ns.session is not None
        ikm, info = secret + ns.session, f"remember:session:{ns.session}"
    else:
        assert ns.session is not None and ns.tool is not None
        ikm, info = secret + ns.session, f"remember:tool:{ns.tool}:{ns.session}"
    return ikm.encode("utf-8"), info.encode("utf-8")


def derive_key(secret: str, ns: Namespace) -> bytes:
    """HKDF-SHA256 of one namespace's key under *secret* (32 bytes)."""
    ikm, info = hkdf_inputs(secret, ns)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=HKDF_SALT, info=info).derive(ikm)


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope; ``aad`` tells whether the storage key is bound."""

    iv: bytes
    tag: bytes
    data: bytes
    kid: str | None
    aad: bool


def parse_envelope(stored: str) -> Envelope:
    """Parse a stored envelope string.

    :raises RememberDecryptionError: when *stored* is not a well-formed envelope.
    """
    try:
        obj = json.loads(stored)
    except (ValueError, TypeError, RecursionError) as exc:
        raise RememberDecryptionError("stored value is not an envelope (not JSON)") from exc
    if not isinstance(obj, dict) or obj.get("alg") != ALG:
        raise RememberDecryptionError("stored value is not an A256GCM envelope")
    iv, tag, data = obj.get("iv"), obj.get("tag"), obj.get("data")
    kid, aad = obj.get("kid"), obj.get("aad")
    if not (isinstance(iv, str) and isinstance(tag, str) and isinstance(data, str)):
        raise RememberDecryptionError("envelope lacks string iv, tag and data")
    if kid is not None and not isinstance(kid, str):
        raise RememberDecryptionError("envelope kid is not a string")
    if aad not in (None, "key"):
        raise RememberDecryptionError("envelope names an unknown aad binding")
    try:
        env = Envelope(b64url_decode(iv), b64url_decode(tag), b64url_decode(data), kid, aad == "key")
    except ValueError as exc:
        raise RememberDecryptionError("envelope fields are not base64url") from exc
    if len(env.iv) != IV_BYTES or len(env.tag) != TAG_BYTES:
        raise RememberDecryptionError("envelope iv or tag has the wrong length")
    return env


def seal(
    plaintext: bytes,
    key: bytes | AESGCM,
    *,
    kid: str | None = None,
    aad: bytes | None = None,
    iv: bytes | None = None,
) -> str:
    """Encrypt *plaintext* into an envelope string.

    With ``aad`` the envelope is our bound form (``kid`` + ``"aad":"key"``);
    without it, and without ``kid``, it is byte-compatible with the reference.
    ``iv`` is for known-answer tests only; by default a fresh random IV is used.
    """
    nonce = iv if iv is not None else os.urandom(IV_BYTES)
    aead = key if isinstance(key, AESGCM) else AESGCM(key)
    sealed = aead.encrypt(nonce, plaintext, aad)
    ct, tag = sealed[:-TAG_BYTES], sealed[-TAG_BYTES:]
    head = f'{{"alg":"{ALG}",'
    if kid is not None:
        head += f'"kid":"{kid}",'
    if aad is not None:
        head += '"aad":"key",'
    return (
        f'{head}"iv":"{b64url_encode(nonce)}","tag":"{b64url_encode(tag)}",'
        f'"data":"{b64url_encode(ct)}"}}'
    )


def open_envelope(env: Envelope, key: bytes | AESGCM, aad: bytes | None) -> bytes:
    """Decrypt *env* with *key* (and *aad* when the envelope is bound).

    :raises RememberDecryptionError: on a wrong key or any tampering.
    """
    aead = key if isinstance(key, AESGCM) else AESGCM(key)
    try:
        return aead.decrypt(env.iv, env.data + env.tag, aad if env.aad else None)
    except InvalidTag as exc:
        raise RememberDecryptionError("entry failed authentication (wrong secret or tampered)") from exc


class Keyring:
    """The master secrets (first encrypts, all decrypt) and the derived-key cache.

    :param secrets: master secrets, newest first.
    :param source: where the first secret came from (``"explicit"``,
        ``"env:REMEMBER_SECRET"``, ``"file:<path>"``, ``"ephemeral"``);
        never the secret itself.
    :param cache_size: how many derived keys to keep.
    """

    def __init__(self, secrets: Sequence[str], *, source: str, cache_size: int = 4096) -> None:
        cleaned = [s for s in secrets]
        if not cleaned or any(not isinstance(s, str) or not s for s in cleaned):
            raise RememberConfigurationError("encryption secrets must be non-empty strings")
        self._secrets = tuple(dict.fromkeys(cleaned))
        self._kids = tuple(key_id(s) for s in self._secrets)
        self.source = source
        self._cache: OrderedDict[tuple[int, Namespace], AESGCM] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        #: How many HKDF derivations ran (a test pins "one per namespace").
        self.derivations = 0

    def __repr__(self) -> str:
        return f"Keyring(secrets={len(self._secrets)}, kids={list(self._kids)}, source={self.source!r})"

    @property
    def primary_kid(self) -> str:
        return self._kids[0]

    @property
    def kids(self) -> tuple[str, ...]:
        return self._kids

    def key(self, ns: Namespace, index: int = 0) -> AESGCM:
        """The AEAD for *ns*'s derived key under secret number *index* (cached)."""
        cache_key = (index, ns)
        with self._lock:
            found = self._cache.get(cache_key)
            if found is not None:
                self._cache.move_to_end(cache_key)
                return found
        derived = AESGCM(derive_key(self._secrets[index], ns))
        with self._lock:
            self.derivations += 1
            self._cache[cache_key] = derived
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return derived

    def candidates(self, kid: str | None) -> list[int]:
        """Secret indexes to try for an envelope: the one its kid names first, then the rest."""
        order = list(range(len(self._secrets)))
        if kid is not None and kid in self._kids:
            first = self._kids.index(kid)
            order.remove(first)
            order.insert(0, first)
        return order

    def open(self, env: Envelope, ns: Namespace, aad: bytes | None) -> tuple[bytes, int]:
        """Decrypt with each candidate secret; return the plaintext and the secret index."""
        for index in self.candidates(env.kid):
            try:
                return open_envelope(env, self.key(ns, index), aad), index
            except RememberDecryptionError:
                continue
        raise RememberDecryptionError(
            "entry could not be decrypted with any configured secret (wrong secret, "
            "tampered, or moved from another key)"
        )

    def hmac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of *message* under the primary secret (used to sign session ids)."""
        return hmac.new(self._secrets[0].encode("utf-8"), message, hashlib.sha256).digest()

    def verify_hmac(self, message: bytes, mac: bytes) -> bool:
        """Constant-time check of *mac* against every configured secret."""
        ok = False
        for secret in self._secrets:
            expected = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()
            ok |= hmac.compare_digest(expected, mac)
        return ok

