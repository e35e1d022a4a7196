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
* the in-process memory store: a private table of this server, apart from the
  plugin's memory store (whose own bounds would evict records without regard
  to whose they are).  Records expire with their sessions.  Each principal
  (:func:`~remember_sync.identity.principal_of`; every anonymous caller
  together counts as one, since an anonymous caller can open any number of
  sessions) may hold ``max_per_principal`` of them: a ``DELETE`` beyond that
  share is refused with ``503`` until its older records expire.  The table
  holds ``max_local`` in all; when it is full, the oldest records of the
  principal holding the most make room.  So no number of principals can fill
  it for the others: a caller below its share can always end its session, and
  what is given up is a record of whoever holds the most (whose ended session
  then comes back for the rest of its signed lifetime -- for the principal it
  was issued to only).  It is one process's memory: a restart forgets it
  (together with every memory the store held).

A shared store holds every record until it expires: it must not be configured to
evict keys (Redis ``maxmemory-policy noeviction``, its default).
"""

from __future__ import annotations

import hashlib

from .._clock import Clock, system_clock
from .._config import DEFAULT_MAX_ENDED_PER_PRINCIPAL, DEFAULT_MAX_ENDED_SESSIONS
from .._keys import ended_session_key
from .._sessions import session_digest
from ..errors import RememberInputError, RememberQuotaError, RememberStoreError
from ..identity import principal_of, sharing_group
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
        #: The in-process table, bounded by *max_local*: when it is full, its fair
        #: eviction takes the oldest record (earliest deadline) of the owner holding the most.
        self._table = MemoryStore(max_entries=max_local, clock=clock) if self.local else None
        self._store: Store = store if self._table is None else self._table
        # The private table needs no prefix (it holds nothing else): shorter keys.
        self._prefix = "" if self.local else prefix
        self.max_local = max_local
        self.max_per_principal = min(max_per_principal, max_local)

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

        :param principal: who ends it, a user id (``None``: an anonymous caller);
            its share of the in-process table is what it may fill.
        :raises RememberStoreError: nothing was recorded (the store failed, or
            the principal's share of the in-process table is full: code
            :data:`FULL_CODE`).
        """
        ttl_ms = None if deadline_ms is None else max(1, deadline_ms - now_ms) + CLOCK_MARGIN_MS
        if self._table is None:
            # When it was ended, for an operator looking at the store.
            self._store.set(self._key(session_id), f'{{"endedAt":{now_ms}}}', ttl_ms=ttl_ms)
            return
        # The share is counted by the table itself, under an owner that is a hash of
        # the principal (in-process only; nothing of it is shown).
        group = sharing_group(principal_of(principal, None))
        owner = hashlib.sha256(f"ended by\x00{group}".encode()).hexdigest()
        try:
            self._table.write_owned(OwnedWrite(
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
        if self._table is not None:
            self._table.close()
