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
from .._keys import ParsedKey
from .._purge import record_rotated_key_id
from .._shred import SubjectKeys
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


def _rotate_one(core: AccessorCore, item: Item, dry_run: bool, *, in_place: bool = False) -> str:
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
        if core.store.compare_and_set(item.stored_at, item.raw, fresh, ttl_ms=ttl_ms):
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
    for item in items:
        in_place = item.shadowed
        if in_place:
            # The application reads the single-layout twin, but this copy is what it
            # reads again once the twin expires or is forgotten: it is brought to the
            # primary secret where it is (never deleted), or reported if unreadable.
            result.shadowed += 1
            item = _reread(core, item)
        result.examined += 1
        outcome = _rotate_one(core, item, dry_run, in_place=in_place)
        if outcome == "moved":
            result.moved += 1
            result.rotated += 1
        elif outcome == "unreadable":
            result.note("unreadable", item.stored_at)
        elif outcome == "contended":
            result.note("contended", item.key)
        else:
            setattr(result, outcome, getattr(result, outcome) + 1)
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
