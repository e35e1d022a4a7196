"""The tamper-evident audit trail: one event per write, chained and MAC'd, in the store.

What an event holds: its sequence number, the time, the operation, the scope,
a keyed hash of the memory key and one of the namespace, the brand, the TTL,
the outcome (and a count for bulk operations), the tool name, and who --
principal and session -- sealed (AES-GCM) so that only holders of the secret
read them.  Never the value or the metadata.

**Chain.**  Each event carries ``mac = MAC(k, previous mac || event)`` (keyed BLAKE2b-256) where
the event's canonical JSON includes its sequence number; ``k`` is derived from
the master secret for this purpose alone.  Editing, deleting, reordering or
inserting an event breaks the chain at that point.  The tail is anchored by a
MAC'd *head* record naming the last block and event, so removing the last
events is detected too; a *witness* outside the store (:class:`TrailWitness`;
verified mode's, through :class:`WitnessAnchor`) also catches a head replaced
by an older copy of itself, or the whole store restored from a snapshot.  An
append that finds the store's trail behind its witness records a ``rollback``
event, so later appends cannot carry the trail past the witness and hide it.

**Storage** (any :class:`~remember_sync.stores.base.Store`, through its
protocol only): events are appended in *blocks*, ``P + "__audit__:b:" + n``
(zero-padded), each holding the events one flush wrote.  A block number is
claimed with ``SET ... NX``: two processes appending at once cannot both take
``n``; the loser reads block ``n``, continues the chain from its last event and
claims ``n + 1``.  So the trail of many processes is one chain, with no lock
and no server-side script.  The head ``P + "__audit__:head"`` is advanced by
compare-and-set, never backwards; a head left behind by a crash is caught up
by the next append.  The keys are no entries (they start neither with ``v2:``
nor ``global:``), so no scope lists them and no purge touches them.

**Intents and buffering.**  An operation stores its event as an *intent*
(``P + "__audit__:i:" + its id``: its fields, sealed identity and a block the
trail had reached) before it returns, then adds it to an in-process buffer;
the buffer is appended when it holds ``batch`` events, every ``flush_ms`` by a
daemon thread, on :meth:`AuditTrail.flush`, on every read of the trail and on
close, and each append deletes the intents of its events.  A process renews a
lease on its intents; once it has expired (the process stopped), a recovery
pass (:meth:`AuditTrail.recover`) moves them into the chain, skipping any
event already there (by its id).  So the event of an operation that returned
is never lost with its process.  The memory store dies with the process: no
intents there.

**Retention.**  Blocks older than ``retention_days`` and events beyond
``max_events`` are trimmed from the front.  A MAC'd *checkpoint*
(``P + "__audit__:checkpoint"``) first records the first block kept and the MAC
its first event chains from; then the older blocks are deleted.  Verification
starts at the checkpoint.
"""

from __future__ import annotations

import bisect
import collections
import functools
import hashlib
import hmac
import itertools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any, Protocol, runtime_checkable

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._audit_sign import (
    RawTrail,
    block_message,
    canonical,
    compact,
    read_raw,
    record_message,
    signer_for,
)
from ._bounded import BoundedCache
from ._clock import Clock
from ._crypto import HKDF_SALT, Keyring, b64url_encode, open_sealed, seal
from ._fork import after_fork_in_child
from ._keys import glob_escape
from .errors import RememberConfigurationError, RememberDecryptionError, RememberError
from .identity import current_identity, is_anonymous
from .stores.base import Store
from .stores.memory import MemoryStore
from .types import Identity

log = logging.getLogger("remember_sync")

#: What follows ``P`` in every key of the trail.
AUDIT_HEAD = "__audit__:"
_MAC_INFO = b"remember:audit-trail-mac:v1"
_SEAL_INFO = b"remember:audit-trail-identities:v1"
_HASH_INFO = b"remember:audit-trail-hashes:v1"
_PERSON_INFO = b"remember:audit-trail-person:v1"
DEFAULT_BATCH = 256
DEFAULT_FLUSH_MS = 200
DEFAULT_MAX_EVENTS = 1_000_000
DEFAULT_RETENTION_DAYS = 365
_CLAIM_ATTEMPTS = 10_000
#: Events one block holds at most (a store's value size stays small: ~200 bytes each).
_BLOCK_MAX = 1024
#: Events the buffer holds at most while the store refuses appends; older ones are
#: dropped and counted (a ``lost`` event records how many).
_MAX_BUFFER = 100_000
_READ_CHUNK = 200
#: How long a process's intents stay its own without renewal (renewed every flush): past
#: it, the process is taken as stopped and a recovery pass moves its intents.
_LEASE_MS = 30_000
_INTENT_AAD = b"remember:audit-intent:v1"
_OPTIONS = frozenset({"retention_days", "max_events", "batch", "flush_ms", "signing_key"})


def trail_exists(store: Store, prefix: str) -> bool:
    """Whether *store* holds an audit trail under *prefix* (its head record)."""
    return store.get(f"{prefix}{AUDIT_HEAD}head") is not None


def audit_settings(value: object, option: str = "audit") -> dict[str, Any] | None:
    """``audit=True | False | None | {...}`` checked: the settings, or ``None`` when off.

    :raises RememberConfigurationError: naming the bad key or value.
    """
    if value is None or value is False:
        return None
    given: Mapping[str, Any]
    if value is True:
        given = {}
    elif isinstance(value, Mapping):
        given = value
        unknown = sorted(set(given) - _OPTIONS)
        if unknown:
            raise RememberConfigurationError(
                f"RememberPlugin.init option {option!r}: unknown key(s) "
                f"{', '.join(map(repr, unknown))}; allowed: {sorted(_OPTIONS)}"
            )
    else:
        raise RememberConfigurationError(
            f"RememberPlugin.init option {option!r}: must be True, False or a dict; "
            f"got {type(value).__name__}"
        )
    out: dict[str, Any] = {
        "retention_days": given.get("retention_days", DEFAULT_RETENTION_DAYS),
        "max_events": given.get("max_events", DEFAULT_MAX_EVENTS),
        "batch": given.get("batch", DEFAULT_BATCH),
        "flush_ms": given.get("flush_ms", DEFAULT_FLUSH_MS),
    }
    for name, number in out.items():
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise RememberConfigurationError(
                f"RememberPlugin.init option '{option}.{name}': must be an int >= 1; "
                f"got {number!r}"
            )
    signing_key = given.get("signing_key")
    if signing_key is not None and not isinstance(signing_key, (str, os.PathLike)):
        raise RememberConfigurationError(
            f"RememberPlugin.init option '{option}.signing_key': must be the path of a PEM "
            f"Ed25519 private key; got {type(signing_key).__name__}"
        )
    out["signing_key"] = None if signing_key is None else os.fspath(signing_key)
    return out


class TrailWitness(Protocol):
    """Somewhere outside the store that remembers the trail's newest head.

    After each append the trail hands the new head to :meth:`record_head`;
    :meth:`AuditTrail.verify` asks :meth:`latest_head` and fails when the
    store's chain does not reach it (the store was rolled back, or its head
    replaced by an older copy).
    """

    def record_head(self, head: Mapping[str, Any]) -> None:
        """Remember *head* (``{"seq": int, "mac": str, ...}``) if it is newer."""
        ...

    def latest_head(self) -> Mapping[str, Any] | None:
        """The newest head recorded (``{"seq": int}`` and its ``"mac"`` or ``"tag"``), or
        ``None``."""
        ...


def _repeated(
    event: Mapping[str, Any], n: int, seq: int, ids: dict[str, object], problems: list[str]
) -> bool:
    """Whether *event* (in block *n*, where event *seq* is expected) repeats an earlier one:
    its id already seen, or its sequence number; each is added to *problems*."""
    found, eid = event.get("seq"), event.get("id")
    if isinstance(eid, str):
        if eid in ids:
            problems.append(f"event {found!r} in block {n} repeats event {ids[eid]!r} "
                            "(the same operation appended twice)")
        ids.setdefault(eid, found)
    if isinstance(found, int) and not isinstance(found, bool) and found < seq:
        problems.append(f"event {found} appears again in block {n} (duplicated sequence)")
        return True
    return False


@runtime_checkable
class _PersonKeys(Protocol):
    """Subject keys (``remember_sync._shred.SubjectKeys``), as the trail uses them."""

    def current(self, user: str) -> str: ...

    def data_key(self, skid: str) -> bytes: ...


class _Floors(Protocol):
    """Verified mode's witness, as the trail uses it (``remember_sync._integrity.Witness``)."""

    def floor(self, name: str) -> tuple[int, int | None]: ...

    def advance(self, name: str, counter: int, deadline: int | None) -> None: ...


def _tag(mac: str) -> int:
    """60 bits of an event's MAC as a positive int: what verified mode's witness keeps
    beside a counter (``0`` for a MAC that is not hex: it matches no event)."""
    try:
        return int(mac[:15], 16) + 1
    except ValueError:
        return 0


def _witnessed(seen: Mapping[str, Any], mac: str) -> bool:
    """Whether an event whose MAC is *mac* is the one a witness's head names."""
    if "mac" in seen:
        return hmac.compare_digest(str(seen["mac"]), mac)
    return hmac.compare_digest(str(seen.get("tag")).encode(), str(_tag(mac)).encode())


class WitnessAnchor:
    """A :class:`TrailWitness` kept in verified mode's witness (a file, a second store).

    That witness holds, per name, a counter it only ever raises and one integer
    beside it; the trail's head goes in as (its sequence number, 60 bits of its
    MAC) under a name only holders of the secret can compute.  Max-only, so
    processes appending at once leave the newest head, whatever their order.

    :param witness: an object with ``floor(name)`` and ``advance(name, counter, n)``.
    :param name: the trail's name in it.
    """

    def __init__(self, witness: _Floors, name: str) -> None:
        self.witness = witness
        self.name = name

    def record_head(self, head: Mapping[str, Any]) -> None:
        """Raise the recorded head to *head* unless a later one is recorded."""
        self.witness.advance(self.name, int(head["seq"]), _tag(str(head["mac"])))

    def latest_head(self) -> Mapping[str, Any] | None:
        """``{"seq": ..., "tag": ...}`` of the newest head recorded, or ``None``."""
        seq, tag = self.witness.floor(self.name)
        return {"seq": seq, "tag": tag} if seq > 0 else None


@dataclass(frozen=True)
class AuditEvent:
    """One recorded operation, as :meth:`AuditTrail.events` returns it.

    ``key_hash`` and ``namespace_hash`` are keyed hashes (base64url): equal
    keys hash equal, and only holders of the secret can compute one to look
    for.  ``principal`` and ``session`` are decrypted from the event (``None``
    when there was none, or it does not open).
    """

    seq: int
    at: int
    op: str
    scope: str | None
    key_hash: str | None
    namespace_hash: str | None
    brand: str | None
    ttl: int | None
    outcome: str
    count: int | None
    tool: str | None
    principal: str | None
    session: str | None
    #: What the operation produced that names it (an erasure: its receipt's MAC).
    ref: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (one line of ``remember-sync audit export``)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class AuditVerification:
    """What :meth:`AuditTrail.verify` found: ``ok`` and, if not, every problem."""

    ok: bool
    #: Events checked.
    events: int
    #: Sequence numbers of the first and last event checked (``0`` when none).
    first_seq: int
    last_seq: int
    problems: tuple[str, ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return self.ok


# An event waiting in the buffer: (at, op, scope, key, identity, brand, ttl, outcome, count,
# ref, id) -- as the caller gave them; checked and turned into text at the append.  The id
# is unique to the event (this process's random origin and a counter): the same event
# appended twice is seen as such by verify.
_Pending = tuple[
    int, str, object, object, Identity, object, object, str, "int | None", "str | None", str,
]


class _Fields(str):
    """An event's fields from ``op`` on, as recorded in an intent (in a recovered
    event's ``op`` place: the text :meth:`AuditTrail._fields_text` wrote for it)."""

    __slots__ = ()


class _NoAudit:
    """What :meth:`AccessorCore.audited` gives with the trail off: a context doing nothing."""

    outcome: str = "ok"
    count: int | None = None
    ref: str | None = None

    def __enter__(self) -> _NoAudit:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


#: The shared do-nothing recorder (setting ``outcome``/``count`` on it is harmless).
NO_AUDIT = _NoAudit()


class Recorder:
    """Records one operation when its ``with`` block ends: ``outcome`` (and ``count``)
    as set inside, or ``error:<code>`` when the block raised."""

    __slots__ = ("brand", "count", "ident", "key", "op", "outcome", "ref", "scope", "trail", "ttl")

    def __init__(
        self,
        trail: AuditTrail,
        op: str,
        ident: Identity | None,
        scope: object,
        key: object,
        brand: object,
        ttl: object,
    ) -> None:
        self.trail, self.op, self.ident, self.scope, self.key = trail, op, ident, scope, key
        self.brand, self.ttl = brand, ttl
        self.outcome = "ok"
        self.count: int | None = None
        self.ref: str | None = None

    def __enter__(self) -> Recorder:
        if self.ident is None:  # the context's identity, read now, inside the context
            try:
                self.ident = current_identity()
            except RememberError:
                self.ident = Identity()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        outcome = self.outcome
        if exc is not None:
            outcome = f"error:{getattr(exc, 'code', None) or type(exc).__name__}"
        trail, ident = self.trail, self.ident
        assert ident is not None  # resolved by __enter__
        trail._push((trail.clock(), self.op, self.scope, self.key, ident, self.brand, self.ttl,
                    outcome, self.count, self.ref, trail.new_id()))


_canonical = canonical


#: Strings JSON spells as they are: printable ASCII without ``"`` and ``\\``.
_PLAIN = re.compile(r'[ !#-\[\]-~]*').fullmatch


@functools.lru_cache(maxsize=1024)  # operations, outcomes, scopes, brands, tool names repeat
def _q(text: str) -> str:
    """*text* as a JSON string, exactly as :func:`json.dumps` writes it."""
    return f'"{text}"' if _PLAIN(text) else json.dumps(text)


_compact = compact


class AuditTrail:
    """The trail of one plugin (``plugin.audit``): record, flush, read, verify."""

    def __init__(self) -> None:
        raise TypeError("the audit trail is plugin.audit (RememberPlugin.init(audit=True))")

    def _setup(
        self,
        store: Store,
        keyring: Keyring | None,
        prefix: str,
        clock: Clock,
        settings: Mapping[str, Any],
        witness: TrailWitness | None = None,
    ) -> None:
        """Make this the trail of a plugin.

        :param store: where the trail lives (the plugin's store).
        :param keyring: the master secrets (the first MACs and seals; all verify and open).
        :param prefix: the key prefix ``P``.
        :param clock: epoch-millisecond clock.
        :param settings: :func:`audit_settings`.
        :param witness: a :class:`TrailWitness`, or ``None``.
        """
        if keyring is None:
            raise RememberConfigurationError(
                "RememberPlugin.init option 'audit': the trail is MAC'd and its identities "
                "sealed with the master secret; it needs encryption enabled"
            )
        self.store = store
        self.keyring = keyring
        self.prefix = prefix
        self.clock = clock
        self.retention_days: int = settings["retention_days"]
        self.max_events: int = settings["max_events"]
        self.batch: int = settings["batch"]
        self.flush_ms: int = settings["flush_ms"]
        # A block never holds more than max_events: retention keeps whole blocks.
        self._block_max = min(_BLOCK_MAX, self.max_events)
        self.witness = witness
        #: The storage-key head of (identity, scope); the core sets its own.
        self.head_of: Callable[[Identity, str], str] = lambda ident, scope: ""
        self._mac_keys = keyring.purpose_keys(_MAC_INFO)
        self._signer = signer_for(keyring, settings.get("signing_key"))
        self._seal_keys = keyring.purpose_keys(_SEAL_INFO)
        self._hash_key = keyring.purpose_keys(_HASH_INFO)[0]
        self._hashes: BoundedCache[tuple[str, str], str] = BoundedCache(4096)
        self._person_keys: BoundedCache[bytes, bytes] = BoundedCache(4096)
        self._fields: BoundedCache[tuple[Any, ...], str] = BoundedCache(4096)
        self._head_key = f"{prefix}{AUDIT_HEAD}head"
        self._checkpoint_key = f"{prefix}{AUDIT_HEAD}checkpoint"
        self._intent_head = f"{prefix}{AUDIT_HEAD}i:"
        # The memory store lives and dies with the process: an intent there outlives
        # nothing the buffer does not, so none is written.
        self._durable = not isinstance(store, MemoryStore)
        self._lease_ms = _LEASE_MS
        self._whos: BoundedCache[tuple[Any, Any], str] = BoundedCache(4096)
        self._closed = False
        self._reset()
        after_fork_in_child(self._reset)

    def _reset(self) -> None:
        # A forked child starts with no buffer (the parent's events are the parent's)
        # and no flusher thread (threads do not survive fork).
        self._pending: collections.deque[_Pending] = collections.deque()
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._appended = 0
        self._lost = 0
        self._origin = b64url_encode(os.urandom(6))
        self._ids = itertools.count(1)
        #: (block key, text, events) of an append whose outcome is unknown (it raised after
        #: claiming): settled by the next flush before anything else is appended.
        self._unsure: tuple[str, str, int, int] | None = None
        self._attempt: tuple[str, str] | None = None
        #: (first seq kept, newest time of the first block kept), or None: not read yet.
        self._front: tuple[int, int] | None = None
        #: A block number the trail had reached before any intent written since (an
        #: intent's event lands in a later block), or None: not read yet.
        self._known_block: int | None = None
        self._leased: float | None = None  # monotonic time of the last lease renewal
        self._recovered = -1e18  # monotonic time of the last recovery pass

    def new_id(self) -> str:
        """A new event id: unique to this process (a random origin) and to the event."""
        return f"{self._origin}{next(self._ids):x}"

    # -- recording ----------------------------------------------------------------------

    def record(
        self, op: str, ident: Identity | None, scope: object, *, outcome: str,
        count: int | None = None,
    ) -> None:
        """Record one event now, for an operation outside an accessor (as a :class:`Recorder`)."""
        with Recorder(self, op, ident, scope, None, None, None) as recorder:
            recorder.outcome, recorder.count = outcome, count

    def _push(self, event: _Pending) -> None:
        """Buffer *event*; append the buffer when it holds ``batch`` events.

        Only a tuple is built per operation: hashing, sealing and MACs happen
        at the append, once per block.
        """
        if self._durable:
            self._intend(event)  # before the buffer: a flush deletes only what it appended
        pending = self._pending
        pending.append(event)  # a deque: appends and pops are atomic, no lock needed
        if len(pending) >= self.batch:
            if len(pending) > _MAX_BUFFER:  # the store refuses appends: bounded memory
                pending.popleft()
                self._lost += 1
            self.flush()
        elif self._thread is None and not self._closed:
            self._start_flusher()

    def _intend(self, item: _Pending) -> None:
        """Store *item* as an intent (``P + "__audit__:i:" + id``) before its operation
        returns: its fields, time and sealed identity, and a block the trail had reached.
        The flush that appends the event deletes it; a recovery pass moves the intents of
        a stopped process into the chain (:meth:`AuditTrail.recover`)."""
        if self._leased is None or time.monotonic() - self._leased > self._lease_ms / 3000:
            self._renew()
        known = self._known_block
        if known is None:
            head = self._signed(self.store.get(self._head_key), "head")
            known = self._known_block = int(head["block"]) if head is not None else 0
        ident = item[4]
        who = None
        if ident.user_id is not None or ident.session_id is not None:
            who = self._whos.get((ident.user_id, ident.session_id))
            if who is None:
                text = json.dumps([ident.user_id, ident.session_id])
                who = seal(text.encode("utf-8", "surrogatepass"), self._seal_keys[0],
                           kid=self.keyring.primary_kid, aad=_INTENT_AAD)
                self._whos.put((ident.user_id, ident.session_id), who)
        self.store.set(self._intent_head + item[10],
                       json.dumps([item[0], self._fields_of(item), who, known]))

    def _renew(self) -> None:
        """Renew this process's lease on its intents (a key that expires unless renewed)."""
        self._leased = time.monotonic()
        self.store.set(f"{self.prefix}{AUDIT_HEAD}l:{self._origin}", "1", ttl_ms=self._lease_ms)

    def _forget(self, items: Sequence[_Pending]) -> None:
        """Delete the intents of *items*, now in the chain."""
        if not self._durable:
            return
        keys = [self._intent_head + item[10] for item in items]
        for i in range(0, len(keys), 500):
            self.store.delete(*keys[i : i + 500])

    def recover(self) -> int:
        """Move the intents of stopped processes into the chain; the events moved.

        A process is stopped when its lease has expired (it renews it on every flush).
        An event already in the chain (its process or an earlier pass appended it and
        stopped before deleting the intent) is recognised by its id and not appended
        again.  Runs when the flusher starts and every lease period after, and in
        ``remember-sync audit verify --repair``; :meth:`verify` reports intents left to move.
        """
        if not self._durable:
            return 0
        self._recovered = time.monotonic()
        moved = 0
        for origin, keys in self._stranded().items():
            claim = f"{self.prefix}{AUDIT_HEAD}r:{origin}"
            if not self.store.set(claim, self._origin, ttl_ms=self._lease_ms,
                                  only_if_absent=True):
                continue  # another process is moving them
            try:
                with self._flush_lock:
                    moved += self._move(keys)
            finally:
                self.store.delete(claim)
        return moved

    def _stranded(self) -> dict[str, list[str]]:
        """The intent keys of stopped processes (their lease expired), by process."""
        if not self._durable:
            return {}
        start = len(self._intent_head)
        by_origin: dict[str, list[str]] = {}
        for key in self.store.scan(glob_escape(self._intent_head) + "*"):
            origin = key[start : start + len(self._origin)]
            if origin != self._origin:
                by_origin.setdefault(origin, []).append(key)
        return {origin: keys for origin, keys in sorted(by_origin.items())
                if self.store.get(f"{self.prefix}{AUDIT_HEAD}l:{origin}") is None}

    def _move(self, keys: list[str]) -> int:
        """Append the intents under *keys* (one stopped process's) not yet in the chain,
        in their process's order, then delete them; how many were appended."""
        start = len(self._intent_head)
        found: list[tuple[int, int, _Pending]] = []
        done: list[str] = []
        for key, raw in zip(keys, self.store.get_many(keys), strict=True):
            recovered = self._recovered_item(key[start:], raw)
            if recovered is None:
                log.warning("remember: audit intent %r is malformed; left in place", key)
                continue
            done.append(key)
            if recovered[1] >= 0:
                found.append(recovered)
        keys = done
        if found:
            first_block = self._start()[0]
            floor = max(first_block, min(known for known, _, _ in found) + 1)
            chained = self._ids_from(floor)
            fresh = [item for _, _, item in sorted(found, key=lambda f: f[1])
                     if item[10] not in chained]
            for i in range(0, len(fresh), self._block_max):
                self._append(fresh[i : i + self._block_max])
        for i in range(0, len(keys), 500):
            self.store.delete(*keys[i : i + 500])
        return len(fresh) if found else 0

    def _recovered_item(self, eid: str, raw: str | None) -> tuple[int, int, _Pending] | None:
        """(known block, counter, event) of an intent; ``(0, -1, ...)`` when it is gone,
        ``None`` when it is malformed."""
        if raw is None:
            return 0, -1, (0, "", None, None, Identity(), None, None, "", None, None, eid)
        try:
            at, fields, who, known = json.loads(raw)
            counter = int(eid[len(self._origin):], 16)
            principal, session = None, None
            if who is not None:
                principal, session = json.loads(open_sealed(who, self._seal_keys, _INTENT_AAD))
            ident = Identity(session_id=session, user_id=principal)
            item: _Pending = (int(at), _Fields(fields), None, None, ident, None, None, "",
                              None, None, eid)
            return int(known), counter, item
        except (ValueError, TypeError, RememberError):
            return None

    def _ids_from(self, first: int) -> set[str]:
        """The ids of the events in the blocks from *first* on."""
        ids: set[str] = set()
        for _, raw in self._blocks(first):
            for event in self._parse_block(raw) or []:
                if isinstance(event.get("id"), str):
                    ids.add(event["id"])
        return ids

    def _start_flusher(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._run, name="remember-audit-flush", daemon=True
            )
        self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_ms / 1000)
            if self._closed:
                return
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - logged; the events stay buffered, retried next time
                log.warning("remember: the audit trail could not be appended", exc_info=True)
            if time.monotonic() - self._recovered > self._lease_ms / 1000:
                try:
                    self.recover()
                except Exception:  # noqa: BLE001 - logged; the intents stay, moved next pass
                    log.warning("remember: stopped processes' audit intents could not be "
                                "moved", exc_info=True)

    def hash_text(self, kind: str, text: str) -> str:
        """The keyed hash events carry for a key (``kind="key"``) or namespace (``"ns"``)."""
        found = self._hashes.get((kind, text))
        if found is None:
            message = kind.encode() + b"\x00" + text.encode("utf-8", "surrogatepass")
            digest = hmac.new(self._hash_key, message, hashlib.sha256).digest()[:18]
            found = b64url_encode(digest)
            self._hashes.put((kind, text), found)
        return found

    def _event_body(self, seq: int, item: _Pending, who: dict[tuple[Any, Any], int]) -> str:
        """The event's compact JSON (without its MAC); *who* collects the block's identities.

        Written field by field, as :func:`_compact` would spell the same dict (a test
        pins the equality): what verification recomputes from the stored event.
        """
        at, op, scope, key, ident, brand, ttl, outcome, count, ref, eid = item
        # The fields after "at" repeat (same key, scope, identity): cached when every
        # argument has the exact type its text depends on (True == 1, but not as text).
        cacheable = (
            type(scope) is str and (key is None or type(key) is str)
            and (brand is None or type(brand) is str) and (ttl is None or type(ttl) is int)
            and (count is None or type(count) is int)
        )
        if cacheable:
            fields = self._fields.get(item[1:10])
            if fields is None:
                fields = self._fields_text(item)
                self._fields.put(item[1:10], fields)
        else:
            fields = self._fields_text(item)
        text = f'{{"seq":{seq},"at":{at},"id":{_q(eid)},{fields}'
        principal, session = ident.user_id, ident.session_id
        if principal is not None or session is not None:
            text += f',"w":{who.setdefault((principal, session), len(who))}'
        return text + "}"

    def _fields_of(self, item: _Pending) -> str:
        """:meth:`_fields_text` of *item*, cached as :meth:`_event_body` caches it."""
        _, _, scope, key, _, brand, ttl, _, count, _, _ = item
        if not (type(scope) is str and (key is None or type(key) is str)
                and (brand is None or type(brand) is str) and (ttl is None or type(ttl) is int)
                and (count is None or type(count) is int)):
            return self._fields_text(item)
        fields = self._fields.get(item[1:10])
        if fields is None:
            fields = self._fields_text(item)
            self._fields.put(item[1:10], fields)
        return fields

    def _fields_text(self, item: _Pending) -> str:
        """An event's fields from ``op`` to ``ref``, as :meth:`_event_body` writes them."""
        _, op, scope, key, ident, brand, ttl, outcome, count, ref, _ = item
        if type(op) is _Fields:
            return str(op)  # recovered from an intent: written then
        text = f'"op":{_q(op)},"outcome":{_q(outcome)}'
        if type(scope) is str:
            text += f',"scope":{_q(scope)}'
            if key is not None and type(key) is str:
                text += f',"key":"{self.hash_text("key", key)}"'
            head = self._head(ident, scope)
            if head is not None:
                text += f',"ns":"{self.hash_text("ns", head)}"'
        if type(brand) is str:
            text += f',"brand":{_q(brand)}'
        if type(ttl) is int:
            text += f',"ttl":{ttl}'
        if count is not None:
            text += f',"count":{count}'
        tool = ident.tool_name
        if tool is not None:
            text += f',"tool":{_q(str(tool))}'
        if ref is not None:
            text += f',"ref":{_q(ref)}'
        return text

    def _head(self, ident: Identity, scope: str) -> str | None:
        """The namespace's storage-key head (``None`` when the identity was refused)."""
        try:
            return self.head_of(ident, scope)
        except Exception:  # noqa: BLE001 - refused identity or scope: no namespace to name
            return None

    @staticmethod
    def _who_aad(first_seq: int) -> bytes:
        return b"remember:audit-who:" + str(first_seq).encode()

    def _mac(self, prev: str, text: str, index: int = 0) -> str:
        """``MAC(k, prev || 0x00 || text)``: an event's chain link, or a record's MAC.

        Keyed BLAKE2b-256 (a MAC by construction, RFC 7693), several times cheaper
        than HMAC-SHA256 through OpenSSL 3 -- it runs once per recorded operation.
        """
        message = prev.encode() + b"\x00" + text.encode()
        return blake2b(message, key=self._mac_keys[index], digest_size=32).hexdigest()

    def _check(self, prev: str, text: str, mac: object) -> bool:
        ok = False
        for index in range(len(self._mac_keys)):
            ok |= hmac.compare_digest(self._mac(prev, text, index), str(mac))
        return ok

    def _check_event(self, prev: str, event: Mapping[str, Any]) -> bool:
        return self._check(prev, _compact({k: v for k, v in event.items() if k != "mac"}),
                           event.get("mac"))

    # -- appending ----------------------------------------------------------------------

    def _block_key(self, n: int) -> str:
        return f"{self.prefix}{AUDIT_HEAD}b:{n:020d}"

    def _signed(self, raw: str | None, kind: str) -> dict[str, Any] | None:
        """A head or checkpoint record if present and its MAC is right; else ``None``."""
        if raw is None:
            return None
        try:
            record = json.loads(raw)
            mac = record.pop("mac")
            record.pop("sig", None)
        except (ValueError, KeyError, AttributeError, TypeError):
            return None
        if not isinstance(record, dict) or not self._check(kind, _canonical(record), mac):
            return None
        return record

    def _signed_text(self, kind: str, fields: dict[str, Any]) -> str:
        text = _canonical(fields)
        sig = self._signer.sign(record_message(kind, text))
        return json.dumps({**fields, "mac": self._mac(kind, text), "sig": sig}, sort_keys=True)

    def public_key(self) -> str:
        """The public key that checks the trail's signatures, as PEM (what
        ``remember-sync audit public-key`` prints): verification without the secret."""
        return self._signer.public_pem()

    def _raw(self) -> RawTrail:
        """The trail's records as stored, from the checkpoint on (a signed export)."""
        self.flush()
        return read_raw(self.store, self.prefix, chunk=_READ_CHUNK)

    def _parse_block(self, raw: str | None) -> list[dict[str, Any]] | None:
        """The events of a stored block (``[]`` when malformed, ``None`` when absent).

        Each event gets ``"_who"``: its (principal, session) from the block's sealed
        table, or ``(None, None)``; a table that does not open gives ``"_who": None``.
        """
        if raw is None:
            return None
        try:
            block = json.loads(raw)
            events = block["events"]
            sealed = block.get("who")
        except (ValueError, KeyError, TypeError, AttributeError):
            return []
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            return []
        table: list[Any] | None = []
        if isinstance(sealed, str) and events:
            try:
                aad = self._who_aad(int(events[0].get("seq", 0)))
                table = json.loads(open_sealed(sealed, self._seal_keys, aad))
                first = int(events[0]["seq"])
                table = [self._person_opened(entry, first) for entry in table]
            except (RememberDecryptionError, ValueError, TypeError, KeyError):
                table = None
        for event in events:
            index = event.get("w")
            if not isinstance(index, int):
                event["_who"] = (None, None)
            elif table is None or not 0 <= index < len(table):
                event["_who"] = None
            else:
                event["_who"] = table[index]
        return events

    def _person_key(self, subjects: _PersonKeys, skid: str) -> bytes:
        """The key a person's identities in the trail are sealed with: derived from their
        data key, asked of the keystore each time (gone with it when they are erased)."""
        data_key = subjects.data_key(skid)
        found = self._person_keys.get(data_key)
        if found is None:
            derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=HKDF_SALT,
                           info=_PERSON_INFO)
            found = derived.derive(data_key)
            self._person_keys.put(data_key, found)
        return found

    def _person_sealed(self, principal: Any, session: Any, first_seq: int) -> Any:
        """A block's identity entry: ``[principal, session]``, or under subject keys, for
        a person, ``{"skid": ..., "sealed": ...}`` sealed with the person's key."""
        subjects = self.keyring.subjects
        if not isinstance(subjects, _PersonKeys) or is_anonymous(principal):
            return [principal, session]
        skid = subjects.current(principal)
        text = json.dumps([principal, session]).encode("utf-8", "surrogatepass")
        return {"skid": skid, "sealed": seal(text, self._person_key(subjects, skid),
                                             aad=self._who_aad(first_seq))}

    def _person_opened(self, entry: Any, first_seq: int) -> tuple[Any, Any]:
        """(principal, session) of an identity entry; ``(None, None)`` for an erased person.

        :raises RememberStoreError: the keystore failed (not taken for an erasure).
        """
        if not isinstance(entry, dict):
            return tuple(entry)
        subjects = self.keyring.subjects
        if not isinstance(subjects, _PersonKeys):
            return (None, None)  # sealed under a subject key; subject keys are off here
        try:
            key = self._person_key(subjects, str(entry["skid"]))
            return tuple(json.loads(open_sealed(entry["sealed"], [key],
                                                self._who_aad(first_seq))))
        except (RememberDecryptionError, KeyError, ValueError, TypeError):
            return (None, None)

    def flush(self) -> None:
        """Append every buffered event to the trail now (blocks of at most 1,024 events).

        Events the buffer had to drop while the store refused appends (more than
        :data:`_MAX_BUFFER` waiting) are recorded as one ``lost`` event with
        their count, so the gap is in the trail, not silent.

        Only the events buffered when the lock is taken are appended: events
        other threads add meanwhile wait for the next flush, so a flusher never
        chases a busy writer with one append (three round trips) per few events.
        """
        if self._leased is not None and time.monotonic() - self._leased > self._lease_ms / 3000:
            self._renew()  # alive: the intents this process wrote stay its own
        with self._flush_lock:
            if self._unsure is not None:
                self._settle()
            buffer = self._pending
            left = len(buffer)
            while left > 0 or self._lost:
                take = min(left, len(buffer), self._block_max)
                if take == 0 and not self._lost:
                    break  # what was left was dropped meanwhile (the buffer is bounded)
                left -= take
                pending = [buffer.popleft() for _ in range(take)]
                lost = self._lost
                if lost:
                    pending.insert(0, (self.clock(), "lost", None, None, Identity(), None, None,
                                       "dropped", lost, None, self.new_id()))
                self._attempt = None
                try:
                    seq = self._append(pending)
                except BaseException:
                    # Kept, in order, for the next flush -- which first looks whether the
                    # block was written after all (the reply lost, not the write).
                    buffer.extendleft(reversed(pending[1:] if lost else pending))
                    if self._attempt is not None:
                        self._unsure = (*self._attempt, take, lost)
                    raise
                self._lost -= lost
                self._appended += 1
                self._forget(pending)
                self._bound(seq)

    def _bound(self, seq: int) -> None:
        """Trim when the trail (now ending at *seq*) is past ``max_events`` by more than half
        a block, or its first block is wholly older than ``retention_days``: checked on
        every append, from what was read at the last check (no read while within bounds)."""
        front = self._front
        if front is None:
            front = self._front = self._read_front()
        first_seq, newest_at = front
        cutoff = self.clock() - self.retention_days * 86_400_000
        slack = min(self.batch, self._block_max) // 2
        if seq - first_seq + 1 > self.max_events + slack or newest_at < cutoff:
            self.trim()
            self._front = None

    def _read_front(self) -> tuple[int, int]:
        """(first seq kept, newest time in the first block kept) as the store has them."""
        first_block, first_seq, _, problems = self._start()
        events = self._parse_block(self.store.get(self._block_key(first_block)))
        if problems or not events:
            return first_seq, self.clock()  # nothing the bounds could cut yet
        return first_seq, int(events[-1].get("at", 0))

    def _settle(self) -> None:
        """Resolve an append that raised after claiming a block: if the block holds our
        text, its events are written (taken off the buffer) and the head is advanced."""
        assert self._unsure is not None
        key, text, count, lost = self._unsure
        if self.store.get(key) == text:
            self._forget([self._pending.popleft()
                          for _ in range(min(count, len(self._pending)))])
            self._lost -= lost
            events = self._parse_block(text)
            if events:
                block = int(key.rsplit(":", 1)[1])
                head_raw = self.store.get(self._head_key)
                head = self._signed(head_raw, "head")
                noted = int(head.get("noted", 0)) if head is not None else 0
                last = events[-1]
                self._publish(block, int(last["seq"]), str(last["mac"]), noted, head_raw)
        self._unsure = None

    def _claim(self, n: int, text: str) -> tuple[bool, str | None]:
        """Claim block *n* with *text*: (ours, what block *n* holds when it is not ours).

        A claim answered "not written" whose block holds exactly our text was ours
        (a replayed or resent request): counted as written, never appended twice.
        """
        key = self._block_key(n)
        self._attempt = (key, text)
        if self.store.set(key, text, only_if_absent=True):
            return True, None
        found = self.store.get(key)
        return found == text, found

    def _append(self, pending: Sequence[_Pending]) -> int:
        """Append *pending* as one block after the trail's last; the last seq written."""
        store = self.store
        # The witness first: it is advanced only after the store, so read in this order an
        # honest witness is never ahead of the head (another process may append between).
        seen = self.witness.latest_head() if self.witness is not None else None
        head_raw = store.get(self._head_key)
        head = self._signed(head_raw, "head")
        noted = 0
        if head is not None:
            block, seq, prev = int(head["block"]), int(head["seq"]), str(head["last"])
            noted = int(head.get("noted", 0))
        else:
            block, seq, prev = 0, 0, ""
            checkpoint = self._signed(store.get(self._checkpoint_key), "checkpoint")
            if checkpoint is not None:  # trimmed: the trail goes on after its first kept block
                block, seq = int(checkpoint["block"]) - 1, int(checkpoint["seq"]) - 1
                prev = str(checkpoint["prev"])
        if seen is not None:
            pending, noted = self._behind(seen, seq, prev, noted, pending)
        for _attempt in range(_CLAIM_ATTEMPTS):
            n = block + 1
            text, last = self._block_text(n, seq, prev, pending)
            ours, found = self._claim(n, text)
            if ours:
                block, seq, prev = n, seq + len(pending), last
                break
            # Block n is another writer's: continue the chain after it.
            taken = self._parse_block(found)
            if taken:
                seq, prev = int(taken[-1].get("seq", seq)), str(taken[-1].get("mac", ""))
            block = n
        else:
            raise RememberConfigurationError("the audit trail could not claim a block")
        self._publish(block, seq, prev, noted, head_raw)
        return seq

    def _block_text(
        self, n: int, seq: int, prev: str, pending: Sequence[_Pending]
    ) -> tuple[str, str]:
        """(block *n*'s text holding *pending* chained after event *seq*, its last MAC)."""
        texts = []
        last = prev
        who: dict[tuple[Any, Any], int] = {}
        body_of, key = self._event_body, self._mac_keys[0]
        for i, item in enumerate(pending):
            body = body_of(seq + 1 + i, item, who)
            # self._mac, inline: it runs once per recorded operation.
            last = blake2b(f"{last}\x00{body}".encode(), key=key, digest_size=32).hexdigest()
            texts.append(f'{body[:-1]},"mac":"{last}"}}')
        table = ""
        if who:
            entries = [self._person_sealed(p, s, seq + 1) for p, s in who]
            sealed = seal(
                json.dumps(entries).encode("utf-8", "surrogatepass"), self._seal_keys[0],
                kid=self.keyring.primary_kid, aad=self._who_aad(seq + 1),
            )
            table = f',"who":{json.dumps(sealed)}'
        events = ",".join(texts)
        sig = self._signer.sign(block_message(n, prev, sealed if who else None, events))
        return f'{{"block":{n}{table},"events":[{events}],"sig":"{sig}"}}', last

    def _publish(self, block: int, seq: int, prev: str, noted: int, head_raw: str | None) -> None:
        """Advance the head to (block, seq, prev) unless it is already past; tell the witness."""
        store = self.store
        new_head = {"block": block, "seq": seq, "last": prev, "at": self.clock()}
        if noted:
            new_head["noted"] = noted
        text = self._signed_text("head", new_head)
        for _attempt in range(_CLAIM_ATTEMPTS):
            if head_raw is None:
                if store.set(self._head_key, text, only_if_absent=True):
                    break
            elif store.compare_and_set(self._head_key, head_raw, text):
                break
            head_raw = store.get(self._head_key)
            now_head = self._signed(head_raw, "head")
            if now_head is not None and int(now_head["block"]) >= block:
                break  # another writer's head is already past ours
        self._attempt = None
        if self._known_block is None or self._known_block < block:
            self._known_block = block
        if self.witness is not None:
            self.witness.record_head({"seq": seq, "mac": prev, "block": block})

    def _behind(
        self, seen: Mapping[str, Any], seq: int, prev: str, noted: int,
        pending: Sequence[_Pending],
    ) -> tuple[Sequence[_Pending], int]:
        """*pending*, led by a ``rollback`` event when the store's trail is behind its witness.

        The store was rolled back (or its trail cut): appending on would soon carry the
        trail past what the witness recorded and hide that, so the finding goes into the
        chain itself, once (the head's ``noted`` names the witness's event it covers).
        """
        witnessed = int(seen.get("seq", 0))
        if witnessed <= noted or witnessed < seq or (
            witnessed == seq and _witnessed(seen, prev)
        ):
            return pending, noted
        log.warning(
            "remember: the audit trail ends at event %d but its witness recorded event %d: "
            "the store was rolled back; recorded in the trail", seq, witnessed,
        )
        found = (self.clock(), "rollback", None, None, Identity(), None, None, "detected",
                 witnessed, None, self.new_id())
        return [found, *pending], witnessed

    def _anchor_in(self, witness: _Floors) -> None:
        """Keep the trail's head in *witness* (verified mode's): see :class:`WitnessAnchor`."""
        self.witness = WitnessAnchor(witness, self._mac("witness-name", self._head_key)[:40])

    # -- reading ------------------------------------------------------------------------

    def _start(self) -> tuple[int, int, str, list[str]]:
        """(first block, first seq, prev mac, problems) from the checkpoint, or the genesis."""
        raw = self.store.get(self._checkpoint_key)
        if raw is None:
            return 1, 1, "", []
        checkpoint = self._signed(raw, "checkpoint")
        if checkpoint is None:
            return 1, 1, "", ["the checkpoint record is not authentic (edited or forged)"]
        return int(checkpoint["block"]), int(checkpoint["seq"]), str(checkpoint["prev"]), []

    def _blocks(self, first: int) -> Iterator[tuple[int, str | None]]:
        """(number, raw) of consecutive blocks from *first* until two chunks find none."""
        n = first
        while True:
            keys = [self._block_key(i) for i in range(n, n + _READ_CHUNK)]
            values = self.store.get_many(keys)
            if all(v is None for v in values):
                return
            for i, value in enumerate(values):
                yield n + i, value
            n += _READ_CHUNK

    def _walk(self) -> tuple[list[dict[str, Any]], list[str], int, int]:
        """Every event from the checkpoint on, checked: (events, problems, last block, head seq)."""
        self.flush()
        # The witness before the store (see _append): an honest one is never ahead of it.
        seen = self.witness.latest_head() if self.witness is not None else None
        first_block, seq, prev, problems = self._start()
        head_record = self._signed(self.store.get(self._head_key), "head")
        events: list[dict[str, Any]] = []
        last_block = first_block - 1
        missing: list[int] = []
        ids: dict[str, object] = {}
        for n, raw in self._blocks(first_block):
            parsed = self._parse_block(raw)
            if parsed is None:
                missing.append(n)
                continue
            if missing:
                problems.append(f"block(s) {missing[0]}..{missing[-1]} missing (deleted)")
                missing = []
            last_block = n
            if not parsed:
                problems.append(f"block {n} is not a well-formed block (edited)")
                continue
            for event in parsed:
                who = event.pop("_who")
                found = event.get("seq")
                if not _repeated(event, n, seq, ids, problems) and found != seq:
                    problems.append(
                        f"event {seq} expected, found {found!r} in block {n} "
                        "(events deleted, reordered or inserted)"
                    )
                if not self._check_event(prev, event):
                    problems.append(
                        f"event {found!r} in block {n} does not verify (edited, "
                        "forged, moved or its predecessor removed)"
                    )
                if who is None:
                    problems.append(f"the identities of block {n} do not open (edited)")
                    who = (None, None)
                if event.get("op") == "rollback":
                    problems.append(
                        f"event {found!r}: an append found the trail behind its witness, "
                        f"which had recorded event {event.get('count')!r} (rolled back)"
                    )
                prev = str(event.get("mac"))
                seq = (found if isinstance(found, int) else seq) + 1
                event["_who"] = who
                events.append(event)
        head_seq = 0
        if head_record is None:
            if self.store.get(self._head_key) is not None:
                problems.append("the head record is not authentic (edited or forged)")
            elif events:
                problems.append("the head record is missing (deleted)")
        else:
            head_seq = int(head_record["seq"])
            if head_seq > seq - 1:
                problems.append(
                    f"the trail ends at event {seq - 1} but its head records {head_seq}: "
                    "the last events were removed"
                )
            if int(head_record["block"]) > last_block:
                problems.append(
                    f"the head records block {head_record['block']}; the last found is "
                    f"{last_block}"
                )
        if seen is not None:
            witnessed = int(seen.get("seq", 0))
            named = next((e for e in events if e.get("seq") == witnessed), None)
            if witnessed > seq - 1:
                problems.append(
                    f"the witness recorded event {witnessed}; the store's trail ends at "
                    f"{seq - 1} (rolled back)"
                )
            elif named is not None and not _witnessed(seen, str(named.get("mac"))):
                # (An event trimmed by retention cannot be compared, nor needs to be.)
                problems.append(
                    f"event {witnessed} is not the one the witness recorded (rewritten)"
                )
        return events, problems, last_block, head_seq

    def _event(self, raw: Mapping[str, Any]) -> AuditEvent:
        principal, session = raw["_who"]

        def opt(name: str, kind: type) -> Any:
            value = raw.get(name)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        return AuditEvent(
            seq=int(raw.get("seq", 0)), at=int(raw.get("at", 0)), op=str(raw.get("op")),
            scope=opt("scope", str), key_hash=opt("key", str), namespace_hash=opt("ns", str),
            brand=opt("brand", str), ttl=opt("ttl", int), outcome=str(raw.get("outcome")),
            count=opt("count", int), tool=opt("tool", str), principal=principal, session=session,
            ref=opt("ref", str),
        )

    def events(
        self,
        since: int | None = None,
        until: int | None = None,
        principal: str | None = None,
        key: str | None = None,
        scope: str | None = None,
        limit: int | None = None,
    ) -> list[AuditEvent]:
        """Recorded events, oldest first, filtered; with *limit*, the newest *limit* of them.

        :param since: only events at or after this epoch-millisecond time.
        :param until: only events before this time.
        :param principal: only events of this user id.
        :param key: only events about this memory key (any namespace).
        :param scope: only events in this scope.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise RememberConfigurationError(f"limit must be an int >= 1; got {limit!r}")
        raw_events = self._walk()[0]
        key_hash = self.hash_text("key", key) if key is not None else None
        out: list[AuditEvent] = []
        for raw in raw_events:
            at = raw.get("at", 0)
            if since is not None and at < since:
                continue
            if until is not None and at >= until:
                continue
            if scope is not None and raw.get("scope") != scope:
                continue
            if key_hash is not None and raw.get("key") != key_hash:
                continue
            event = self._event(raw)
            if principal is not None and event.principal != principal:
                continue
            out.append(event)
        return out[-limit:] if limit is not None else out

    def verify(self) -> AuditVerification:
        """Check the whole chain from the checkpoint to the head (and the witness's head)."""
        events, problems, _, _ = self._walk()
        stranded = sum(map(len, self._stranded().values()))
        if stranded:
            problems.append(
                f"{stranded} event(s) of stopped processes are recorded as intents and not "
                "yet in the chain (moved by the next recovery pass, or by "
                "'remember-sync audit verify --repair')"
            )
        first = int(events[0].get("seq", 0)) if events else 0
        last = int(events[-1].get("seq", 0)) if events else 0
        return AuditVerification(
            ok=not problems, events=len(events), first_seq=first, last_seq=last,
            problems=tuple(problems),
        )

    # -- retention ----------------------------------------------------------------------

    def trim(self) -> int:
        """Drop events past ``retention_days`` and beyond ``max_events``; blocks deleted.

        The checkpoint is moved (compare-and-set, only forwards) before any block
        is deleted, so the trail verifies at every moment.
        """
        store = self.store
        checkpoint_raw = store.get(self._checkpoint_key)
        first_block, _, _, problems = self._start()
        if problems:
            return 0  # never trim a trail whose start is in doubt
        head = self._signed(store.get(self._head_key), "head")
        if head is None:
            return 0
        last_block, last_seq = int(head["block"]), int(head["seq"])
        cutoff_at = self.clock() - self.retention_days * 86_400_000
        numbers = list(range(first_block, last_block + 1))
        cache: dict[int, list[dict[str, Any]]] = {}

        def events_of(n: int) -> list[dict[str, Any]]:
            if n not in cache:
                cache[n] = self._parse_block(store.get(self._block_key(n))) or []
            return cache[n]

        def keep(n: int) -> bool:
            events = events_of(n)
            if not events:
                return False
            newest_at = events[-1].get("at", 0)
            first_seq = int(events[0].get("seq", 0))
            return newest_at >= cutoff_at and last_seq - first_seq + 1 <= self.max_events

        # keep() is monotone (older blocks fail first): the first kept block by bisection.
        cut = bisect.bisect_left(numbers, True, key=keep)
        if cut == 0 or cut >= len(numbers):
            return 0  # nothing to drop; the newest block always stays
        keep_from = numbers[cut]
        first_kept = events_of(keep_from)
        previous = events_of(keep_from - 1)
        if not first_kept or not previous:
            return 0
        fields = {
            "block": keep_from,
            "seq": int(first_kept[0]["seq"]),
            "prev": str(previous[-1].get("mac")),
        }
        text = self._signed_text("checkpoint", fields)
        if checkpoint_raw is None:
            moved = store.set(self._checkpoint_key, text, only_if_absent=True)
        else:
            moved = store.compare_and_set(self._checkpoint_key, checkpoint_raw, text)
        self._front = None
        if not moved:
            return 0  # another process trims
        doomed = [self._block_key(n) for n in range(first_block, keep_from)]
        for i in range(0, len(doomed), 500):
            store.delete(*doomed[i : i + 500])
        return len(doomed)

    def close(self) -> None:
        """Flush what is buffered and stop the flusher thread."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._wake.set()
