"""Ended MCP sessions, remembered for the rest of their signed lifetime.

Session ids are signed, not stored (:mod:`remember_sync._sessions`), so ending
one (``DELETE``) needs a record that outlives nothing less than the id's
signature: ``P + "__revoked__:" + session_digest(id)``
(:func:`~remember_sync._keys.ended_session_key`), written with a TTL of the
id's remaining lifetime plus :data:`CLOCK_MARGIN_MS`.  Every request that
presents a validly signed id reads it (one ``GET``); a store that fails while
it is read makes the request fail, never pass.

Where the record lives:

* a shared store (Redis, Redis Cluster, Vercel KV, a store of your own): the
  plugin's store, so every worker and every server sharing it answers ``404``
  on the next request.  The key holds a digest, never the id, and is no entry:
  no scope lists it, the legacy purge and ``rotate``/``export`` leave it (the
  operator tools count it among "other keys").
* the in-process memory store: a private, never-evicting
  :class:`~remember_sync.stores.memory.MemoryStore` of this server.  The
  plugin's memory store may evict (``max_entries``, ``max_bytes``), and an
  evicted record would bring its session back.  Records expire with their
  sessions; their number is capped (``max_local``), and so is each
  principal's share of it (``max_per_principal``; every anonymous caller
  together counts as one principal, since an anonymous caller can open any
  number of sessions): one caller ending its own sessions fills its own share,
  never the table, and every other caller can still end theirs.  When a
  share (or the table) is full a ``DELETE`` is refused with ``503`` rather
  than any record being dropped: an ended session never comes back, at worst
  a caller cannot end one until its older records expire.  It is one
  process's memory: a restart forgets it (together with every memory the
  store held).

Nothing is ever evicted: a shared store must not be configured to evict keys
either (Redis ``maxmemory-policy noeviction``, its default).
"""

from __future__ import annotations

import hashlib
import threading

from .._clock import Clock, system_clock
from .._config import DEFAULT_MAX_ENDED_PER_PRINCIPAL, DEFAULT_MAX_ENDED_SESSIONS
from .._fork import after_fork_in_child
from .._keys import ended_session_key
from .._sessions import session_digest
from ..errors import RememberInputError, RememberQuotaError, RememberStoreError
from ..stores.base import OwnedWrite, Store
from ..stores.memory import MemoryStore

__all__ = [
    "CLOCK_MARGIN_MS",
    "DEFAULT_MAX_LOCAL",
    "DEFAULT_MAX_PER_PRINCIPAL",
    "FULL_CODE",
    "EndedSessions",
]

#: Added to every record's TTL: another worker's clock may run behind this one's, so
#: it accepts an id a little longer than this worker would.
CLOCK_MARGIN_MS = 5 * 60_000
#: How many ended sessions an in-process table holds (about 33 MB at most: some 330 bytes each).
DEFAULT_MAX_LOCAL = DEFAULT_MAX_ENDED_SESSIONS
#: How many of those one principal (or all anonymous callers together) may hold.
DEFAULT_MAX_PER_PRINCIPAL = DEFAULT_MAX_ENDED_PER_PRINCIPAL
#: The code of the error raised when the in-process table (or a caller's share) is full.
FULL_CODE = "REMEMBER_ENDED_SESSIONS_FULL"
#: What the in-process table holds per session: one shared string.
_LOCAL_RECORD = "ended"


class EndedSessions:
    """The ended sessions of one MCP server (see the module docs).

    :param store: the plugin's store.
    :param prefix: the plugin's key prefix.
    :param max_local: the cap of the in-process table (memory store only).
    :param max_per_principal: each principal's share of it (at most *max_local*).
    :param clock: when the in-process table's records expire.
    """

    def __init__(
        self, store: Store, prefix: str, *, max_local: int = DEFAULT_MAX_LOCAL,
        max_per_principal: int = DEFAULT_MAX_PER_PRINCIPAL, clock: Clock = system_clock,
    ) -> None:
        for name, value in (("max_local", max_local), ("max_per_principal", max_per_principal)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RememberInputError(f"{name} must be a positive int; got {value!r}")
        self.local = isinstance(store, MemoryStore)
        # A store of its own, without a bound: a bounded one evicts, and an evicted
        # record would bring its session back.
        self._store: Store = MemoryStore(max_entries=None, clock=clock) if self.local else store
        # The private table needs no prefix (it holds nothing else): shorter keys.
        self._prefix = "" if self.local else prefix
        self.max_local = max_local
        self.max_per_principal = min(max_per_principal, max_local)
        self._lock = threading.Lock()
        after_fork_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock at the fork (see _fork).
        # It only makes "count, then write" one step; the table itself is a MemoryStore,
        # which renews its own lock.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = "in-process" if self.local else "shared store"
        return f"EndedSessions({where})"

    def _key(self, session_id: str) -> str:
        return ended_session_key(self._prefix, session_digest(session_id))

    def is_ended(self, session_id: str) -> bool:
        """Whether *session_id* was ended.

        :raises RememberStoreError: the store could not say (treat as ended).
        """
        return self._store.get(self._key(session_id)) is not None

    def end(
        self, session_id: str, deadline_ms: int | None, now_ms: int, principal: str | None = None
    ) -> None:
        """Record *session_id* as ended until *deadline_ms* (``None``: for good).

        :param principal: who ends it (``None``: an anonymous caller); its share
            of the in-process table is what it may fill.
        :raises RememberStoreError: nothing was recorded (the store failed, or
            the in-process table or the principal's share of it is full: code
            :data:`FULL_CODE`).
        """
        ttl_ms = None if deadline_ms is None else max(1, deadline_ms - now_ms) + CLOCK_MARGIN_MS
        if not self.local:
            # When it was ended, for an operator looking at the store.
            self._store.set(self._key(session_id), f'{{"endedAt":{now_ms}}}', ttl_ms=ttl_ms)
            return
        with self._lock:  # the count and the write together, so the cap holds
            assert isinstance(self._store, MemoryStore)
            if len(self._store) >= self.max_local:
                raise RememberStoreError(
                    f"this server already remembers {self.max_local} ended sessions, its "
                    "limit; no more can be ended until the oldest expire",
                    code=FULL_CODE,
                )
            # The share is counted by the table itself, under an owner that is a hash
            # of the principal (in-process only; nothing of it is shown).
            owner = hashlib.sha256(f"ended by\x00{principal or ''}".encode()).hexdigest()
            try:
                self._store.write_owned(OwnedWrite(
                    self._key(session_id), _LOCAL_RECORD, owner, ttl_ms=ttl_ms,
                    quota=(self.max_per_principal, None),
                ))  # fmt: skip
            except RememberQuotaError:
                raise RememberStoreError(
                    f"this caller already has {self.max_per_principal} ended sessions "
                    "remembered, its share of this server's table; it can end more when the "
                    "oldest expire",
                    code=FULL_CODE,
                ) from None

    def close(self) -> None:
        """Drop the in-process table (a shared store is the plugin's to close)."""
        if self.local:
            self._store.close()
