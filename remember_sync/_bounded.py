"""The one bounded cache: a thread-safe mapping of fixed capacity, oldest write dropped first.

Every per-process cache of the package (derived keys, remembered namespaces, "warned once"
sets, Redis page guesses) is one of these, so memory stays bounded whatever
callers send, and the eviction rule is written once.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``size`` items; the one written (or re-added) longest ago is dropped first.

    Reads take no lock and do not reorder (a read is the dict's own atomic ``get``):
    a hot item that is dropped is simply recomputed by its next miss.  Writes lock,
    with a re-entrant lock and in single C-level steps, each correct whatever ran
    between them: a signal handler that writes the cache while its thread is
    half-way through a write enters instead of waiting for ever.

    :param size: the capacity, at least 1.
    """

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a whole number >= 1, got {size!r}")
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.RLock()
        # A hit is the hot path of every read (namespaces, derived keys): it is the
        # dict's own C-level get, with no Python frame and no lock.
        self.get = self._items.get  # type: ignore[method-assign, assignment]

    def get(self, key: K) -> V | None:  # replaced per instance by the dict's own get
        """The value under ``key``, or ``None``."""
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, dropping the oldest item when full."""
        with self._lock:
            self._items.pop(key, None)
            self._items[key] = value  # a new key goes last
            self._trim()

    def add(self, key: K, value: V) -> bool:
        """Store ``value`` unless ``key`` is present; ``True`` when it was not (``warn once``)."""
        with self._lock:
            if key in self._items:
                with contextlib.suppress(KeyError):  # dropped meanwhile by a nested write
                    self._items.move_to_end(key)
                return False
            self._items[key] = value
            self._trim()
            return True

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or ``None``."""
        with self._lock:
            return self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)

    def _trim(self) -> None:  # under the lock
        while len(self._items) > self.size:
            with contextlib.suppress(KeyError):  # emptied meanwhile by a nested write
                self._items.popitem(last=False)
