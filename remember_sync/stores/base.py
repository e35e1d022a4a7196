"""The store protocol: opaque strings under full keys.

A store knows nothing of scopes, identities, JSON or encryption.  Keys arrive
complete (prefix included) and the store never adds a prefix of its own.
Policy -- TTL rules, expiry checks, identity, serialisation, crypto -- lives
once, in :mod:`remember_sync.accessor`.

Every method either does what it says or raises
:class:`~remember_sync.errors.RememberStoreError` (wrapping the driver's error
with ``raise ... from``).  There is no base class with default methods that
silently succeed: a store implements all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from .._text import TEXT_ERRORS, to_bytes, to_text
from ..errors import (
    RememberConfigurationError,
    RememberInputError,
    RememberInputTypeError,
    RememberQuotaError,
)

__all__ = [
    "CAS_LUA_SCRIPT",
    "SCAN_ITEMS_LUA_SCRIPT",
    "TEXT_ERRORS",
    "CasMarkers",
    "IndexOf",
    "ItemScanner",
    "ManifestCommit",
    "MarkerOf",
    "NamespaceIndex",
    "PrunesIndexes",
    "OwnedWrite",
    "OwnedWrites",
    "Quota",
    "Store",
    "check_key",
    "check_keys",
    "check_owned",
    "check_scan",
    "check_write",
    "merged_index_of",
    "quota_exceeded",
    "to_bytes",
    "to_text",
]

#: Maps a full key to the name of its listing index, or ``None`` for a key no index holds.
IndexOf = Callable[[str], str | None]
#: ``marker_of(key, hash_tag)``: the compare-and-set marker key of an entry (``None``: none).
MarkerOf = Callable[[str, str], str | None]
#: One owner's quota: (entries, bytes), ``None`` for no bound on that count.
Quota = tuple[int | None, int | None]


# -- the contract's argument checks: every store calls them first, before any I/O -------------
# Text (keys, values, patterns) is a str a store can carry as UTF-8: any text, and the lone
# surrogates U+DC80..U+DCFF standing for bytes that are not UTF-8 (to_text).  The common case
# (an ASCII str: every encrypted entry, every encoded key) costs a type test and an O(1) isascii.


def _check_text(text: object, name: str) -> None:
    if not isinstance(text, str):
        raise RememberInputTypeError(f"{name} must be a str; got {type(text).__name__}")
    try:
        text.encode("utf-8", TEXT_ERRORS)
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "backslashreplace")[:60]
        raise RememberInputError(f"{name} holds a lone surrogate: {shown!r}") from None


def check_key(key: object) -> None:
    """Refuse a key that is not text a store can carry."""
    if not (isinstance(key, str) and key.isascii()):
        _check_text(key, "key")


def check_keys(keys: Sequence[object]) -> None:
    """Refuse ``keys`` unless it is a sequence of keys (a single ``str`` is not)."""
    kind = type(keys)  # list or tuple, as a rule: no isinstance against an ABC
    if kind is not list and kind is not tuple and (
        kind in (str, bytes) or not isinstance(keys, Sequence)
    ):
        raise RememberInputTypeError(f"keys must be a sequence of str; got {kind.__name__}")
    try:
        if all(map(str.isascii, keys)):  # type: ignore[arg-type]
            return
    except TypeError:
        pass  # an item that is not a str: named below
    for key in keys:
        _check_text(key, "key")


def check_write(key: object, value: object, ttl_ms: object, expected: object = "") -> None:
    """Refuse the arguments of ``set`` (``compare_and_set``: with *expected*); ``ttl_ms`` >= 1."""
    if (
        isinstance(key, str) and key.isascii() and isinstance(value, str) and value.isascii()
        and isinstance(expected, str) and expected.isascii()
        and (ttl_ms is None or (type(ttl_ms) is int and ttl_ms > 0))
    ):  # fmt: skip
        return
    for text, name in ((key, "key"), (value, "value"), (expected, "expected")):
        _check_text(text, name)
    whole = isinstance(ttl_ms, int) and not isinstance(ttl_ms, bool)
    if ttl_ms is not None and not (whole and ttl_ms >= 1):  # type: ignore[operator]
        raise RememberInputError(f"ttl_ms must be a whole number >= 1, or None; got {ttl_ms!r}")


def check_scan(pattern: object, count: object) -> None:
    """Refuse the arguments of ``scan``, ``scan_pages`` and ``index_pages``."""
    if not (isinstance(pattern, str) and pattern.isascii()):
        _check_text(pattern, "pattern")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise RememberInputError(f"count must be a positive int; got {count!r}")


def _same(f: IndexOf, g: IndexOf) -> bool:
    """Whether *f* and *g* are the same function (or equal ``functools.partial`` objects)."""
    if isinstance(f, functools.partial) and isinstance(g, functools.partial):
        return (f.func, f.args, f.keywords) == (g.func, g.args, g.keywords)
    return f is g


class _AnyIndexOf:
    """Several plugins (key prefixes) on one store: the first index any of them names."""

    def __init__(self, parts: tuple[IndexOf, ...]) -> None:
        self.parts = parts

    def __call__(self, key: str) -> str | None:
        return next((i for part in self.parts if (i := part(key)) is not None), None)


def merged_index_of(current: IndexOf | None, index_of: IndexOf) -> IndexOf:
    """What ``use_index(index_of)`` keeps: *index_of* beside *current*, not instead of it
    (a second plugin with another prefix on the same store must not stop the first
    one's writes from being indexed); the same function twice is kept once.
    """
    if not callable(index_of):
        raise RememberConfigurationError("index_of must be a callable")
    parts = () if current is None else getattr(current, "parts", (current,))
    if any(_same(part, index_of) for part in parts):
        return current  # type: ignore[return-value]
    return _AnyIndexOf((*parts, index_of)) if parts else index_of


def group_by_index(
    keys: Sequence[str], index_of: IndexOf
) -> tuple[dict[str, list[str]], list[str]]:
    """*keys* (each once) grouped by index name, and those no index holds."""
    groups: dict[str, list[str]] = {}
    plain: list[str] = []
    for key in dict.fromkeys(keys):
        index = index_of(key)
        (plain if index is None else groups.setdefault(index, [])).append(key)
    return groups, plain


#: Lua: SET KEYS[1] to ARGV[2], expiring in ARGV[3] ms unless that is "" (a SET without
#: PX clears any previous TTL, matching Store.set).  Shared by the scripts that end so.
SET_KEY_LUA = """\
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
"""

#: Compare-and-set for Redis-protocol stores. KEYS[1] = key; ARGV = expected, new
#: value, PX milliseconds or "" for none.  A missing key reads as false, which never
#: equals a string, so CAS cannot create a key: an update racing a forget can never
#: resurrect it.  A SET without PX clears any previous TTL, matching Store.set.
CAS_LUA_SCRIPT = """\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
""" + SET_KEY_LUA + "return 1\n"

#: One page of :meth:`ItemScanner.scan_pages` for Redis-protocol stores, in one round
#: trip.  ARGV = cursor, pattern, count.  Returns ``{next cursor, keys, values}`` with
#: the values as MGET gives them (nil for a key that vanished or holds another type).
#: Read-only, but it finds its keys instead of declaring them: servers that insist on
#: declared keys (Redis Cluster, some managed services) refuse it, and the store then
#: reads the page with SCAN and MGET.
SCAN_ITEMS_LUA_SCRIPT = """\
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local keys, values = page[2], {}
if #keys > 0 and #keys <= 1000 then
  values = redis.call('MGET', unpack(keys))
else
  for i = 1, #keys, 1000 do
    local part = redis.call('MGET', unpack(keys, i, math.min(i + 999, #keys)))
    for j = 1, #part do values[#values + 1] = part[j] end
  end
end
return {page[1], keys, values}
"""


@runtime_checkable
class Store(Protocol):
    """What the accessor, the purge and the CLI need from a key/value store.

    ``ttl_ms`` is a time-to-live in whole milliseconds (``> 0``) or ``None``
    for no expiry.  ``pattern`` is a Redis glob (``*``, ``?``, ``[...]``,
    ``\\`` escapes) over full keys.
    """

    def get(self, key: str) -> str | None:
        """Return the value stored under *key*, or ``None`` when absent or expired."""
        ...

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        """Return the values of *keys*, in order, ``None`` for each one absent."""
        ...

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        """Store *value* under *key*; return whether it was written.

        With ``only_if_absent`` nothing is written when the key exists (and
        ``False`` is returned).  Without ``ttl_ms`` any previous expiry is
        cleared.
        """
        ...

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        """Atomically replace *key*'s value with *value* if it currently equals *expected*.

        Returns ``False`` (writing nothing) when the key is absent or holds
        anything else.  ``ttl_ms`` is applied as in :meth:`set`.
        """
        ...

    def delete(self, *keys: str) -> int:
        """Delete *keys*; return how many existed."""
        ...

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        """Yield every key matching the glob *pattern*, each once.

        ``count`` is a hint for how many keys one round trip examines.
        """
        ...

    def close(self) -> None:
        """Release what the store created (never a client that was passed in)."""
        ...


@runtime_checkable
class ItemScanner(Protocol):
    """An optional capability: keys *and* values in one pass.

    A store that has it lets :meth:`~remember_sync.accessor.RememberAccessor.entries`
    (and ``list``) read a namespace without a second round trip per page; one
    without it is read by :meth:`Store.scan` then :meth:`Store.get_many`, with the
    same result.
    """

    def scan_pages(self, pattern: str, *, count: int = 1000) -> Iterator[list[tuple[str, str]]]:
        """Yield the ``(key, value)`` pairs of the keys matching the glob *pattern*.

        One list per page (what one round trip brought); over the whole walk
        every matching key comes once.  A key that expires or is deleted during
        the walk may be left out, as with :meth:`Store.scan` followed by
        :meth:`Store.get_many`.  ``count`` is the hint of :meth:`Store.scan`.
        """
        ...


@runtime_checkable
class NamespaceIndex(Protocol):
    """An optional capability: per-namespace listing indexes kept in step with writes.

    Once :meth:`use_index` is called, every ``set``, ``compare_and_set`` and
    ``delete`` of a key for which *index_of* names an index keeps that index
    in step, and :meth:`index_pages` reads a namespace without walking the
    database: its cost depends on the size of the index, not of the store.
    The store still knows nothing of scopes: an index is a name *index_of*
    gives it.
    """

    def use_index(self, index_of: IndexOf) -> bool:
        """Keep the indexes *index_of* names from now on.

        Returns whether the indexes are complete at once (an in-process store,
        which indexes what it already holds); ``False`` means entries written
        before (or by writers that do not keep the index) are only found after
        a reindex (:func:`remember_sync._ops.reindex.reindex`).
        """
        ...

    def index_pages(
        self, index: str, pattern: str, *, count: int = 1000
    ) -> Iterator[list[tuple[str, str]]]:
        """Yield the ``(key, value)`` pairs of the index's live keys matching glob *pattern*.

        Every key written (and not deleted) before the walk began is yielded
        once; keys whose entry is gone or expired are not.
        """
        ...

    def add_to_index(self, keys: Sequence[str]) -> int:
        """Put existing *keys* into their indexes (missing ones are skipped); return how many."""
        ...


@runtime_checkable
class CasMarkers(Protocol):
    """An optional capability: a resent compare-and-set is recognised, never applied twice.

    A store whose driver may send a write again after losing its reply keeps,
    beside each entry, a marker of the compare-and-sets that landed there
    (see ``docs/redis.rst``, "A lost reply").
    """

    def use_cas_markers(self, marker_of: MarkerOf) -> None:
        """Keep the markers *marker_of* names from now on."""
        ...


@runtime_checkable
class PrunesIndexes(Protocol):
    """An optional capability: a pass that settles listing indexes no write or read settles.

    A store whose index upkeep cannot be atomic (Redis Cluster) keeps members
    of deleted entries for a grace period, and never expires an index that
    once held an entry without a deadline; this pass drops what is gone and
    re-derives each index's expiry, without reading any entry's value.
    """

    def prune_indexes(self, pattern: str, *, count: int = 1000) -> int:
        """Settle every index key matching glob *pattern*; return how many members were dropped."""


def quota_exceeded(which: str, quota: Quota) -> RememberQuotaError:
    """The error of a write refused by *quota*; *which* is ``"entries"`` or ``"bytes"``."""
    entries, nbytes = quota
    if which == "entries":
        limit = f"its quota of {entries} entries"
    else:
        limit = f"its quota of {nbytes} bytes (keys and stored values)"
    return RememberQuotaError(
        f"this caller already holds {limit}, across all of its scopes; nothing was "
        "written. Forget entries it no longer needs, store smaller values, or give "
        "entries a TTL so they expire"
    )


@dataclass(frozen=True)
class ManifestCommit:
    """One atomic commit of verified mode (``docs/verified.rst``): the entries to write
    and the manifest that vouches for them, for a store's ``commit_manifest``.

    :attr manifest_key: the namespace's manifest key.
    :attr expected: the token of the stored manifest the writer computed from
        (``None`` when there was none).
    :attr manifest: the new sealed manifest.
    :attr manifest_ttl_ms: its ``PX`` in milliseconds, or ``None``.
    :attr writes: ``(key, value or None to delete, PX ms or None)``.
    """

    manifest_key: str
    expected: str | None
    manifest: str
    manifest_ttl_ms: int | None
    writes: Sequence[tuple[str, str | None, int | None]]


class OwnedWrite(NamedTuple):
    """One write charged to an owner (:meth:`OwnedWrites.write_owned`).

    :param key: the full key written.
    :param value: the string stored.
    :param owner: the opaque tag charged for it.
    :param group: the unit of fair eviction for a store that evicts (default:
        *owner*); stores that never evict ignore it.
    :param quota: the owner's (entries, bytes) bound (``None``: only charge it).
    :param ttl_ms: milliseconds to live (``None``: no expiry).
    :param only_if_absent: write only where no live value is stored.
    :param expected: compare-and-set: write only over exactly this value.
    :param index_key: the listing index key of *key*'s namespace, as the writer
        already knows it (``None``: a store that keeps indexes finds it from *key*).
        Read only by stores whose class sets ``uses_index_key = True`` (they would
        otherwise parse *key* on every write); the core fills it in only for them.
    """

    key: str
    value: str
    owner: str
    group: str | None = None
    quota: Quota | None = None
    ttl_ms: int | None = None
    only_if_absent: bool = False
    expected: str | None = None
    index_key: str | None = None


def check_owned(write: OwnedWrite) -> None:
    """Refuse the arguments of ``write_owned`` as :func:`check_write` those of ``set``."""
    key, value, owner, _, _, ttl_ms, _, expected, index_key = write
    check_write(key, value, ttl_ms, "" if expected is None else expected)
    if not (isinstance(owner, str) and owner.isascii()):
        check_key(owner)
    if index_key is not None and not (isinstance(index_key, str) and index_key.isascii()):
        check_key(index_key)


@runtime_checkable
class OwnedWrites(Protocol):
    """An optional capability: writes charged to an *owner*, with a quota per owner.

    The owner is an opaque tag (the core passes a keyed hash of the principal;
    a store never sees an identity).  An owner's usage counts its live
    entries and their bytes (UTF-8 key plus stored value); entries that
    expire, are deleted or are overwritten smaller stop counting or count
    less.  A write over the quota raises
    :class:`~remember_sync.errors.RememberQuotaError` and writes nothing,
    atomically with the write itself: concurrent writers of one owner never
    take it past its quota.  Nothing is ever evicted to make room.  A plain
    :meth:`Store.set` or compare-and-set over an owned entry (``rotate``
    re-sealing it in place) leaves it charged to its owner: the memory store
    charges its new size, a ledger in Redis keeps the size last charged (a
    re-sealed envelope has the same length).
    """

    def write_owned(self, write: OwnedWrite) -> bool:
        """:meth:`Store.set` (or, with ``expected``, :meth:`Store.compare_and_set`) of
        *write*, charged to its owner; whether it was written.

        :raises RememberQuotaError: the write would take the owner over its quota.
        """
        ...

    def delete_owned(self, owner: str, *keys: str) -> int:
        """:meth:`Store.delete` of *owner*'s *keys*, refunding *owner*; how many existed."""
        ...

    def owner_usage(self, owner: str) -> tuple[int, int]:
        """The live entries and bytes charged to *owner*."""
        ...
