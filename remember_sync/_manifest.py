"""Verified mode's manifest: what must exist in one namespace, as its last writer left it.

The format (sealed by :class:`~remember_sync._integrity.Verifier`)::

    {"c": counter, "x": deadline or 0, "e": {bare key: [digest, deadline or 0, [alts]]}}

and the leases of Redis Cluster's two-step writes.  See ``docs/verified.rst``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._text import TEXT_ERRORS
from .errors import RememberIntegrityError

#: How long a manifest outlives the latest deadline it records (and how long an emptied one stays).
MANIFEST_GRACE_MS = 60_000

#: A manifest record: (digest or "" when the entry must be absent, deadline, other
#: versions accepted while a two-step write is under way).
Record = tuple[str, int | None, tuple[str, ...]]


def token(manifest: str | None) -> str | None:
    """What identifies a stored manifest to the store's scripts: its start, through the tag.

    Every manifest is sealed with a fresh random IV, and its GCM tag covers the
    rest, so no two manifests a writer with the secret stored share it.  A
    string someone else made with the same start can only make a reader or
    writer act on the manifest this token came from -- one that was stored
    and that they could have put back whole.
    """
    if manifest is None:
        return None
    cut = manifest.find(',"data":"')
    return manifest if cut < 0 else manifest[:cut]


def digest(stored: str) -> str:
    """The version of a stored string: base64url of the first 16 bytes of its SHA-256."""
    raw = hashlib.sha256(stored.encode("utf-8", TEXT_ERRORS)).digest()[:16]
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def record_json(key: str, rec: Record) -> str:
    """One record as its manifest JSON member: ``"key":["digest",deadline(,[alts])]``."""
    d, dl, alts = rec
    tail = f",{json.dumps(list(alts))}" if alts else ""
    return f'{_json_string(key)}:[{_json_string(d)},{dl or 0}{tail}]'


_json_string = json.encoder.encode_basestring


@dataclass(frozen=True)
class Manifest:
    """What must exist in one namespace, as the last writer with the secret left it."""

    counter: int = 0
    deadline: int | None = None
    records: Mapping[str, Record] = field(default_factory=dict)
    #: Each record's JSON member, carried from manifest to manifest: a write re-encodes
    #: the records it changes, not the whole namespace.  Complete (one per record) or
    #: empty (a manifest read from the store: replaced by the first ``member_texts``);
    #: never modified once the manifest exists.
    texts: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def member_texts(self) -> dict[str, str]:
        """:attr:`texts`, filled in for every record (never modify the result)."""
        texts = self.texts
        if len(texts) != len(self.records):
            # A new dict, swapped in whole: threads sharing a cached manifest each
            # see a complete one, never another thread's half-filled dict.
            texts = {key: record_json(key, rec) for key, rec in self.records.items()}
            object.__setattr__(self, "texts", texts)
        return texts

    def to_json(self) -> bytes:
        members = ",".join(self.member_texts().values())  # a JSON object: order is free
        body = f'{{"c":{self.counter},"x":{self.deadline or 0},"e":{{{members}}}}}'
        return body.encode("utf-8", TEXT_ERRORS)

    @classmethod
    def from_json(cls, text: bytes) -> Manifest:
        try:
            obj = json.loads(text)
            records: dict[str, Record] = {}
            for key, rec in obj["e"].items():
                d, dl = rec[0], rec[1]
                alts = tuple(rec[2]) if len(rec) > 2 else ()
                if not isinstance(d, str) or type(dl) is not int:
                    raise ValueError("record")
                if not all(isinstance(a, str) for a in alts):
                    raise ValueError("alts")
                records[key] = (d, dl or None, alts)
            counter, deadline = obj["c"], obj["x"]
            if type(counter) is not int or type(deadline) is not int:
                raise ValueError("counter")
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise RememberIntegrityError("the namespace's manifest is not a manifest") from exc
        return cls(counter, deadline or None, records)

    def live(self, now: int) -> dict[str, Record]:
        """The records a write carries over: pending ones, and those not yet expired."""
        soonest = min(filter(None, map(_DEADLINE, self.records.values())), default=None)
        if soonest is None or now < soonest:  # the usual case, decided in C
            return dict(self.records)
        return {
            k: r for k, r in self.records.items() if r[2] or r[1] is None or now < r[1]
        }


_DEADLINE = operator.itemgetter(1)


EMPTY = Manifest()

#: A change of one entry: its new stored string (``None``: delete it) and deadline.
Change = tuple[str | None, int | None]


#: How long other writers wait for a two-step writer to finish a key (then take over).
LEASE_MS = 2_000
#: An item of a record's ``alts`` that is a lease, not a version: ``"~<epoch ms>"``.
LEASE_MARK = "~"


def leased(manifest: Manifest, wanted: Mapping[str, Change], now: int) -> int:
    """Milliseconds until no key of *wanted* is leased by a writer between its steps (0: none)."""
    wait = 0
    for bare in wanted:
        rec = manifest.records.get(bare)
        if rec is not None:
            for item in rec[2]:
                if item.startswith(LEASE_MARK):
                    wait = max(wait, int(item[1:]) - now)
    return wait


def lease_end(rec: Record) -> int:
    """When the lease on a pending record runs out (0: it has none)."""
    return max((int(v[1:]) for v in rec[2] if v.startswith(LEASE_MARK)), default=0)


def manifest_deadline(records: Mapping[str, Record], now: int) -> int | None:
    """When a manifest holding *records* may expire: after its last entry, plus a grace."""
    deadlines = list(map(_DEADLINE, records.values()))
    if None in deadlines:
        return None
    return max(max(deadlines, default=now), now) + MANIFEST_GRACE_MS
