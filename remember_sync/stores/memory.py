"""In-process store: one lock, a dict, and a heap of deadlines.

Expiry is lazy on read plus an amortised sweep of the deadline heap on writes,
so there is no timer per key.

Bounds.  Optional ``max_entries`` (keys held) and ``max_bytes`` (stored bytes:
the UTF-8 length of key and value plus :data:`ENTRY_OVERHEAD_BYTES` per entry,
an estimate of the interpreter's own bookkeeping, so that many tiny entries
are bounded too) keep a runaway or hostile caller from exhausting the
process's memory.  A write that would cross a bound first drops every expired
entry, then evicts -- fairly: the store groups keys into *namespaces* with a
function given by its owner (the plugin passes
:func:`remember_sync._keys.storage_namespace`: one namespace per scope and
identity; the store itself knows nothing of scopes), and evicts from the
namespace holding the most bytes, there the entry with the earliest deadline
first, then the least recently used one.  Writes made with
:meth:`MemoryStore.write_owned` are grouped by the *group* they name instead
(the plugin's core names the principal, as an opaque tag): a caller opening
many sessions is still one group.  So a caller filling the store with
long-lived entries evicts its own entries, never every other caller's.
Without a namespace function the whole store is one namespace.  An entry
larger than ``max_bytes`` on its own is refused (nothing written).

Concurrency: writers (and multi-key reads) take the lock; a single-key
:meth:`MemoryStore.get` does not.  Its reads are single C-level dict
operations, atomic under the GIL.  Keeping work off the lock matters: when the
interpreter switches threads while one holds the lock, every other thread that
reaches the lock blocks and hands the GIL on, a convoy that on a busy machine
cut throughput with 8 threads to a third.  So an unbounded store's write holds
the lock only for the dict assignment (and a sweep when one is due); the LRU
bump and the deadline's way into the heap (through a deque, drained by the
next sweep) happen after it.  Because readers may run at any moment, nothing
iterates the dict directly: iteration goes over a snapshot taken by one C call
(``list(d.items())``).

Signal handlers.  A Python signal handler runs in the main thread between two
bytecodes, possibly while that thread holds the lock half-way through an
update.  Waiting for the lock there would hang for ever, and entering would let
the handler see and change a half-made update.  So a call made while its own
thread already holds the lock (:meth:`_StoreLock.held_here`) never waits: a
plain ``set`` or ``delete`` is queued and applied by the holder before it lets
go (reads, from the handler or any thread, see queued writes at once); reads
use the data as it stands without touching it; a conditional write
(``only_if_absent``, ``compare_and_set``), whose answer depends on the
interrupted update, raises :class:`~remember_sync.errors.RememberConflictError`
with nothing written.

Listing index.  After :meth:`MemoryStore.use_index` the store also groups its
keys by index name (one ``dict`` per namespace, kept under the lock by every
write, delete, expiry and eviction), so :meth:`MemoryStore.index_pages` reads a
namespace in time proportional to that namespace, not to the store.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence

from .. import _metrics
from .._clock import Clock, system_clock
from .._fork import after_fork_in_child
from .._glob import glob_matcher
from ..errors import RememberConfigurationError, RememberConflictError, RememberInputError
from .base import (
    IndexOf,
    OwnedWrite,
    Quota,
    check_key,
    check_keys,
    check_owned,
    check_scan,
    check_write,
    merged_index_of,
    quota_exceeded,
)

__all__ = ["ENTRY_OVERHEAD_BYTES", "MemoryStore"]

log = logging.getLogger("remember_sync")


#: A deadline later than any clock reading.
_NEVER = 2**63
#: Deadlines an unbounded store collects before a write moves them into the heap.
_PENDING_MAX = 256
#: Bytes charged per entry on top of its key and value under ``max_bytes``: an
#: estimate of what CPython spends on one entry of a bounded store.  Measured with
#: tracemalloc on 64-bit CPython 3.11 (100,000 entries, half with a TTL): about 375
#: bytes of tuples, dict slots and heap items, plus two str headers of 49 bytes.
ENTRY_OVERHEAD_BYTES = 512


def _utf8_len(text: str) -> int:
    # isascii() is O(1) on CPython (a flag of the string), and every encrypted entry is ASCII.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


#: A key with no queued write (see :class:`_StoreLock`).
_NOT_QUEUED = object()
#: A queued write: (value, ttl_ms, clock reading when it was made); ``None``: a delete.
_Queued = tuple[str, int | None, int] | None


class _StoreLock:
    """The store's lock; a call by the thread already holding it is queued, never waited for.

    See "Signal handlers" in the module docs.  Leaving the lock applies the
    queue first (the holder's own handler may queue more meanwhile: it is
    drained until empty, after letting go too).
    """

    def __init__(self, apply_queued: Callable[[], None]) -> None:
        self._lock = threading.RLock()
        self._apply_queued = apply_queued
        #: Keys written while the lock was held by their own thread, in order.
        self.queue: deque[str] = deque()

    def held_here(self) -> bool:
        """Whether the calling thread holds the lock (one C call: exact at any bytecode)."""
        return bool(self._lock._is_owned())  # type: ignore[attr-defined]

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        while True:
            try:
                self._apply_queued()
            finally:
                self._lock.release()
            if not self.queue:
                return
            self._lock.acquire()  # a handler queued between the last apply and the release


class _Space:
    """One namespace of a bounded store: its bytes, its keys in LRU order, its deadlines."""

    __slots__ = ("name", "nbytes", "lru", "heap", "kept")

    def __init__(self, name: str) -> None:
        self.name = name
        self.nbytes = 0
        # key -> bytes charged for it; order = least recently used first.
        self.lru: OrderedDict[str, int] = OrderedDict()
        self.heap: list[tuple[int, str]] = []
        # Records written with write_kept: evicted only once lru is empty, oldest first.
        self.kept: OrderedDict[str, int] = OrderedDict()


class MemoryStore:
    """A thread-safe in-memory :class:`~remember_sync.stores.base.Store`.

    :param max_entries: evict when more than this many keys would be held
        (``None``: no bound on the count).
    :param max_bytes: evict when the stored bytes -- UTF-8 key and value plus
        :data:`ENTRY_OVERHEAD_BYTES` per entry -- would exceed this
        (``None``: no bound on the size).
    :param namespace_of: maps a key to its namespace, the unit of fair
        eviction (see the module docs); ``None``: one namespace.  Called with
        every key written to a bounded store; it must be fast and pure.
    :param clock: returns epoch milliseconds (``None``: the system clock); inject one in tests.
    :raises RememberConfigurationError: a bound that is not a positive int.
    """

    def __init__(
        self,
        *,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        namespace_of: Callable[[str], str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        for name, bound in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or bound < 1
            ):
                raise RememberConfigurationError(
                    f"{name} must be a positive int or None; got {bound!r}"
                )
        if namespace_of is not None and not callable(namespace_of):
            raise RememberConfigurationError("namespace_of must be a callable or None")
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bounded = max_entries is not None or max_bytes is not None
        self._namespace_of = namespace_of
        # Bounded stores only: the namespaces, each key's namespace, the bytes held,
        # and a lazy max-heap of (-bytes, namespace) (see _largest_space).
        self._spaces: dict[str, _Space] = {}
        self._space_of: dict[str, _Space] = {}
        self._bytes = 0
        self._by_size: list[tuple[int, str]] = []
        self._clock = clock or system_clock
        self._lock = _StoreLock(self._apply_queued)
        # key -> its latest queued write (see _StoreLock); read before the data.
        self._queued: dict[str, _Queued] = {}
        # key -> (value, deadline_ms or None); order = least recently used first.
        self._data: OrderedDict[str, tuple[str, int | None]] = OrderedDict()
        self._heap: list[tuple[int, str]] = []
        # Deadlines written by unbounded sets, appended outside the lock (deque.append
        # is atomic) and moved into the heap by the next sweep; the earliest of them,
        # so a set knows without the lock whether a sweep is due.
        self._pending: deque[tuple[int, str]] = deque()
        self._pending_min = _NEVER
        self.evictions = 0
        # The listing index (use_index): index name -> its keys, and key -> index name.
        self._index_of: IndexOf | None = None
        self._groups: dict[str, dict[str, None]] = {}
        self._group_of: dict[str, str] = {}
        # Owned writes (write_owned): owner -> [entries, bytes], and key -> (owner, bytes).
        self._owners: dict[str, list[int]] = {}
        self._owner_of: dict[str, tuple[str, int]] = {}
        after_fork_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock at the fork (see _fork):
        # without a new one the child hangs on its first operation.  The child's copy
        # of the data is NOT guaranteed consistent: if that thread was half-way through
        # an update, the child sees the half that was done (e.g. a key in the table whose
        # bytes are not yet counted, or an expiry not yet in the heap).  Every entry is
        # still a whole (value, deadline) pair, but the size accounting of a bounded store
        # may be off by that one write, and a lost heap entry only delays the sweep of an
        # expired key (reads check the deadline themselves).  The store is per process
        # anyway: the child works on a copy the parent never sees.  Writes a signal
        # handler queued are kept: the child's next write applies them.
        queue = self._lock.queue
        self._lock = _StoreLock(self._apply_queued)
        self._lock.queue = queue

    # -- internals (call with the lock held) ---------------------------------

    def _live(self, key: str, now: int) -> tuple[str, int | None] | None:
        item = self._data.get(key)
        if item is None:
            return None
        deadline = item[1]
        if deadline is not None and now >= deadline:
            self._remove(key)
            return None
        return item

    def _view(self, key: str, now: int) -> str | None:
        """The live value of *key* as a reader sees it now, queued writes first; changes nothing."""
        queued: object = self._queued.get(key, _NOT_QUEUED) if self._queued else _NOT_QUEUED
        if queued is not _NOT_QUEUED:
            if not isinstance(queued, tuple):
                return None  # a queued delete
            value, ttl_ms, then = queued
            return str(value) if ttl_ms is None or now < then + ttl_ms else None
        item = self._data.get(key)
        if item is None or (item[1] is not None and now >= item[1]):
            return None
        return item[0]

    def _queue(self, key: str, write: _Queued) -> None:
        """Queue a write made while this thread holds the lock (see _StoreLock)."""
        if write is not None and self._max_bytes is not None:
            self._check_charge(key, write[0])  # refused now, not when applied
        self._queued[key] = write
        self._lock.queue.append(key)

    def _apply_queued(self) -> None:
        """Apply the queued writes, oldest first (lock held, by the thread that queued them)."""
        queue = self._lock.queue
        while queue:
            key = queue.popleft()
            write: object = self._queued.get(key, _NOT_QUEUED)
            if write is _NOT_QUEUED:
                continue  # queued twice: applied with the first
            if isinstance(write, tuple):
                value, ttl_ms, then = write
                self._put(key, value, ttl_ms, then)
            elif key in self._data:
                self._remove(key)
            if self._queued.get(key, _NOT_QUEUED) is write:
                del self._queued[key]

    def _busy(self) -> RememberConflictError:
        return RememberConflictError(
            "the memory store is in the middle of a write that this call (a signal handler) "
            "interrupted, and a conditional write cannot be decided before it ends; "
            "nothing was written"
        )

    def _check_charge(self, key: str, value: str) -> int:
        charge = _utf8_len(key) + _utf8_len(value) + ENTRY_OVERHEAD_BYTES
        max_bytes = self._max_bytes
        if max_bytes is not None and charge > max_bytes:
            raise RememberInputError(
                f"entry of {charge} bytes (key, value and {ENTRY_OVERHEAD_BYTES} bytes "
                f"overhead) is larger than the memory store's max_bytes ({max_bytes})"
            )
        return charge

    def _remove(self, key: str) -> None:
        del self._data[key]
        if self._index_of is not None:
            self._ungroup(key)
        if self._owner_of:
            self._disown(key)
        if self._bounded:
            space = self._space_of.pop(key)
            charge = space.lru.pop(key, None)
            if charge is None:
                charge = space.kept.pop(key)
            space.nbytes -= charge
            self._bytes -= charge
            if not space.lru and not space.kept:
                del self._spaces[space.name]

    def _disown(self, key: str) -> None:
        """Refund *key*'s owner, if an owned write charged one (lock held)."""
        owned = self._owner_of.pop(key, None)
        if owned is None:
            return
        owner, size = owned
        usage = self._owners[owner]
        usage[0] -= 1
        usage[1] -= size
        if not usage[0]:
            del self._owners[owner]

    def _over_quota(self, owner: str, key: str, size: int, quota: Quota) -> str | None:
        """Which count of *quota* writing *size* bytes under *key* would exceed, if any."""
        entries, nbytes = self._owners.get(owner, (0, 0))
        old = self._owner_of.get(key)
        if old is not None and old[0] == owner:
            entries -= 1
            nbytes -= old[1]
        if quota[0] is not None and entries + 1 > quota[0]:
            return "entries"
        if quota[1] is not None and nbytes + size > quota[1]:
            return "bytes"
        return None

    def _group(self, key: str) -> None:
        """Put *key* into its index group (lock held, index on)."""
        assert self._index_of is not None
        if key in self._group_of:
            return
        name = self._index_of(key)
        if name is None:
            return
        group = self._groups.get(name)
        if group is None:
            group = self._groups[name] = {}
        group[key] = None
        self._group_of[key] = name

    def _ungroup(self, key: str) -> None:
        name = self._group_of.pop(key, None)
        if name is None:
            return
        group = self._groups[name]
        del group[key]
        if not group:
            del self._groups[name]

    def _sweep(self, now: int) -> None:
        heap = self._heap
        pending = self._pending
        self._pending_min = _NEVER
        while pending:
            heapq.heappush(heap, pending.popleft())
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            item = self._data.get(key)
            if item is not None and item[1] == deadline:
                self._remove(key)
        # Overwrites leave stale heap items behind; rebuild before they dominate.
        if len(heap) > 64 and len(heap) > 2 * len(self._data):
            self._heap = [(d, k) for k, (_, d) in list(self._data.items()) if d is not None]
            heapq.heapify(self._heap)

    def _largest_space(self) -> _Space:
        # A lazy max-heap: every write pushes its namespace's new size, shrinking pushes
        # nothing, so each namespace has an item at least as large as its size.  The top
        # item is exact for the largest; a stale one is replaced by the exact size.
        heap = self._by_size
        while True:
            negative, name = heap[0]
            space = self._spaces.get(name)
            if space is not None and space.nbytes == -negative:
                return space
            heapq.heappop(heap)
            if space is not None:
                heapq.heappush(heap, (-space.nbytes, name))

    def _evict_one(self) -> None:
        space = self._largest_space()
        heap = space.heap
        victim = None
        while heap:
            deadline, key = heapq.heappop(heap)
            item = self._data.get(key)
            if item is not None and item[1] == deadline and key in space.lru:
                victim = key
                break
        if victim is None:
            victim = next(iter(space.lru or space.kept))
            log.debug("remember: memory store full, evicted the least recently used entry")
        else:
            log.debug("remember: memory store full, evicted the entry expiring first")
        self._remove(victim)
        self.evictions += 1
        _metrics.EVICTIONS.add("memory")
        if space.lru or space.kept:
            heapq.heappush(self._by_size, (-space.nbytes, space.name))

    def _put(
        self, key: str, value: str, ttl_ms: int | None, now: int, group: str | None = None,
        kept: bool = False,
    ) -> None:
        """Write with the lock held; under a bound, make room fairly first.

        *group* is the unit of fair eviction (default: the key's namespace); a
        *kept* key is evicted only once its group holds nothing else.
        """
        deadline = None if ttl_ms is None else now + ttl_ms
        if self._index_of is not None:
            self._group(key)
        if not self._bounded:
            self._data[key] = (value, deadline)
            self._data.move_to_end(key)
            if deadline is not None:
                heapq.heappush(self._heap, (deadline, key))
            return
        if group is not None:
            name = group
        else:
            name = "" if self._namespace_of is None else self._namespace_of(key)
        charge = self._check_charge(key, value)
        max_bytes = self._max_bytes
        if key in self._data:
            self._remove(key)  # an overwrite: its old bytes no longer count
        max_entries = self._max_entries
        while self._data and (
            (max_entries is not None and len(self._data) >= max_entries)
            or (max_bytes is not None and self._bytes + charge > max_bytes)
        ):
            self._evict_one()
        space = self._spaces.get(name)
        if space is None:
            space = self._spaces[name] = _Space(name)
        self._data[key] = (value, deadline)  # a new key: at the LRU end already
        if self._index_of is not None:
            self._group(key)
        self._space_of[key] = space
        (space.kept if kept else space.lru)[key] = charge
        space.nbytes += charge
        self._bytes += charge
        by_size = self._by_size
        heapq.heappush(by_size, (-space.nbytes, name))
        if len(by_size) > 64 and len(by_size) > 2 * len(self._spaces):
            self._by_size = [(-sp.nbytes, n) for n, sp in self._spaces.items()]
            heapq.heapify(self._by_size)
        if deadline is not None:
            heapq.heappush(self._heap, (deadline, key))
            if kept:
                return  # never an eviction candidate by deadline
            heap = space.heap
            heapq.heappush(heap, (deadline, key))
            if len(heap) > 64 and len(heap) > 2 * len(space.lru):
                data = self._data
                space.heap = [(d, k) for k in space.lru if (d := data[k][1]) is not None]
                heapq.heapify(space.heap)

    # -- the Store protocol -----------------------------------------------------

    def get(self, key: str) -> str | None:
        check_key(key)
        if self._queued:  # writes a signal handler queued (see _StoreLock)
            return self._view(key, self._clock())
        # No lock (see the module docs): one atomic read, then one atomic LRU move.
        item = self._data.get(key)
        if item is None:
            return None
        deadline = item[1]
        if deadline is not None and (now := self._clock()) >= deadline:  # no deadline: no clock
            if not self._lock.held_here():  # else a handler: the holder's next sweep drops it
                with self._lock:
                    self._live(key, now)  # re-read under the lock: removes it if still expired
            return None
        try:
            self._data.move_to_end(key)
            if self._bounded:
                # A missing key raises KeyError (no space), like a deleted one.
                self._space_of[key].lru.move_to_end(key)
        except KeyError:
            pass  # deleted since the read, which still happened before the delete
        return item[0]

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        check_keys(keys)
        if self._lock.held_here():
            now = self._clock()
            return [self._view(key, now) for key in keys]
        with self._lock:
            now = self._clock()
            out: list[str | None] = []
            for key in keys:
                item = self._live(key, now)
                out.append(None if item is None else item[0])
            return out

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        check_write(key, value, ttl_ms)
        now = self._clock()
        if self._lock.held_here():
            if only_if_absent:
                raise self._busy()
            self._queue(key, (value, ttl_ms, now))
            return True
        if self._owner_of and key in self._owner_of:
            return self._rewrite_owned(key, value, ttl_ms, only_if_absent=only_if_absent)
        if self._bounded:
            # Bounded: eviction needs the heap exact, so everything under the lock.
            with self._lock:
                self._sweep(now)
                if only_if_absent and self._live(key, now) is not None:
                    return False
                self._put(key, value, ttl_ms, now)
                return True
        # Unbounded: work is done before and after the lock so that, in the usual
        # case, no call runs while it is held.  The interpreter switches threads only
        # at calls and loops, and a switch while the lock is held makes every other
        # writer queue behind a descheduled holder (see the module docs).
        deadline = None if ttl_ms is None else now + ttl_ms
        data = self._data
        heap = self._heap
        try:
            due = len(self._pending) >= _PENDING_MAX or self._pending_min <= now or (
                bool(heap) and heap[0][0] <= now
            )
        except IndexError:  # the heap emptied while we looked
            due = True
        with self._lock:
            if due:
                self._sweep(now)
            if only_if_absent and self._live(key, now) is not None:
                return False
            data[key] = (value, deadline)
            if self._index_of is not None and key not in self._group_of:
                self._group(key)
        # After the lock: the LRU bump (without a bound nothing is evicted by recency,
        # so its timing changes nothing) and the deadline, for the next sweep.
        try:
            data.move_to_end(key)
        except KeyError:
            pass  # deleted since: the delete came after this write
        if deadline is not None:
            self._pending.append((deadline, key))
            if deadline < self._pending_min:
                self._pending_min = deadline
        return True

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        check_write(key, value, ttl_ms, expected)
        if self._lock.held_here():
            raise self._busy()
        if self._owner_of and key in self._owner_of:
            return self._rewrite_owned(key, value, ttl_ms, expected=expected)
        with self._lock:
            now = self._clock()
            item = self._live(key, now)
            if item is None or item[0] != expected:
                return False
            self._put(key, value, ttl_ms, now)
            return True

    def delete(self, *keys: str) -> int:
        check_keys(keys)
        if self._lock.held_here():
            now = self._clock()
            removed = 0
            for key in keys:
                removed += self._view(key, now) is not None
                self._queue(key, None)
            return removed
        with self._lock:
            now = self._clock()
            removed = 0
            for key in keys:
                if self._live(key, now) is not None:
                    self._remove(key)
                    removed += 1
            return removed

    # -- owned writes (OwnedWrites) ----------------------------------------------------

    def write_owned(self, write: OwnedWrite) -> bool:
        """:meth:`set` / :meth:`compare_and_set` charged to its owner (see
        :class:`~remember_sync.stores.base.OwnedWrites`).

        A bounded store evicts by ``group`` (default: the owner), not by namespace:
        one principal opening many sessions is still one unit of fair eviction.
        The quota check, the write and the charge happen under the lock; a
        write over the quota first drops every expired entry, then is refused.
        """
        check_owned(write)
        key, value, owner, group, quota, ttl_ms, only_if_absent, expected, _ = write
        if key.isascii() and value.isascii():  # every encrypted entry (see _utf8_len)
            size = len(key) + len(value)
        else:
            size = _utf8_len(key) + _utf8_len(value)
        if self._lock.held_here():
            # A signal handler interrupted this thread's own call (see _StoreLock): a
            # plain write is queued, uncharged; a quota or a condition cannot be decided
            # in the middle of another write, so it is refused with nothing written.
            if expected is None and not only_if_absent and quota is None:
                return self.set(key, value, ttl_ms=ttl_ms)
            raise self._busy()
        now = self._clock()
        with self._lock:
            data = self._data
            heap = self._heap
            # A bounded store sweeps on every write (as set does); an unbounded one when a
            # deadline is due or many are pending (see set).
            if self._bounded or len(self._pending) >= _PENDING_MAX or self._pending_min <= now or (
                heap and heap[0][0] <= now
            ):
                self._sweep(now)
            item = data.get(key)
            if item is not None and item[1] is not None and now >= item[1]:
                self._remove(key)
                item = None
            if expected is not None:
                if item is None or item[0] != expected:
                    return False
            elif only_if_absent and item is not None:
                return False
            owner_of = self._owner_of
            if quota is not None:
                usage = self._owners.get(owner)
                entries, nbytes = (0, 0) if usage is None else usage
                old = owner_of.get(key)
                if old is not None and old[0] == owner:
                    entries -= 1
                    nbytes -= old[1]
                limit_n, limit_b = quota
                if (limit_n is not None and entries >= limit_n) or (
                    limit_b is not None and nbytes + size > limit_b
                ):
                    self._sweep(now)  # expired entries no longer count
                    which = self._over_quota(owner, key, size, quota)
                    if which is not None:
                        raise quota_exceeded(which, quota)
            if self._bounded:
                self._put(key, value, ttl_ms, now, owner if group is None else group)
            else:
                # set's unbounded write, under the lock (the charge must be exact).
                deadline = None if ttl_ms is None else now + ttl_ms
                data[key] = (value, deadline)
                data.move_to_end(key)
                if self._index_of is not None and key not in self._group_of:
                    self._group(key)
                if deadline is not None:
                    self._pending.append((deadline, key))
                    if deadline < self._pending_min:
                        self._pending_min = deadline
            old = owner_of.get(key)  # an unbounded overwrite: nothing removed it
            if old is not None and old[0] == owner:
                if old[1] != size:
                    self._owners[owner][1] += size - old[1]
                    owner_of[key] = (owner, size)
                return True
            if old is not None:
                self._disown(key)
            usage = self._owners.get(owner)  # _put or _disown may have dropped it
            owner_of[key] = (owner, size)
            if usage is None:
                self._owners[owner] = [1, size]
            else:
                usage[0] += 1
                usage[1] += size
            return True

    def _rewrite_owned(
        self, key: str, value: str, ttl_ms: int | None, *, only_if_absent: bool = False,
        expected: str | None = None,
    ) -> bool:
        """A plain write over an owned entry (an operator's ``rotate`` re-sealing it in
        place): it stays its owner's, charged at its new size, in its eviction group.
        Nothing is refused: only :meth:`write_owned` with a quota is."""
        owned = self._owner_of.get(key)
        space = self._space_of.get(key)
        if owned is None:  # disowned since the caller looked: a plain write after all
            if expected is not None:
                return self.compare_and_set(key, expected, value, ttl_ms=ttl_ms)
            return self.set(key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)
        return self.write_owned(OwnedWrite(
            key, value, owned[0], group=None if space is None else space.name,
            ttl_ms=ttl_ms, only_if_absent=only_if_absent, expected=expected,
        ))  # fmt: skip

    def write_kept(
        self,
        key: str,
        value: str,
        *,
        group: str | None,
        ttl_ms: int | None = None,
        only_if_absent: bool = False,
        expected: str | None = None,
    ) -> bool:
        """:meth:`set` / :meth:`compare_and_set` of a record a bounded store keeps.

        The record counts toward the bounds, in *group* (default: its namespace),
        and is evicted only once that group holds nothing else (oldest record
        first): bookkeeping such as a session's owner record stays while its
        principal has entries, without letting anyone's records crowd out
        someone else's entries.  Unbounded, a plain write.
        """
        if not self._bounded:
            if expected is not None:
                return self.compare_and_set(key, expected, value, ttl_ms=ttl_ms)
            return self.set(key, value, ttl_ms=ttl_ms, only_if_absent=only_if_absent)
        check_write(key, value, ttl_ms, "" if expected is None else expected)
        if self._lock.held_here():
            raise self._busy()
        with self._lock:
            now = self._clock()
            self._sweep(now)
            item = self._live(key, now)
            if expected is not None:
                if item is None or item[0] != expected:
                    return False
            elif only_if_absent and item is not None:
                return False
            self._put(key, value, ttl_ms, now, group, kept=True)
            return True

    def delete_owned(self, owner: str, *keys: str) -> int:
        """:meth:`delete`: every key knows its owner here."""
        check_key(owner)
        return self.delete(*keys)

    def owner_usage(self, owner: str) -> tuple[int, int]:
        """The live entries and bytes charged to *owner* (expired ones dropped first)."""
        check_key(owner)
        with self._lock:
            self._sweep(self._clock())
            entries, nbytes = self._owners.get(owner, (0, 0))
            return entries, nbytes

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        check_scan(pattern, count)
        matches = glob_matcher(pattern)  # linear time, whatever the pattern
        if self._lock.held_here() or self._queued:
            now = self._clock()
            every = dict.fromkeys([*list(self._data), *list(self._queued)])
            return iter([k for k in every if matches(k) and self._view(k, now) is not None])
        with self._lock:
            now = self._clock()
            self._sweep(now)
            items = list(self._data.items())  # one C call: a consistent snapshot
        keys = [
            k
            for k, (_, deadline) in items
            if (deadline is None or now < deadline) and matches(k)
        ]
        return iter(keys)

    def scan_pages(self, pattern: str, *, count: int = 1000) -> Iterator[list[tuple[str, str]]]:
        """:meth:`scan` and :meth:`get_many` as one page (a read: it counts as a use for LRU)."""
        keys = list(self.scan(pattern, count=count))
        values = self.get_many(keys)
        page = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        return iter([page] if page else [])

    # -- the listing index (NamespaceIndex) ------------------------------------------

    def use_index(self, index_of: IndexOf) -> bool:
        """Group keys by ``index_of(key)`` from now on (what the store holds included).

        Returns ``True``: an in-process store's index is complete at once.
        """
        if self._lock.held_here():
            raise self._busy()
        with self._lock:
            self._index_of = merged_index_of(self._index_of, index_of)
            self._groups.clear()
            self._group_of.clear()
            for key in list(self._data):
                self._group(key)
        return True

    def index_pages(
        self, index: str, pattern: str, *, count: int = 1000
    ) -> Iterator[list[tuple[str, str]]]:
        """The live ``(key, value)`` pairs of *index* matching *pattern*, as one page.

        Costs the size of the namespace: the store never looks at other keys.
        A read, so it counts as a use for LRU (as :meth:`scan_pages`).
        """
        check_scan(pattern, count)
        check_key(index)
        matches = glob_matcher(pattern)
        if self._lock.held_here() or self._queued:
            # No grouping of queued keys yet: the namespace's keys from the whole view.
            keys = [k for k in self.scan(pattern, count=count) if self._index_name(k) == index]
            now = self._clock()
            view = [(k, self._view(k, now)) for k in keys]
            found = [(k, v) for k, v in view if v is not None]
            return iter([found] if found else [])
        with self._lock:
            now = self._clock()
            group = self._groups.get(index)
            if not group:
                return iter([])
            page: list[tuple[str, str]] = []
            for key in [k for k in group if matches(k)]:
                item = self._live(key, now)
                if item is not None:
                    page.append((key, item[0]))
                    self._touch(key)
        return iter([page] if page else [])

    def _index_name(self, key: str) -> str | None:
        return None if self._index_of is None else self._index_of(key)

    def _touch(self, key: str) -> None:
        self._data.move_to_end(key)
        if self._bounded:
            lru = self._space_of[key].lru
            if key in lru:  # else a kept record: no recency order
                lru.move_to_end(key)

    def add_to_index(self, keys: Sequence[str]) -> int:
        """Nothing to bring in: every key is grouped as it is written.  Returns how many are."""
        check_keys(keys)
        if self._lock.held_here():
            return sum(1 for k in keys if k in self._group_of or k in self._queued)
        with self._lock:
            return sum(1 for k in keys if k in self._group_of)

    def close(self) -> None:
        if self._lock.held_here():
            raise self._busy()
        with self._lock:
            self._queued.clear()
            self._lock.queue.clear()
            self._data.clear()
            self._heap.clear()
            self._pending.clear()
            self._spaces.clear()
            self._space_of.clear()
            self._by_size.clear()
            self._groups.clear()
            self._group_of.clear()
            self._owners.clear()
            self._owner_of.clear()
            self._bytes = 0

    @property
    def max_entries(self) -> int | None:
        """The bound on the number of entries (``None``: none)."""
        return self._max_entries

    @property
    def max_bytes(self) -> int | None:
        """The bound on the stored bytes (``None``: none)."""
        return self._max_bytes

    @property
    def stored_bytes(self) -> int:
        """Bytes a bounded store holds, as counted for ``max_bytes`` (0 when unbounded)."""
        return self._bytes

    def __len__(self) -> int:
        if self._lock.held_here() or self._queued:
            return sum(1 for _ in self.scan("*"))
        with self._lock:
            now = self._clock()
            self._sweep(now)
            return len(self._data)

    def __repr__(self) -> str:
        return (
            f"MemoryStore(entries={len(self._data)}, max_entries={self._max_entries}, "
            f"max_bytes={self._max_bytes})"
        )
