"""``rotate``: re-encrypt every entry under the first configured secret.

What a run guarantees -- idempotent and resumable, compare-and-set writes
(no lost updates), deadlines kept, unreadable entries reported and never
touched, doubled-prefix entries moved into the single layout or, when
shadowed, re-sealed in place -- is ``docs/cli.rst`` (``rotate``, "Layouts").
A doubled-prefix entry is moved like the accessor's ``update`` moves it:
``SET NX`` under the key the application reads it as, read back and decoded,
and only then is the doubled-prefix key deleted, so an application reading
either layout keeps reading the entry.  A write a 1.8.0 instance makes to the
doubled-prefix key between the read and the delete is lost: run it once no
such instance writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TextIO

from .._core import AccessorCore
from .._erasure import OWNER_HEAD
from .._keys import ParsedKey, glob_escape, parse_storage_key
from .._purge import record_rotated_key_id
from .._shred import SubjectKeys
from ..identity import STATELESS_USER_PREFIX, is_anonymous, principal_of
from ..stores._quota_lua import sizes_key
from ..types import Identity, Namespace
from .walk import Item, Report, decode_item, walk_entries

#: Compare-and-set attempts per entry before it is reported as contended.
CAS_ATTEMPTS = 5


@dataclass
class RotateResult(Report):
    """What ``rotate`` did.

    :attr rotated: entries re-encrypted (or, on a dry run, that would be).
    :attr current: entries already sealed by the primary secret.
    :attr contended: entries changed concurrently more than ``CAS_ATTEMPTS``
        times in a row (run again).
    """

    examined: int = 0
    rotated: int = 0
    current: int = 0
    expired: int = 0
    vanished: int = 0
    contended: int = 0
    contended_keys: list[str] = field(default_factory=list)
    #: Doubled-prefix entries moved into the single layout (also counted in ``rotated``).
    moved: int = 0
    #: Doubled-prefix keys whose single-layout twin exists (left alone).
    shadowed: int = 0
    #: Doubled-prefix keys not read because ``read_doubled_prefix`` is off.
    doubled_unread: int = 0
    #: With subject keys: the keystore's data keys wrapped anew under the primary
    #: secret (the entries they seal need no rewrite).
    rewrapped: int = 0
    #: With subject keys: key records no configured secret opens (left as they are).
    keys_unreadable: int = 0
    #: A complete run recorded the primary secret's key id under ``P + "__keyid__"``.
    key_id_recorded: bool = False
    dry_run: bool = False

    @property
    def complete(self) -> bool:
        """Every live entry is now sealed by the primary secret (none left unread)."""
        return not (
            self.unreadable or self.contended or self.doubled_unread or self.keys_unreadable
        )


class _Charges:
    """Whose each rotated entry is, so that it is charged under the new owner tag.

    The owner tags change with the secret: a re-sealed entry is charged anew to
    its principal (:meth:`AccessorCore.write`, never refused), and once the walk
    is done the ledgers of those principals under the older secrets are deleted.
    A user-scope entry is its user's, a ``stateless-user:<user>`` session its
    user's; another session is the user's its owner record names (among the
    users with user-scope entries), or, with no owner record, the anonymous
    session's own.  A session recorded for several users, or for a user with no
    user-scope entry, is left charged where it was.
    """

    def __init__(self, core: AccessorCore) -> None:
        self._core = core
        self._users: dict[str, str] = {}  # H(user) under any secret -> user
        self._records: dict[str, set[str]] = {}  # H(session) -> {H(user)}
        self.principals: set[str] = set()
        book, prefix, keyring = core.owners, core.prefix, core.codec.keyring
        self._secrets = list(range(len(keyring.kids))) if keyring is not None else [0]
        for full in core.store.scan(glob_escape(prefix) + "v2:user:*"):
            parsed = parse_storage_key(prefix, full)
            user = None if parsed is None else parsed.namespace.user
            if user and not is_anonymous(user) and user not in self._users.values():
                for index in self._secrets:
                    self._users[self._hashes(book.record_key(user, "", index))[0]] = user
        head = prefix + OWNER_HEAD
        for record in core.store.scan(glob_escape(head) + "*"):
            hashed_user, hashed_session = self._hashes(record)
            self._records.setdefault(hashed_session, set()).add(hashed_user)

    def _hashes(self, record_key: str) -> tuple[str, str]:
        """(H(user), H(session)) of an owner record's key."""
        rest = record_key[len(self._core.prefix) + len(OWNER_HEAD) :]
        user, _, session = rest.partition(":")
        return user, session

    def owner(self, ns: Namespace) -> Identity | None:
        """The identity the core charges as *ns*'s principal; ``None`` when unknown."""
        session = ns.session
        if session is None or session.startswith(STATELESS_USER_PREFIX):
            user = ns.user if session is None else session[len(STATELESS_USER_PREFIX) :]
            return None if is_anonymous(user) else Identity(user_id=user)
        users: set[str] = set()
        for index in self._secrets:
            hashed = self._hashes(self._core.owners.record_key("", session, index))[1]
            users |= self._records.get(hashed, set())
        if not users:
            return Identity(session_id=session)
        named = {self._users.get(u) for u in users} - {None}
        if len(named) != 1 or len(users) > len(self._secrets):
            return None
        return Identity(session_id=session, user_id=named.pop())

    def reseal(self, item: Item, fresh: str, ttl_ms: int | None) -> bool:
        """Write *fresh* over *item* by compare-and-set, charged under the new tag."""
        core, ns = self._core, item.parsed.namespace
        owner = None if item.doubled else self.owner(ns)
        if owner is None or core.charges is None or ns.scope == "global":
            return core.store.compare_and_set(item.stored_at, item.raw or "", fresh, ttl_ms=ttl_ms)
        principal = principal_of(owner.user_id, ns.session) or ""
        self.principals.add(principal)
        return core.write(
            owner, ns, item.stored_at, fresh, ttl_ms=ttl_ms, expected=item.raw, charge_only=True
        )

    def drop_old_ledgers(self) -> None:
        """Delete the older secrets' ledgers of every principal charged anew."""
        charges = self._core.charges
        assert charges is not None
        for principal in sorted(self.principals):
            for tag in charges.tags(principal)[1:]:
                self._core.store.delete(tag, sizes_key(tag))


def _rotate_one(
    core: AccessorCore, item: Item, dry_run: bool, *, in_place: bool = False,
    charges: _Charges | None = None,
) -> str:  # fmt: skip
    """Bring one entry to the primary secret; return what happened to it.

    A doubled-prefix entry is moved into the single layout, unless *in_place*
    (a shadowed copy: re-sealed where it is).
    """
    parsed: ParsedKey = item.parsed
    for _attempt in range(CAS_ATTEMPTS):
        if item.raw is None:
            return "vanished"
        if item.entry is None:
            return "unreadable"
        now = core.clock()
        if item.entry.is_expired(now):
            return "expired"
        if item.doubled and not in_place:
            return _move_doubled(core, item, dry_run)
        if item.current:
            return "current"
        if dry_run:
            return "rotated"
        # The same entry text (every member: search data too) in a new envelope.
        fresh = core.codec.reseal(item.raw, parsed.namespace, item.key)
        ttl_ms = core.ttl_ms(item.entry.expires_at, now)
        if charges is not None:
            written = charges.reseal(item, fresh, ttl_ms)
        else:
            written = core.store.compare_and_set(item.stored_at, item.raw, fresh, ttl_ms=ttl_ms)
        if written:
            return "rotated"
        item = _reread(core, item)  # someone wrote (or deleted) it since we read it
    return "contended"


def _reread(core: AccessorCore, item: Item) -> Item:
    """*item* read again from where it is stored."""
    raw = core.store.get(item.stored_at)
    return decode_item(core.codec, item.key, item.parsed, raw, stored_at=item.stored_at)


def _move_doubled(core: AccessorCore, item: Item, dry_run: bool) -> str:
    """Move a readable doubled-prefix entry into the single layout, sealed anew."""
    assert item.entry is not None and item.raw is not None
    if dry_run:
        return "moved"
    now = core.clock()
    fresh = core.codec.reseal(item.raw, item.parsed.namespace, item.key)
    ttl_ms = core.ttl_ms(item.entry.expires_at, now)
    if not core.store.set(item.key, fresh, ttl_ms=ttl_ms, only_if_absent=True):
        # The single-layout twin appeared meanwhile: it wins, as on read, and this
        # copy is brought to the primary secret where it is.
        return _rotate_one(core, item, dry_run, in_place=True)
    # Verified before the old copy goes: the single-layout entry is there and decodes
    # (an application may already have updated it: any readable value will do).
    check = decode_item(core.codec, item.key, item.parsed, core.store.get(item.key))
    if check.entry is None:
        return "contended"
    core.store.delete(item.stored_at)
    return "moved"


def rotate(
    core: AccessorCore,
    *,
    dry_run: bool = False,
    progress_stream: TextIO | None = None,
) -> RotateResult:
    """Re-encrypt every entry under the prefix that is not sealed by the primary secret.

    Walks every layout the plugin reads (``core.read_doubled_prefix``); see the module.
    """
    result = RotateResult(dry_run=dry_run)
    prefix = core.prefix
    subjects = core.codec.keyring.subjects if core.codec.keyring is not None else None
    if isinstance(subjects, SubjectKeys):
        result.rewrapped, result.keys_unreadable = subjects.rewrap(dry_run=dry_run)
    result.doubled_unread, items = walk_entries(
        core, label="rotate", progress_stream=progress_stream
    )
    charges = None if core.charges is None or dry_run else _Charges(core)
    for item in items:
        in_place = item.shadowed
        if in_place:
            # The application reads the single-layout twin, but this copy is what it
            # reads again once the twin expires or is forgotten: it is brought to the
            # primary secret where it is (never deleted), or reported if unreadable.
            result.shadowed += 1
            item = _reread(core, item)
        result.examined += 1
        outcome = _rotate_one(core, item, dry_run, in_place=in_place, charges=charges)
        if outcome == "moved":
            result.moved += 1
            result.rotated += 1
        elif outcome == "unreadable":
            result.note("unreadable", item.stored_at)
        elif outcome == "contended":
            result.note("contended", item.key)
        else:
            setattr(result, outcome, getattr(result, outcome) + 1)
    if charges is not None:
        charges.drop_old_ledgers()
    keyring = core.codec.keyring
    if not dry_run and result.complete and keyring is not None and prefix:
        # Every live entry is now the primary secret's: the fleet's record says so,
        # or instances that dropped the old secret would be told they do not match.
        result.key_id_recorded = record_rotated_key_id(
            core.store, prefix, keyring.primary_kid, now_ms=core.clock()
        )
    if core.audit is not None:
        outcome = "counted" if dry_run else "rotated" if result.complete else "partial"
        core.audit.record("rotate", None, None, outcome=outcome, count=result.rotated)
    return result
