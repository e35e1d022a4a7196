"""Who owns a session, and erasing every entry of one person.

A session namespace carries no user id: its storage key holds the session
identity only.  So that a person's sessions can be found from the person,
every write in session or tool scope by an authenticated user records the
session's owner once (:class:`OwnerBook`):

``P + "__owner__:" + H(user) + ":" + H(session)``

where ``H`` is a keyed hash (HMAC-SHA256 under a key derived from the master
secret, cut to 18 bytes, base64url) -- never the raw id in a storage key.  The
value is the session identity, sealed (AES-GCM under a key derived from the
master secret for this purpose alone, bound to the record's key).
Like the layout marker, the key starts with neither ``v2:`` nor ``global:``
(no scope lists or forgets it) nor a legacy head (the purge leaves it), and
:func:`~remember_sync._keys.parse_storage_key` returns ``None`` for it.

:func:`erase` walks the store once and deletes, for one user id: the user
namespace, every session the person owns (unless someone else is recorded as
owner too), tool namespaces under those sessions, the ``stateless-user:``
session, and the owner records -- in our layout and, when enabled, in 1.8.0's
doubled-prefix one.  An entry in those namespaces that cannot be decrypted is
deleted too (it is the person's by namespace) and counted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ._bounded import BoundedCache
from ._clock import Clock
from ._codec import EntryCodec
from ._crypto import Keyring, b64url_encode, open_sealed, seal
from ._keys import CAS_HEAD, MANIFEST_HEAD, glob_escape, index_key_of, parse_storage_key
from .errors import RememberDecryptionError, RememberInputError
from .identity import STATELESS_USER_PREFIX, current_identity, is_anonymous
from .stores.base import Store
from .types import ErasureReceipt, Identity, Namespace

log = logging.getLogger("remember_sync")

#: What follows ``P`` in every owner record's key.
OWNER_HEAD = "__owner__:"
_OWNER_INFO = b"remember:owner-records:v1"
_SEAL_INFO = b"remember:owner-records-seal:v1"
_RECEIPT_INFO = b"remember:erasure-receipt:v1"
_STATELESS = STATELESS_USER_PREFIX
#: (user, session) pairs whose record this process already wrote (oldest forgotten first).
_NOTED = 8192
#: Milliseconds before a noted pair is written again (``SET NX``: a no-op while the
#: record exists), so a session keeps its owner recorded after another process erased it.
_RENOTE_MS = 60_000
#: How long an owner record outlives the latest entry written in its session: it is
#: extended only when a write's deadline passes what it covers, so a session written
#: all day long extends its record about once a day.
_GRACE_MS = 86_400_000
_EXTEND_ATTEMPTS = 10
_BATCH = 500


def _hash_keys(codec: EntryCodec) -> tuple[bytes | None, ...]:
    """One hash key per configured secret (newest first); ``(None,)`` without encryption."""
    keyring = codec.keyring
    return (None,) if keyring is None else keyring.purpose_keys(_OWNER_INFO)


def user_hashes(keyring: Keyring, user_id: str) -> tuple[str, ...]:
    """``H(user)`` under every secret of *keyring*, newest first (the subject hashes)."""
    return tuple(_h(k, b"user", user_id) for k in keyring.purpose_keys(_OWNER_INFO))


def _h(key: bytes | None, kind: bytes, text: str) -> str:
    message = kind + b"\x00" + text.encode("utf-8", "surrogatepass")
    if key is None:  # encryption disabled: the ids are in clear in the entries' keys anyway
        digest = hashlib.sha256(b"remember_sync owner\x00" + message).digest()
    else:
        digest = hmac.new(key, message, hashlib.sha256).digest()
    return b64url_encode(digest[:18])


def subject_hashes(codec: EntryCodec, user_id: str) -> tuple[str, ...]:
    """``H(user)`` under every configured secret, newest first."""
    return tuple(_h(k, b"user", user_id) for k in _hash_keys(codec))


def _covers(until: int | None, wanted: int | None) -> bool:
    """Whether a record lasting until *until* (``None``: for ever) lasts until *wanted*."""
    return until is None or (wanted is not None and until >= wanted)


class OwnerBook:
    """Records, once per process, which authenticated user wrote into which session.

    :meth:`note` is called by every write path once the entry is written (a
    write that fails or is refused records nothing); it costs a cache lookup
    except on a session's first write by a user in this process, and then at
    most once a minute, when it writes the record (one ``SET ... NX``).  A
    process killed between the two leaves an entry without a recorded owner:
    :func:`erase` reports its session as unattributed.

    A record lives as long as the entries it attributes: its deadline (kept
    in the sealed record too) is the latest deadline of an entry written
    through it plus :data:`_GRACE_MS`, or none when such an entry has none.
    A write whose entry outlives the record extends it (read, then
    compare-and-set, never shortening it), whichever process wrote the record.
    A bounded memory store keeps records (``write_kept``) in their principal's
    eviction group (:attr:`group_of`), evicted only once that principal has
    no entry left there.
    """

    def __init__(self, store: Store, codec: EntryCodec, prefix: str, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.codec = codec
        self.prefix = prefix
        #: The eviction group of a write by (identity, namespace); the core sets its own.
        self.group_of: Callable[[Identity | None, Namespace], str | None] = lambda i, ns: None
        self._kept = getattr(store, "write_kept", None)
        # (user, session) -> (when noted, the record's deadline as last known; None: none).
        self._noted: BoundedCache[tuple[str, str], tuple[int, int | None]] = BoundedCache(
            _NOTED
        )

    def note(self, ident: Identity | None, ns: Namespace, deadline: int | None) -> None:
        """Record the user of *ident* (default: the bound one) as an owner of *ns*'s session,
        for at least as long as an entry expiring at *deadline* (``None``: never).

        Only session and tool scope of a verified session have one to record.

        When other writers change the record during every attempt to extend it,
        a warning is logged and the next write into the session tries again.
        """
        session = ns.session
        if session is None or session.startswith(_STATELESS):
            return  # user/global scope; a stateless session names its user already
        user = (ident or current_identity()).user_id
        if is_anonymous(user):
            return
        assert user is not None
        pair = (user, session)
        now = self.clock()
        wanted = None if deadline is None else deadline + _GRACE_MS
        noted = self._noted.get(pair)
        if noted is not None and 0 <= now - noted[0] < _RENOTE_MS and _covers(noted[1], wanted):
            return
        key = self.record_key(user, session)
        group = self.group_of(ident, ns)
        until = self._keep(key, user, session, wanted, now, group, noted)
        self._noted.put(pair, (now, until))

    def _keep(
        self, key: str, user: str, session: str, wanted: int | None, now: int,
        group: str | None, noted: tuple[int, int | None] | None,
    ) -> int | None:
        """Make the record under *key* exist until *wanted*; the deadline it has after."""
        text = self._seal(user, session, key, wanted)
        if self._write(key, text, wanted, now, group, only_if_absent=True):
            return wanted
        if noted is not None and _covers(noted[1], wanted):
            return noted[1]  # there, and known to last long enough
        for _attempt in range(_EXTEND_ATTEMPTS):
            raw = self.store.get(key)
            if raw is None:
                if self._write(key, text, wanted, now, group, only_if_absent=True):
                    return wanted
                continue
            opened = self._open(key, raw)
            if opened is None:
                return wanted  # not ours to rewrite (it does not open): left as it is
            if _covers(opened[1], wanted):
                return opened[1]
            if self._write(key, text, wanted, now, group, expected=raw):
                return wanted
        # The entry is already written: failing its write now would report a write that
        # happened as refused.  Say so, and leave the pair uncovered so that the next
        # write into the session tries again.
        log.warning(
            "remember: a session's owner record changed during each of %d attempts to "
            "extend it; the next write into the session tries again", _EXTEND_ATTEMPTS
        )
        return now

    def _write(
        self, key: str, text: str, until: int | None, now: int, group: str | None, *,
        only_if_absent: bool = False, expected: str | None = None,
    ) -> bool:
        ttl_ms = None if until is None else max(1, until - now)
        if self._kept is not None:
            return bool(self._kept(key, text, group=group, ttl_ms=ttl_ms,
                                   only_if_absent=only_if_absent, expected=expected))
        if expected is not None:
            return self.store.compare_and_set(key, expected, text, ttl_ms=ttl_ms)
        return self.store.set(key, text, ttl_ms=ttl_ms, only_if_absent=only_if_absent)

    def record_key(self, user: str, session: str, index: int = 0) -> str:
        """The owner record's key under secret number *index*."""
        k = _hash_keys(self.codec)[index]
        return f"{self.prefix}{OWNER_HEAD}{_h(k, b'user', user)}:{_h(k, b'session', session)}"

    def _seal(self, user: str, session: str, key: str, until: int | None) -> str:
        record: dict[str, object] = {"session": session}
        if until is not None:
            record["until"] = until
        text = json.dumps(record, ensure_ascii=False).encode("utf-8")
        keyring = self.codec.keyring
        if keyring is None:
            return text.decode("utf-8")
        aad = key[len(self.prefix) :].encode("utf-8", "surrogatepass")
        return seal(text, keyring.purpose_keys(_SEAL_INFO)[0], kid=keyring.primary_kid, aad=aad)

    def open(self, key: str, stored: str) -> str | None:
        """The session identity the record under *key* names, or ``None`` if it does not open."""
        opened = self._open(key, stored)
        return None if opened is None else opened[0]

    def _open(self, key: str, stored: str) -> tuple[str, int | None] | None:
        """(session, deadline or ``None``) of the record under *key*; ``None`` if it does
        not open.  A record without a deadline (written before records had one) has none."""
        keyring = self.codec.keyring
        try:
            if keyring is None:
                text: str | bytes = stored
            else:
                aad = key[len(self.prefix) :].encode("utf-8", "surrogatepass")
                text = open_sealed(stored, keyring.purpose_keys(_SEAL_INFO), aad)
            record = json.loads(text)
            session, until = record.get("session"), record.get("until")
        except (RememberDecryptionError, ValueError, AttributeError):
            return None
        if not (isinstance(session, str) and session):
            return None
        return session, until if isinstance(until, int) and not isinstance(until, bool) else None

    def forget_noted(self) -> None:
        """Empty the cache: after an erasure, a later write records its owner anew."""
        self._noted = BoundedCache(_NOTED)


@dataclass
class _Plan:
    """What one erasure found: storage keys by scope, and what it left alone."""

    doomed: dict[str, list[tuple[str, str, Namespace]]] = field(
        default_factory=lambda: {"user": [], "session": [], "tool": []}
    )
    owner_keys: list[str] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    unattributed: set[str] = field(default_factory=set)
    shared: set[str] = field(default_factory=set)
    #: Compare-and-set markers in the person's namespaces (their entries may be gone).
    markers: list[str] = field(default_factory=list)
    #: Verified mode's manifests of the person's namespaces (emptied ones included).
    manifests: list[tuple[str, Namespace]] = field(default_factory=list)


def _pages(store: Store, pattern: str) -> Iterator[list[tuple[str, str]]]:
    """(key, value) pages of every key matching *pattern*."""
    scanner = getattr(store, "scan_pages", None)
    if scanner is not None:
        yield from scanner(pattern)
        return
    keys = list(store.scan(pattern))
    for i in range(0, len(keys), _BATCH):
        chunk = keys[i : i + _BATCH]
        got = store.get_many(chunk)
        yield [(k, v) for k, v in zip(chunk, got, strict=True) if v is not None]


def _owners(
    book: OwnerBook, user: str, subjects: Sequence[str]
) -> tuple[set[str], list[str], dict[str, set[str]]]:
    """The person's sessions, their owner record keys, and every session hash -> owner hashes."""
    prefix = book.prefix
    head = prefix + OWNER_HEAD
    mine: set[str] = set()
    mine_keys: list[str] = []
    owners: dict[str, set[str]] = {}
    for page in _pages(book.store, glob_escape(head) + "*"):
        for key, stored in page:
            if not key.startswith(head):
                continue
            who, _, session_hash = key[len(head) :].partition(":")
            owners.setdefault(session_hash, set()).add(who)
            if who in subjects:
                mine_keys.append(key)
                session = book.open(key, stored)
                if session is not None:
                    mine.add(session)
    return mine, mine_keys, owners


def _manifests(
    store: Store, prefix: str, user: str, verdict: Callable[[str], str]
) -> Iterator[tuple[str, Namespace]]:
    """(manifest key, namespace) of verified mode's manifests of *user*'s namespaces:
    their user namespace, and sessions *verdict* finds ``"mine"``."""
    head = prefix + MANIFEST_HEAD
    for mkey in store.scan(glob_escape(head) + "v2:*"):
        parsed = parse_storage_key(prefix, prefix + mkey[len(head) :] + "x")
        if parsed is None or not mkey.startswith(head):
            continue
        ns = parsed.namespace
        if ns.user == user if ns.scope == "user" else verdict(ns.session or "") == "mine":
            yield mkey, ns


def _plan(book: OwnerBook, user: str, doubled: bool, manifests: bool = False) -> _Plan:
    prefix = book.prefix
    keys = _hash_keys(book.codec)
    subjects = {_h(k, b"user", user) for k in keys}
    mine, plan_owner_keys, owners = _owners(book, user, tuple(subjects))
    plan = _Plan(owner_keys=plan_owner_keys)
    stateless = _STATELESS + user
    verdicts: dict[str, str] = {}  # session -> "mine" / "other" / "shared" / "unattributed"

    def verdict(session: str) -> str:
        found = verdicts.get(session)
        if found is not None:
            return found
        if session == stateless:
            found = "mine"
        elif session.startswith(_STATELESS):
            found = "other"
        else:
            recorded: set[str] = set()
            for k in keys:
                recorded |= owners.get(_h(k, b"session", session), set())
            if not recorded:
                found = "unattributed"
            elif recorded <= subjects:
                found = "mine" if session in mine else "other"
            elif recorded & subjects:
                found = "shared"
            else:
                found = "other"
        verdicts[session] = found
        return found

    heads = [prefix] + ([prefix + prefix] if doubled and prefix else [])
    for head in heads:
        # Keys only: the values of the person's entries are read afterwards, nobody
        # else's are read at all.
        for full in book.store.scan(glob_escape(head) + "v2:*"):
            parsed = parse_storage_key(prefix, full[len(head) - len(prefix) :])
            if parsed is None or not full.startswith(head):
                continue
            ns = parsed.namespace
            if ns.scope == "user":
                if ns.user != user:
                    continue
            else:
                assert ns.session is not None
                seen = verdict(ns.session)
                if seen == "unattributed":
                    plan.unattributed.add(ns.session)
                if seen == "shared":
                    plan.shared.add(ns.session)
                if seen != "mine":
                    continue
                plan.sessions.add(ns.session)
            skey = full[len(head) - len(prefix) :]
            plan.doomed[ns.scope].append((full, skey, ns))
    plan.markers = _markers(book.store, prefix, user, verdict)
    if manifests:
        plan.manifests = list(_manifests(book.store, prefix, user, verdict))
    return plan


def _delete(book: OwnerBook, entries: list[str], others: list[str]) -> None:
    """Delete the person's *entries*, then *others* (owner records, compare-and-set
    markers) and the listing indexes of the erased namespaces (a cluster prunes them
    only later): they name the person's keys."""
    store = book.store
    indexes = {index_key_of(book.prefix, full) for full in entries}
    for doomed in (entries, others + sorted(i for i in indexes if i)):
        for i in range(0, len(doomed), _BATCH):
            store.delete(*doomed[i : i + _BATCH])


def _markers(
    store: Store, prefix: str, user: str, verdict: Callable[[str], str]
) -> list[str]:
    """The compare-and-set markers (:func:`~remember_sync._keys.cas_marker_key`, with or
    without a cluster's hash tag) of keys in *user*'s namespaces: their user namespace,
    and the sessions *verdict* calls theirs -- whether or not the entries still exist."""
    head = prefix + CAS_HEAD
    found = []
    for marker in store.scan(glob_escape(head) + "*"):
        rest = marker[len(head) :]
        if rest.startswith("{") and "}" in rest:
            rest = rest[rest.index("}") + 1 :]
        parsed = parse_storage_key(prefix, prefix + rest)
        if parsed is None:
            continue
        ns = parsed.namespace
        if ns.user == user if ns.scope == "user" else (
            ns.session is not None and verdict(ns.session) == "mine"
        ):
            found.append(marker)
    return found


def _unreadable(
    store: Store, codec: EntryCodec, found: Sequence[tuple[str, str, Namespace]]
) -> int:
    """How many of the entries *found* the secrets cannot open (read in batches)."""
    by_ns: dict[Namespace, list[tuple[str, str]]] = {}
    for i in range(0, len(found), _BATCH):
        chunk = found[i : i + _BATCH]
        values = store.get_many([full for full, _, _ in chunk])
        for (_, skey, ns), stored in zip(chunk, values, strict=True):
            if stored is not None:
                by_ns.setdefault(ns, []).append((skey, stored))
    bad = 0
    for ns, items in by_ns.items():
        decoded = codec.decode_many([v for _, v in items], ns, [k for k, _ in items])
        bad += sum(isinstance(d, RememberDecryptionError) for d in decoded)
    return bad


def receipt_mac(codec: EntryCodec, fields: dict[str, object], index: int = 0) -> str:
    """The receipt's MAC over *fields* (every field but ``mac``); empty without encryption."""
    keyring = codec.keyring
    if keyring is None:
        return ""
    body = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode("utf-8")
    key = keyring.purpose_keys(_RECEIPT_INFO)[index]
    return b64url_encode(hmac.new(key, body, hashlib.sha256).digest())


def check_receipt(codec: EntryCodec, receipt: ErasureReceipt) -> bool:
    """Whether *receipt*'s MAC is right under one of the configured secrets."""
    keyring = codec.keyring
    if keyring is None or not isinstance(receipt, ErasureReceipt):
        return False
    fields = receipt.as_dict()
    mac = fields.pop("mac")
    ok = False
    for index in range(len(keyring.kids)):
        ok |= hmac.compare_digest(receipt_mac(codec, fields, index), str(mac))
    return ok


def erase(
    book: OwnerBook,
    user_id: object,
    *,
    now: int,
    doubled: bool,
    dry_run: bool,
    shred: Callable[[str, int, bool], int] | None = None,
    refund: Callable[[str, Sequence[str]], None] | None = None,
    ended: Callable[[Namespace, str], None] | None = None,
) -> ErasureReceipt:
    """Delete every entry of *user_id* (see the module docstring); the receipt.

    Besides the entries and owner records, the listing indexes of the erased
    namespaces and the compare-and-set markers in them go (they name the
    person's keys, session ids included), also those of entries already gone.

    :param shred: with subject keys, destroys the person's keys first --
        ``shred(user_id, now, dry_run)``, how many -- so that every copy of their
        entries is unreadable even if deleting them stops half-way.
    :param refund: with quotas, ``refund(user_id, keys)`` after the deletes: the
        person's charges and usage ledger go.
    :param ended: verified mode: ``ended(namespace, manifest key)`` erases the
        manifest of each of the person's namespaces once its entries are deleted.

    :raises RememberInputError: *user_id* is not a non-empty str, or is anonymous
        (an ``anon:`` principal is shared, nobody's to erase).
    """
    if isinstance(user_id, int) and not isinstance(user_id, bool):
        user_id = str(user_id)
    if not isinstance(user_id, str) or is_anonymous(user_id):
        raise RememberInputError(
            f"user_id must be an authenticated user id (a non-empty str, not anon:); "
            f"got {type(user_id).__name__}"
        )
    plan = _plan(book, user_id, doubled, manifests=ended is not None)
    codec, store = book.codec, book.store
    every = [item for scope in ("user", "session", "tool") for item in plan.doomed[scope]]
    unreadable = _unreadable(store, codec, every)
    destroyed = 0 if shred is None else shred(user_id, now, dry_run)
    if not dry_run:
        _delete(book, [full for full, _, _ in every], plan.owner_keys + plan.markers)
        if refund is not None:
            refund(user_id, [full for full, _, _ in every])
        if ended is not None:
            for mkey, ns in plan.manifests:
                ended(ns, mkey)
        book.forget_noted()
    fields: dict[str, object] = {
        "subject": subject_hashes(codec, user_id)[0],
        "user_entries": len(plan.doomed["user"]),
        "session_entries": len(plan.doomed["session"]),
        "tool_entries": len(plan.doomed["tool"]),
        "unreadable": unreadable,
        "sessions": len(plan.sessions),
        "unattributed_sessions": len(plan.unattributed),
        "shared_sessions": len(plan.shared),
        "erased_at": now,
        "dry_run": dry_run,
    }
    if shred is not None:
        fields["keys_destroyed"] = destroyed
    return ErasureReceipt(**fields, mac=receipt_mac(codec, fields))  # type: ignore[arg-type]
