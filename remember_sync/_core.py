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

from ._bounded import BoundedCache
from ._clock import Clock, system_clock
from ._codec import EntryCodec, EntryFields, check_json_value, entry_json, entry_to_json
from ._fork import after_fork_in_child
from ._keys import (
    check_key,
    check_pattern,
    describe_key,
    index_key_of,
    index_record_key,
    match_user_pattern,
    namespace_index_key,
    scope_glob,
    scope_prefix,
)
from ._quota import Owners
from .errors import (
    RememberConfigurationError,
    RememberConflictError,
    RememberDecryptionError,
    RememberInputError,
    RememberInputTypeError,
)
from .identity import current_identity, resolve_namespace
from .stores.base import NamespaceIndex, OwnedWrites, Store
from .types import Identity, Namespace, RememberEntry, check_brand, check_scope

__all__ = [
    "CAS_ATTEMPTS",
    "DEFAULT_MAX_VALUE_BYTES",
    "LISTING_MODES",
    "MAX_TTL_SECONDS",
    "UNREADABLE_REMEMBERED",
    "AccessorCore",
    "check_ttl",
]

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
        owners: Owners | None = None,
    ) -> None:
        if listing not in LISTING_MODES:
            raise RememberConfigurationError(f"listing must be 'index' or 'scan'; got {listing!r}")
        self.store = store
        self.codec = codec
        self.prefix = prefix
        self.default_ttl = default_ttl
        self.clock: Clock = clock or system_clock
        self.max_value_bytes = max_value_bytes
        self.on_decrypt_error = on_decrypt_error
        self.read_doubled_prefix = read_doubled_prefix
        self.sleep = sleep or time.sleep
        if owners is not None and not isinstance(store, OwnedWrites):
            raise RememberConfigurationError(
                f"quotas need a store that charges writes to their owner; {type(store).__name__} "
                "does not implement OwnedWrites"
            )
        self.owners = owners
        self._stats = _Stats()
        self._lock = threading.Lock()
        self._new_caches()
        self.listing = listing
        #: Whether reads may trust the index: every older entry is in it.
        self.index_ready = False
        self._index_checked_at: int | None = None
        if listing == "index" and not isinstance(store, NamespaceIndex):
            self.listing = "scan"
        elif listing == "index":
            assert isinstance(store, NamespaceIndex)
            self.index_ready = store.use_index(functools.partial(index_key_of, prefix))
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
        self._lock = threading.Lock()
        self._new_caches()

    def namespace(self, ident: Identity | None, scope: object) -> tuple[Namespace, str]:
        """The namespace of *scope* for *ident*, and its storage-key head (cached).

        *ident* ``None`` is the identity bound in the current context.

        :raises ValueError: for an unknown scope.
        :raises RememberIdentityError: when the scope needs an identity *ident* lacks.
        """
        if ident is None:
            ident = current_identity()
        # Keyed by plain strings, not the Identity: their hashes are cached C-level
        # ones, where a dataclass __hash__ is a Python call on every operation.
        cache_key = (scope, ident.session_id, ident.user_id, ident.tool_name)
        try:
            found = self._namespaces.get(cache_key)
        except TypeError:  # identity parts that are not even hashable: no caching
            ns = resolve_namespace(ident, check_scope(scope))
            return ns, scope_prefix(self.prefix, ns)
        if found is None:
            ns = resolve_namespace(ident, check_scope(scope))
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

    def deadline(self, ttl: int | None, now: int) -> int | None:
        """When an entry written now expires: after *ttl* seconds, or ``default_ttl``."""
        if ttl is not None:
            return now + check_ttl(ttl) * 1000
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
                "remember: %s is unreadable (%s); treating it as absent. Check that every "
                "instance uses the same REMEMBER_SECRET.",
                describe_key(self.prefix, full_key),
                exc.message,
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
        return True

    # -- decoding ---------------------------------------------------------------------

    def decode(
        self, raw: str | None, ns: Namespace, skey: str, now: int | None = None
    ) -> RememberEntry | None:
        """The live entry in *raw*, or ``None`` when absent, expired or unreadable."""
        fields = self.decode_fields(raw, ns, skey, now)
        return None if fields is None else RememberEntry(*fields)

    def decode_fields(
        self, raw: str | None, ns: Namespace, skey: str, now: int | None = None
    ) -> EntryFields | None:
        """:meth:`decode` as the tuple of entry fields.

        :param now: the time to judge expiry by; by default the clock, read only
            when the entry has a deadline.
        """
        if raw is None:
            return None
        try:
            fields = self.codec.open_fields(raw, ns, skey)[0]
        except RememberDecryptionError as exc:
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

    def seal_checked(self, entry_text: str, ns: Namespace, skey: str) -> str:
        """Seal serialised entry JSON, refusing it over ``max_value_bytes`` (nothing written)."""
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
        return self.codec.seal_text(text, ns, skey)

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

    def scan_pages(self, ns: Namespace, pattern: str) -> Iterator[list[tuple[str, str]]]:
        """:meth:`scan_keys` with the stored values: pages of (full key, value).

        Through the store's :meth:`~remember_sync.stores.base.ItemScanner.scan_pages`
        when it has one (keys and values in one pass), else ``scan`` then
        ``get_many`` per batch.  Keys whose value vanished in between are left out.
        """
        if self.index_usable():
            yield from self._index_pages(ns, pattern)
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


    def _index_pages(self, ns: Namespace, pattern: str) -> Iterator[list[tuple[str, str]]]:
        """:meth:`scan_pages` through the namespace's listing index (1.8.0's keys are not in it)."""
        head = scope_prefix(self.prefix, ns)
        cut = len(head)
        # (cast, not an assert: isinstance of a runtime-checkable Protocol costs ~10 us;
        # __init__ checked it once)
        pages = cast(NamespaceIndex, self.store).index_pages(
            namespace_index_key(self.prefix, head), scope_glob(self.prefix, ns, pattern)
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
    ) -> bool:
        """Store *stored* under *skey* (compare-and-set with *expected*); whether written.

        With owners tracked, the write is charged to the principal of *ident*
        in *ns* and refused over its quota (unless *charge_only*: a write
        that forgets or moves an entry is never refused).

        :raises RememberQuotaError: over the principal's quota; nothing written.
        """
        owners = self.owners
        if owners is not None:
            owner = owners.of(ident, ns)
            if owner is not None:
                # (no cast(): a call on every write; __init__ checked the capability)
                return self.store.write_owned(  # type: ignore[attr-defined, no-any-return]
                    skey, stored, owner=owner[0], group=owner[1],
                    quota=None if charge_only else owners.quota, ttl_ms=ttl_ms,
                    only_if_absent=only_if_absent, expected=expected,
                )  # fmt: skip
        if expected is not None:
            return self.store.compare_and_set(skey, expected, stored, ttl_ms=ttl_ms)
        return self.store.set(skey, stored, ttl_ms=ttl_ms, only_if_absent=only_if_absent)

    def delete(self, ident: Identity | None, ns: Namespace, *keys: str) -> int:
        """Delete *keys* of *ns*, refunding their owner when owners are tracked."""
        owners = self.owners
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
    ) -> None:
        """``RememberAccessor.set``: validate, seal and store a new entry."""
        ns, skey = self.key(ident, key, scope)
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
        now = self.clock()
        expires = self.deadline(ttl, now)
        stored = self.seal_checked(entry_json(value, brand, now, now, expires, metadata), ns, skey)
        self.write(ident, ns, skey, stored, ttl_ms=self.ttl_ms(expires, now))

    def get_fields(self, ident: Identity | None, key: str, scope: object) -> EntryFields | None:
        """The live entry under *key* as its fields, or ``None`` (the path of every read)."""
        ns, skey = self.key(ident, key, scope)
        return self.decode_fields(self.read_raw(skey)[0], ns, skey)

    def update(
        self, ident: Identity | None, key: str, scope: object, value: Any, ttl: int | None
    ) -> bool:
        """``RememberAccessor.update``: replace an existing entry's value by compare-and-set."""
        ns, skey = self.key(ident, key, scope)
        if ttl is not None:
            check_ttl(ttl)
        check_json_value(value, "value")
        return self._swap(ident, key, ns, skey, lambda current: value, ttl=ttl, create=False)

    def _swap(
        self,
        ident: Identity | None,
        key: str,
        ns: Namespace,
        skey: str,
        value_for: Callable[[EntryFields | None], Any],
        *,
        ttl: int | None,
        create: bool,
    ) -> bool:
        """The compare-and-set loop behind ``update``, ``modify`` and ``increment``.

        Each attempt reads the entry, asks ``value_for(fields)`` (``None`` when
        missing or expired) for the new value and writes it only if the store
        still holds exactly what was read: ``compare_and_set`` over a stored
        value, ``SET ... NX`` where there was none.  With *create* false a
        missing entry returns ``False`` and an unreadable one counts as missing
        (nothing is written either way); with *create* true a missing one is
        created and an unreadable one raises rather than being replaced.  A
        sealed write reported as lost but found in the store on the next read
        (a resent command after a lost reply) counts as written.

        :raises RememberConflictError: after :data:`CAS_ATTEMPTS` lost races.
        """
        store = self.store
        # Sealed entries carry a fresh random IV, so stored text is unique to the
        # attempt that wrote it; plaintext entries are not (same value, same ms).
        unique = self.codec.keyring is not None
        tried: str | None = None  # what the last attempt failed to write
        for attempt in range(CAS_ATTEMPTS):
            raw, source = self.read_raw(skey)
            if tried is not None and raw == tried:
                # That write did land: its reply was lost, and the driver's retry of the
                # conditional write found our own value and answered "not written".
                # Applying the change again would apply it twice.
                return True
            now = self.clock()
            current: EntryFields | None
            if not create:
                current = self.decode_fields(raw, ns, skey, now)
                if current is None:
                    return False
            elif raw is None:
                current = None
            else:
                try:
                    current = self.codec.open_fields(raw, ns, skey)[0]
                except RememberDecryptionError as exc:
                    # Never replace what could not be read: it may be another
                    # secret's data, and a counter restarted from 0 loses it silently.
                    raise RememberDecryptionError(
                        f"{key!r} holds an entry that cannot be read ({exc.message}); "
                        "it was left as it is. Check that every instance uses the same "
                        "REMEMBER_SECRET, or forget the key to start over"
                    ) from exc
                if current[4] is not None and now >= current[4]:
                    current = None  # expired: replaced as if missing
            if current is not None and raw is not None and source != skey:
                # A 1.8.0 doubled-prefix entry: move it under the real key first.
                ttl_ms = self.ttl_ms(current[4], now)
                if self.write(
                    ident, ns, skey, raw, ttl_ms=ttl_ms, only_if_absent=True, charge_only=True
                ):
                    store.delete(source)
                continue
            value = value_for(current)
            if current is None:
                brand, created_at, metadata = None, now, None
                expires = self.deadline(ttl, now)
            else:
                _, brand, created_at, _, expires, metadata = current
                if ttl is not None or expires is None:
                    expires = self.deadline(ttl, now)  # else: keep the deadline
            stored = self.seal_checked(
                entry_json(value, brand, created_at, now, expires, metadata), ns, skey
            )
            ttl_ms = self.ttl_ms(expires, now)
            if raw is None or source != skey:
                written = self.write(ident, ns, skey, stored, ttl_ms=ttl_ms, only_if_absent=True)
            else:
                written = self.write(ident, ns, skey, stored, ttl_ms=ttl_ms, expected=raw)
            if written:
                return True
            if unique:
                tried = stored
            with self._lock:
                self._stats.cas_retries += 1
            if _CAS_EAGER <= attempt < CAS_ATTEMPTS - 1:
                # Randomised, growing pauses: writers that keep colliding drift apart.
                pause = min(_CAS_PAUSE_MAX, _CAS_PAUSE_FIRST * 2 ** (attempt - _CAS_EAGER))
                self.sleep(random.uniform(0, pause))
        if tried is not None and self.read_raw(skey)[0] == tried:
            return True  # the last write landed after all (see above)
        raise RememberConflictError(
            f"{key!r} was changed by other writers during each of {CAS_ATTEMPTS} "
            "compare-and-set attempts; nothing was written"
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

        self._swap(ident, key, ns, skey, apply, ttl=ttl, create=True)
        return new

    def forget(self, ident: Identity | None, key: str, scope: object) -> bool:
        """Delete the entry (and its 1.8.0 doubled-prefix twin); whether one was there."""
        ns, skey = self.key(ident, key, scope)
        keys = [skey, self.prefix + skey] if self.read_doubled_prefix else [skey]
        return self.delete(ident, ns, *keys) > 0

    def _decoded_pages(
        self, ident: Identity | None, scope: object, pattern: str, brand: str | None
    ) -> Iterator[tuple[int, list[tuple[str, str]], list[str], list[_Decoded]]]:
        """Pages read from the store, decoded: (time read, page, storage keys, fields or errors).

        1.8.0's doubled-prefix keys are decoded as ours (under their storage key).
        """
        ns, head = self.namespace(ident, scope)
        cut_doubled = len(self.prefix + head)
        for batch in self.scan_pages(ns, pattern):
            now = self.clock()
            skeys = [k if k.startswith(head) else head + k[cut_doubled:] for k, _ in batch]
            yield now, batch, skeys, self.codec.decode_many([v for _, v in batch], ns, skeys)

    def entries(
        self, ident: Identity | None, scope: object, pattern: str, brand: str | None
    ) -> dict[str, RememberEntry]:
        """Readable, unexpired entries matching *pattern* (and *brand*), by bare key."""
        _check_listing(pattern, brand)
        out: dict[str, RememberEntry] = {}
        cut = len(self.namespace(ident, scope)[1])
        for now, _, skeys, decoded in self._decoded_pages(ident, scope, pattern, brand):
            for skey, fields in zip(skeys, decoded, strict=True):
                if isinstance(fields, RememberDecryptionError):
                    self._unreadable(skey, fields)
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
        ns = self.namespace(ident, scope)[0]
        deleted = sum(
            self.delete(ident, ns, *doomed[i : i + _BATCH]) for i in range(0, len(doomed), _BATCH)
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
