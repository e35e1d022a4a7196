"""``stats`` and ``doctor``: what a store holds, and whether anything needs attention."""

from __future__ import annotations

import datetime as _dt
import secrets as _random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from .._codec import EntryCodec
from .._keys import layout_marker_key
from .._purge import (
    DEFAULT_DELAY_MS,
    KeyIdStatus,
    Marker,
    key_id_key,
    mismatch_message,
    nested_prefix,
    nested_prefix_message,
    read_key_id,
    read_marker,
    sweep_legacy,
)
from ..errors import LayoutMarkerError, RememberError
from ..stores.base import Store, to_bytes
from ..types import BRANDS, SCOPES
from .walk import Report, classify, list_keys, read_items

HOUR_MS = 3_600_000


def format_ms(epoch_ms: int) -> str:
    """An epoch-millisecond time as ISO 8601 UTC, to the second."""
    moment = _dt.datetime.fromtimestamp(epoch_ms / 1000, tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class StoreStats(Report):
    """What one walk of the store found under the prefix.

    Entry counts (``entries``, ``by_scope``, ``by_brand``, ``expiring_within_hour``,
    ``without_expiry``) cover readable, unexpired entries.  ``value_bytes`` and
    ``key_bytes`` are UTF-8 sizes of every entry key read, readable or not.
    """

    prefix: str
    keys: int = 0
    entries: int = 0
    by_scope: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SCOPES, 0))
    by_brand: dict[str, int] = field(default_factory=dict)
    value_bytes: int = 0
    key_bytes: int = 0
    expiring_within_hour: int = 0
    without_expiry: int = 0
    expired: int = 0
    #: Readable, but sealed by a previous secret or in the other envelope form.
    stale: int = 0
    legacy: int = 0
    marker: bool = False
    other: int = 0
    #: Entry keys not decoded because no secret was available (doctor only).
    undecoded: int = 0
    #: Keys in 1.8.0's doubled-prefix layout (``P + P + "v2:..."``).
    doubled: int = 0
    #: Doubled-prefix keys not read: the walk was told the application does not
    #: read that layout (``read_doubled_prefix`` off).
    doubled_unread: int = 0
    #: Doubled-prefix keys whose single-layout twin exists (the application reads the twin).
    shadowed: int = 0
    #: Entries whose envelope does not bind its storage key (1.8.0's form), readable
    #: or refused by ``accept_unbound=False``.
    unbound: int = 0


def collect_stats(
    store: Store,
    prefix: str,
    codec: EntryCodec | None,
    *,
    now: int,
    progress_stream: TextIO | None = None,
    read_doubled_prefix: bool = False,
) -> StoreStats:
    """Walk every key under *prefix* and count (``codec=None``: count keys, decode nothing).

    :param read_doubled_prefix: the application reads 1.8.0's doubled-prefix
        layout too: decode those keys as well (else they are only counted).
    """
    stats = StoreStats(prefix=prefix)
    keys = list_keys(store, prefix)
    stats.keys = len(keys)
    for key in keys:
        kind, _ = classify(prefix, key)
        if kind == "legacy":
            stats.legacy += 1
        elif kind == "marker":
            stats.marker = True
        elif kind == "other":
            stats.other += 1
        elif kind == "doubled":
            stats.doubled += 1
            if not read_doubled_prefix:
                stats.doubled_unread += 1
            elif codec is None:
                stats.undecoded += 1
        elif codec is None:
            stats.undecoded += 1
    if codec is None:
        return stats
    brands: dict[str, int] = {}
    for item in read_items(
        store, codec, keys, label="stats", progress_stream=progress_stream,
        read_doubled_prefix=read_doubled_prefix,
    ):
        if item.shadowed:
            stats.shadowed += 1
            continue
        if item.raw is None:
            continue  # deleted or expired since the listing
        if item.bound is False:
            stats.unbound += 1
        stats.key_bytes += len(to_bytes(item.key))
        stats.value_bytes += len(to_bytes(item.raw))
        if item.entry is None:
            stats.note("unreadable", item.stored_at)
            continue
        entry = item.entry
        if entry.is_expired(now):
            stats.expired += 1
            continue
        stats.entries += 1
        stats.by_scope[item.parsed.namespace.scope] += 1
        brand = entry.brand if entry.brand is not None else "none"
        brands[brand] = brands.get(brand, 0) + 1
        if entry.expires_at is None:
            stats.without_expiry += 1
        elif entry.expires_at - now <= HOUR_MS:
            stats.expiring_within_hour += 1
        if not item.current:
            stats.stale += 1
    # Known brands first, in their documented order, then anything foreign, then "none".
    order = [*BRANDS, *sorted(b for b in brands if b not in BRANDS and b != "none"), "none"]
    stats.by_brand = {b: brands[b] for b in order if b in brands}
    return stats


Status = Literal["ok", "note", "attention"]


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report.

    :attr status: ``ok``; ``note`` (worth knowing, nothing to fix); ``attention``
        (something to fix: the command exits non-zero).
    """

    name: str
    status: Status
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


def secret_check(summary: dict[str, Any]) -> Check:
    """The doctor's verdict on loaded secrets, from :meth:`Opened.secret_summary`."""
    if not summary["encryption"]:
        return Check("secret", "note", "encryption disabled (--plaintext)", summary)
    previous = len(summary["previous_kids"])
    return Check(
        "secret",
        "ok",
        f"from {summary['source']} (key id {summary['primary_kid']}; {previous} previous "
        f"secret{'' if previous == 1 else 's'})",
        summary,
    )


def _probe_store(store: Store, prefix: str) -> Check:
    """Write, read back and delete a short-lived probe key, timing each round trip."""
    probe = f"{prefix}__doctor__:{_random.token_hex(6)}"
    token = _random.token_hex(8)
    timings: list[float] = []

    def timed(op: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = op()
        timings.append((time.perf_counter() - start) * 1000)
        return result

    try:
        timed(lambda: store.get(layout_marker_key(prefix)))
        # 60 s TTL: even a doctor killed half-way leaves nothing behind for long.
        timed(lambda: store.set(probe, token, ttl_ms=60_000))
        back = timed(lambda: store.get(probe))
        timed(lambda: store.delete(probe))
    except RememberError as exc:
        return Check("store", "attention", f"store unreachable or failing: {exc.message}")
    if back != token:
        return Check(
            "store",
            "attention",
            "store did not return what was just written to it (a read replica, or a proxy "
            "that drops writes?)",
        )
    latency = statistics.median(timings)
    return Check(
        "store",
        "ok",
        f"reachable; round trip {latency:.1f} ms (median of {len(timings)})",
        {"latency_ms": round(latency, 3)},
    )


def _marker_check(
    store: Store, prefix: str, delay_ms: int, now: int
) -> tuple[Check, Marker | None]:
    key = layout_marker_key(prefix)
    if not prefix:
        return Check("marker", "note", "empty prefix: the legacy purge is disabled"), None
    try:
        marker = read_marker(store, prefix)
    except LayoutMarkerError as exc:
        return (
            Check(
                "marker",
                "attention",
                f"layout marker {key!r} is unreadable ({exc.message}): the legacy purge stands "
                "down everywhere until it is fixed or deleted",
            ),
            None,
        )
    if marker is None:
        return (
            Check(
                "marker",
                "note",
                f"no layout marker {key!r} yet: no plugin with the legacy purge has started on "
                "this prefix (the first one writes it)",
            ),
            None,
        )
    due = marker.first_seen_at + delay_ms
    when = "passed" if due <= now else f"in {(due - now) / HOUR_MS:.1f} h"
    return (
        Check(
            "marker",
            "ok",
            f"layout marker firstSeenAt {format_ms(marker.first_seen_at)}; purge window "
            f"({delay_ms // 1000} s) ends {format_ms(due)} ({when})",
            {"first_seen_at": marker.first_seen_at, "purge_due_at": due},
        ),
        marker,
    )


def _key_id_check(store: Store, prefix: str, codec: EntryCodec | None) -> Check:
    """Do the configured secrets include the one the store's data was written with?

    Read-only: compares the key id recorded under ``P + "__keyid__"`` (by the
    first instance that ran the legacy purge) with the loaded secrets' ids.
    """
    key = key_id_key(prefix)
    if codec is None:
        return Check("key-id", "note", "not checked: no usable secret")
    if codec.keyring is None:
        return Check("key-id", "note", "encryption disabled: there is no key id to compare")
    kids = codec.keyring.kids
    try:
        record = read_key_id(store, prefix)
    except LayoutMarkerError as exc:
        return Check(
            "key-id",
            "attention",
            f"key id record {key!r} is unreadable ({exc.message}): delete it and the next "
            "instance that runs the legacy purge records its key id",
        )
    if record is None:
        return Check(
            "key-id",
            "note",
            f"no key id recorded at {key!r} yet (the first instance that runs the legacy purge "
            f"records its own); this secret's key id is {kids[0]}",
        )
    status = KeyIdStatus(key, record.kid, kids)
    detail = {"recorded_kid": record.kid, "kids": list(kids)}
    if not status.matches:
        text = mismatch_message(status).removeprefix("remember: ")
        return Check("key-id", "attention", text, detail)
    which = "this secret" if record.kid == kids[0] else "a previous secret (rotation in progress)"
    return Check(
        "key-id",
        "ok",
        f"the store's data was written with key id {record.kid}: {which}",
        detail,
    )


def _legacy_check(
    store: Store, prefix: str, named: int, marker: Marker | None, delay_ms: int, now: int
) -> Check:
    """Legacy entries the purge would delete (*named*: keys under its patterns, by name).

    Only when keys match by name are their values read (a dry-run sweep), so the
    count is what the purge would really delete, not hashes or foreign strings.
    """
    if named == 0:
        return Check("legacy", "ok", "no legacy (pre-v2) keys", {"legacy": 0})
    segment = nested_prefix(prefix)
    if segment is not None:
        return Check(
            "legacy",
            "note",
            f"{named} keys under the legacy patterns; {nested_prefix_message(prefix, segment)}",
            {"legacy": named},
        )
    counted = sweep_legacy(store, prefix, dry_run=True)
    legacy = counted.found
    if legacy == 0:
        return Check(
            "legacy",
            "ok",
            f"no legacy (pre-v2) entries; {counted.kept} other keys under the legacy patterns "
            "are not this plugin's and are never purged",
            {"legacy": 0, "kept": counted.kept},
        )
    if marker is not None and marker.first_seen_at + delay_ms > now:
        due = format_ms(marker.first_seen_at + delay_ms)
        return Check(
            "legacy",
            "note",
            f"{legacy} legacy (pre-v2) keys; the purge deletes them after {due}",
            {"legacy": legacy},
        )
    why = "the purge window has passed" if marker is not None else "there is no layout marker"
    return Check(
        "legacy",
        "attention",
        f"{legacy} legacy (pre-v2) keys remain and {why} (is skip_legacy_purge set?): "
        "run `remember-sync purge-legacy`",
        {"legacy": legacy},
    )


def _entries_check(stats: StoreStats, decoded: bool) -> Check:
    if not decoded:
        return Check(
            "entries",
            "note",
            f"{stats.undecoded} entries not checked: no usable secret",
            {"entries": stats.undecoded},
        )
    detail = {
        "entries": stats.entries,
        "unreadable": stats.unreadable,
        "stale": stats.stale,
        "unreadable_keys": stats.unreadable_keys,
        "doubled": stats.doubled,
        "doubled_unread": stats.doubled_unread,
        "shadowed": stats.shadowed,
    }
    if stats.unreadable:
        first = ", ".join(repr(k) for k in stats.unreadable_keys[:3])
        return Check(
            "entries",
            "attention",
            f"{stats.unreadable} of {stats.unreadable + stats.entries + stats.expired} entries "
            "do not decrypt with the configured secrets (wrong REMEMBER_SECRET, or a previous "
            f"secret missing from REMEMBER_PREVIOUS_SECRETS?); e.g. {first}",
            detail,
        )
    if stats.stale:
        return Check(
            "entries",
            "note",
            f"{stats.entries} entries readable; {stats.stale} sealed by a previous secret "
            "or in the other envelope form (run `remember-sync rotate`)",
            detail,
        )
    return Check("entries", "ok", f"{stats.entries} entries, all readable", detail)


def _doubled_check(stats: StoreStats) -> Check:
    """Keys in 1.8.0's doubled-prefix layout: invisible unless the application reads them."""
    detail = {"doubled": stats.doubled, "doubled_unread": stats.doubled_unread}
    if stats.doubled_unread:
        return Check(
            "doubled",
            "attention",
            f"{stats.doubled_unread} keys in 1.8.0's doubled-prefix layout (P+P+'v2:...') are "
            "invisible to an application without read_doubled_prefix=True (and were not "
            "checked here): if they are its data, set read_doubled_prefix=True and run "
            "`remember-sync rotate --read-doubled-prefix` to move them into the current "
            "layout; run this again with --read-doubled-prefix to check them",
            detail,
        )
    return Check(
        "doubled",
        "note",
        f"{stats.doubled} keys in 1.8.0's doubled-prefix layout, read because of "
        "read_doubled_prefix=True: `remember-sync rotate --read-doubled-prefix` moves them "
        "into the current layout, after which the option can go",
        detail,
    )


def _unbound_check(stats: StoreStats) -> Check:
    """How many envelopes lack the key binding (see "Locking down unbound envelopes")."""
    detail = {"unbound": stats.unbound}
    if not stats.unbound:
        return Check("unbound", "ok", "no unbound (1.8.0-form) envelopes", detail)
    return Check(
        "unbound",
        "note",
        f"{stats.unbound} entries in the unbound (1.8.0) envelope form: run `remember-sync "
        "rotate` to bind them before setting encryption={'accept_unbound': False}",
        detail,
    )


def run_doctor(
    store: Store,
    prefix: str,
    *,
    secret: Check,
    codec: EntryCodec | None,
    now: int,
    delay_ms: int = DEFAULT_DELAY_MS,
    memory: bool = False,
    progress_stream: TextIO | None = None,
    read_doubled_prefix: bool = False,
) -> list[Check]:
    """Every check, in order: secret, store, marker, key id, legacy keys, entries, doubled
    (only when 1.8.0 doubled-prefix keys exist), unbound.

    *secret* is the caller's verdict on the secret source (it loaded them);
    ``codec`` is ``None`` when no secret could be loaded.  When the store
    cannot be reached the later checks are not attempted.
    *read_doubled_prefix* says the application reads 1.8.0's doubled-prefix
    layout, so those entries are checked too.
    """
    checks = [secret]
    probe = _probe_store(store, prefix)
    if memory and probe.status == "ok":
        probe = Check(
            "store",
            "note",
            "in-memory store (the default): empty, nothing persistent to check; give "
            "--redis-url or --vercel-kv to examine a real store",
            probe.detail,
        )
    checks.append(probe)
    if probe.status == "attention":
        return checks
    try:
        marker_check, marker = _marker_check(store, prefix, delay_ms, now)
        checks.append(marker_check)
        if prefix:
            checks.append(_key_id_check(store, prefix, codec))
        stats = collect_stats(
            store, prefix, codec, now=now, progress_stream=progress_stream,
            read_doubled_prefix=read_doubled_prefix,
        )
        legacy_check = _legacy_check(store, prefix, stats.legacy, marker, delay_ms, now)
    except RememberError as exc:
        checks.append(Check("store", "attention", f"store failed during the walk: {exc.message}"))
        return checks
    checks.append(legacy_check)
    checks.append(_entries_check(stats, codec is not None))
    if stats.doubled:
        checks.append(_doubled_check(stats))
    if codec is not None and codec.keyring is not None:
        checks.append(_unbound_check(stats))
        checks.append(_integrity_check(store, prefix, codec, now))
    return checks


def _integrity_check(store: Store, prefix: str, codec: EntryCodec, now: int) -> Check:
    """Verified mode: ``remember-sync verify`` without repair, when the store has manifests."""
    from .verify import verify_store  # noqa: PLC0415 - one walk more, only with a secret

    result = verify_store(store, prefix, codec, clock=lambda: now)
    detail = {"violations": result.violation_count, "manifests": result.manifests,
              "warnings": result.warnings}
    if not result.manifests:
        return Check("integrity", "ok", "default mode (no manifests); `remember-sync verify "
                     "--repair` moves the store into verified mode", detail)
    if result.violation_count:
        return Check("integrity", "attention", f"{result.violation_count} integrity "
                     "violations: run `remember-sync verify` for the list", detail)
    if result.warnings:
        return Check("integrity", "attention", "; ".join(result.warnings), detail)
    return Check("integrity", "ok", f"{result.manifests} manifests verified, no violation",
                 detail)
