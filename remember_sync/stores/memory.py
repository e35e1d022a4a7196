"""In-process store: one lock, a dict, and a heap of deadlines.

Expiry is lazy on read plus an amortised sweep of the deadline heap on writes,
so there is no timer per key.  An optional ``max_entries`` bound evicts the
entry with the earliest deadline first, then the least recently used one, so
a runaway agent cannot exhaust the process's memory.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

from ..errors import RememberConfigurationError
from .glob import compile_glob

__all__ = ["MemoryStore"]

log = logging.getLogger("remember_sync")


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
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            item = self._data.get(key)
            if item is not None and item[1] == deadline:
                del self._data[key]
        # Overwrites leave stale heap items behind; rebuild before they dominate.
        if len(heap) > 64 and len(heap) > 2 * len(self._data):
            self._heap = [(d, k) for k, (_, d) in self._data.items() if d is not None]
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
        with self._lock:
            item = self._live(key, self._clock())
            if item is None:
                return None
            self._data.move_to_end(key)
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
        with self._lock:
            now = self._clock()
            self._sweep(now)
            if only_if_absent and self._live(key, now) is not None:
                return False
            self._put(key, value, ttl_ms, now)
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
        regex = compile_glob(pattern)
        with self._lock:
            now = self._clock()
            self._sweep(now)
            keys = [
                k
                for k, (_, deadline) in self._data.items()
                if (deadline is None or now < deadline) and regex.fullmatch(k)
            ]
        return iter(keys)

    def close(self) -> None:
        with self._lock:
            self._data.clear()
            self._heap.clear()

    def __len__(self) -> int:
        with self._lock:
            now = self._clock()
            self._sweep(now)
            return len(self._data)

    def __repr__(self) -> str:
        return f"MemoryStore(entries={len(self._data)}, max_entries={self._max_entries})"
