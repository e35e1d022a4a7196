"""Ed25519 signatures on the audit trail, and its verification with the public key only.

Every block carries ``"sig"``: a signature over the block's number, the MAC its
first event chains from, its sealed identity table and its events' text (MACs
included); the head and the retention checkpoint carry one over their fields.
A verifier holding only the public key checks, from the checkpoint to the
head: each block's signature, the sequence numbers (no gap, no repeat), each
block chaining from the previous block's last event, and the head naming the
last event -- so an edited, deleted, swapped, forged, reordered or truncated
event, and a forged checkpoint or head, are reported without the secret that
MACs the events and seals the identities.

A signature is ``<kid>.<base64url signature>``, ``kid`` the first 8 bytes of
SHA-256 of the raw public key: a verifier given several public keys (before
and after a rotation) uses the one each record names.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from ._crypto import Keyring, b64url_decode, b64url_encode
from .errors import RememberConfigurationError
from .stores.base import Store

_SIGN_INFO = b"remember:audit-trail-signing:v1"
_BLOCK = b"remember:audit-block:v1\x00"
_RECORD = b"remember:audit-record:v1\x00"


def key_id(public: Ed25519PublicKey) -> str:
    """The id a signature names its key by (base64url of 8 bytes of SHA-256)."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return b64url_encode(hashlib.sha256(raw).digest()[:8])


class Signer:
    """Signs the trail's blocks and records with one Ed25519 key."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self.private = private
        self.public = private.public_key()
        self.kid = key_id(self.public)

    def sign(self, message: bytes) -> str:
        """``<kid>.<signature>`` of *message*."""
        return f"{self.kid}.{b64url_encode(self.private.sign(message))}"

    def public_pem(self) -> str:
        """The public key as PEM (SubjectPublicKeyInfo), what ``audit public-key`` prints."""
        return self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")


def signer_for(keyring: Keyring, path: str | None) -> Signer:
    """The trail's signer: the key in *path* (PEM, PKCS#8 Ed25519), or one derived from
    the primary master secret under a label of its own.

    :raises RememberConfigurationError: *path* unreadable or not an Ed25519 private key.
    """
    if path is None:
        seed = keyring.purpose_keys(_SIGN_INFO)[0]
        return Signer(Ed25519PrivateKey.from_private_bytes(seed))
    try:
        with open(os.fspath(path), "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise RememberConfigurationError(
            f"RememberPlugin.init option 'audit.signing_key': {path!r} is not a readable "
            f"PEM private key: {exc}"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise RememberConfigurationError(
            f"RememberPlugin.init option 'audit.signing_key': {path!r} holds a "
            f"{type(key).__name__}, not an Ed25519 private key"
        )
    return Signer(key)


def load_public_keys(paths: Iterable[str]) -> dict[str, Ed25519PublicKey]:
    """Public keys by :func:`key_id`, from PEM files.

    :raises RememberConfigurationError: a file unreadable or not an Ed25519 public key.
    """
    out: dict[str, Ed25519PublicKey] = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                key = serialization.load_pem_public_key(f.read())
        except (OSError, ValueError) as exc:
            raise RememberConfigurationError(
                f"--public-key {path!r}: not a readable PEM public key: {exc}"
            ) from exc
        if not isinstance(key, Ed25519PublicKey):
            raise RememberConfigurationError(
                f"--public-key {path!r}: a {type(key).__name__}, not an Ed25519 public key"
            )
        out[key_id(key)] = key
    return out


def block_message(n: int, prev: str, who: str | None, events_text: str) -> bytes:
    """What a block's signature covers."""
    return _BLOCK + f"{n}\x00{prev}\x00{who or ''}\x00{events_text}".encode()


def record_message(kind: str, canonical: str) -> bytes:
    """What a head's or checkpoint's signature covers (its fields, sorted, no MAC)."""
    return _RECORD + kind.encode() + b"\x00" + canonical.encode()


def check(keys: Mapping[str, Ed25519PublicKey], message: bytes, sig: object) -> bool:
    """Whether *sig* is a signature of *message* by one of *keys* (the one it names)."""
    if not isinstance(sig, str) or "." not in sig:
        return False
    kid, _, raw = sig.partition(".")
    key = keys.get(kid)
    if key is None:
        return False
    try:
        key.verify(b64url_decode(raw), message)
    except (InvalidSignature, ValueError):
        return False
    return True


def canonical(obj: Mapping[str, Any]) -> str:
    """A head or checkpoint record's fields as MAC and signature cover them (sorted keys)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def compact(obj: Mapping[str, Any]) -> str:
    """An event's text as stored (fields in the order written)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class RawTrail:
    """A trail's records as stored: what a live store or a signed export holds."""

    checkpoint: str | None
    head: str | None
    #: (block number, its text), ascending.
    blocks: Sequence[tuple[int, str]]

    def export_lines(self) -> list[str]:
        """The records as JSON Lines (``audit export --signed``)."""
        lines = [json.dumps({"checkpoint": self.checkpoint}), json.dumps({"head": self.head})]
        lines += [json.dumps({"block": n, "text": text}) for n, text in self.blocks]
        return lines

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> RawTrail:
        """Read :meth:`export_lines` back.

        :raises RememberConfigurationError: a line that is not one of its records.
        """
        checkpoint = head = None
        blocks: list[tuple[int, str]] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if "block" in obj:
                    blocks.append((int(obj["block"]), str(obj["text"])))
                elif "checkpoint" in obj:
                    checkpoint = obj["checkpoint"]
                else:
                    head = obj["head"]
            except (ValueError, KeyError, TypeError) as exc:
                raise RememberConfigurationError(
                    f"export line {number}: not a record of a signed audit export"
                ) from exc
        return cls(checkpoint, head, sorted(blocks))


def _record(raw: str | None, kind: str, keys: Mapping[str, Ed25519PublicKey]
            ) -> tuple[dict[str, Any] | None, bool]:
    """(the record's fields, whether its signature verifies); ``(None, False)`` if absent."""
    if raw is None:
        return None, False
    try:
        record = json.loads(raw)
        record.pop("mac", None)
        sig = record.pop("sig", None)
    except (ValueError, AttributeError, TypeError):
        return {}, False
    return record, check(keys, record_message(kind, canonical(record)), sig)


@dataclass
class _Walk:
    """Where a public verification is in the chain."""

    seq: int
    prev: str
    head_seq: int
    problems: list[str]
    count: int = 0
    at_head: str | None = None
    ids: set[str] = field(default_factory=set)

    def events(self, n: int, events: Sequence[Any]) -> None:
        """Check block *n*'s events: sequence numbers, repeated ids; follow the chain."""
        for event in events:
            found = event.get("seq") if isinstance(event, dict) else None
            eid = event.get("id") if isinstance(event, dict) else None
            if found != self.seq:
                self.problems.append(f"event {self.seq} expected, found {found!r} in block {n} "
                                     "(events deleted, reordered, duplicated or inserted)")
            if isinstance(eid, str):
                if eid in self.ids:
                    self.problems.append(f"event {found!r} in block {n} is appended twice")
                self.ids.add(eid)
            self.seq = (found if isinstance(found, int) else self.seq) + 1
            self.prev = str(event.get("mac")) if isinstance(event, dict) else ""
            if found == self.head_seq:
                self.at_head = self.prev
            self.count += 1


def _start(trail: RawTrail, keys: Mapping[str, Ed25519PublicKey],
           problems: list[str]) -> tuple[int, int, str]:
    """(first block, first seq, prev MAC) from the signed checkpoint, or the genesis."""
    checkpoint, ok = _record(trail.checkpoint, "checkpoint", keys)
    if checkpoint is None:
        return 1, 1, ""
    if not ok:
        problems.append("the checkpoint's signature does not verify (edited, forged, or "
                        "signed by another key)")
        return 1, 1, ""
    return int(checkpoint["block"]), int(checkpoint["seq"]), str(checkpoint["prev"])


def verify_public(
    trail: RawTrail, keys: Mapping[str, Ed25519PublicKey]
) -> tuple[int, int, int, list[str]]:
    """Check *trail* with public keys only: (events, first seq, last seq, problems)."""
    problems: list[str] = []
    block, first, prev = _start(trail, keys, problems)
    head, head_ok = _record(trail.head, "head", keys)
    walk = _Walk(first, prev, int(head["seq"]) if head and head_ok else -1, problems)
    last_block, signed = block - 1, 0
    for n, text in trail.blocks:
        if n < block:
            continue  # before the checkpoint: trimmed
        if n != last_block + 1:
            problems.append(f"block(s) {last_block + 1}..{n - 1} missing (deleted)")
        last_block = n
        try:
            parsed = json.loads(text)
            events = parsed["events"]
            sig, who = parsed.get("sig"), parsed.get("who")
            events_text = ",".join(compact(e) for e in events)
        except (ValueError, KeyError, TypeError, AttributeError):
            problems.append(f"block {n} is not a well-formed block (edited)")
            continue
        if check(keys, block_message(n, walk.prev, who, events_text), sig):
            signed += 1
        else:
            problems.append(f"block {n}'s signature does not verify (edited, forged, moved, "
                            "its predecessor removed, or signed by another key)")
        walk.events(n, events)
    if trail.blocks and not signed:
        problems.append("no block is signed by the given public key(s): the trail was "
                        "signed by another key")
    last = walk.seq - 1
    if head is None:
        if walk.count:
            problems.append("the head record is missing (deleted)")
    elif not head_ok:
        problems.append("the head's signature does not verify (edited, forged, or signed "
                        "by another key)")
    elif walk.head_seq > last:
        problems.append(f"the trail ends at event {last} but its head records "
                        f"{walk.head_seq}: the last events were removed")
    elif walk.at_head is not None and walk.at_head != str(head["last"]):
        problems.append(f"event {walk.head_seq} is not the one the head names (rewritten)")
    return walk.count, first if walk.count else 0, last if walk.count else 0, problems


def read_raw(store: Store, prefix: str, *, chunk: int = 200) -> RawTrail:
    """The trail's records under *prefix* as *store* holds them (no secret needed):
    consecutive blocks from the checkpoint's first, until a chunk finds none."""
    head_key = f"{prefix}__audit__:"
    checkpoint = store.get(head_key + "checkpoint")
    n = 1
    if checkpoint is not None:
        try:
            n = max(1, int(json.loads(checkpoint)["block"]))
        except (ValueError, KeyError, TypeError):
            n = 1
    blocks: list[tuple[int, str]] = []
    while True:
        values = store.get_many([f"{head_key}b:{i:020d}" for i in range(n, n + chunk)])
        if all(v is None for v in values):
            break
        blocks += [(n + i, v) for i, v in enumerate(values) if v is not None]
        n += chunk
    return RawTrail(checkpoint, store.get(head_key + "head"), blocks)
