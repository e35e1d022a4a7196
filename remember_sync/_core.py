"""The core behind every accessor: every memory policy and every read and write path, once.

Identity and scope rules, storage keys, input validation, TTL and expiry,
serialisation and encryption are applied here; stores only move opaque
strings.  :class:`~remember_sync.accessor.RememberAccessor` is the public face
over one :class:`AccessorCore`.
"""

from __future__ import annotations

import builtins
import copy
import functools
import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from . import _metrics
from ._audit import NO_AUDIT, AuditTrail, Recorder
from ._bounded import BoundedCache
from ._clock import Clock, system_clock
from ._codec import EntryCodec, EntryFields, check_json_value, entry_json, entry_to_json
from ._crypto import SUBJECT_KEY_GONE
from ._erasure import OwnerBook
from ._fork import after_fork_in_child
from ._integrity import Manifest, Verifier
from ._keys import (
    cas_marker_key,
    check_key,
    check_pattern,
    describe_key,
    index_key_of,
    index_record_key,
    manifest_key,
    match_user_pattern,
    namespace_index_key,
    scope_glob,
    scope_prefix,
)
from ._quota import Owners
from ._search import Hit, SearchCache, SearchSettings, check_query, embedding_member
from .errors import (
    RememberConfigurationError,
    RememberConflictError,
    RememberDecryptionError,
    RememberIdentityError,
    RememberInputError,
    RememberInputTypeError,
)
from .identity import current_identity, resolve_namespace
from .stores.base import CasMarkers, NamespaceIndex, OwnedWrite, OwnedWrites, Store
from .types import SCOPES, Identity, Namespace, RememberEntry, Scope, check_brand, check_scope

log = logging.getLogger("remember_sync")

DEFAULT_MAX_VALUE_BYTES = 1024 * 1024
#: Compare-and-set attempts of ``update``, ``modify`` and ``increment`` before
#: :class:`~remember_sync.errors.RememberConflictError`.  The first
#: ``_CAS_EAGER`` retries are immediate; each later one waits a random time up to
#: ``_CAS_PAUSE_FIRST`` seconds, doubling up to ``_CAS_PAUSE_MAX`` (at most about 2 s
#: of pauses in all before giving up).
CAS_ATTEMPTS = 64
_CAS_EAGER = 3
_CAS_PAUSE_FIRST = 0.0005
_CAS_PAUSE_MAX = 0.032
#: The longest TTL accepted: 100 years, in seconds.
MAX_TTL_SECONDS = 100 * 365 * 86_400
_BATCH = 500
#: How a namespace is listed: ``"index"`` (its listing index) or ``"scan"`` (the database).
LISTING_MODES = ("index", "scan")
#: While the fleet's older entries are not yet indexed, the record is read at most this often.
_INDEX_RECHECK_MS = 5_000
#: Search reads a namespace's index of up to this many members whole (on Redis: one
#: ZRANGE pipelined with the MGET of the members it read last time).
_SEARCH_PAGE = 10_000
#: Resolved (identity, scope) pairs kept per plugin (oldest dropped first).
_NAMESPACE_CACHE = 4096
#: Distinct unreadable keys a plugin remembers (as 16-byte hashes, oldest forgotten
#: first): each is logged and counted once while it is remembered.
UNREADABLE_REMEMBERED = 10_000


def check_ttl(ttl: object, name: str = "ttl") -> int:
    """A TTL is a whole number of seconds, 1 .. 100 years (``bool`` and ``float`` refused).

    The ceiling keeps every deadline representable by every store (Redis refuses
    a ``PX`` that overflows), so an absurd TTL is bad input, not a store outage.
    """
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 < ttl <= MAX_TTL_SECONDS:
        raise RememberInputError(
            f"{name} must be an int of seconds from 1 to {MAX_TTL_SECONDS}; got {ttl!r}"
        )
    return ttl


_Decoded = EntryFields | RememberDecryptionError


def _check_listing(pattern: object, brand: object) -> None:
    check_pattern(pattern)
    if brand is not None:
        check_brand(brand)


@dataclass(frozen=True)
class SwapRules:
    """How :meth:`AccessorCore.swap` treats the entry it finds, and what it writes.

    :param create: a missing or expired entry is created; otherwise nothing is
        written and the swap reports it missing.
    :param unreadable: given the key and the decryption error of an entry that
        cannot be read, the error to raise (the entry is left as it is), or
        ``None`` to replace it as if it were missing; ``unreadable=None``: it
        counts as missing (reported as ``on_decrypt_error`` says).
    :param guard: called with the live entry before it is replaced; raises to
        refuse (nothing written).
    :param fresh: the new entry's (brand, metadata, writer), its creation time
        now; ``None``: keep the current entry's brand, creation time and metadata.
    :param forget: swap the live entry for one that has already expired.
    """

    create: bool = True
    unreadable: Callable[[str, RememberDecryptionError], Exception | None] | None = None
    guard: Callable[[EntryFields], None] | None = None
    fresh: tuple[str | None, dict[str, Any] | None, str | None] | None = None
    forget: bool = False


def _check_entry(
    value: object, ttl: object, brand: object, metadata: object
) -> None:
    """Refuse what a new entry cannot hold (nothing written)."""
    if ttl is not None:
        check_ttl(ttl)
    if brand is not None:
        check_brand(brand)
    check_json_value(value, "value")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise RememberInputTypeError(
                f"metadata must be a dict with str keys; got {type(metadata).__name__}"
            )
        check_json_value(metadata, "metadata")


def _left_as_is(key: str, exc: RememberDecryptionError) -> RememberDecryptionError:
    # A counter restarted from 0 over another secret's data would lose it silently.
    return RememberDecryptionError(
        f"{key!r} holds an entry that cannot be read ({exc.message}); it was left as it "
        "is. Check that every instance uses the same REMEMBER_SECRET, or forget the key "
        "to start over"
    )


_UPDATE = SwapRules(create=False)
_MODIFY = SwapRules(unreadable=_left_as_is)


@dataclass
class _Stats:
    unreadable: int = 0
    cas_retries: int = 0


class AccessorCore:
    """The settings and shared state behind every accessor of one plugin.

    :param store: where strings go.
    :param codec: entries to strings (encryption policy).
    :param prefix: the key prefix ``P``.
    :param default_ttl: seconds; ``0`` for none.
    :param clock: epoch-millisecond clock (inject in tests).
    :param max_value_bytes: largest serialised entry accepted.
    :param on_decrypt_error: ``"warn"`` (treat as absent, log once per key, count)
        or ``"raise"``.
    :param read_doubled_prefix: also read keys written by 1.8.0's Redis and
        Vercel KV stores, which doubled the prefix (``P + P + ...``).
    :param sleep: pauses between compare-and-set retries (inject in tests).
    :param verifier: verified mode (:mod:`remember_sync._integrity`): every read
        and write goes through the namespace's manifest, and listing reads it
        instead of the index or the database.  ``None``: the default mode.
    :param search: the ``search`` option (embedder); its per-process cache of
        decrypted search data is :attr:`search_cache`.
    :param listing: ``"index"`` (default): writes keep a per-namespace listing
        index and ``list``/``entries``/``forget_many`` read it, at a cost that
        depends on the namespace, not the database -- once the fleet's older
        entries are indexed (``P + "__indexed__"`` is recorded by a reindex;
        until then they scan).  ``"scan"``: walk the database, as 1.8.0 does.
        A store without the :class:`~remember_sync.stores.base.NamespaceIndex`
        capability always scans.
    :param owners: charge every write to its principal's owner tag
        (:class:`~remember_sync._quota.Owners`: quotas, and the memory store's
        eviction by principal); the store must have the
        :class:`~remember_sync.stores.base.OwnedWrites` capability.
    """

    def __init__(
        self,
        store: Store,
        codec: EntryCodec,
        *,
        prefix: str,
        default_ttl: int = 0,
        clock: Clock | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        on_decrypt_error: str = "warn",
        read_doubled_prefix: bool = False,
        sleep: Callable[[float], None] | None = None,
        listing: str = "index",
        verifier: Verifier | None = None,
        search: SearchSettings | None = None,
        charges: Owners | None = None,
    ) -> None:
        if listing not in LISTING_MODES:
            raise RememberConfigurationError(f"listing must be 'index' or 'scan'; got {listing!r}")
        self.store = store
        #: The ``store`` attribute of this core's measurements (:mod:`._metrics`).
        self.store_kind = _metrics.store_kind(store)
        self.codec = codec
        self.prefix = prefix
        self.default_ttl = default_ttl
        self.clock: Clock = clock or system_clock
        self.max_value_bytes = max_value_bytes
        self.on_decrypt_error = on_decrypt_error
        self.read_doubled_prefix = read_doubled_prefix
        self.sleep = sleep or time.sleep
        self.verifier = verifier
        if verifier is not None:
            listing = "scan"  # the manifest lists a namespace; no index is kept or read
        if charges is not None and not isinstance(store, OwnedWrites):
            raise RememberConfigurationError(
                f"quotas need a store that charges writes to their owner; {type(store).__name__} "
                "does not implement OwnedWrites"
            )
        #: Quotas and the memory store's fair eviction: who is charged for a write.
        self.charges = charges
        self._stats = _Stats()
        #: Who owns which session (erasure finds a person's sessions through it).
        self.owners = OwnerBook(store, codec, prefix, self.clock)
        if charges is not None:
            self.owners.group_of = lambda ident, ns: (charges.of(ident, ns) or (None, None))[1]
        #: The audit trail (``audit=`` of ``init``), or ``None``.
        self.audit: AuditTrail | None = None
        # Re-entrant: a signal handler's call may count while its thread, interrupted,
        # holds it (a plain lock would wait for ever).
        self._lock = threading.RLock()
        self.search_settings = search or SearchSettings()
        self.search_cache = SearchCache(self.search_settings)
        self._new_caches()
        self.listing = listing
        # Owned writes name their namespace's index to a store that would parse the key.
        self._index_hints: bool = listing == "index" and getattr(store, "uses_index_key", False)
        #: Whether reads may trust the index: every older entry is in it.
        self.index_ready = False
        self._index_checked_at: int | None = None
        if listing == "index" and not isinstance(store, NamespaceIndex):
            self.listing = "scan"
        elif listing == "index":
            assert isinstance(store, NamespaceIndex)
            self.index_ready = store.use_index(functools.partial(index_key_of, prefix))
        if isinstance(store, CasMarkers):
            store.use_cas_markers(functools.partial(cas_marker_key, prefix))
        after_fork_in_child(self._after_fork_in_child)

    def index_usable(self) -> bool:
        """Whether listing reads the index now (index mode, and the fleet's reindex recorded).

        Until the record ``P + "__indexed__"`` appears, it is read at most every
        few seconds and listing scans the database (a store error also scans).
        """
        if self.listing != "index":
            return False
        if self.index_ready:
            return True
        now = self.clock()
        if self._index_checked_at is not None and now - self._index_checked_at < _INDEX_RECHECK_MS:
            return False
        self._index_checked_at = now
        try:
            self.index_ready = self.store.get(index_record_key(self.prefix)) is not None
        except Exception:  # noqa: BLE001 - a failing store is reported by the scan itself
            return False
        return self.index_ready

    def _new_caches(self) -> None:
        # Hashes of the unreadable keys already logged and counted (see note_unreadable).
        self._warned: BoundedCache[bytes, bool] = BoundedCache(UNREADABLE_REMEMBERED)
        # (scope, session_id, user_id, tool_name) -> (namespace, storage-key head).
        # Resolving the scope rules and percent-encoding the identity is pure, and
        # costs more than a lookup on every call.
        self._namespaces: BoundedCache[tuple[object, ...], tuple[Namespace, str]] = (
            BoundedCache(_NAMESPACE_CACHE)
        )

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held a lock at the fork (see _fork).
        # They guard counters and caches: at worst the child counts one event the
        # parent's thread was counting, or reports an unreadable key once more.
        self._lock = threading.RLock()
        self._new_caches()
        self.search_cache = SearchCache(self.search_settings)

    def namespace(self, ident: Identity | None, scope: object) -> tuple[Namespace, str]:
        """The namespace of *scope* for *ident*, and its storage-key head (cached).

        *ident* ``None`` is the identity bound in the current context.

        :raises ValueError: for an unknown scope.
        :raises RememberIdentityError: when the scope needs an identity *ident* lacks.
        """
        given = ident is not None
        if ident is None:
            ident = current_identity()
        # Keyed by plain strings, not the Identity: their hashes are cached C-level
        # ones, where a dataclass __hash__ is a Python call on every operation.
        cache_key = (scope, ident.session_id, ident.user_id, ident.tool_name)
        try:
            found = self._namespaces.get(cache_key)
        except TypeError:  # identity parts that are not even hashable: no caching
            ns = resolve_namespace(ident, check_scope(scope), given=given)
            return ns, scope_prefix(self.prefix, ns)
        if found is None:
            ns = resolve_namespace(ident, check_scope(scope), given=given)
            found = (ns, scope_prefix(self.prefix, ns))
            self._namespaces.put(cache_key, found)  # only valid scopes and identities
        return found

    def key(self, ident: Identity | None, key: object, scope: object) -> tuple[Namespace, str]:
        """The namespace and the storage key of *key* in *scope* for *ident*.

        :raises ValueError: a bad key or scope.
        :raises RememberIdentityError: when the scope needs an identity *ident* lacks.
        """
        check_key(key)
        ns, head = self.namespace(ident, scope)
        return ns, head + key  # type: ignore[operator]

    def audited(
        self,
        op: str,
        ident: Identity | None,
        scope: object,
        key: object = None,
        brand: object = None,
        ttl: object = None,
    ) -> Recorder:
        """A context recording one audit event for *op* when it ends (nothing with audit off).

        Set ``outcome`` (and ``count``) on it inside; an exception records ``error:<code>``.
        """
        audit = self.audit
        if audit is None:
            return NO_AUDIT  # type: ignore[return-value]
        return Recorder(audit, op, ident, scope, key, brand, ttl)

    def audit_head(self, ident: Identity | None, scope: object) -> str:
        """The namespace head an audit event names (:attr:`AuditTrail.head_of`)."""
        return self.namespace(ident, scope)[1]

    def deadline(self, ttl: int | None, now: int) -> int | None:
        """When an entry written now expires: after *ttl* seconds (already checked), or
        ``default_ttl``."""
        if ttl is not None:
            return now + ttl * 1000
        if self.default_ttl:
            return now + self.default_ttl * 1000
        return None

    # -- reporting ----------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters: unreadable entries seen, CAS retries, HKDF derivations.

        ``unreadable`` counts distinct keys, not reads: a key read a thousand times
        counts once.  The plugin remembers the last :data:`UNREADABLE_REMEMBERED`
        distinct keys (as hashes), so a key seen again after that many others is
        counted again.
        """
        keyring = self.codec.keyring
        return {
            "unreadable": self._stats.unreadable,
            "cas_retries": self._stats.cas_retries,
            "key_derivations": keyring.derivations if keyring is not None else 0,
        }

    def _unreadable(self, full_key: str, exc: RememberDecryptionError) -> None:
        first = self.note_unreadable(full_key, exc)
        if self.on_decrypt_error == "raise":
            raise RememberDecryptionError(
                f"{describe_key(self.prefix, full_key)} is unreadable: {exc.message}"
            ) from exc
        if first:
            log.warning(
                "remember: %s is unreadable (%s); treating it as absent.%s",
                describe_key(self.prefix, full_key),
                exc.message,
                "" if exc.message == SUBJECT_KEY_GONE
                else " Check that every instance uses the same REMEMBER_SECRET.",
            )

    def note_unreadable(self, full_key: str, exc: RememberDecryptionError) -> bool:
        """Count *full_key* as unreadable once; return whether this is the first time.

        Only a hash of the key is kept (it holds a session id), bounded by
        :data:`UNREADABLE_REMEMBERED`.  Nothing is logged here.
        """
        digest = hashlib.blake2b(
            full_key.encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
        if not self._warned.add(digest, True):
            return False
        with self._lock:
            self._stats.unreadable += 1
        _metrics.UNREADABLE.add(self.store_kind)
        return True

    # -- decoding ---------------------------------------------------------------------

    def decode(
        self, raw: str | None, ns: Namespace, skey: str, now: int | None = None
    ) -> RememberEntry | None:
        """The live entry in *raw*, or ``None`` when absent, expired or unreadable."""
        fields = self.decode_fields(raw, ns, skey, now)
        return None if fields is None else RememberEntry(*fields)

    def decode_fields(
        self,
        raw: str | None,
        ns: Namespace,
        skey: str,
        now: int | None = None,
        *,
        strict: bool = False,
    ) -> EntryFields | None:
        """:meth:`decode` as the tuple of entry fields.

        :param now: the time to judge expiry by; by default the clock, read only
            when the entry has a deadline.
        :param strict: raise :class:`RememberDecryptionError` for an unreadable
            entry (counted, not logged) whatever ``on_decrypt_error`` says.
        """
        if raw is None:
            return None
        try:
            fields = self.codec.open_fields(raw, ns, skey)[0]
        except RememberDecryptionError as exc:
            if strict:
                self.note_unreadable(skey, exc)
                raise
            self._unreadable(skey, exc)
            return None
        expires = fields[4]
        if expires is not None and (self.clock() if now is None else now) >= expires:
            return None
        return fields

    def read_raw(self, skey: str) -> tuple[str | None, str]:
        """The stored string under *skey* (or its doubled-prefix twin) and the key it came from."""
        raw = self.store.get(skey)
        if raw is None and self.read_doubled_prefix:
            doubled = self.prefix + skey
            return self.store.get(doubled), doubled
        return raw, skey

    def ttl_ms(self, expires_at: int | None, now: int) -> int | None:
        """The store TTL for a deadline: the remaining time, never longer than it."""
        if expires_at is None:
            return None
        return max(1, expires_at - now)

    def encode_checked(self, entry: RememberEntry, ns: Namespace, skey: str) -> str:
        """Encode, refusing entries larger than ``max_value_bytes`` (nothing written)."""
        return self.seal_checked(entry_to_json(entry), ns, skey)

    def seal_checked(
        self,
        entry_text: str,
        ns: Namespace,
        skey: str,
        ident: Identity | None = None,
        *,
        like: str | None = None,
    ) -> str:
        """Seal serialised entry JSON, refusing it over ``max_value_bytes`` (nothing written).

        *ident* (default: the bound identity) is who writes: with subject keys, a
        signed-in user's session entries are sealed under their key; *like* is the
        stored value an entry sealed anew replaces (its subject key is kept).
        """
        try:
            text = entry_text.encode("utf-8")
        except UnicodeEncodeError as exc:
            # JSON can carry a lone surrogate ("\ud800"); UTF-8 cannot.
            raise RememberInputTypeError(
                "value or metadata contains text that is not valid Unicode (a lone surrogate)"
            ) from exc
        if len(text) > self.max_value_bytes:
            raise RememberInputError(
                f"entry is {len(text)} bytes serialised; max_value_bytes is {self.max_value_bytes}"
            )
        codec = self.codec
        if codec.keyring is None:
            return entry_text  # stored as it is: its UTF-8 was checked above, once
        if codec.keyring.subjects is None:
            return codec.seal_text(text, ns, skey)
        writer = (ident or current_identity()).user_id
        return codec.seal_text(text, ns, skey, writer=writer, like=like)

    def _globs(self, ns: Namespace, pattern: str) -> list[tuple[str, str]]:
        """(glob, storage-key head) pairs to walk for *ns*: ours, then 1.8.0's doubled one."""
        head = scope_prefix(self.prefix, ns)
        pairs = [(scope_glob(self.prefix, ns, pattern), head)]
        if self.read_doubled_prefix:
            pairs.append((scope_glob(self.prefix + self.prefix, ns, pattern), self.prefix + head))
        return pairs

    def scan_keys(self, ns: Namespace, pattern: str) -> list[str]:
        """Full storage keys in *ns* whose bare key matches *pattern*, de-duplicated."""
        found: dict[str, None] = {}
        everything = pattern == "*"  # matches any bare key: no per-key pattern call
        for glob, h in self._globs(ns, pattern):
            cut = len(h)
            for key in self.store.scan(glob):
                # Post-filter by the exact prefix: the glob is escaped, this is belt and braces.
                if key.startswith(h) and (everything or match_user_pattern(pattern, key[cut:])):
                    found.setdefault(key, None)
        return list(found)

    def scan_pages(
        self, ns: Namespace, pattern: str, count: int = 1000
    ) -> Iterator[list[tuple[str, str]]]:
        """:meth:`scan_keys` with the stored values: pages of (full key, value).

        Through the store's :meth:`~remember_sync.stores.base.ItemScanner.scan_pages`
        when it has one (keys and values in one pass), else ``scan`` then
        ``get_many`` per batch.  Keys whose value vanished in between are left out.
        """
        if self.verifier is not None:
            yield from self._verified_pages(ns, scope_prefix(self.prefix, ns), pattern)
            return
        if self.index_usable():
            yield from self._index_pages(ns, pattern, count)
            return
        scanner = getattr(self.store, "scan_pages", None)
        if scanner is None:
            keys = self.scan_keys(ns, pattern)
            for start in range(0, len(keys), _BATCH):
                chunk = keys[start : start + _BATCH]
                values = self.store.get_many(chunk)
                yield [(k, v) for k, v in zip(chunk, values, strict=True) if v is not None]
            return
        globs = self._globs(ns, pattern)
        seen: set[str] = set()
        for glob, h in globs:
            cut = len(h)
            for page in scanner(glob):
                # Post-filter by the exact prefix: the glob is escaped, this is belt and braces.
                kept = [item for item in page if item[0].startswith(h)]
                if pattern != "*":
                    kept = [item for item in kept if match_user_pattern(pattern, item[0][cut:])]
                if len(globs) > 1:  # a key matching both globs is read once
                    kept = [item for item in kept if item[0] not in seen]
                    seen.update(k for k, _ in kept)
                if kept:
                    yield kept


    def _index_pages(
        self, ns: Namespace, pattern: str, count: int = 1000
    ) -> Iterator[list[tuple[str, str]]]:
        """:meth:`scan_pages` through the namespace's listing index (1.8.0's keys are not in it)."""
        head = scope_prefix(self.prefix, ns)
        cut = len(head)
        # (cast, not an assert: isinstance against a runtime-checkable Protocol inspects
        # every member on each call; __init__ checked it once)
        pages = cast(NamespaceIndex, self.store).index_pages(
            namespace_index_key(self.prefix, head), scope_glob(self.prefix, ns, pattern),
            count=count,
        )
        for page in pages:
            kept = [item for item in page if item[0].startswith(head)]
            if pattern != "*":
                kept = [item for item in kept if match_user_pattern(pattern, item[0][cut:])]
            if kept:
                yield kept

    # -- every write and delete of an entry ------------------------------------------------

    def write(
        self,
        ident: Identity | None,
        ns: Namespace,
        skey: str,
        stored: str,
        *,
        ttl_ms: int | None,
        only_if_absent: bool = False,
        expected: str | None = None,
        charge_only: bool = False,
        bare: str | None = None,
    ) -> bool:
        """Store *stored* under *skey* (compare-and-set with *expected*); whether written.

        With owners tracked, the write is charged to the principal of *ident*
        in *ns* and refused over its quota (unless *charge_only*: a write
        that forgets or moves an entry is never refused).  *bare*: the key
        within the namespace (*skey* ends with it), so that the store is told
        the namespace's listing index instead of parsing *skey* again.

        :raises RememberQuotaError: over the principal's quota; nothing written.
        """
        owners = self.charges
        if owners is not None:
            owner = owners.of(ident, ns)
            if owner is not None:
                # tuple.__new__: the named tuple's own __new__ is a Python call on every write.
                write = tuple.__new__(OwnedWrite, (
                    skey, stored, owner[0], owner[1], None if charge_only else owners.quota,
                    ttl_ms, only_if_absent, expected,
                    None if bare is None or not self._index_hints
                    else namespace_index_key(self.prefix, skey[: len(skey) - len(bare)]),
                ))  # fmt: skip
                # (no cast(): a call on every write; __init__ checked the capability)
                return self.store.write_owned(write)  # type: ignore[attr-defined, no-any-return]
        if expected is not None:
            return self.store.compare_and_set(skey, expected, stored, ttl_ms=ttl_ms)
        return self.store.set(skey, stored, ttl_ms=ttl_ms, only_if_absent=only_if_absent)

    def delete(self, ident: Identity | None, ns: Namespace, *keys: str) -> int:
        """Delete *keys* of *ns*, refunding their owner when owners are tracked."""
        owners = self.charges
        if owners is not None:
            owner = owners.of(ident, ns)
            if owner is not None:
                return cast(OwnedWrites, self.store).delete_owned(owner[0], *keys)
        return self.store.delete(*keys)

    # -- the read and write paths of RememberAccessor ------------------------------------

    def set(
        self,
        ident: Identity | None,
        key: str,
        value: Any,
        scope: object,
        ttl: int | None,
        brand: str | None,
        metadata: dict[str, Any] | None,
        unreadable: Callable[[str, RememberDecryptionError], Exception | None] | None = None,
    ) -> int | None:
        """``RememberAccessor.set``: validate, seal and store a new entry; its deadline.

        With *unreadable*, by compare-and-set against the entry it read
        (:meth:`swap`): an entry that cannot be read is replaced only when
        ``unreadable(key, error)`` returns ``None``; otherwise what it returns
        is raised and nothing is written.
        """
        ns, skey = self.key(ident, key, scope)
        _check_entry(value, ttl, brand, metadata)
        fresh = (brand, metadata, None)  # host writes record no writer
        if unreadable is not None:
            rules = SwapRules(unreadable=unreadable, fresh=fresh)
            return self.swap(ident, key, ns, skey, lambda current: value, ttl=ttl, rules=rules)[1]
        now = self.clock()
        stored, expires = self._entry(ident, key, ns, skey, value, None, ttl, now, fresh)
        if self.verifier is not None:
            head = skey[: len(skey) - len(key)]
            self.verifier.commit(
                ns, head, manifest_key(self.prefix, head), lambda m: {key: (stored, expires)}
            )
        else:
            self.write(ident, ns, skey, stored, ttl_ms=self.ttl_ms(expires, now), bare=key)
        self.owners.note(ident, ns, expires)
        return expires

    def search_extras(
        self, key: str, value: Any, brand: str | None, metadata: dict[str, Any] | None,
        written_by: str | None = None,
    ) -> dict[str, Any] | None:
        """The entry members kept for search: who wrote it (a tool; absent for the host)
        and, with an embedder, its vector -- both sealed inside the entry."""
        extras: dict[str, Any] = {}
        if written_by is not None:
            extras["writtenBy"] = written_by
        if self.search_settings.embedder is not None:
            extras["embedding"] = embedding_member(
                self.search_settings, key, value, brand, metadata
            )
        return extras or None

    def get_fields(
        self, ident: Identity | None, key: str, scope: object, *, strict: bool = False
    ) -> EntryFields | None:
        """The live entry under *key* as its fields, or ``None`` (the path of every read).

        :param strict: an unreadable entry raises (see :meth:`decode_fields`).
        """
        ns, skey = self.key(ident, key, scope)
        if self.verifier is not None:
            raw, _ = self.read_verified(ns, key, skey)
            return self.decode_fields(raw, ns, skey, strict=strict)
        return self.decode_fields(self.read_raw(skey)[0], ns, skey, strict=strict)

    # -- verified mode (remember_sync._integrity) ---------------------------------------

    def _expired_entry(self, raw: str, ns: Namespace, skey: str, now: int) -> bool:
        """Whether *raw* is a genuine entry of *skey* whose own deadline has passed."""
        try:
            expires = self.codec.open_fields(raw, ns, skey)[0][4]
        except RememberDecryptionError:
            return False
        return expires is not None and now >= expires

    def _expired_at(self, ns: Namespace, now: int) -> Callable[[str, str], bool]:
        """``expired(storage key, stored string)`` for :meth:`Verifier.unlisted`."""
        return lambda skey, raw: self._expired_entry(raw, ns, skey, now)

    def read_verified(
        self, ns: Namespace, key: str, skey: str
    ) -> tuple[str | None, tuple[str | None, Manifest]]:
        """The entry's stored string if its manifest vouches for it, and that manifest.

        One round trip (manifest and entry together).

        :raises RememberIntegrityError: see :meth:`Verifier.accept`.
        """
        verifier = self.verifier
        assert verifier is not None
        mkey = manifest_key(self.prefix, skey[: len(skey) - len(key)])

        def read() -> tuple[str | None, tuple[str | None, Manifest]]:
            assert verifier is not None
            raw_manifest, (raw,) = verifier.fetch(mkey, [skey])
            manifest = verifier.open_manifest(ns, mkey, raw_manifest)
            now = self.clock()
            if raw_manifest is None and raw is None:
                verifier.unlisted(ns, skey[: len(skey) - len(key)], self._expired_at(ns, now))
            raw = verifier.accept(
                ns, manifest, key, raw, now, lambda r: self._expired_entry(r, ns, skey, now)
            )
            rec = manifest.records.get(key)
            if rec is not None and rec[2]:  # a two-step write unfinished (Redis Cluster)
                verifier.settle_stale(ns, mkey, (raw_manifest, manifest), {key: raw})
            return raw, (raw_manifest, manifest)

        return verifier.checked(read)

    def _verified_pages(
        self, ns: Namespace, head: str, pattern: str
    ) -> Iterator[list[tuple[str, str]]]:
        """:meth:`scan_pages` in verified mode: the manifest's keys, each one checked.

        With the manifest this plugin last saw, manifest and entries are read in
        one round trip; when the manifest changed meanwhile, its keys are read again.
        """
        verifier = self.verifier
        assert verifier is not None
        mkey = manifest_key(self.prefix, head)

        def wanted(keys: builtins.list[str]) -> builtins.list[str]:
            return keys if pattern == "*" else [k for k in keys if match_user_pattern(pattern, k)]

        def read() -> builtins.list[tuple[str, str]]:
            assert verifier is not None
            guess = verifier.cached_keys(mkey)
            keys = wanted(guess) if guess is not None else []
            raw_manifest, values = verifier.fetch(mkey, [head + k for k in keys])
            manifest = verifier.open_manifest(ns, mkey, raw_manifest)
            if raw_manifest is None:
                verifier.unlisted(ns, head, self._expired_at(ns, self.clock()))
            listed = wanted(builtins.list(manifest.records))
            if listed != keys:
                keys = listed
                values = self.store.get_many([head + k for k in keys])
            now = self.clock()
            page: builtins.list[tuple[str, str]] = []
            pending: dict[str, str | None] = {}
            for bare, raw in zip(keys, values, strict=True):
                skey = head + bare
                accepted = verifier.accept(
                    ns, manifest, bare, raw, now,
                    lambda r, skey=skey: self._expired_entry(r, ns, skey, now),  # type: ignore[misc]
                )
                if accepted is not None:
                    page.append((skey, accepted))
                if manifest.records[bare][2]:  # a two-step write unfinished (Redis Cluster)
                    pending[bare] = raw
            if pending:
                verifier.settle_stale(ns, mkey, (raw_manifest, manifest), pending)
            return page

        page = verifier.checked(read)
        for start in range(0, len(page), _BATCH):
            yield page[start : start + _BATCH]

    def update(
        self, ident: Identity | None, key: str, scope: object, value: Any, ttl: int | None
    ) -> bool:
        """``RememberAccessor.update``: replace an existing entry's value by compare-and-set."""
        ns, skey = self.key(ident, key, scope)
        if ttl is not None:
            check_ttl(ttl)
        check_json_value(value, "value")
        return self.swap(ident, key, ns, skey, lambda current: value, ttl=ttl, rules=_UPDATE)[0]

    def swap(
        self,
        ident: Identity | None,
        key: str,
        ns: Namespace,
        skey: str,
        value_for: Callable[[EntryFields | None], Any],
        *,
        ttl: int | None,
        rules: SwapRules,
        where: str | None = None,
    ) -> tuple[bool, int | None]:
        """The one compare-and-set loop of every read-then-write of an entry.

        Each attempt reads the entry, asks ``value_for(fields)`` (``None`` when
        missing or expired) for the new value and writes it only if the store
        still holds exactly what was read: ``compare_and_set`` over a stored
        value, ``SET ... NX`` where there was none.  *rules* say what happens to
        a missing, unreadable or protected entry and what the new entry keeps.
        A live 1.8.0 doubled-prefix entry found in place of *skey* is first moved
        under *skey*; *where* (a doubled-prefix key) is read and written instead
        of *skey*, values still bound to *skey*.  A sealed write reported as lost
        but found in the store on the next read (a resent command after a lost
        reply) counts as written.  A write records the session's owner
        (:meth:`OwnerBook.note`).  *ttl* is already checked (:func:`check_ttl`).

        :returns: whether it wrote (``False``: missing and not created, nothing
            written), and the deadline written.
        :raises RememberConflictError: after :data:`CAS_ATTEMPTS` lost races.
        """
        # Sealed entries carry a fresh random IV, so stored text is unique to the
        # attempt that wrote it; plaintext entries are not (same value, same ms).
        unique = self.codec.keyring is not None
        tried: str | None = None  # what the last attempt failed to write
        expires: int | None = None  # its deadline
        verifier = self.verifier
        target = skey if where is None else where
        seen: tuple[str | None, Manifest] | None = None  # verified mode: the manifest read
        for attempt in range(CAS_ATTEMPTS):
            if verifier is not None:
                (raw, seen), source = self.read_verified(ns, key, skey), skey
            elif where is None:
                raw, source = self.read_raw(skey)
            else:
                raw, source = self.store.get(where), where
            if tried is not None and raw == tried:
                # That write did land: its reply was lost, and the driver's retry of the
                # conditional write found our own value and answered "not written".
                # Applying the change again would apply it twice.
                return self._swapped(ident, ns, rules, expires)
            now = self.clock()
            current = self.checked_entry(raw, ns, key, skey, now, rules)
            if current is None and not rules.create:
                return False, None
            if current is not None and raw is not None and source != target:
                # A 1.8.0 doubled-prefix entry: move it under the real key first.
                if self.write(
                    ident, ns, skey, raw, ttl_ms=self.ttl_ms(current[4], now),
                    only_if_absent=True, charge_only=True, bare=key,
                ):  # fmt: skip
                    self.store.delete(source)
                continue
            if rules.forget:
                # An entry expired since the epoch: every reader sees nothing, the store
                # drops it a millisecond later (stores have no compare-and-delete); in
                # verified mode the manifest deletes it.
                stored = None if verifier is not None else self.seal_checked(
                    entry_json(None, None, 0, 0, 1, None), ns, skey, ident, like=raw
                )
            else:
                stored, expires = self._entry(ident, key, ns, skey, value_for(current), current,
                                              ttl, now, rules.fresh)  # fmt: skip
            if verifier is not None:
                assert seen is not None
                written = self.swap_verified(ns, key, skey, seen, stored, expires)
            else:
                assert stored is not None
                ttl_ms = 1 if rules.forget else self.ttl_ms(expires, now)
                bare = key if where is None else None  # a doubled-prefix key has no index
                if raw is None or source != target:
                    written = self.write(
                        ident, ns, target, stored, ttl_ms=ttl_ms, only_if_absent=True, bare=bare
                    )
                else:
                    written = self.write(
                        ident, ns, target, stored, ttl_ms=ttl_ms, expected=raw,
                        charge_only=rules.forget, bare=bare,
                    )  # fmt: skip
            if written:
                return self._swapped(ident, ns, rules, expires)
            if unique:
                tried = stored
            with self._lock:
                self._stats.cas_retries += 1
            _metrics.CAS_RETRIES.add(self.store_kind)
            if _CAS_EAGER <= attempt < CAS_ATTEMPTS - 1:
                # Randomised, growing pauses: writers that keep colliding drift apart.
                pause = min(_CAS_PAUSE_MAX, _CAS_PAUSE_FIRST * 2 ** (attempt - _CAS_EAGER))
                self.sleep(random.uniform(0, pause))
        if tried is not None and self.store.get(target) == tried:
            return self._swapped(ident, ns, rules, expires)  # landed after all (see above)
        _metrics.CAS_CONFLICTS.add(self.store_kind)
        raise RememberConflictError(
            f"{key!r} was changed by other writers during each of {CAS_ATTEMPTS} "
            "compare-and-set attempts; nothing was written"
        )

    def _swapped(
        self, ident: Identity | None, ns: Namespace, rules: SwapRules, expires: int | None
    ) -> tuple[bool, int | None]:
        if not rules.forget:
            self.owners.note(ident, ns, expires)
        return True, expires

    def checked_entry(
        self, raw: str | None, ns: Namespace, key: str, skey: str, now: int, rules: SwapRules
    ) -> EntryFields | None:
        """The live entry *raw* holds for *skey* (``None``: missing or expired), which
        *rules* allow :meth:`swap` to replace.

        :raises Exception: what ``rules.unreadable`` or ``rules.guard`` raise.
        """
        if raw is None:
            return None
        if rules.unreadable is None:
            current = self.decode_fields(raw, ns, skey, now)  # unreadable: as missing
            if current is not None and rules.guard is not None:
                rules.guard(current)
            return current
        try:
            current = self.codec.open_fields(raw, ns, skey)[0]
        except RememberDecryptionError as exc:
            # Never replace what could not be read (it may be another secret's data)
            # unless the caller says so.
            error = rules.unreadable(key, exc)
            if error is None:
                return None
            raise error from exc
        if current[4] is not None and now >= current[4]:
            return None  # expired: replaced as if missing
        if rules.guard is not None:
            rules.guard(current)
        return current

    def _entry(
        self, ident: Identity | None, key: str, ns: Namespace, skey: str, value: Any,
        current: EntryFields | None, ttl: int | None, now: int,
        fresh: tuple[str | None, dict[str, Any] | None, str | None] | None,
    ) -> tuple[str, int | None]:  # fmt: skip
        """The sealed entry :meth:`swap` writes over *current*, and its deadline: *fresh*
        (brand, metadata, writer) or, by default, the current entry's brand, creation
        time, metadata and deadline (unless *ttl* gives a new one)."""
        writer = None
        if fresh is not None:
            (brand, metadata, writer), created_at = fresh, now
            expires = self.deadline(ttl, now)
        elif current is None:
            brand, created_at, metadata = None, now, None
            expires = self.deadline(ttl, now)
        else:
            _, brand, created_at, _, expires, metadata = current
            if ttl is not None or expires is None:
                expires = self.deadline(ttl, now)  # else: keep the deadline
        extras = (
            None if writer is None and self.search_settings.embedder is None
            else self.search_extras(key, value, brand, metadata, writer)
        )
        entry = entry_json(value, brand, created_at, now, expires, metadata, extras)
        return self.seal_checked(entry, ns, skey, ident), expires

    def swap_verified(
        self,
        ns: Namespace,
        key: str,
        skey: str,
        seen: tuple[str | None, Manifest],
        stored: str | None,
        expires: int | None,
    ) -> bool:
        """Verified mode's compare-and-set: write *stored* (``None``: delete) if unchanged.

        Written only while the manifest still records the version of *key* that
        :meth:`read_verified` saw with *seen* (other keys of the namespace may
        change meanwhile).  Whether it was written.
        """
        assert self.verifier is not None
        record = seen[1].records.get(key)
        head = skey[: len(skey) - len(key)]
        return (
            self.verifier.commit(
                ns,
                head,
                manifest_key(self.prefix, head),
                lambda m: {key: (stored, expires)} if m.records.get(key) == record else None,
                known=seen,
            )
            is not None
        )

    def modify(
        self,
        ident: Identity | None,
        key: str,
        scope: object,
        fn: Callable[[Any], Any],
        default: Any,
        ttl: int | None,
    ) -> Any:
        """``RememberAccessor.modify``: ``fn(current value)``, written by compare-and-set."""
        ns, skey = self.key(ident, key, scope)
        if ttl is not None:
            check_ttl(ttl)
        if not callable(fn):
            raise RememberInputTypeError(f"fn must be callable; got {type(fn).__name__}")
        new: Any = None

        def apply(current: EntryFields | None) -> Any:
            nonlocal new
            # A fresh default per call: an fn that mutates its argument must not see
            # its own earlier, unwritten attempt.
            new = fn(copy.deepcopy(default) if current is None else current[0])
            check_json_value(new, "the value fn returned")
            return new

        self.swap(ident, key, ns, skey, apply, ttl=ttl, rules=_MODIFY)
        return new

    def forget(self, ident: Identity | None, key: str, scope: object) -> bool:
        """Delete the entry (and its 1.8.0 doubled-prefix twin); whether one was there."""
        ns, skey = self.key(ident, key, scope)
        if self.verifier is not None:
            head = skey[: len(skey) - len(key)]
            base = self.verifier.commit(
                ns,
                head,
                manifest_key(self.prefix, head),
                lambda m: {key: (None, None)} if key in m.records else None,
            )
            record = None if base is None else base.records.get(key)
            return record is not None and record[0] != "" and (
                record[1] is None or self.clock() < record[1]
            )
        keys = [skey, self.prefix + skey] if self.read_doubled_prefix else [skey]
        return self.delete(ident, ns, *keys) > 0

    def _raw_pages(
        self, ns: Namespace, head: str, pattern: str, count: int = 1000
    ) -> Iterator[tuple[list[tuple[str, str]], list[str]]]:
        """Pages read from the store: (page, storage keys).

        1.8.0's doubled-prefix keys are given their storage key.
        """
        cut_doubled = len(self.prefix + head)
        for batch in self.scan_pages(ns, pattern, count):
            yield batch, [k if k.startswith(head) else head + k[cut_doubled:] for k, _ in batch]

    def _decoded_pages(
        self, ident: Identity | None, scope: object, pattern: str, brand: str | None
    ) -> Iterator[tuple[int, list[tuple[str, str]], list[str], list[_Decoded]]]:
        """Pages read from the store, decoded: (time read, page, storage keys, fields or errors).

        1.8.0's doubled-prefix keys are decoded as ours (under their storage key).
        """
        ns, head = self.namespace(ident, scope)
        for batch, skeys in self._raw_pages(ns, head, pattern):
            now = self.clock()
            yield now, batch, skeys, self.codec.decode_many([v for _, v in batch], ns, skeys)

    def entries(
        self,
        ident: Identity | None,
        scope: object,
        pattern: str,
        brand: str | None,
        unreadable: builtins.list[str] | None = None,
    ) -> dict[str, RememberEntry]:
        """Readable, unexpired entries matching *pattern* (and *brand*), by bare key.

        :param unreadable: receives the bare keys of the entries that exist but
            cannot be read (so a caller can say so instead of leaving them out).
        """
        _check_listing(pattern, brand)
        out: dict[str, RememberEntry] = {}
        cut = len(self.namespace(ident, scope)[1])
        for now, _, skeys, decoded in self._decoded_pages(ident, scope, pattern, brand):
            for skey, fields in zip(skeys, decoded, strict=True):
                if isinstance(fields, RememberDecryptionError):
                    self._unreadable(skey, fields)
                    if unreadable is not None:
                        unreadable.append(skey[cut:])
                    continue
                expires = fields[4]
                if expires is not None and now >= expires:
                    continue
                bare = skey[cut:]
                if (brand is None or fields[1] == brand) and bare not in out:
                    out[bare] = RememberEntry(*fields)
        return out

    def forget_many(
        self,
        ident: Identity | None,
        scope: object,
        pattern: str,
        brand: str | None,
        include_unreadable: bool,
    ) -> int:
        """``RememberAccessor.forget_many``: delete what matches; how many live ones."""
        _check_listing(pattern, brand)
        if type(include_unreadable) is not bool:
            raise RememberInputTypeError(
                f"include_unreadable must be a bool; got {type(include_unreadable).__name__}"
            )
        if include_unreadable and brand is not None:
            raise RememberInputError(
                "include_unreadable=True cannot be combined with brand: the brand of an "
                "entry that cannot be read is unknown"
            )
        doomed: builtins.list[str] = []  # live or unreadable: counted
        expired: builtins.list[str] = []  # deleted as cleanup, not counted
        unreadable = 0
        for now, batch, skeys, decoded in self._decoded_pages(ident, scope, pattern, brand):
            for (full, _), skey, fields in zip(batch, skeys, decoded, strict=True):
                if isinstance(fields, RememberDecryptionError):
                    unreadable += 1
                    if self.note_unreadable(skey, fields):
                        log.warning(
                            "remember: %s is unreadable (%s); forget_many %s it",
                            describe_key(self.prefix, skey),
                            fields.message,
                            "deletes" if include_unreadable else "keeps",
                        )
                    if include_unreadable:
                        doomed.append(full)
                elif brand is None or fields[1] == brand:
                    # Expired ones go too (they are ours and readable), uncounted.
                    gone = fields[4] is not None and now >= fields[4]
                    (expired if gone else doomed).append(full)
        if unreadable and not include_unreadable and self.on_decrypt_error == "raise":
            raise RememberDecryptionError(
                f"forget_many found {unreadable} unreadable entries in {scope} scope and "
                "deleted nothing (include_unreadable=True deletes them too)"
            )
        # Between the read and the delete another writer may replace an entry; the
        # store protocol has no compare-and-delete, so that window (one round trip)
        # remains.  What is never deleted is an entry this call read as unreadable.
        if self.verifier is not None:
            deleted = self._verified_delete(ident, scope, doomed, expired)
        else:
            ns = self.namespace(ident, scope)[0]
            deleted = sum(
                self.delete(ident, ns, *doomed[i : i + _BATCH])
                for i in range(0, len(doomed), _BATCH)
            )
            for i in range(0, len(expired), _BATCH):
                self.delete(ident, ns, *expired[i : i + _BATCH])
        if unreadable:
            log.warning(
                "remember: forget_many in %s scope %s %d unreadable entries%s",
                scope,
                "deleted" if include_unreadable else "kept",
                unreadable,
                "" if include_unreadable else " (include_unreadable=True deletes them)",
            )
        return deleted

    def _verified_delete(
        self,
        ident: Identity | None,
        scope: object,
        doomed: builtins.list[str],
        expired: builtins.list[str],
    ) -> int:
        """``forget_many``'s deletes in verified mode, one commit; how many of *doomed* lived."""
        assert self.verifier is not None
        ns, head = self.namespace(ident, scope)
        cut = len(head)
        gone = [k[cut:] for k in doomed]
        drop = gone + [k[cut:] for k in expired]
        if not drop:
            return 0
        now = self.clock()
        base = self.verifier.commit(
            ns,
            head,
            manifest_key(self.prefix, head),
            lambda m: {bare: (None, None) for bare in drop if bare in m.records} or None,
        )
        if base is None:
            return 0
        live = [base.records.get(bare) for bare in gone]
        return sum(
            1 for r in live if r is not None and r[0] != "" and (r[1] is None or now < r[1])
        )

    def search(
        self,
        ident: Identity | None,
        query: object,
        scope: object,
        brand: object,
        limit: object,
        host_only: object,
        *,
        scopes: tuple[Scope, ...] = SCOPES,
        max_limit: int = 1000,
    ) -> list[Hit]:
        """``RememberAccessor.search``: rank the caller's readable, live entries for *query*.

        Reads every namespace searched through :meth:`scan_pages` (its listing
        index), so the cost depends on the caller's namespaces, not the database;
        what was decrypted is kept in :attr:`search_cache` (see
        :class:`~remember_sync._search.SearchCache`).  *scope* ``None`` searches each
        of *scopes* this identity may use and skips the others.

        :raises RememberIdentityError: an explicit *scope* this identity cannot use.
        """
        query, limit = check_query(query, limit, max_limit=max_limit)
        brand = None if brand is None else check_brand(brand)
        if type(host_only) is not bool:
            raise RememberInputTypeError(
                f"host_only must be a bool; got {type(host_only).__name__}"
            )
        if scope is None:
            wanted: list[Scope] = list(scopes)
        else:
            wanted = [check_scope(scope)]
        parts = []
        for name in wanted:
            try:
                ns, head = self.namespace(ident, name)
            except RememberIdentityError:
                if scope is not None:
                    raise
                continue
            items: list[tuple[str, str]] = []
            for batch, skeys in self._raw_pages(ns, head, "*", _SEARCH_PAGE):
                if self.read_doubled_prefix:  # a doubled-prefix key reads as its storage key
                    items.extend(zip(skeys, [raw for _, raw in batch], strict=True))
                else:
                    items.extend(batch)
            parts.append((name, head, items, functools.partial(self._open_records, ns)))

        def unreadable(scope: str, skey: str, exc: Exception) -> None:
            # Left out of the results, logged and counted once per key -- or raised,
            # with on_decrypt_error="raise", as every other read does.
            if isinstance(exc, RememberDecryptionError):
                self._unreadable(skey, exc)

        return self.search_cache.search(
            parts, query, brand=brand, limit=limit, now=self.clock(),
            host_only=host_only, on_unreadable=unreadable,
        )

    def _open_records(
        self, ns: Namespace, skeys: list[str], raws: list[str]
    ) -> list[tuple[EntryFields, dict[str, Any]] | RememberDecryptionError]:
        return self.codec.records_many(raws, ns, skeys)
