"""In-process store: one lock, a dict, and a heap of deadlines.

Expiry is lazy on read plus an amortised sweep of the deadline heap on writes,
so there is no timer per key.  An optional ``max_entries`` bound evicts the
entry with the earliest deadline first, then the least recently used one, so
a runaway agent cannot exhaust the process's memory.

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
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence

from ..errors import RememberConfigurationError
from .base import check_count
from .glob import glob_matcher

__all__ = ["MemoryStore"]

log = logging.getLogger("remember_sync")


#: A deadline later than any clock reading.
_NEVER = 2**63
#: Deadlines an unbounded store collects before a write moves them into the heap.
_PENDING_MAX = 256


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class MemoryStore:
    """A thread-safe in-memory :class:`~remember_sync.stores.base.Store`.

    :param max_entries: evict when more than this many keys would be held
        (``None``: unbounded).
    :param clock: returns epoch milliseconds; inject one in tests.
    """

    def __init__(
        self,
        *,
        max_entries: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if max_entries is not None and (
            isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1
        ):
            raise RememberConfigurationError(
                f"max_entries must be a positive int or None; got {max_entries!r}"
            )
        self._max_entries = max_entries
        self._clock = clock or _wall_clock_ms
        self._lock = threading.Lock()
        # key -> (value, deadline_ms or None); order = least recently used first.
        self._data: OrderedDict[str, tuple[str, int | None]] = OrderedDict()
        self._heap: list[tuple[int, str]] = []
        # Deadlines written by unbounded sets, appended outside the lock (deque.append
        # is atomic) and moved into the heap by the next sweep; the earliest of them,
        # so a set knows without the lock whether a sweep is due.
        self._pending: deque[tuple[int, str]] = deque()
        self._pending_min = _NEVER
        self.evictions = 0

    # -- internals (call with the lock held) ---------------------------------

    def _live(self, key: str, now: int) -> tuple[str, int | None] | None:
        item = self._data.get(key)
        if item is None:
            return None
        deadline = item[1]
        if deadline is not None and now >= deadline:
            del self._data[key]
            return None
        return item

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
                del self._data[key]
        # Overwrites leave stale heap items behind; rebuild before they dominate.
        if len(heap) > 64 and len(heap) > 2 * len(self._data):
            self._heap = [(d, k) for k, (_, d) in list(self._data.items()) if d is not None]
            heapq.heapify(self._heap)

    def _evict_one(self) -> None:
        heap = self._heap
        while heap:
            deadline, key = heapq.heappop(heap)
            item = self._data.get(key)
            if item is not None and item[1] == deadline:
                del self._data[key]
                self.evictions += 1
                log.debug("remember: memory store full, evicted the entry expiring first")
                return
        self._data.popitem(last=False)
        self.evictions += 1
        log.debug("remember: memory store full, evicted the least recently used entry")

    def _put(self, key: str, value: str, ttl_ms: int | None, now: int) -> None:
        deadline = None if ttl_ms is None else now + ttl_ms
        if (
            self._max_entries is not None
            and key not in self._data
            and len(self._data) >= self._max_entries
        ):
            self._evict_one()
        self._data[key] = (value, deadline)
        self._data.move_to_end(key)
        if deadline is not None:
            heapq.heappush(self._heap, (deadline, key))

    # -- the Store protocol -----------------------------------------------------

    def get(self, key: str) -> str | None:
        now = self._clock()
        # No lock (see the module docs): one atomic read, then one atomic LRU move.
        item = self._data.get(key)
        if item is None:
            return None
        deadline = item[1]
        if deadline is not None and now >= deadline:
            with self._lock:
                self._live(key, now)  # re-read under the lock: removes it if still expired
            return None
        try:
            self._data.move_to_end(key)
        except KeyError:
            pass  # deleted since the read, which still happened before the delete
        return item[0]

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        with self._lock:
            now = self._clock()
            out: list[str | None] = []
            for key in keys:
                item = self._live(key, now)
                out.append(None if item is None else item[0])
            return out

    def set(
        self,
        key: str,
        value: str,
        *,
        ttl_ms: int | None = None,
        only_if_absent: bool = False,
    ) -> bool:
        now = self._clock()
        if self._max_entries is not None:
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
        with self._lock:
            now = self._clock()
            item = self._live(key, now)
            if item is None or item[0] != expected:
                return False
            self._put(key, value, ttl_ms, now)
            return True

    def delete(self, *keys: str) -> int:
        with self._lock:
            now = self._clock()
            removed = 0
            for key in keys:
                if self._live(key, now) is not None:
                    del self._data[key]
                    removed += 1
            return removed

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        check_count(count)
        matches = glob_matcher(pattern)  # linear time, whatever the pattern
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

    def close(self) -> None:
        with self._lock:
            self._data.clear()
            self._heap.clear()
            self._pending.clear()

    def __len__(self) -> int:
        with self._lock:
            now = self._clock()
            self._sweep(now)
            return len(self._data)

    def __repr__(self) -> str:
        return f"MemoryStore(entries={len(self._data)}, max_entries={self._max_entries})"
