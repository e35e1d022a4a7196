"""The legacy purge (SPEC section 7): a fleet-wide clock in the store and a daemon timer.

Entries written before the ``v2:`` layout (``P + "session:..."``,
``P + "tool:..."``, ``P + "user:..."``) can no longer be read: their key
derivation and namespace encoding changed.  They are deleted once, a window
(``legacy_purge_delay_ms``, one day by default) after the **fleet** first
reached the new layout -- not after this process started.

The fleet's clock is a marker in the store, ``P + "__layout__"`` =
``{"version":2,"firstSeenAt":<epoch ms>}``, written once with only-if-absent
and no TTL, and never overwritten.  Every instance reads it; the first one to
find it missing writes it; one that loses that race adopts the winner's value.
A marker that cannot be trusted -- not JSON, no numeric ``firstSeenAt``, gone
right after a lost race, or any store error -- makes the purge stand down:
a missing clock is never licence to delete.

What the sweep deletes is decided by name **and value** (:func:`is_legacy_value`):
a key under ``P+"session:"``, ``P+"tool:"`` or ``P+"user:"`` goes only when it
holds a string that is a legacy entry of this plugin -- the reference's envelope
``{"alg":"A256GCM","iv":…,"tag":…,"data":…}`` (no ``kid``, no ``aad``) or a
plaintext entry ``{"value":…,"createdAt":…,"updatedAt":…}``.  Hashes, sets,
lists, streams and sorted sets (which ``get_many`` reports as absent), strings
of any other shape, our own ``kid``-bearing envelopes (which only a current
deployment writes) and keys shaped like another deployment's current layout
nested under ours (:func:`nested_key`) are kept and counted in
:attr:`PurgeResult.kept`.  A ``key_prefix`` that lies inside another
deployment's layout (:func:`nested_prefix`) makes the purge stand down.

The same worker guards against a wrong secret: ``P + "__keyid__"`` records the
key id (:func:`~remember_sync._crypto.key_id`, never the secret) of the first
instance that ran the purge, and a plugin whose secrets do not include it logs
one ERROR (:func:`check_key_id`, :class:`KeyIdCheck`).

Three layers, usable separately:

* :func:`read_marker` / :func:`ensure_marker` -- the clock;
* :func:`sweep_legacy` -- one SCAN-and-batched-delete pass (the CLI's
  ``purge-legacy`` uses it directly);
* :class:`LegacyPurge` -- the background worker the plugin arms: a daemon
  :class:`threading.Timer`, once per store object per process, fork-aware and
  stoppable.

Everything is logged on ``logging.getLogger("remember_sync")``.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ._clock import Clock, system_clock
from ._codec import entry_fields
from ._crypto import envelope_form
from ._fork import after_fork_in_child
from ._keys import (
    INDEX_HEAD,
    glob_escape,
    index_key_of,
    index_record_key,
    layout_marker_key,
    legacy_patterns,
    parse_doubled_key,
)
from .errors import (
    LayoutMarkerError,
    RememberConfigurationError,
    RememberDecryptionError,
    RememberError,
    RememberStoreError,
)
from .stores.base import NamespaceIndex, PrunesIndexes, Store

log = logging.getLogger("remember_sync")

#: The layout version the marker records.
MARKER_VERSION = 2
#: Default window between the fleet's first ``v2`` sighting and the sweep (one day).
DEFAULT_DELAY_MS = 86_400_000
#: Longest single timer wait.  A monotonic timer does not follow wall-clock jumps or a
#: suspended host, and an operator may reset the marker; re-reading it every few hours
#: costs one GET and keeps the worker honest.
MAX_WAIT_MS = 6 * 3_600_000
#: The pre-``v2`` scopes, in the order they are swept (``global`` never changed).
LEGACY_SCOPES = ("session", "tool", "user")
#: Keys examined per SCAN round trip (SPEC section 6.2).
SCAN_COUNT = 1000
#: Prefix segments that belong to a deployment's own layout: ``v2`` (current
#: session/tool/user keys), ``global`` and the legacy scopes.  A ``key_prefix`` with
#: one of them as a whole segment (``remember:v2:``, ``remember:user:``,
#: ``app:global:``) lies inside another deployment's keys: its legacy patterns would
#: match that deployment's entries (``remember:v2:`` + ``session:*`` is the default
#: deployment's current session entries).
NESTED_SEGMENTS = ("v2", "global", *LEGACY_SCOPES)
#: Last segments of another deployment's bookkeeping keys (never legacy entries).
_BOOKKEEPING = ("__layout__", "__keyid__", "__indexed__", "__indexing__", "__pruning__")
#: Substrings of a key that only a (possibly nested) current deployment writes.
_NESTED_MARKERS = (
    "v2:session:", "v2:user:", "v2:tool:", "global:", *_BOOKKEEPING, "__revoked__:", "__index__:",
    "__cas__:",
)


@dataclass(frozen=True)
class Marker:
    """The fleet clock read from ``P + "__layout__"``.

    :attr version: the marker's ``version`` (``None`` if it is not an int; like
        the reference, the version is recorded but not checked).
    :attr first_seen_at: epoch milliseconds when the fleet first reached ``v2``.
    """

    version: int | None
    first_seen_at: int

    def to_json(self) -> str:
        """The stored form, ``{"version":2,"firstSeenAt":<ms>}`` (compact, this key order)."""
        return json.dumps(
            {"version": self.version, "firstSeenAt": self.first_seen_at}, separators=(",", ":")
        )


@dataclass(frozen=True)
class PurgeResult:
    """What one :func:`sweep_legacy` pass did.

    :attr found: legacy entries found: keys under the legacy patterns holding a
        legacy value (:func:`is_legacy_value`); on a dry run, what would go.
    :attr deleted: keys the store reported deleted (``0`` on a dry run).
    :attr kept: keys under the legacy patterns left alone because they are not
        legacy entries of this plugin: another type (hash, set, list...), a string
        of another shape, one of our ``kid`` envelopes, a key shaped like a nested
        deployment's (:func:`nested_key`), or gone since the listing.
    :attr failed_batches: delete batches the store refused (their keys remain).
    :attr failed_listings: patterns whose SCAN failed part-way (the rest of the
        pattern was not swept; the next pattern still was).
    :attr stopped: the pass was interrupted by ``should_stop`` after a batch.
    :attr dry_run: nothing was deleted on purpose.
    """

    found: int = 0
    deleted: int = 0
    kept: int = 0
    failed_batches: int = 0
    failed_listings: int = 0
    stopped: bool = False
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """The pass completed with no failed batch or listing."""
        return not (self.failed_batches or self.failed_listings or self.stopped)


def _entries(count: int) -> str:
    """*count* and the noun in its number: ``"1 entry"``, ``"2 entries"``."""
    return f"{count} entry" if count == 1 else f"{count} entries"


def purged_message(count: int) -> str:
    """The exact warning logged after a sweep that deleted *count* > 0 entries (SPEC section 7)."""
    return (
        f"remember: purged {_entries(count)} left unreadable by the session/tool key-derivation "
        "change and the namespace encoding. This is a one-time upgrade step; set "
        "skip_legacy_purge to handle the migration yourself."
    )


# -- the marker ----------------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    # json accepts NaN/Infinity by default; a marker holding one is not a clock.
    raise ValueError(f"non-finite number {name}")


def _parse_marker(key: str, raw: str) -> Marker:
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        raise LayoutMarkerError(
            f"layout marker {key!r} is not JSON", key=key, reason="unreadable", raw=raw
        ) from exc
    first = data.get("firstSeenAt") if isinstance(data, dict) else None
    # bool is an int subclass; True is not a timestamp.
    if isinstance(first, bool) or not isinstance(first, (int, float)) or not math.isfinite(first):
        raise LayoutMarkerError(
            f"layout marker {key!r} has no numeric firstSeenAt", key=key, reason="unreadable",
            raw=raw,
        )
    version = data.get("version")
    return Marker(
        version=version if isinstance(version, int) and not isinstance(version, bool) else None,
        first_seen_at=math.floor(first),
    )


def read_marker(store: Store, prefix: str) -> Marker | None:
    """Read the layout marker ``prefix + "__layout__"``.

    :returns: the marker, or ``None`` when there is none.
    :raises LayoutMarkerError: (``reason="unreadable"``) when a value is there
        but is not JSON with a finite numeric ``firstSeenAt``.
    :raises RememberStoreError: when the store fails.
    """
    key = layout_marker_key(prefix)
    raw = store.get(key)
    return None if raw is None else _parse_marker(key, raw)


def ensure_marker(store: Store, prefix: str, now_ms: int) -> Marker:
    """Return the fleet's marker, writing ``{"version":2,"firstSeenAt":now_ms}`` if absent.

    The write is only-if-absent and carries no TTL -- whatever ``default_ttl``
    says -- so a later instance can never reset the clock.  Losing the race to
    another instance means adopting its value.

    :raises LayoutMarkerError: the marker is unreadable, or vanished right after
        a lost race; callers stand down.
    :raises RememberStoreError: when the store fails; callers stand down.
    """
    found = read_marker(store, prefix)
    if found is not None:
        return found
    key = layout_marker_key(prefix)
    mine = Marker(version=MARKER_VERSION, first_seen_at=int(now_ms))
    if store.set(key, mine.to_json(), ttl_ms=None, only_if_absent=True):
        return mine
    winner = read_marker(store, prefix)
    if winner is None:
        raise LayoutMarkerError(
            f"layout marker {key!r} vanished after a lost race", key=key, reason="vanished"
        )
    return winner


# -- the key id record --------------------------------------------------------------------


def key_id_key(prefix: str) -> str:
    """``P + "__keyid__"``: the key id of the secret the fleet's data is written with."""
    return f"{prefix}__keyid__"


@dataclass(frozen=True)
class KeyIdRecord:
    """What ``P + "__keyid__"`` holds: ``{"version":1,"kid":…,"recordedAt":<ms>}``.

    :attr kid: :func:`~remember_sync._crypto.key_id` of the first recording
        instance's primary secret (a truncated hash: never the secret).
    :attr recorded_at: epoch milliseconds of the recording.
    """

    kid: str
    recorded_at: int

    def to_json(self) -> str:
        """The stored form (compact, this key order)."""
        return json.dumps(
            {"version": 1, "kid": self.kid, "recordedAt": self.recorded_at}, separators=(",", ":")
        )


@dataclass(frozen=True)
class KeyIdStatus:
    """The outcome of :func:`check_key_id`.

    :attr key: the record's storage key.
    :attr recorded: the recorded key id (``None``: nothing recorded yet).
    :attr kids: this plugin's key ids, primary first.
    :attr wrote: this call recorded ``kids[0]``.
    """

    key: str
    recorded: str | None
    kids: tuple[str, ...]
    wrote: bool = False

    @property
    def matches(self) -> bool:
        """Nothing is recorded, or one of our secrets is the recorded one."""
        return self.recorded is None or self.recorded in self.kids


def read_key_id(store: Store, prefix: str) -> KeyIdRecord | None:
    """Read ``prefix + "__keyid__"``.

    :returns: the record, or ``None`` when there is none.
    :raises LayoutMarkerError: (``reason="unreadable"``) when a value is there
        but is not ``{"kid": <non-empty str>, ...}``.
    :raises RememberStoreError: when the store fails.
    """
    key = key_id_key(prefix)
    raw = store.get(key)
    return None if raw is None else _parse_key_id(key, raw)


def _parse_key_id(key: str, raw: str) -> KeyIdRecord:
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except ValueError:
        data = None
    kid = data.get("kid") if isinstance(data, dict) else None
    if not isinstance(kid, str) or not kid:
        raise LayoutMarkerError(
            f"key id record {key!r} is not {{\"kid\": <key id>, ...}}", key=key,
            reason="unreadable", raw=raw,
        )
    at = data.get("recordedAt") if isinstance(data, dict) else None
    recorded_at = at if isinstance(at, int) and not isinstance(at, bool) else 0
    return KeyIdRecord(kid=kid, recorded_at=recorded_at)


def check_key_id(
    store: Store, prefix: str, kids: Sequence[str], *, record: bool, now_ms: int
) -> KeyIdStatus:
    """Compare *kids* with the key id recorded under *prefix*; record ``kids[0]`` if asked.

    With *record*, a missing record is written with only-if-absent and no TTL
    (like the marker: never overwritten; a lost race adopts the winner's).
    Without it nothing is written.

    :raises LayoutMarkerError: the record is unreadable.
    :raises RememberStoreError: when the store fails.
    """
    if not kids:
        raise RememberConfigurationError("check_key_id needs at least one key id")
    key = key_id_key(prefix)
    ours = tuple(kids)
    found = read_key_id(store, prefix)
    if found is None and record:
        mine = KeyIdRecord(kid=ours[0], recorded_at=int(now_ms))
        if store.set(key, mine.to_json(), ttl_ms=None, only_if_absent=True):
            return KeyIdStatus(key, mine.kid, ours, wrote=True)
        found = read_key_id(store, prefix)
    return KeyIdStatus(key, None if found is None else found.kid, ours)


def record_rotated_key_id(store: Store, prefix: str, kid: str, *, now_ms: int) -> bool:
    """After a complete ``rotate``: make the record say *kid* (the new primary secret's).

    The record is otherwise never overwritten; a rotation that re-sealed every
    entry under *kid* is the one event that changes whose data the store holds.
    The replacement is a compare-and-set against the record just read, so a
    concurrent rotation or repair is never clobbered.  An unreadable record is
    left for the operator (``doctor`` reports it).

    :returns: whether the record now holds *kid*.
    :raises RememberStoreError: when the store fails.
    """
    key = key_id_key(prefix)
    fresh = KeyIdRecord(kid=kid, recorded_at=int(now_ms)).to_json()
    raw = store.get(key)
    if raw is None:
        return store.set(key, fresh, ttl_ms=None, only_if_absent=True)
    try:
        if _parse_key_id(key, raw).kid == kid:
            return True
    except LayoutMarkerError:
        return False
    return store.compare_and_set(key, raw, fresh)


def mismatch_message(status: KeyIdStatus) -> str:
    """The ERROR (and doctor text) for a secret that does not match the store's record."""
    previous = list(status.kids[1:])
    return (
        "remember: the configured secret does not match the one this store's data was "
        f"written with: {status.key!r} records key id {status.recorded!r}, this plugin's secret "
        f"has key id {status.kids[0]!r} (previous secrets: {previous}). Entries it writes cannot "
        "be read by the instances using the recorded secret, and theirs are unreadable here. "
        "Set REMEMBER_SECRET (or encryption secrets) to the fleet's secret, or add it to "
        "REMEMBER_PREVIOUS_SECRETS while rotating; a complete `remember-sync rotate` then "
        "records the new key id."
    )


def _verify_key_id(
    store: Store,
    prefix: str,
    kids: Sequence[str],
    *,
    record: bool,
    clock: Clock,
    logger: logging.Logger,
) -> KeyIdStatus | None:
    """:func:`check_key_id` for a background worker: ERROR on a mismatch, debug on failure."""
    try:
        status = check_key_id(store, prefix, kids, record=record, now_ms=clock())
    except RememberError as exc:
        # LayoutMarkerError is a RememberError too.  Not being able to check is no
        # evidence of a mismatch; doctor reports an unreadable record.
        logger.debug(
            "remember: could not check the key id record, skipped (key=%r, error=%s)",
            key_id_key(prefix),
            exc,
        )
        return None
    if not status.matches:
        logger.error(mismatch_message(status))
    return status


class KeyIdCheck:
    """A one-shot background :func:`check_key_id`, for plugins that do not run the purge.

    :meth:`start` schedules the check on a daemon timer (no I/O on the
    caller's thread).  It never writes unless *record* is true; a mismatch is
    logged once, at ERROR.  :attr:`status` holds the outcome (``None`` until it
    ran, or when the store failed).
    """

    def __init__(
        self,
        store: Store,
        prefix: str,
        kids: Sequence[str],
        *,
        clock: Clock,
        record: bool = False,
        logger: logging.Logger | None = None,
        timer_factory: TimerFactory = threading.Timer,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.kids = tuple(kids)
        self.record = record
        self._clock = clock
        self._log = logger or log
        self._timer_factory = timer_factory
        self._timer: TimerLike | None = None
        self._done = threading.Event()
        self._stopped = False
        self.status: KeyIdStatus | None = None
        """The outcome, once the check ran (``None`` if the store failed)."""

    def start(self) -> KeyIdCheck:
        """Schedule the check now on a daemon timer; returns ``self``."""
        timer = self._timer_factory(0, self._run)
        timer.daemon = True
        if isinstance(timer, threading.Thread):
            timer.name = "remember-key-id-check"
        self._timer = timer
        timer.start()
        return self

    def _run(self) -> None:
        try:
            if not self._stopped:
                self.status = _verify_key_id(
                    self.store, self.prefix, self.kids, record=self.record, clock=self._clock,
                    logger=self._log,
                )
        except Exception:  # noqa: BLE001 - a background thread must never die silently
            self._log.warning("remember: key id check failed unexpectedly", exc_info=True)
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the check has run; ``False`` on timeout."""
        return self._done.wait(timeout)

    def stop(self, timeout: float | None = 5.0) -> None:
        """Cancel the check if it has not run; wait for it if it is running."""
        self._stopped = True
        timer = self._timer
        if timer is None:
            return
        timer.cancel()
        if isinstance(timer, threading.Thread) and timer.ident is not None:
            if timer is not threading.current_thread():
                timer.join(timeout)


# -- what the sweep may delete ----------------------------------------------------------------


def nested_prefix(prefix: str) -> str | None:
    """The segment that puts *prefix* inside another deployment's key layout, or ``None``.

    Only whole segments count (``"remember:v2:"`` has ``v2``; ``"remember:v2"``
    and ``"myappv2:"`` do not): a prefix with ``v2``, ``global``, ``session``,
    ``tool`` or ``user`` as a segment is where a deployment with a shorter prefix
    keeps entries, so this one's legacy patterns would sweep them.  Storage is
    not refused: such a prefix shares another deployment's key space but, for
    ``P+"v2:"`` or ``P+"user:"``, never one of its keys (``docs/purge.rst``).
    """
    for segment in prefix.split(":")[:-1]:
        if segment in NESTED_SEGMENTS:
            return segment
    return None


def nested_key(rest: str) -> bool:
    """Whether a key under ``P + scope + ":"`` may be a *nested* deployment's key.

    *rest* is the key after ``P + scope + ":"``.  A deployment whose prefix lies
    under ``P + "session:"`` (``remember:session:``, or ``remember:session:app``
    with no trailing colon) keeps its current entries at ``…v2:<scope>:…`` and
    ``…global:…`` and its bookkeeping at ``…__layout__``, ``…__keyid__`` and
    ``…__revoked__:…``.  Any key holding one of those markers *anywhere* is never
    swept, even when its value is an entry: a nested prefix need not end at a
    segment boundary.  A true legacy entry that happens to contain one (a user key
    ``a:global:b``) is kept too: keeping garbage is safe, deleting another
    deployment's data is not.
    """
    return any(marker in rest for marker in _NESTED_MARKERS)


def is_legacy_value(raw: str) -> bool:
    """Whether *raw* is a value this plugin's legacy layout wrote (SPEC section 4).

    True for the reference's envelope ``{"alg":"A256GCM","iv","tag","data"}``
    (checked by ``_crypto.envelope_form``) without ``kid`` or
    ``aad`` -- those two mark our current envelopes, which no legacy version
    wrote -- and for a plaintext entry (:func:`~remember_sync._codec.entry_fields`:
    an object with ``value`` and numeric ``createdAt``/``updatedAt``).
    Anything else is someone else's data.
    """
    try:
        kid, bound = envelope_form(raw)
    except RememberDecryptionError:
        pass
    else:
        return kid is None and not bound
    try:
        entry_fields(raw)
    except RememberDecryptionError:
        return False
    return True


def _refuse_prefix(prefix: str) -> None:
    """The prefixes :func:`sweep_legacy` refuses, with the reason."""
    if not prefix:
        raise RememberConfigurationError(
            "the legacy purge is disabled for an empty key_prefix: 'session:*' would match "
            "keys that are not ours"
        )
    segment = nested_prefix(prefix)
    if segment is not None:
        raise RememberConfigurationError(nested_prefix_message(prefix, segment))


def nested_prefix_message(prefix: str, segment: str) -> str:
    """Why the purge refuses *prefix*: it lies inside another deployment's layout."""
    return (
        f"the legacy purge is disabled for key_prefix {prefix!r}: its segment {segment + ':'!r} "
        "lies inside another deployment's key layout, so its legacy patterns "
        f"({prefix}session:*, {prefix}tool:*, {prefix}user:*) would match that deployment's "
        "entries; set skip_legacy_purge=True and remove this prefix's legacy keys yourself"
    )


# -- the sweep -----------------------------------------------------------------------------


def _check_whole(name: str, value: object, minimum: int) -> None:
    """Refuse *value* unless it is an int of at least *minimum* (``bool`` is not)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RememberConfigurationError(f"{name} must be an int >= {minimum}; got {value!r}")


def _never() -> bool:
    return False


def sweep_legacy(
    store: Store,
    prefix: str,
    *,
    dry_run: bool = False,
    batch: int = 500,
    should_stop: Callable[[], bool] | None = None,
) -> PurgeResult:
    """Delete every pre-``v2`` entry under *prefix*: one SCAN pass per scope, batched.

    Scans ``P+"session:*"``, ``P+"tool:*"`` and ``P+"user:*"`` (the prefix
    glob-escaped, and every key checked again against the literal prefix, so
    ``v2:`` keys, ``global:`` keys, the marker and keys under any other prefix
    are never touched; keys shaped like a nested deployment's are skipped too,
    :func:`nested_key`).  Per ``batch`` keys: one ``store.get_many`` (one
    ``MGET``), then one ``store.delete`` (one ``UNLINK``) of the keys whose
    value is a legacy entry (:func:`is_legacy_value`).  A hash, set, list,
    stream or sorted set reads as ``None`` through ``get_many`` (Redis ``MGET``
    answers nil for another type) and is never deleted.

    The value is not re-checked atomically with the delete: current versions
    never write these keys, keys a nested deployment writes are excluded by
    name, and our own envelopes by their ``kid``; a foreign writer would have to
    replace a legacy-shaped value in the one round trip between ``MGET`` and
    ``UNLINK`` (see ``docs/purge.rst``).

    A batch the store refuses (read or delete) is logged and counted and the
    sweep goes on; a SCAN that fails is logged and counted and the next scope is
    swept.  Nothing is logged at warning level here: :class:`LegacyPurge` (and
    the CLI) report the count.

    :param dry_run: only count what would be deleted (values are still read).
    :param batch: keys per read and delete call.
    :param should_stop: polled between keys; once true the sweep finishes the
        batch in flight and returns with ``stopped=True``.
    :raises RememberConfigurationError: for an empty *prefix*, whose patterns
        would match keys that are not ours, and for a prefix inside another
        deployment's layout (:func:`nested_prefix`).
    """
    _refuse_prefix(prefix)
    _check_whole("batch", batch, 1)
    stop = should_stop or _never
    found = deleted = kept = failed_batches = failed_listings = 0
    stopped = False

    def flush(keys: list[str]) -> None:
        nonlocal found, deleted, kept, failed_batches
        try:
            values = store.get_many(keys)
        except RememberStoreError as exc:
            failed_batches += 1
            log.debug(
                "remember: legacy purge could not read a batch of %d keys, continuing (%s)",
                len(keys),
                exc,
            )
            return
        doomed = [
            key
            for key, raw in zip(keys, values, strict=True)
            if raw is not None and is_legacy_value(raw)
        ]
        found += len(doomed)
        kept += len(keys) - len(doomed)
        if dry_run or not doomed:
            return
        try:
            deleted += store.delete(*doomed)
        except RememberStoreError as exc:
            failed_batches += 1
            log.debug(
                "remember: legacy purge could not delete a batch of %d keys, continuing (%s)",
                len(doomed),
                exc,
            )

    for scope, pattern in zip(LEGACY_SCOPES, legacy_patterns(prefix), strict=True):
        head = f"{prefix}{scope}:"
        pending: list[str] = []
        keys = iter(store.scan(pattern, count=SCAN_COUNT))
        while True:
            if stop():
                stopped = True
                break
            try:
                key = next(keys)
            except StopIteration:
                break
            except RememberStoreError as exc:
                failed_listings += 1
                log.debug(
                    "remember: legacy purge skipped, store could not list keys (pattern=%r, %s)",
                    pattern,
                    exc,
                )
                break
            # Belt and braces: a store whose glob is looser than Redis's must still never
            # hand us a v2:, global:, marker or foreign key.
            if not key.startswith(head):
                continue
            if nested_key(key[len(head) :]):
                kept += 1
                continue
            pending.append(key)
            if len(pending) >= batch:
                flush(pending)
                pending = []
        if stopped:
            # The batch in flight has finished; keys not yet sent stay for the next run.
            break
        if pending:
            flush(pending)
    return PurgeResult(
        found=found,
        deleted=deleted,
        kept=kept,
        failed_batches=failed_batches,
        failed_listings=failed_listings,
        stopped=stopped,
        dry_run=dry_run,
    )


# -- the background worker -----------------------------------------------------------------


class TimerLike(Protocol):
    """What :class:`LegacyPurge` needs from a timer (``threading.Timer`` fits)."""

    daemon: bool

    def start(self) -> None: ...

    def cancel(self) -> None: ...


TimerFactory = Callable[[float, Callable[[], None]], TimerLike]

#: Store objects that already have a worker in this process (by identity: stores
#: need not be hashable).  A claim is dropped when its store is collected, or when
#: its worker is stopped before finishing, so a later plugin on the store can arm.
_claims: dict[int, Callable[[], object | None]] = {}
_claims_lock = threading.Lock()
#: Every worker that may need re-arming in a forked child.
_workers: weakref.WeakSet[LegacyPurge] = weakref.WeakSet()


def _claim(store: Store) -> bool:
    key = id(store)
    with _claims_lock:
        held = _claims.get(key)
        if held is not None and held() is store:
            return False
        try:

            def _drop(ref: object, key: int = key) -> None:
                # No lock: weakref callbacks may run inside a GC triggered while it is held.
                if _claims.get(key) is ref:
                    del _claims[key]

            _claims[key] = weakref.ref(store, _drop)
        except TypeError:
            # Not weak-referenceable: hold it (the plugin holds it anyway).
            _claims[key] = lambda: store
        return True


def _release(store: Store) -> None:
    with _claims_lock:
        held = _claims.get(id(store))
        if held is not None and held() is store:
            del _claims[id(store)]


class LegacyPurge:
    """The background worker the plugin arms (SPEC section 7).

    Nothing happens on the caller's thread: :meth:`start` only schedules the
    first step on a daemon timer (``Timer(0, ...)``).  Each step reads -- or
    writes -- the marker; while the window is open it re-arms a daemon timer for
    the remainder (at most :data:`MAX_WAIT_MS` at a time, re-reading the marker
    on each wake); once it has passed it sweeps once and logs the count.

    Only one worker per store object per process arms; a second one on the
    same store settles in state ``"duplicate"``.  In a forked child, workers
    that were waiting re-arm themselves (the parent's timer thread does not
    exist there).

    :param store: where the marker and legacy keys live.
    :param prefix: the key prefix ``P`` (empty: the worker is disabled).
    :param delay_ms: the window after the marker's ``firstSeenAt``.
    :param clock: epoch milliseconds.
    :param logger: defaults to ``logging.getLogger("remember_sync")``.
    :param timer_factory: ``(seconds, function) -> timer``; tests inject one
        they can fire by hand.
    :param batch: keys per delete call during the sweep.
    :param kids: the plugin's key ids, primary first (``None``: encryption is
        disabled, no key id check).  The first step records ``kids[0]`` under
        ``P + "__keyid__"`` if nothing is recorded and logs one ERROR when the
        recorded id is not among *kids* (:func:`check_key_id`).  A worker that
        will not run (``"duplicate"``, or ``"stood-down"`` for a nested prefix)
        runs a read-only :class:`KeyIdCheck` instead.

    A prefix inside another deployment's layout (:func:`nested_prefix`) makes
    :meth:`start` stand down at once with one WARNING naming it.

    States (:attr:`state`): ``"idle"`` (not started), ``"pending"`` (a step is
    due now or running), ``"armed"`` (waiting for the window), ``"swept"``,
    ``"stood-down"``, ``"stopped"``, ``"disabled"``, ``"duplicate"``.
    """

    def __init__(
        self,
        store: Store,
        prefix: str,
        *,
        delay_ms: int = DEFAULT_DELAY_MS,
        clock: Clock,
        logger: logging.Logger | None = None,
        timer_factory: TimerFactory = threading.Timer,
        batch: int = 500,
        kids: Sequence[str] | None = None,
        on_swept: Callable[[PurgeResult], None] | None = None,
    ) -> None:
        _check_whole("legacy_purge_delay_ms", delay_ms, 0)
        _check_whole("batch", batch, 1)
        #: Called with the result of each sweep (the plugin records it in its audit trail).
        self.on_swept = on_swept
        self.store = store
        self.prefix = prefix
        self.delay_ms = delay_ms
        self._clock = clock
        self._log = logger or log
        self._timer_factory = timer_factory
        self._batch = batch
        self.kids = None if not kids else tuple(kids)
        self._kid_checked = False
        self.key_check: KeyIdCheck | None = None
        """The read-only check a worker that does not run starts instead."""
        self.key_status: KeyIdStatus | None = None
        """What the first step's key id check found (``None`` before it, or on failure)."""
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._settled.set()
        self._state = "idle"
        self._stopping = False
        self._running = False
        self._owns_claim = False
        self._timer: TimerLike | None = None
        self._generation = 0
        self.marker: Marker | None = None
        """The marker read by the latest step."""
        self.last_result: PurgeResult | None = None
        """What the sweep did, once it ran."""
        self.next_wake_ms: int | None = None
        """Length of the wait currently armed (ms), ``None`` when none is."""
        self.armed_pid: int | None = None
        """The process that armed the current timer (changes in a forked child)."""

    # -- public ----------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """Where the worker is: see the class docstring."""
        return self._state

    @property
    def due_at_ms(self) -> int | None:
        """Epoch ms when the window passes (``firstSeenAt + delay_ms``), once the marker is read."""
        return None if self.marker is None else self.marker.first_seen_at + self.delay_ms

    def start(self) -> LegacyPurge:
        """Schedule the first step on a daemon timer; never does I/O on this thread."""
        with self._lock:
            if self._state != "idle":
                return self
            if not self.prefix:
                self._state = "disabled"
                self._log.debug("remember: legacy purge disabled for an empty key_prefix")
                return self
            segment = nested_prefix(self.prefix)
            if segment is not None:
                self._state = "stood-down"
                self._log.warning("remember: %s", nested_prefix_message(self.prefix, segment))
                self._start_key_check()
                return self
            if not _claim(self.store):
                self._state = "duplicate"
                self._log.debug("remember: legacy purge already armed for this store")
                self._start_key_check()
                return self
            self._owns_claim = True
            _workers.add(self)
            self._schedule_locked(0)
        return self

    def _start_key_check(self) -> None:
        """A read-only key id check for a worker that will not run its own steps."""
        if self.kids is not None:
            self.key_check = KeyIdCheck(
                self.store, self.prefix, self.kids, clock=self._clock, logger=self._log,
                timer_factory=self._timer_factory,
            ).start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Cancel the timer; a running sweep finishes its batch and stops.

        Waits up to *timeout* seconds for the worker thread to end (never when
        called from that thread), so a closed plugin leaves no thread behind.
        """
        if self.key_check is not None:
            self.key_check.stop(timeout)
        with self._lock:
            if self._state in ("stopped", "idle", "disabled", "duplicate"):
                if self._state == "idle":
                    self._state = "stopped"
                return
            self._stopping = True
            timer, self._timer = self._timer, None
            finished = self._state in ("swept", "stood-down")
            self._state = "stopped"
            self.next_wake_ms = None
            if timer is not None:
                timer.cancel()
            if not self._running:
                # A cancelled timer never runs its step, so nothing else would settle us.
                self._settled.set()
        if self._owns_claim and not finished:
            # Stopped before its job was done: let a later plugin on this store take over.
            _release(self.store)
            self._owns_claim = False
        thread = timer if isinstance(timer, threading.Thread) else None
        on_worker = thread is threading.current_thread()
        if thread is not None and thread.ident is not None and not on_worker:
            thread.join(timeout)
        if not on_worker:
            self._settled.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no step is due or running; return ``False`` on timeout.

        For tests and operators' tools: after :meth:`start`, ``wait()`` returns
        once the first step has read the marker and either armed a wait, swept,
        or stood down.
        """
        return self._settled.wait(timeout)

    def __repr__(self) -> str:
        return f"LegacyPurge(prefix={self.prefix!r}, state={self._state!r})"

    # -- the worker ------------------------------------------------------------------------

    def _schedule_locked(self, delay_ms: int) -> None:
        """Arm a daemon timer to run a step after *delay_ms* (lock held)."""
        self._generation += 1
        generation = self._generation
        timer = self._timer_factory(delay_ms / 1000.0, lambda: self._step(generation))
        timer.daemon = True
        if isinstance(timer, threading.Thread):
            timer.name = "remember-legacy-purge"
        self._timer = timer
        self.armed_pid = os.getpid()
        # Started before the state is published, so a waiter that sees "armed" sees a live
        # thread; the step itself cannot run before we release the lock.
        timer.start()
        if delay_ms == 0:
            self._state = "pending"
            self.next_wake_ms = None
            self._settled.clear()
        else:
            self._state = "armed"
            self.next_wake_ms = delay_ms
            self._settled.set()

    def _step(self, generation: int) -> None:
        with self._lock:
            if self._stopping or generation != self._generation:
                return  # cancelled, or superseded (a forked child re-armed)
            self._state = "pending"
            self._running = True
            self._settled.clear()
        try:
            self._run()
        except Exception:  # noqa: BLE001 - a background thread must never die silently
            self._log.warning(
                "remember: legacy purge failed unexpectedly and stood down; nothing more will "
                "be deleted by this process",
                exc_info=True,
            )
            self._finish("stood-down")
        finally:
            with self._lock:
                self._running = False
                self._settled.set()

    def _finish(self, state: str) -> None:
        with self._lock:
            if not self._stopping:
                self._state = state
                self._timer = None
                self.next_wake_ms = None

    def _run(self) -> None:
        if self.kids is not None and not self._kid_checked:
            # Once per worker, so a mismatch is one ERROR, not one per re-armed wake.
            self._kid_checked = True
            self.key_status = _verify_key_id(
                self.store, self.prefix, self.kids, record=True, clock=self._clock,
                logger=self._log,
            )
        key = layout_marker_key(self.prefix)
        try:
            marker = ensure_marker(self.store, self.prefix, self._clock())
        except LayoutMarkerError as exc:
            if exc.reason == "vanished":
                text = "remember: layout marker vanished after a lost race, legacy purge stood down"
            else:
                text = "remember: layout marker is unreadable, legacy purge stood down"
            self._log.debug("%s (key=%r)", text, key)
            self._finish("stood-down")
            return
        except RememberError as exc:
            self._log.debug(
                "remember: could not establish the layout marker, legacy purge stood down "
                "(key=%r, error=%s)",
                key,
                exc,
            )
            self._finish("stood-down")
            return
        self.marker = marker
        remaining = marker.first_seen_at + self.delay_ms - self._clock()
        with self._lock:
            if self._stopping:
                return
            if remaining > 0:
                self._schedule_locked(min(remaining, MAX_WAIT_MS))
                self._log.debug(
                    "remember: legacy purge armed, %d ms until the window from firstSeenAt=%d "
                    "has passed",
                    remaining,
                    marker.first_seen_at,
                )
                return
        result = sweep_legacy(
            self.store, self.prefix, batch=self._batch, should_stop=lambda: self._stopping
        )
        self.last_result = result
        if self.on_swept is not None:
            self.on_swept(result)
        if result.deleted > 0:
            self._log.warning(purged_message(result.deleted))
        self._log.debug(
            "remember: legacy purge swept (found=%d, deleted=%d, failed_batches=%d, "
            "failed_listings=%d, stopped=%s)",
            result.found,
            result.deleted,
            result.failed_batches,
            result.failed_listings,
            result.stopped,
        )
        self._finish("swept")

    # -- fork ------------------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        # The parent's lock and event may have been held by a thread that does not exist
        # here; start from fresh ones.
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._settled.set()
        self._running = False
        if self._stopping or self._state not in ("pending", "armed"):
            return
        with self._lock:
            # The old timer object's thread is gone; its generation is retired.
            self._timer = None
            self._schedule_locked(0)


def _after_fork_in_child() -> None:
    global _claims_lock
    _claims_lock = threading.Lock()
    for worker in list(_workers):
        try:
            worker._after_fork_in_child()
        except Exception:  # noqa: BLE001 - never break the child over a background job
            log.debug("remember: legacy purge could not re-arm after fork", exc_info=True)


after_fork_in_child(_after_fork_in_child)


# -- the one-time background reindex ----------------------------------------------------------

#: How long one instance's claim to run the fleet's reindex holds (renewed before each
#: batch: an instance that dies mid-pass lets another start over after it).
INDEXING_LEASE_MS = 600_000
#: An instance that met another's lease tries again this often until the record is
#: there (a pass whose instance died is taken over by a running one); after a failed
#: pass it waits twice as long each time, up to 64 times this.
INDEXING_RETRY_S = 60.0


#: How often the fleet prunes its listing indexes (Redis Cluster; see prune_indexes):
#: an index key is gone at most the grace plus this long after its namespace's last
#: entry ended and its last write (docs/redis.rst, "The listing index").
INDEX_PRUNE_PERIOD_S = 3600.0


@dataclass(frozen=True)
class ReindexResult:
    """What one :func:`reindex_store` pass did.

    :attr keys: keys found under the prefix.
    :attr entries: of them, entry keys (the ones an index holds).
    :attr indexed: entries the store put into (or confirmed in) their index;
        fewer than *entries* when some were deleted during the pass.
    :attr seconds: how long the pass took.
    :attr stopped: interrupted by ``should_stop`` (nothing recorded).
    :attr pruned: index members whose entry was gone, dropped by :func:`prune_indexes`.
    """

    keys: int
    entries: int
    indexed: int
    seconds: float
    stopped: bool = False
    pruned: int = 0

    @property
    def rate(self) -> float:
        """Entries per second."""
        return self.entries / self.seconds if self.seconds > 0 else float(self.entries)


def indexing_lease_key(prefix: str) -> str:
    """``P + "__indexing__"``: which instance is running the fleet's reindex (with a TTL)."""
    return f"{prefix}__indexing__"


def pruning_lease_key(prefix: str) -> str:
    """``P + "__pruning__"``: the fleet's prune pass of this period is taken (with a TTL)."""
    return f"{prefix}__pruning__"


def prune_indexes(store: Store, prefix: str) -> int:
    """Settle every listing index under *prefix* (a store that needs it: Redis Cluster).

    Members whose entry is gone are dropped and each index's expiry follows
    its live entries, so an index key disappears within the bound of
    ``docs/redis.rst`` without any read of its namespace.  Returns how many
    members were dropped (0 on a store without the capability).
    """
    if not isinstance(store, PrunesIndexes):
        return 0
    return store.prune_indexes(glob_escape(prefix + INDEX_HEAD) + "*")


def record_indexed(store: Store, prefix: str, now_ms: int) -> None:
    """Write ``P + "__indexed__"`` = ``{"version":1,"indexedAt":<ms>}`` (no TTL)."""
    text = json.dumps({"version": 1, "indexedAt": int(now_ms)}, separators=(",", ":"))
    store.set(index_record_key(prefix), text)


def reindex_store(
    store: Store,
    prefix: str,
    *,
    batch: int = 1000,
    on_total: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    clock: Clock | None = None,
) -> ReindexResult:
    """Put every entry under *prefix* into its listing index, then record ``P + "__indexed__"``.

    One ``SCAN`` of ``P*`` (the keys are held to count them), then the entry
    keys go to :meth:`~remember_sync.stores.base.NamespaceIndex.add_to_index`
    *batch* at a time.  Idempotent, and safe beside live writers (they keep
    the index themselves).  *on_total* gets the number of entry keys,
    *on_batch* each batch's size (a progress bar).

    :raises RememberConfigurationError: the store keeps no listing index, or a bad *batch*.
    :raises RememberStoreError: the store failed (nothing is recorded).
    """
    if not isinstance(store, NamespaceIndex):
        raise RememberConfigurationError(
            f"{type(store).__name__} keeps no listing index: nothing to reindex"
        )
    _check_whole("batch", batch, 1)
    began = time.perf_counter()
    store.use_index(functools.partial(index_key_of, prefix))
    found = store.scan(glob_escape(prefix) + "*")
    keys = list(dict.fromkeys(k for k in found if k.startswith(prefix)))
    entries = [k for k in keys if index_key_of(prefix, k) is not None]
    if on_total is not None:
        on_total(len(entries))
    indexed = 0
    stopped = False
    for start in range(0, len(entries), batch):
        if should_stop is not None and should_stop():
            stopped = True
            break
        chunk = entries[start : start + batch]
        indexed += store.add_to_index(chunk)
        if on_batch is not None:
            on_batch(len(chunk))
    pruned = 0
    if not stopped:
        now = (clock or system_clock)()
        record_indexed(store, prefix, now)
        pruned = prune_indexes(store, prefix)
    return ReindexResult(
        keys=len(keys),
        entries=len(entries),
        indexed=indexed,
        seconds=time.perf_counter() - began,
        stopped=stopped,
        pruned=pruned,
    )


#: (store, prefix) pairs that already have a backfill worker in this process (see _claim).
_backfills: dict[tuple[int, str], Callable[[], object | None]] = {}
#: (store, prefix) pairs already checked for doubled-prefix keys in this process.
_doubled_checks: dict[tuple[int, str], Callable[[], object | None]] = {}


def _claim_pass(
    table: dict[tuple[int, str], Callable[[], object | None]], store: Store, prefix: str
) -> bool:
    """Claim (*store*, *prefix*) in *table* for this process; ``False`` when already held.

    Two prefixes on one store are two claims; a collected store frees its claim.
    """
    key = (id(store), prefix)
    with _claims_lock:
        held = table.get(key)
        if held is not None and held() is store:
            return False
        try:
            table[key] = weakref.ref(store)
        except TypeError:
            table[key] = lambda: store
        return True


def count_doubled_keys(
    store: Store, prefix: str, *, should_stop: Callable[[], bool] | None = None
) -> int:
    """How many keys of 1.8.0's doubled-prefix layout (``P + P + "v2:..."``) *store* holds.

    One ``SCAN`` of ``P + P + "*"`` (:func:`~remember_sync._keys.parse_doubled_key`
    decides); 0 for an empty prefix.
    """
    if not prefix:
        return 0
    found = 0
    for key in store.scan(glob_escape(prefix + prefix) + "*"):
        if should_stop is not None and should_stop():
            break
        found += parse_doubled_key(prefix, key) is not None
    return found


def doubled_prefix_message(count: int) -> str:
    """The WARNING for *count* doubled-prefix keys a plugin does not read."""
    return (
        f"remember: the store holds {_entries(count)} in 1.8.0's doubled-prefix layout "
        "(P+P+'v2:...') that this plugin does not read: they are invisible to every read, "
        "list and reindex. If they are this application's, set read_doubled_prefix=True "
        "(the CLI: --read-doubled-prefix), and run `remember-sync rotate "
        "--read-doubled-prefix` to move them into the current layout"
    )


class _OneThread:
    """Background work on one daemon thread: a stop flag, and :meth:`wait` for the thread."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        raise NotImplementedError

    def _spawn(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker thread ended (or none was started); ``False`` on timeout."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()


class DoubledPrefixCheck(_OneThread):
    """A one-shot background count of 1.8.0's doubled-prefix keys, for a plugin that skips them.

    Started by a plugin without ``read_doubled_prefix`` on a store that may hold
    1.8.0's data; runs once per store and prefix per process, on a daemon
    thread (construction never waits, no request pays for it), and logs one
    WARNING (:func:`doubled_prefix_message`) when it finds any.  A store error
    stands down with a DEBUG log.  :attr:`count` holds the number found
    (``None`` until it ran, or when it could not).
    """

    def __init__(self, store: Store, prefix: str, *, logger: logging.Logger | None = None) -> None:
        super().__init__()
        self.store = store
        self.prefix = prefix
        self._log = logger or log
        self.count: int | None = None

    def start(self) -> DoubledPrefixCheck:
        """Start the daemon thread, unless this store and prefix were checked in this process."""
        if self.prefix and _claim_pass(_doubled_checks, self.store, self.prefix):
            self._spawn("remember-doubled-prefix-check")
        return self

    def _run(self) -> None:
        try:
            count = count_doubled_keys(self.store, self.prefix, should_stop=self._stop.is_set)
        except Exception as exc:  # noqa: BLE001 - a background thread must never die silently
            self._log.debug("remember: doubled-prefix check stood down (%s)", exc)
            return
        if self._stop.is_set():
            return
        self.count = count
        if count:
            self._log.warning(doubled_prefix_message(count))

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop a running count and wait for it."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)


class IndexBackfill(_OneThread):
    """The one-time, fleet-wide background reindex a plugin in index mode starts.

    Like :class:`LegacyPurge` it runs on a daemon thread, once per store object
    per process, and its state lives in the store beside the layout marker:
    ``P + "__indexed__"`` records that the fleet's older entries are indexed
    (then nothing runs), and ``P + "__indexing__"`` -- written only-if-absent,
    with a :data:`INDEXING_LEASE_MS` TTL -- lets one instance of the fleet run
    the pass while the others wait for the record.  The lease is renewed
    before each batch (a pass that lost it stops); an instance that met it, or
    failed, tries again every :data:`INDEXING_RETRY_S` until the record is
    there, so a pass whose instance died is taken over once its lease expires.
    Until the record appears, plugins list by scanning; every failure stands
    down quietly (a DEBUG log) and listing keeps scanning.

    States (:attr:`state`): ``"idle"``, ``"running"``, ``"indexed"`` (recorded,
    by us or before), ``"elsewhere"`` (another instance holds the lease),
    ``"duplicate"``, ``"stood-down"``, ``"stopped"``, ``"failed"``.

    Once indexed, on a store that needs it (Redis Cluster) the worker runs
    :func:`prune_indexes` every :data:`INDEX_PRUNE_PERIOD_S`, once per period
    for the whole fleet (``P + "__pruning__"``, written only-if-absent with a
    TTL just under the period); a failed pass is logged at DEBUG and the next
    period tries again.

    :param on_done: called (on the worker thread) once the record is there.
    """

    def __init__(
        self,
        store: Store,
        prefix: str,
        *,
        clock: Clock,
        on_done: Callable[[], None] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.prefix = prefix
        self._clock = clock
        self._on_done = on_done
        self._log = logger or log
        self._retry: threading.Timer | None = None
        self._failures = 0
        self.state = "idle"
        self.result: ReindexResult | None = None
        """What the pass did, when this instance ran it."""
        self.prune_passes = 0
        """Prune passes this instance ran (it took the period's lease and finished)."""
        self._pruner: threading.Timer | None = None

    def start(self) -> IndexBackfill:
        """Start the daemon thread (no I/O on the caller's thread).

        Like the legacy purge it stands down for an empty prefix or one inside
        another deployment's layout (:func:`nested_prefix`): listing then
        scans until ``remember-sync reindex`` records the index.
        """
        if not self.prefix or nested_prefix(self.prefix) is not None:
            self.state = "stood-down"
            return self
        if not _claim_pass(_backfills, self.store, self.prefix):
            self.state = "duplicate"
            return self
        self.state = "running"
        self._spawn("remember-index-backfill")
        return self

    def _run(self) -> None:
        try:
            self.state = self._step()
        except Exception as exc:  # noqa: BLE001 - a background thread must never die silently
            self._log.debug("remember: background reindex stood down (%s)", exc)
            self.state = "failed"
        if self.state == "indexed" and self._on_done is not None:
            self._on_done()
        if self.state == "indexed" and isinstance(self.store, PrunesIndexes):
            self._schedule_prune()
        if self.state != "indexed":
            self._release()
            if not self._stop.is_set():  # elsewhere, failed, or lost the lease: later again
                # A failed pass scanned the keyspace: back off (to 64x) before the next.
                self._failures += self.state == "failed"
                delay = INDEXING_RETRY_S * min(2**self._failures, 64)
                self._retry = threading.Timer(delay, self._run)
                self._retry.daemon = True
                self._retry.start()

    def _step(self) -> str:
        store, prefix = self.store, self.prefix
        if store.get(index_record_key(prefix)) is not None:
            return "indexed"
        lease = indexing_lease_key(prefix)
        mine = json.dumps({"startedAt": self._clock(), "pid": os.getpid()}, separators=(",", ":"))
        if not store.set(lease, mine, ttl_ms=INDEXING_LEASE_MS, only_if_absent=True):
            return "elsewhere"

        def stop_or_lost() -> bool:  # before each batch: renew the lease, stop if it is gone
            return self._stop.is_set() or not store.compare_and_set(
                lease, mine, mine, ttl_ms=INDEXING_LEASE_MS
            )

        try:
            result = reindex_store(store, prefix, should_stop=stop_or_lost, clock=self._clock)
        finally:
            if store.get(lease) == mine:  # never another instance's lease
                store.delete(lease)
        self.result = result
        if result.stopped:
            return "stopped"
        self._log.info(
            "remember: indexed %d older entries for listing (%.1f s)",
            result.indexed,
            result.seconds,
        )
        return "indexed"

    def _schedule_prune(self) -> None:
        if self._stop.is_set():
            return
        self._pruner = threading.Timer(INDEX_PRUNE_PERIOD_S, self._prune)
        self._pruner.daemon = True
        self._pruner.start()

    def _prune(self) -> None:
        """One period: take the fleet's lease, prune the indexes; schedule the next."""
        if self._stop.is_set():
            return
        try:
            period_ms = int(INDEX_PRUNE_PERIOD_S * 1000)
            mine = json.dumps({"startedAt": self._clock(), "pid": os.getpid()})
            lease = pruning_lease_key(self.prefix)
            if self.store.set(lease, mine, ttl_ms=max(1, period_ms * 9 // 10), only_if_absent=True):
                dropped = prune_indexes(self.store, self.prefix)
                self.prune_passes += 1
                self._log.debug("remember: index prune pass dropped %d gone members", dropped)
        except Exception as exc:  # noqa: BLE001 - a background thread must never die silently
            self._log.debug("remember: index prune pass failed (%s)", exc)
        self._schedule_prune()

    def _release(self) -> None:
        with _claims_lock:
            held = _backfills.get((id(self.store), self.prefix))
            if held is not None and held() is self.store:
                del _backfills[(id(self.store), self.prefix)]

    def stop(self, timeout: float | None = 5.0) -> None:
        """Ask a running pass to stop after its batch, and wait for it."""
        self._stop.set()
        retry, pruner = self._retry, self._pruner
        for timer in (retry, pruner):
            if timer is not None:
                timer.cancel()
        for thread in (self._thread, retry, pruner):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)

    def __repr__(self) -> str:
        return f"IndexBackfill(prefix={self.prefix!r}, state={self.state!r})"
