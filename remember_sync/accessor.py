"""The accessor: every memory policy lives here, once.

Identity and scope rules, storage keys, input validation, TTL and expiry,
serialisation and encryption are applied here; stores only move opaque
strings.  A :class:`RememberAccessor` is either bound to a fixed
:class:`~remember_sync.types.Identity` or (``plugin.remember``) reads the
identity bound in the current context on every call.
"""

from __future__ import annotations

import builtins
import copy
import functools
import hashlib
import html
import logging
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ._codec import EntryCodec, EntryFields, check_json_value, entry_json, entry_to_json
from ._fork import after_fork_in_child
from ._keys import (
    MAX_KEY_BYTES,
    check_key,
    check_pattern,
    index_key_of,
    index_record_key,
    match_user_pattern,
    namespace_index_key,
    parse_storage_key,
    scope_glob,
    scope_prefix,
)
from .errors import (
    RememberConfigurationError,
    RememberConflictError,
    RememberDecryptionError,
    RememberIdentityError,
    RememberInputError,
    RememberInputTypeError,
)
from .identity import current_identity, resolve_namespace
from .stores.base import NamespaceIndex, Store
from .types import Identity, Namespace, RememberEntry, Scope, check_brand, check_scope

__all__ = [
    "CAS_ATTEMPTS",
    "DEFAULT_MAX_VALUE_BYTES",
    "LISTING_MODES",
    "MAX_TTL_SECONDS",
    "UNREADABLE_REMEMBERED",
    "AccessorCore",
    "RememberAccessor",
    "describe_key",
]

log = logging.getLogger("remember_sync")

DEFAULT_MAX_VALUE_BYTES = 1024 * 1024
_SENTINEL: Any = object()
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
#: Resolved (identity, scope) pairs kept per plugin; the cache is emptied when full.
_NAMESPACE_CACHE = 4096
#: Distinct unreadable keys a plugin remembers (as 16-byte hashes, oldest forgotten
#: first): each is logged and counted once while it is remembered.
UNREADABLE_REMEMBERED = 10_000


def describe_key(prefix: str, full_key: str) -> str:
    """How logs and error messages name a storage key: never with its identity in clear.

    A storage key holds the session id, which grants that session's memory
    (and the user id).  The name given is the scope, a short SHA-256 of the
    namespace part (enough to tell two namespaces apart in a log, not to
    recover an id) and the bare key, which the caller chose.  A key that is
    not one of ours is named by its hash alone.
    """
    parsed = parse_storage_key(prefix, full_key)
    if parsed is None and full_key.startswith(prefix + prefix):
        parsed = parse_storage_key(prefix, full_key[len(prefix) :])  # 1.8.0's doubled prefix
    if parsed is None:
        return f"key #{hashlib.sha256(full_key.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
    head = full_key[: len(full_key) - len(parsed.key)]
    digest = hashlib.sha256(head.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{parsed.namespace.scope} entry {parsed.key!r} (namespace #{digest})"



def wall_clock_ms() -> int:
    """Epoch milliseconds from the system clock."""
    return time.time_ns() // 1_000_000


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


@dataclass
class _Stats:
    unreadable: int = 0
    cas_retries: int = 0
    by_op: dict[str, int] = field(default_factory=dict)


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
    """

    def __init__(
        self,
        store: Store,
        codec: EntryCodec,
        *,
        prefix: str,
        default_ttl: int = 0,
        clock: Callable[[], int] | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        on_decrypt_error: str = "warn",
        read_doubled_prefix: bool = False,
        sleep: Callable[[float], None] | None = None,
        listing: str = "index",
    ) -> None:
        if listing not in LISTING_MODES:
            raise RememberConfigurationError(f"listing must be 'index' or 'scan'; got {listing!r}")
        self.store = store
        self.codec = codec
        self.prefix = prefix
        self.default_ttl = default_ttl
        self.clock = clock or wall_clock_ms
        self.max_value_bytes = max_value_bytes
        self.on_decrypt_error = on_decrypt_error
        self.read_doubled_prefix = read_doubled_prefix
        self.sleep = sleep or time.sleep
        self._stats = _Stats()
        # Hashes of the unreadable keys already logged and counted (see note_unreadable).
        self._warned: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        # (scope, session_id, user_id, tool_name) -> (namespace, storage-key head).
        # Resolving the scope rules and percent-encoding the identity is pure, and
        # costs more than a dict lookup on every call.
        self._namespaces: dict[tuple[object, ...], tuple[Namespace, str]] = {}
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

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock at the fork (see _fork).
        # It guards counters and the set of keys already reported unreadable: at worst
        # the child counts one event the parent's thread was counting, or reports a key
        # once more.  The namespace cache is only a cache: the child starts empty.
        self._lock = threading.Lock()
        self._namespaces = {}

    def namespace(self, ident: Identity, scope: object) -> tuple[Namespace, str]:
        """The namespace of *scope* for *ident*, and its storage-key head (cached).

        :raises ValueError: for an unknown scope.
        :raises RememberIdentityError: when the scope needs an identity *ident* lacks.
        """
        # Keyed by plain strings, not the Identity: their hashes are cached C-level
        # ones, where a dataclass __hash__ is a Python call on every operation.
        if type(scope) is str:
            try:
                found = self._namespaces.get(
                    (scope, ident.session_id, ident.user_id, ident.tool_name)
                )
            except TypeError:  # identity parts that are not even hashable: no caching
                found = None
            if found is not None:
                return found  # only valid scopes and identities are ever cached
        checked = check_scope(scope)
        ns = resolve_namespace(ident, checked)
        found = (ns, scope_prefix(self.prefix, ns))
        try:
            cache_key = (checked, ident.session_id, ident.user_id, ident.tool_name)
            if len(self._namespaces) >= _NAMESPACE_CACHE:
                self._namespaces.clear()
            self._namespaces[cache_key] = found
        except TypeError:
            pass
        return found

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
        with self._lock:
            if digest in self._warned:
                return False
            self._warned[digest] = None
            self._stats.unreadable += 1
            if len(self._warned) > UNREADABLE_REMEMBERED:
                self._warned.popitem(last=False)
        return True

    # -- decoding ---------------------------------------------------------------------

    def decode(self, raw: str | None, ns: Namespace, skey: str, now: int) -> RememberEntry | None:
        """The live entry in *raw*, or ``None`` when absent, expired or unreadable."""
        fields = self.decode_fields(raw, ns, skey, now)
        return None if fields is None else RememberEntry.from_fields(fields)

    def decode_fields(
        self, raw: str | None, ns: Namespace, skey: str, now: int
    ) -> EntryFields | None:
        """:meth:`decode` as the tuple of entry fields (no :class:`RememberEntry` built)."""
        if raw is None:
            return None
        try:
            fields = self.codec.decode_fields(raw, ns, skey)[0]
        except RememberDecryptionError as exc:
            self._unreadable(skey, exc)
            return None
        expires = fields[4]
        # RememberEntry.is_expired, inline.
        return None if expires is not None and now >= expires else fields

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
        assert isinstance(self.store, NamespaceIndex)
        pages = self.store.index_pages(
            namespace_index_key(self.prefix, head), scope_glob(self.prefix, ns, pattern)
        )
        for page in pages:
            kept = [item for item in page if item[0].startswith(head)]
            if pattern != "*":
                kept = [item for item in kept if match_user_pattern(pattern, item[0][cut:])]
            if kept:
                yield kept


class RememberAccessor:
    """Scoped, encrypted memory for one identity.

    Obtain one from ``plugin.remember`` (the identity bound in the current
    context, read on every call) or ``plugin.accessor(identity)`` (a fixed
    identity: notebooks, cron jobs).  Every method takes ``scope=``
    (``"session"`` by default, ``"user"``, ``"tool"`` or ``"global"``).
    """

    def __init__(self, core: AccessorCore, identity: Identity | None = None) -> None:
        self._core = core
        self._identity = identity

    # -- helpers ------------------------------------------------------------------------

    @property
    def identity(self) -> Identity:
        """The identity this accessor acts for (the context's, when not fixed)."""
        return self._identity if self._identity is not None else current_identity()

    def _ns(self, scope: object) -> Namespace:
        ident = self._identity if self._identity is not None else current_identity()
        return self._core.namespace(ident, scope)[0]

    def _key(self, key: object, scope: object) -> tuple[Namespace, str]:
        # keys.check_key, decided without a call for the usual key: an ASCII str
        # has one byte per character and cannot hold a lone surrogate.
        if not (
            type(key) is str
            and key.isascii()
            and 0 < len(key) <= MAX_KEY_BYTES
            and "\x00" not in key
        ):
            check_key(key)
        assert isinstance(key, str)
        ident = self._identity if self._identity is not None else current_identity()
        ns, head = self._core.namespace(ident, scope)
        return ns, head + key  # keys.storage_key, with the head cached

    def _deadline(self, ttl: int | None, now: int) -> int | None:
        if ttl is not None:
            return now + check_ttl(ttl) * 1000
        if self._core.default_ttl:
            return now + self._core.default_ttl * 1000
        return None

    # -- the API ------------------------------------------------------------------------

    def set(
        self,
        key: str,
        value: Any,
        *,
        scope: Scope = "session",
        ttl: int | None = None,
        brand: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Store *value*, replacing any entry (``created_at = updated_at = now``).

        :param ttl: seconds until it expires; ``None`` uses ``default_ttl``.
        :param brand: one of ``approval``, ``preference``, ``cache``, ``state``,
            ``conversation``, ``custom``.
        :param metadata: a JSON object (``dict`` with ``str`` keys).
        :raises ValueError: bad key, scope, ttl, brand or an entry over ``max_value_bytes``.
        :raises TypeError: a value or metadata JSON cannot hold.
        :raises RememberIdentityError: the scope needs an identity this caller lacks.
        """
        ns, skey = self._key(key, scope)
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
        core = self._core
        now = core.clock()
        # self._deadline and core.ttl_ms, inline (ttl is checked above).
        if ttl is not None:
            expires: int | None = now + ttl * 1000
        elif core.default_ttl:
            expires = now + core.default_ttl * 1000
        else:
            expires = None
        stored = core.seal_checked(entry_json(value, brand, now, now, expires, metadata), ns, skey)
        core.store.set(skey, stored, ttl_ms=None if expires is None else max(1, expires - now))

    def get(self, key: str, *, scope: Scope = "session", default: Any = None) -> Any:
        """The stored value, or *default* when missing, expired or unreadable."""
        # get_entry without building the RememberEntry it would only take .value of.
        core = self._core
        # self._key, inline for the usual call (a valid ASCII key, a cached namespace).
        found = None
        if (
            type(key) is str
            and type(scope) is str
            and key.isascii()
            and 0 < len(key) <= MAX_KEY_BYTES
            and "\x00" not in key
        ):
            ident = self._identity if self._identity is not None else current_identity()
            try:
                found = core._namespaces.get(
                    (scope, ident.session_id, ident.user_id, ident.tool_name)
                )
            except TypeError:
                pass
        if found is None:
            ns, skey = self._key(key, scope)
        else:
            ns, skey = found[0], found[1] + key
        raw = core.store.get(skey)  # core.read_raw, inline
        if raw is None:
            if not core.read_doubled_prefix:
                return default
            raw = core.store.get(core.prefix + skey)
            if raw is None:
                return default
        # core.decode_fields, inline; the clock is only read when there is a deadline.
        try:
            fields = core.codec.decode_fields(raw, ns, skey)[0]
        except RememberDecryptionError as exc:
            core._unreadable(skey, exc)
            return default
        expires = fields[4]
        if expires is not None and core.clock() >= expires:
            return default
        return fields[0]

    def get_entry(self, key: str, *, scope: Scope = "session") -> RememberEntry | None:
        """The whole entry (value, brand, times, metadata), or ``None``."""
        ns, skey = self._key(key, scope)
        core = self._core
        raw, _ = core.read_raw(skey)
        return core.decode(raw, ns, skey, core.clock())

    def knows(self, key: str, *, scope: Scope = "session") -> bool:
        """Whether a readable, unexpired entry exists."""
        return self.get_entry(key, scope=scope) is not None

    def update(
        self, key: str, value: Any, *, scope: Scope = "session", ttl: int | None = None
    ) -> bool:
        """Replace the value of an existing entry, atomically.

        Keeps ``created_at``, ``brand`` and ``metadata``; sets ``updated_at``;
        keeps the deadline unless *ttl* is given (an entry without one gets
        ``default_ttl`` from now).  Returns ``False`` when the entry is missing
        or expired.  A concurrent ``forget`` is never undone: the write is a
        compare-and-set against the exact value read.  To compute the new value
        from the current one, use :meth:`modify`.

        :raises RememberConflictError: after :data:`CAS_ATTEMPTS` lost races.
        """
        ns, skey = self._key(key, scope)
        if ttl is not None:
            check_ttl(ttl)
        check_json_value(value, "value")
        return self._swap(key, ns, skey, lambda current: value, ttl=ttl, create=False)

    def modify(
        self,
        key: str,
        fn: Callable[[Any], Any],
        *,
        scope: Scope = "session",
        default: Any = None,
        ttl: int | None = None,
    ) -> Any:
        """Set the entry to ``fn(current value)``, exactly once against concurrent writers.

        The read-modify-write is a compare-and-set against the exact stored
        value read: if another writer changed (or removed) the entry in
        between, the entry is read again and *fn* called again, up to
        :data:`CAS_ATTEMPTS` times, with a short random pause after the first
        few (so *fn* may run more than once: keep it free of side effects).
        Writers using ``modify`` or :meth:`increment` on the same key never
        lose each other's changes, on every store.

        * An existing entry keeps ``created_at``, ``brand`` and ``metadata``;
          ``updated_at`` becomes now; its deadline is kept unless *ttl* is given
          (an entry without one gets ``default_ttl`` from now), as with
          :meth:`update`.
        * A missing or expired entry: *fn* gets a fresh copy of *default*, and
          the result is stored as a new entry (``created_at = now``, no brand,
          no metadata) expiring after *ttl* or ``default_ttl`` seconds.
        * An entry that cannot be read (another secret, tampering) is never
          overwritten: :class:`~remember_sync.errors.RememberDecryptionError`.

        :param fn: gets the current value (or *default*), returns the new one,
            which must be JSON-serialisable and fit ``max_value_bytes``.
        :param ttl: seconds until it expires, from now.
        :returns: the new value, as *fn* returned it.
        :raises TypeError: *fn* is not callable, or returned a value JSON cannot hold.
        :raises ValueError: bad key, scope or ttl, or an entry over ``max_value_bytes``.
        :raises RememberDecryptionError: the stored entry is unreadable.
        :raises RememberConflictError: too many concurrent writers.

        Whatever *fn* raises propagates.  On every error nothing is written.
        """
        ns, skey = self._key(key, scope)
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

        self._swap(key, ns, skey, apply, ttl=ttl, create=True)
        return new

    def increment(
        self,
        key: str,
        delta: int | float = 1,
        *,
        scope: Scope = "session",
        ttl: int | None = None,
    ) -> int | float:
        """Add *delta* to the number stored under *key*; return the new number.

        :meth:`modify` with ``fn = current + delta``: exact under concurrent
        writers on every store.  A missing or expired entry counts as ``0``
        (and is created, expiring after *ttl* or ``default_ttl`` seconds); an
        existing one keeps its deadline unless *ttl* is given.  Integers stay
        exact (no float rounding).

        :param delta: an ``int`` or a finite ``float`` (not ``bool``); may be negative.
        :raises RememberInputTypeError: *delta* is not a number, or the stored
            value is not one (``bool`` included); nothing is written.
        :raises ValueError: bad key, scope or ttl, or a non-finite *delta*.
        :raises RememberDecryptionError: the stored entry is unreadable.
        :raises RememberConflictError: too many concurrent writers.
        """
        if isinstance(delta, bool) or not isinstance(delta, (int, float)):
            raise RememberInputTypeError(
                f"delta must be an int or a float; got {type(delta).__name__}"
            )
        if isinstance(delta, float) and not math.isfinite(delta):
            raise RememberInputError(f"delta must be a finite number; got {delta!r}")

        def add(current: Any) -> int | float:
            if isinstance(current, bool) or not isinstance(current, (int, float)):
                raise RememberInputTypeError(
                    f"cannot increment {key!r}: it holds a {type(current).__name__}, "
                    "not a number; nothing was written"
                )
            return current + delta

        result: int | float = self.modify(key, add, scope=scope, default=0, ttl=ttl)
        return result

    def _swap(
        self,
        key: str,
        ns: Namespace,
        skey: str,
        value_for: Callable[[EntryFields | None], Any],
        *,
        ttl: int | None,
        create: bool,
    ) -> bool:
        """The compare-and-set loop behind :meth:`update`, :meth:`modify` and :meth:`increment`.

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
        core = self._core
        store = core.store
        # Sealed entries carry a fresh random IV, so stored text is unique to the
        # attempt that wrote it; plaintext entries are not (same value, same ms).
        unique = core.codec.keyring is not None
        tried: str | None = None  # what the last attempt failed to write
        for attempt in range(CAS_ATTEMPTS):
            raw, source = core.read_raw(skey)
            if tried is not None and raw == tried:
                # That write did land: its reply was lost, and the driver's retry of the
                # conditional write found our own value and answered "not written".
                # Applying the change again would apply it twice.
                return True
            now = core.clock()
            current: EntryFields | None
            if not create:
                current = core.decode_fields(raw, ns, skey, now)
                if current is None:
                    return False
            elif raw is None:
                current = None
            else:
                try:
                    current = core.codec.decode_fields(raw, ns, skey)[0]
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
                if store.set(skey, raw, ttl_ms=core.ttl_ms(current[4], now), only_if_absent=True):
                    store.delete(source)
                continue
            value = value_for(current)
            if current is None:
                brand, created_at, metadata = None, now, None
                expires = self._deadline(ttl, now)
            else:
                _, brand, created_at, _, expires, metadata = current
                if ttl is not None or expires is None:
                    expires = self._deadline(ttl, now)  # else: keep the deadline
            stored = core.seal_checked(
                entry_json(value, brand, created_at, now, expires, metadata), ns, skey
            )
            ttl_ms = core.ttl_ms(expires, now)
            if raw is None or source != skey:
                written = store.set(skey, stored, ttl_ms=ttl_ms, only_if_absent=True)
            else:
                written = store.compare_and_set(skey, raw, stored, ttl_ms=ttl_ms)
            if written:
                return True
            if unique:
                tried = stored
            with core._lock:
                core._stats.cas_retries += 1
            if _CAS_EAGER <= attempt < CAS_ATTEMPTS - 1:
                # Randomised, growing pauses: writers that keep colliding drift apart.
                pause = min(_CAS_PAUSE_MAX, _CAS_PAUSE_FIRST * 2 ** (attempt - _CAS_EAGER))
                core.sleep(random.uniform(0, pause))
        if tried is not None and core.read_raw(skey)[0] == tried:
            return True  # the last write landed after all (see above)
        raise RememberConflictError(
            f"{key!r} was changed by other writers during each of {CAS_ATTEMPTS} "
            "compare-and-set attempts; nothing was written"
        )

    def forget(self, key: str, *, scope: Scope = "session") -> bool:
        """Delete the entry; return whether something was there."""
        ns, skey = self._key(key, scope)
        keys = [skey, self._core.prefix + skey] if self._core.read_doubled_prefix else [skey]
        return self._core.store.delete(*keys) > 0

    def list(self, *, scope: Scope = "session", pattern: str = "*") -> list[str]:
        """Bare keys of readable, unexpired entries matching *pattern*, sorted.

        Only ``*`` and ``?`` are wildcards; every other character is literal.
        """
        return sorted(self.entries(scope=scope, pattern=pattern))

    def entries(
        self, *, scope: Scope = "session", pattern: str = "*", brand: str | None = None
    ) -> dict[str, RememberEntry]:
        """Readable, unexpired entries matching *pattern* (and *brand*), in one batched read."""
        check_pattern(pattern)
        if brand is not None:
            check_brand(brand)
        ident = self._identity if self._identity is not None else current_identity()
        core = self._core
        ns, head = core.namespace(ident, scope)
        out: dict[str, RememberEntry] = {}
        cut, cut_doubled = len(head), len(core.prefix + head)
        make = RememberEntry.from_fields
        for batch in core.scan_pages(ns, pattern):
            now = core.clock()
            # Storage keys: 1.8.0's doubled-prefix keys are read as ours.
            skeys = [k if k.startswith(head) else head + k[cut_doubled:] for k, _ in batch]
            decoded = core.codec.decode_many([v for _, v in batch], ns, skeys)
            for skey, fields in zip(skeys, decoded, strict=True):
                if isinstance(fields, RememberDecryptionError):
                    core._unreadable(skey, fields)
                    continue
                expires = fields[4]
                if expires is not None and now >= expires:
                    continue
                bare = skey[cut:]
                if (brand is None or fields[1] == brand) and bare not in out:
                    out[bare] = make(fields)
        return out

    def forget_many(
        self,
        *,
        scope: Scope = "session",
        pattern: str,
        brand: str | None = None,
        include_unreadable: bool = False,
    ) -> int:
        """Delete every readable entry matching *pattern* (and *brand*); return how many.

        The count is of live entries only: an expired entry still held by the
        store (a ``ttl`` that ran out by this plugin's clock, the placeholder
        the memory tool ``forget`` leaves for a millisecond) is deleted too, as
        cleanup, but not counted -- every reader already saw it as absent.

        Only what was read is deleted: an entry that does not decrypt (written
        with another secret, tampered, an unbound envelope refused by
        ``accept_unbound=False``) is **kept**, logged once per key and counted in
        ``stats()["unreadable"]``, and one WARNING says how many were kept.
        With ``on_decrypt_error="raise"`` such an entry makes the call raise
        before anything is deleted.

        :param include_unreadable: delete unreadable entries too (erasure: the
            caller wants everything under the pattern gone, readable or not).
            They are included in the returned count (their deadline is
            unknown) and a WARNING says how many of it were unreadable.  Not
            allowed with *brand*: an unreadable entry's brand is unknown.
        :raises RememberDecryptionError: unreadable entries, ``on_decrypt_error="raise"``
            and not *include_unreadable* (nothing was deleted).
        """
        check_pattern(pattern)
        if brand is not None:
            check_brand(brand)
        if type(include_unreadable) is not bool:
            raise RememberInputTypeError(
                f"include_unreadable must be a bool; got {type(include_unreadable).__name__}"
            )
        if include_unreadable and brand is not None:
            raise RememberInputError(
                "include_unreadable=True cannot be combined with brand: the brand of an "
                "entry that cannot be read is unknown"
            )
        ident = self._identity if self._identity is not None else current_identity()
        core = self._core
        ns, head = core.namespace(ident, scope)
        cut_doubled = len(core.prefix + head)
        doomed: builtins.list[str] = []  # live or unreadable: counted
        expired: builtins.list[str] = []  # deleted as cleanup, not counted
        unreadable = 0
        for batch in core.scan_pages(ns, pattern):
            now = core.clock()
            # Storage keys: 1.8.0's doubled-prefix keys are decoded as ours (as entries() does).
            skeys = [k if k.startswith(head) else head + k[cut_doubled:] for k, _ in batch]
            decoded = core.codec.decode_many([v for _, v in batch], ns, skeys)
            for (full, _), skey, fields in zip(batch, skeys, decoded, strict=True):
                if isinstance(fields, RememberDecryptionError):
                    unreadable += 1
                    if core.note_unreadable(skey, fields):
                        log.warning(
                            "remember: %s is unreadable (%s); forget_many %s it",
                            describe_key(core.prefix, skey),
                            fields.message,
                            "deletes" if include_unreadable else "keeps",
                        )
                    if include_unreadable:
                        doomed.append(full)
                elif brand is None or fields[1] == brand:
                    # Expired ones go too (they are ours and readable), uncounted.
                    gone = fields[4] is not None and now >= fields[4]
                    (expired if gone else doomed).append(full)
        if unreadable and not include_unreadable and core.on_decrypt_error == "raise":
            raise RememberDecryptionError(
                f"forget_many found {unreadable} unreadable entries in {scope} scope and "
                "deleted nothing (include_unreadable=True deletes them too)"
            )
        # Between the read and the delete another writer may replace an entry; the
        # store protocol has no compare-and-delete, so that window (one round trip)
        # remains.  What is never deleted is an entry this call read as unreadable.
        deleted = sum(
            core.store.delete(*doomed[i : i + _BATCH]) for i in range(0, len(doomed), _BATCH)
        )
        for i in range(0, len(expired), _BATCH):
            core.store.delete(*expired[i : i + _BATCH])
        if unreadable:
            log.warning(
                "remember: forget_many in %s scope %s %d unreadable entries%s",
                scope,
                "deleted" if include_unreadable else "kept",
                unreadable,
                "" if include_unreadable else " (include_unreadable=True deletes them)",
            )
        return deleted

    # -- presentation -------------------------------------------------------------------

    def __repr__(self) -> str:
        who = "context" if self._identity is None else repr(self._identity)
        return f"RememberAccessor(identity={who}, prefix={self._core.prefix!r})"

    def table_rows(
        self,
        scopes: Iterable[Scope] = ("session", "user", "tool", "global"),
        *,
        values: bool = False,
    ) -> builtins.list[dict[str, Any]]:
        """One row per entry visible to this identity (scopes it cannot use are skipped)."""
        rows: builtins.list[dict[str, Any]] = []
        for scope in scopes:
            try:
                found = self.entries(scope=scope)
            except RememberIdentityError:
                continue  # a scope this identity cannot use is simply not shown
            for key in sorted(found):
                e = found[key]
                row: dict[str, Any] = {
                    "key": key,
                    "scope": scope,
                    "brand": e.brand,
                    "expires_at": e.expires_at,
                }
                if values:
                    row["value"] = e.value
                rows.append(row)
        return rows

    def _repr_html_(self) -> str:
        """Jupyter: an HTML table of keys, scopes, brands and expiry -- never values."""
        rows = self.table_rows()
        now = self._core.clock()
        body = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                html.escape(r["key"]),
                html.escape(r["scope"]),
                html.escape(r["brand"] or ""),
                "never"
                if r["expires_at"] is None
                else f"in {max(0, -((now - r['expires_at']) // 1000))} s",  # rounded up
            )
            for r in rows
        ) or '<tr><td colspan="4">(no entries)</td></tr>'
        return (
            f"<table><caption>{html.escape(repr(self))}</caption>"
            "<thead><tr><th>key</th><th>scope</th><th>brand</th><th>expires</th></tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )

