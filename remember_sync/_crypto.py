"""Encryption at rest: master secrets, HKDF-derived keys and AES-256-GCM envelopes.

Wire format (SPEC section 4), compatible with ``@frontmcp/plugin-remember`` 1.8.0::

    {"alg":"A256GCM","iv":"<b64url 12 B>","tag":"<b64url 16 B>","data":"<b64url ct>"}

Our default envelope adds ``"kid"`` (a short, non-secret id of the master
secret that sealed it) and ``"aad":"key"``: the ciphertext is then bound to
the storage key (without the prefix) as associated data, so a value copied to
another key fails to open.  Both forms are read.  With subject keys
(``docs/audit.rst``) an entry of a person is sealed under a key of that person
instead: the envelope carries ``"skid"`` (the id of that key in the keystore)
in place of ``"kid"``, always with ``"aad":"key"``.

Keys: ``HKDF-SHA256(ikm, salt="remember-plugin-v1", info, 32)`` with the
IKM/info table of :func:`hkdf_inputs`.  The secret is used as *text*; it is
never base64-decoded.  Derived keys are cached in a bounded LRU, so there is
at most one HKDF per (secret, scope, identity) while it stays cached.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import itertools
import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._bounded import BoundedCache
from ._fork import after_fork_in_child
from .errors import RememberConfigurationError, RememberDecryptionError
from .types import Namespace

HKDF_SALT = b"remember-plugin-v1"
ALG = "A256GCM"
IV_BYTES = 12
TAG_BYTES = 16


_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
#: Padding to add to base64 text of length 4n + i (i = 1 cannot be valid anyway).
_PAD = ("", "===", "==", "=")
a2b_base64 = binascii.a2b_base64


def b64url_encode(data: bytes) -> str:
    """Base64url (RFC 4648 section 5) without ``=`` padding."""
    # binascii directly: base64.urlsafe_b64encode is the same work behind two more calls.
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").translate(_TO_URLSAFE).decode(
        "ascii"
    )


def b64url_decode(text: str) -> bytes:
    """Decode unpadded (or padded) base64url; raise ``ValueError`` on anything else."""
    if not isinstance(text, str) or "+" in text or "/" in text:
        raise ValueError("not base64url")
    stripped = text.rstrip("=")
    try:
        # strict_mode rejects every character outside the alphabet (in C), like
        # b64decode(validate=True) without its Python-level wrappers.
        return binascii.a2b_base64(
            stripped.replace("-", "+").replace("_", "/") + "=" * (-len(stripped) % 4),
            strict_mode=True,
        )
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
    """A parsed envelope; ``aad`` tells whether the storage key is bound.

    ``skid`` is the subject key that sealed it (``None``: a master secret did).
    """

    iv: bytes
    tag: bytes
    data: bytes
    kid: str | None
    aad: bool
    skid: str | None = None


# The canonical spelling of an envelope, as :func:`seal` (and 1.8.0) write it: a
# 12-byte IV is 16 base64url characters and a 16-byte tag 22.  The expression
# recognises everything up to the data; the data (the rest, up to the closing
# ``"}``) is checked by strict base64 decoding, in C, which refuses every character
# outside the alphabet (quotes and backslashes included) once ``-_`` are mapped to
# ``+/`` -- so a text that also holds no ``+``, ``/`` or ``=`` of its own is
# base64url throughout, and json.loads would yield exactly these fields.
_CANONICAL_HEAD = re.compile(
    r'\{"alg":"A256GCM",(?:"kid":"([A-Za-z0-9_-]*+)",)?(?:"skid":"([A-Za-z0-9_-]{1,64})",)?'
    r'("aad":"key",)?'
    r'"iv":"([A-Za-z0-9_-]{16})","tag":"([A-Za-z0-9_-]{22})","data":"'
).match


#: A subject key id as :func:`seal` writes it (base64url, bounded).
_SKID = re.compile(r"[A-Za-z0-9_-]{1,64}").fullmatch


def _parse(stored: object) -> tuple[bytes, bytes, bytes, str | None, bool, str | None]:
    """The envelope parser: ``(iv, tag, data, kid, bound, skid)`` of a stored envelope.

    The grammar is a JSON object with ``"alg":"A256GCM"``, base64url ``iv`` (12
    bytes), ``tag`` (16 bytes) and ``data``, an optional string ``kid``, an
    optional non-empty string ``skid`` (only together with ``"aad":"key"``) and an
    optional ``"aad":"key"``.  The canonical spelling (what :func:`seal` and 1.8.0
    write) is recognised by one regular expression up to the data and by strict
    base64 decoding of the data; any other spelling (key order, spacing, escapes,
    padding) is read by :mod:`json` against the same rules, and every refusal is
    raised from there.

    :raises RememberDecryptionError: when *stored* is not a well-formed envelope.
    """
    found = _CANONICAL_HEAD(stored) if type(stored) is str else None
    if found is not None:
        text: str = found.string
        # endswith from the data on: the quote that opens the data cannot close it too.
        end = found.end()
        if text.endswith('"}', end) and "+" not in text and "/" not in text and "=" not in text:
            kid, skid, bound, iv, tag = found.groups()
            body = text[end:-2]
            try:
                # IV and tag (16 + 22 characters) decode in one call: 12 + 16 bytes.
                ivtag = a2b_base64((iv + tag).replace("-", "+").replace("_", "/") + "==")
                sealed = a2b_base64(
                    body.replace("-", "+").replace("_", "/") + _PAD[len(body) % 4],
                    strict_mode=True,
                )
                if skid is None or bound is not None:
                    return (ivtag[:IV_BYTES], ivtag[IV_BYTES:], sealed, kid, bound is not None,
                            skid)
            except ValueError:
                pass  # not base64url, or 4n+1 characters: the JSON reading says why
    try:
        obj = json.loads(stored)  # type: ignore[arg-type]
    except (ValueError, TypeError, RecursionError) as exc:
        raise RememberDecryptionError("stored value is not an envelope (not JSON)") from exc
    if not isinstance(obj, dict) or obj.get("alg") != ALG:
        raise RememberDecryptionError("stored value is not an A256GCM envelope")
    iv, tag, data = obj.get("iv"), obj.get("tag"), obj.get("data")
    kid, aad, skid = obj.get("kid"), obj.get("aad"), obj.get("skid")
    if not (isinstance(iv, str) and isinstance(tag, str) and isinstance(data, str)):
        raise RememberDecryptionError("envelope lacks string iv, tag and data")
    if kid is not None and not isinstance(kid, str):
        raise RememberDecryptionError("envelope kid is not a string")
    if aad not in (None, "key"):
        raise RememberDecryptionError("envelope names an unknown aad binding")
    if skid is not None and (
        not isinstance(skid, str) or _SKID(skid) is None or aad != "key"
    ):
        raise RememberDecryptionError("envelope skid is not a key id bound to its key")
    try:
        raw_iv, raw_tag, raw_data = b64url_decode(iv), b64url_decode(tag), b64url_decode(data)
    except ValueError as exc:
        raise RememberDecryptionError("envelope fields are not base64url") from exc
    if len(raw_iv) != IV_BYTES or len(raw_tag) != TAG_BYTES:
        raise RememberDecryptionError("envelope iv or tag has the wrong length")
    return raw_iv, raw_tag, raw_data, kid, aad == "key", skid


def envelope_form(stored: str) -> tuple[str | None, bool]:
    """The ``(kid, binds the storage key)`` of a well-formed envelope.

    For callers that only need to know which form an envelope is (the legacy purge).

    :raises RememberDecryptionError: when *stored* is not a well-formed envelope.
    """
    kid, bound = _parse(stored)[3:5]
    return kid, bound


def parse_envelope(stored: str) -> Envelope:
    """Parse a stored envelope string.

    :raises RememberDecryptionError: when *stored* is not a well-formed envelope.
    """
    return Envelope(*_parse(stored))


# -- IVs -------------------------------------------------------------------------------


#: Bytes of the per-process random field of an IV; the rest is the invocation counter.
_IV_FIXED_BYTES = 8
_IV_COUNTER_LIMIT = 1 << (8 * (IV_BYTES - _IV_FIXED_BYTES))
_iv_fixed = os.urandom(_IV_FIXED_BYTES)
_iv_counter = itertools.count()


def _new_iv_field() -> None:
    """A forked child draws its own fixed field and restarts its counter."""
    global _iv_fixed, _iv_counter
    _iv_fixed = os.urandom(_IV_FIXED_BYTES)
    _iv_counter = itertools.count()


after_fork_in_child(_new_iv_field)


def random_iv() -> bytes:
    """A 12-byte IV that no other call of any process uses with the same key.

    NIST SP 800-38D's deterministic construction (section 8.2.1): a fixed field of
    8 random bytes drawn once per process (again in a forked child) and a 4-byte
    invocation counter.  Unique by construction:

    * threads and re-entrancy: the counter is advanced by one ``next()`` on an
      :func:`itertools.count`, a single C call that no other thread and no
      signal handler can interleave with, so no two calls get the same number
      (reading an offset and storing the next one in two steps would let a signal
      handler sealing in between get the same IV).
    * forks: the child draws a new fixed field before it runs any code, so
      parent and child never share one; processes on other machines draw theirs
      independently (two of *k* processes share a field with probability about
      ``k**2 / 2**65``).
    * after 2**32 IVs in one process (a counter that would wrap) each IV is one
      :func:`os.urandom` call.

    No system call per write: ``os.urandom`` releases the GIL, and one call per
    write makes concurrent writer threads convoy (docs/benchmarks.rst).
    The IV reveals which writes one process made, and in what order; nothing
    about the data.
    """
    count = next(_iv_counter)
    if count >= _IV_COUNTER_LIMIT:
        return os.urandom(IV_BYTES)
    return _iv_fixed + count.to_bytes(IV_BYTES - _IV_FIXED_BYTES, "big")


def seal(
    plaintext: bytes,
    key: bytes | AESGCM,
    *,
    kid: str | None = None,
    aad: bytes | None = None,
    iv: bytes | None = None,
    skid: str | None = None,
) -> str:
    """Encrypt *plaintext* into an envelope string: the one sealer.

    With ``aad`` the envelope is our bound form (``"aad":"key"``, with ``kid`` when
    given, or ``skid``: the subject key that seals); without ``aad`` and ``kid`` it
    is byte-compatible with the reference.
    ``iv`` (12 bytes) is for known-answer tests only; by default :func:`random_iv`.
    """
    if iv is None:
        iv = random_iv()
    elif len(iv) != IV_BYTES:
        raise ValueError(f"iv must be {IV_BYTES} bytes; got {len(iv)}")
    aead = key if isinstance(key, AESGCM) else AESGCM(key)
    sealed = aead.encrypt(iv, plaintext, aad)
    # 12 bytes are exactly 16 characters, so one encoding serves IV and tag.
    ivtag = b64url_encode(iv + sealed[-TAG_BYTES:])
    head = '{"alg":"A256GCM",' if kid is None else f'{{"alg":"A256GCM","kid":"{kid}",'
    if skid is not None:
        head += f'"skid":"{skid}",'
    if aad is not None:
        head += '"aad":"key",'
    data = b64url_encode(sealed[:-TAG_BYTES])
    return f'{head}"iv":"{ivtag[:16]}","tag":"{ivtag[16:]}","data":"{data}"}}'


def open_sealed(stored: str, keys: Sequence[bytes], aad: bytes) -> bytes:
    """Open an envelope :func:`seal` made with one of *keys* (raw 32-byte keys) and *aad*.

    For the bookkeeping records sealed under a purpose key
    (:meth:`Keyring.purpose_keys`), not entries (:meth:`Keyring.open`).

    :raises RememberDecryptionError: not an envelope, or no key opens it.
    """
    iv, tag, data = _parse(stored)[:3]
    for key in keys:
        try:
            return AESGCM(key).decrypt(iv, data + tag, aad)
        except InvalidTag:
            continue
    raise RememberDecryptionError(_UNOPENED)


#: Why an envelope without the key binding is unreadable under ``accept_unbound=False``.
UNBOUND_REFUSED = (
    "envelope is not bound to its storage key (the 1.8.0 form) and accept_unbound is off"
)
_UNOPENED = (
    "entry could not be decrypted with any configured secret (wrong secret, "
    "tampered, or moved from another key)"
)


#: Why an entry whose subject key is gone from the keystore cannot be read.
SUBJECT_KEY_GONE = "its subject key was erased (crypto-shredded) or is not in this keystore"
#: Why an envelope sealed by a subject key is unreadable without subject keys.
SUBJECT_KEYS_OFF = (
    "entry is sealed under a subject key (skid) and subject_keys is off: configure the "
    "keystore (docs/audit.rst)"
)


class SubjectSealer(Protocol):
    """Seals and opens entries under per-person keys (``encryption.subject_keys``)."""

    def open_subject(
        self, skid: str, ns: Namespace, iv: bytes, sealed: bytes, aad: bytes | None
    ) -> bytes:
        """Decrypt *sealed* (ciphertext and tag) under subject key *skid* for *ns*.

        :raises RememberDecryptionError: the key is gone (erased) or does not open it.
        :raises RememberStoreError: the keystore failed.
        """
        ...

    def seal_subject(
        self, text: bytes, ns: Namespace, aad: bytes, user: str | None, like: str | None
    ) -> str | None:
        """*text* sealed under the person's key (*user*, or the subject key the stored
        envelope *like* names); ``None`` when there is no person to seal for."""
        ...


class Keyring:
    """The master secrets (first encrypts, all decrypt) and the derived-key cache.

    :param secrets: master secrets, newest first.
    :param source: where the first secret came from (``"explicit"``,
        ``"env:REMEMBER_SECRET"``, ``"file:<path>"``, ``"ephemeral"``);
        never the secret itself.
    :param cache_size: how many derived keys to keep.
    """

    def __init__(self, secrets: Sequence[str], *, source: str, cache_size: int = 4096) -> None:
        cleaned = list(secrets)
        if not cleaned or any(not isinstance(s, str) or not s for s in cleaned):
            raise RememberConfigurationError("encryption secrets must be non-empty strings")
        self._secrets = tuple(dict.fromkeys(cleaned))
        #: The key ids of the secrets, newest first.
        self.kids = tuple(key_id(s) for s in self._secrets)
        #: The key id of the secret that seals.
        self.primary_kid = self.kids[0]
        self._order = tuple(range(len(self._secrets)))
        self.source = source
        self._cache_size = cache_size
        self._cache: BoundedCache[tuple[int, str, str | None, str | None, str | None], AESGCM]
        self._cache = BoundedCache(cache_size)
        # Re-entrant: a signal handler's call may count while its thread, interrupted,
        # holds it (a plain lock would wait for ever).
        self._lock = threading.RLock()
        #: How many HKDF derivations ran (a test pins "one per namespace").
        self.derivations = 0
        self._purpose: dict[bytes, tuple[bytes, ...]] = {}
        #: Per-person keys (``encryption.subject_keys``), or ``None``.
        self.subjects: SubjectSealer | None = None
        after_fork_in_child(self._after_fork_in_child)

    def __repr__(self) -> str:
        return (
            f"Keyring(secrets={len(self._secrets)}, kids={list(self.kids)}, "
            f"source={self.source!r})"
        )

    def key(self, ns: Namespace, index: int = 0) -> AESGCM:
        """The AEAD for *ns*'s derived key under secret number *index* (cached)."""
        # Plain strings as the key: their hashes are cached, where a dataclass
        # __hash__ is a Python call.  A hit takes no lock.
        cache_key = (index, ns.scope, ns.session, ns.user, ns.tool)
        found = self._cache.get(cache_key)
        if found is None:
            found = AESGCM(derive_key(self._secrets[index], ns))
            self._cache.put(cache_key, found)
            with self._lock:
                self.derivations += 1
        return found

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held a lock at the fork (see _fork);
        # the cache is only a cache, so the child starts with an empty one.
        self._lock = threading.RLock()
        self._cache = BoundedCache(self._cache_size)

    def open(
        self,
        stored: str,
        ns: Namespace,
        aad: bytes | None,
        *,
        bound_only: bool = False,
        current: AESGCM | None = None,
    ) -> tuple[bytes, int, bool]:
        """Parse and decrypt a stored envelope of *ns*: the one opener.

        The secret its ``kid`` names is tried first, then the others; *aad* is
        used when the envelope binds the storage key.

        :param bound_only: refuse an envelope that does not bind the storage key
            (1.8.0's form), even when it opens (:data:`UNBOUND_REFUSED`).
        :param current: ``self.key(ns)``, when the caller already has it.
        :returns: the plaintext, the index of the secret that opened it, and
            whether the envelope binds the storage key.
        :raises RememberDecryptionError: when it is not an envelope or no secret opens it.
        """
        iv, tag, data, kid, bound, skid = _parse(stored)
        sealed = data + tag
        associated = aad if bound else None
        if skid is not None:
            if self.subjects is None:
                raise RememberDecryptionError(SUBJECT_KEYS_OFF)
            return self.subjects.open_subject(skid, ns, iv, sealed, associated), 0, True
        order: Sequence[int] = self._order
        if kid != self.primary_kid and len(order) > 1 and kid in self.kids:
            first = self.kids.index(kid)
            order = (first, *(i for i in order if i != first))
        for index in order:
            aead = current if index == 0 and current is not None else self.key(ns, index)
            try:
                plaintext = aead.decrypt(iv, sealed, associated)
            except InvalidTag:
                continue
            if bound_only and not bound:
                raise RememberDecryptionError(UNBOUND_REFUSED)
            return plaintext, index, bound
        raise RememberDecryptionError(_UNOPENED)

    def open_many(
        self,
        stored: Sequence[str],
        ns: Namespace,
        aads: Sequence[bytes | None],
        *,
        bound_only: bool = False,
    ) -> list[tuple[bytes, int, bool] | RememberDecryptionError]:
        """:meth:`open` over many envelopes of *ns*: each result, or its error.

        The namespace's current key is looked up once for them all, and an
        envelope the current secret sealed (no other ``kid``) and that *bound_only*
        accepts is opened here at once -- the first try :meth:`open` would make.
        Every other envelope, and every refusal, goes through :meth:`open`.
        """
        current = self.key(ns)
        primary = self.primary_kid
        out: list[tuple[bytes, int, bool] | RememberDecryptionError] = []
        for text, aad in zip(stored, aads, strict=True):
            try:
                iv, tag, data, kid, bound, skid = _parse(text)
                if (
                    (kid is None or kid == primary)
                    and skid is None
                    and (bound or not bound_only)
                ):
                    try:
                        out.append((current.decrypt(iv, data + tag, aad if bound else None), 0,
                                    bound))
                        continue
                    except InvalidTag:
                        pass  # an older secret, or not ours: open() tries them and says why
                out.append(self.open(text, ns, aad, bound_only=bound_only, current=current))
            except RememberDecryptionError as exc:
                out.append(exc)
        return out

    #: HKDF ``info`` of the key that signs session ids (IKM: the master secret as text,
    #: salt: :data:`HKDF_SALT`).  No namespace's info can equal it: theirs are
    #: ``remember:global``, ``remember:user:``..., ``remember:session:``... and
    #: ``remember:tool:``...
    SESSION_SIGNING_INFO = b"remember:session-id-signing:v1"

    def _session_signing_keys(self) -> tuple[bytes, ...]:
        return self.purpose_keys(self.SESSION_SIGNING_INFO)

    def purpose_keys(self, info: bytes) -> tuple[bytes, ...]:
        """32-byte keys of their own for one purpose, one per secret, newest first (cached).

        ``HKDF-SHA256(secret, salt="remember-plugin-v1", info=info)``: the owner
        records, the audit trail and erasure receipts each MAC with such a key,
        never with the master secret.  *info* must differ from every namespace's
        (``remember:global``, ``remember:user:``...) and from the signing key's.
        """
        found = self._purpose.get(info)
        if found is None:
            found = tuple(
                HKDF(algorithm=hashes.SHA256(), length=32, salt=HKDF_SALT, info=info).derive(
                    secret.encode("utf-8")
                )
                for secret in self._secrets
            )
            self._purpose[info] = found  # racing threads derive the same bytes
        return found

    def hmac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of *message* under the primary secret's session-id signing key.

        The key is ``HKDF-SHA256(secret, salt="remember-plugin-v1",
        info="remember:session-id-signing:v1")``: a key of its own, as every
        encryption key is, so no MAC the server hands out is ever computed with
        the master secret itself.
        """
        return hmac.new(self._session_signing_keys()[0], message, hashlib.sha256).digest()

    def verify_hmac(self, message: bytes, mac: bytes, *, legacy: bool = False) -> bool:
        """Constant-time check of *mac* against every configured secret.

        :param legacy: check MACs made the pre-HKDF way, with the raw master
            secret as the HMAC key (session ids issued before the signing key
            was derived; :class:`~remember_sync.mcp.SessionSigner` accepts
            them only within their signed lifetime).
        """
        keys = (
            tuple(s.encode("utf-8") for s in self._secrets)
            if legacy
            else self._session_signing_keys()
        )
        ok = False
        for key in keys:
            expected = hmac.new(key, message, hashlib.sha256).digest()
            ok |= hmac.compare_digest(expected, mac)
        return ok
