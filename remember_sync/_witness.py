"""Verified mode's witness: a record outside the store of each namespace's latest counter.

Kinds: a local SQLite file (:class:`FileWitness`), a second store
(:class:`StoreWitness`: another Redis, another Vercel KV database), or any
object with ``floor``, ``advance`` and ``close`` (and, optionally, ``names``:
then ``remember-sync verify`` also finds namespaces the store lost whole).
See ``docs/verified.rst``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from ._bounded import BoundedCache
from ._fork import after_fork_in_child
from ._keys import glob_escape
from .errors import RememberConfigurationError, RememberConflictError
from .stores.base import Store

#: Attempts of a store witness's compare-and-set against other writers.
COMMIT_ATTEMPTS = 64
_CACHED = 4096
_BATCH = 500
# -- witnesses --------------------------------------------------------------------------------


class Witness(Protocol):
    """A record outside the store of each namespace's latest manifest counter.

    Names are keyed hashes (no session id or user id reaches the witness).
    ``advance`` only ever raises what is kept (max-only); ``floor`` returns
    ``(counter, manifest deadline or None)``, ``(0, None)`` for a name never seen.
    """

    def floor(self, name: str) -> tuple[int, int | None]:
        """The highest counter recorded for *name*, and that manifest's deadline."""
        ...

    def advance(self, name: str, counter: int, deadline: int | None) -> None:
        """Record *counter* for *name* unless a higher one is recorded."""
        ...

    def close(self) -> None:
        """Release what the witness opened."""
        ...


class ListableWitness(Witness, Protocol):
    """A witness that can also list what it recorded (optional for a custom witness).

    ``remember-sync verify`` then compares both ways: a namespace the witness
    recorded and the store no longer has (deleted whole, or rolled back to
    before it existed) is a violation, unless that namespace expired or was erased.
    """

    def names(self) -> Iterator[tuple[str, int, int | None]]:
        """Every recorded ``(name, counter, deadline or None)``."""
        ...


def listable(witness: Witness | None) -> ListableWitness | None:
    """*witness* if it can list its records, else ``None``."""
    return witness if callable(getattr(witness, "names", None)) else None  # type: ignore[return-value]


#: Tries of a file witness's switch to WAL (about a second in all; see FileWitness._wal).
_WAL_ATTEMPTS = 40
#: Connections a forked child inherited: kept, never used or closed (see FileWitness).
_INHERITED: list[sqlite3.Connection] = []


class FileWitness:
    """A witness in a local SQLite file (single host): 0600, WAL, ``synchronous=NORMAL``.

    A committed ``advance`` survives the process being killed; the last ones
    before a power loss may not (the write-ahead log is synced at checkpoints,
    not per commit): see ``docs/verified.rst``.  ``synchronous="FULL"`` syncs
    every advance.
    """

    def __init__(self, path: str, *, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise RememberConfigurationError("witness synchronous must be 'NORMAL' or 'FULL'")
        self.path = path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            os.close(fd)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._wal()
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS heads (name TEXT PRIMARY KEY, counter INTEGER, "
                "deadline INTEGER)"
            )
        except (OSError, sqlite3.Error) as exc:
            raise RememberConfigurationError(f"witness file {path!r} is unusable: {exc}") from exc
        self._lock = threading.Lock()
        self._synchronous = synchronous
        after_fork_in_child(self._reopen)

    def _wal(self) -> None:
        """Switch the file to WAL.  While another process switches the same new file, SQLite
        answers "database is locked" at once (no busy wait for this pragma): workers that
        start together would be refused, so the switch is tried again, for up to a second."""
        for attempt in range(_WAL_ATTEMPTS):
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == _WAL_ATTEMPTS - 1:
                    raise
                time.sleep(0.01 * (1 + attempt % 4))

    def _reopen(self) -> None:
        # An SQLite connection must not cross a fork: the child opens its own, and never
        # closes the parent's (closing it could release locks the parent holds).
        _INHERITED.append(self._db)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute(f"PRAGMA synchronous={self._synchronous}")

    def floor(self, name: str) -> tuple[int, int | None]:
        with self._lock:
            row = self._db.execute(
                "SELECT counter, deadline FROM heads WHERE name = ?", (name,)
            ).fetchone()
        return (0, None) if row is None else (int(row[0]), row[1] or None)

    def advance(self, name: str, counter: int, deadline: int | None) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO heads VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                "counter = excluded.counter, deadline = excluded.deadline "
                "WHERE excluded.counter > heads.counter",
                (name, counter, deadline or 0),
            )

    def names(self) -> Iterator[tuple[str, int, int | None]]:
        with self._lock:
            rows = self._db.execute("SELECT name, counter, deadline FROM heads").fetchall()
        for name, counter, deadline in rows:
            yield str(name), int(counter), int(deadline or 0) or None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"FileWitness({self.path!r})"


class StoreWitness:
    """A witness in a second store (another Redis, another Vercel KV database).

    Useful only when the main store's writers cannot reach it.  One key per
    namespace, ``P + "witness:" + name`` = ``"<counter>:<deadline>"``, raised
    by compare-and-set (max-only).
    """

    def __init__(self, store: Store, *, prefix: str = "remember:", owns: bool = True) -> None:
        self.store = store
        self.prefix = prefix
        self._owns = owns
        # name -> the value this process last saw: a warm advance is one compare-and-set.
        self._seen: BoundedCache[str, str] = BoundedCache(_CACHED)

    def _key(self, name: str) -> str:
        return f"{self.prefix}witness:{name}"

    @staticmethod
    def _parse(raw: str | None) -> tuple[int, int | None]:
        if raw is None:
            return 0, None
        counter, _, deadline = raw.partition(":")
        return int(counter), int(deadline or 0) or None

    def floor(self, name: str) -> tuple[int, int | None]:
        raw = self.store.get(self._key(name))
        if raw is not None:
            self._seen.put(name, raw)
        return self._parse(raw)

    def advance(self, name: str, counter: int, deadline: int | None) -> None:
        key, value = self._key(name), f"{counter}:{deadline or 0}"
        raw = self._seen.get(name)
        for _ in range(COMMIT_ATTEMPTS):
            if raw is None:
                if self.store.set(key, value, only_if_absent=True):
                    self._seen.put(name, value)
                    return
            elif self._parse(raw)[0] >= counter:
                return
            elif self.store.compare_and_set(key, raw, value):
                self._seen.put(name, value)
                return
            raw = self.store.get(key)
        raise RememberConflictError("the witness changed during every attempt to advance it")

    def names(self) -> Iterator[tuple[str, int, int | None]]:
        head = self._key("")
        keys = [k for k in self.store.scan(glob_escape(head) + "*") if k.startswith(head)]
        for start in range(0, len(keys), _BATCH):
            chunk = keys[start : start + _BATCH]
            for key, raw in zip(chunk, self.store.get_many(chunk), strict=True):
                if raw is not None:
                    yield (key[len(head) :], *self._parse(raw))

    def close(self) -> None:
        if self._owns:
            self.store.close()

    def __repr__(self) -> str:
        return f"StoreWitness({self.store!r})"


def witness_from(
    spec: object, store_from_url: Callable[[str], Store]
) -> Witness | None:
    """The witness a ``witness=`` option names.

    ``None``; a path (``str``); a ``redis://``/``rediss://``/``unix://`` URL (a
    second store, built by *store_from_url*); a dict ``{"type": "file", "path":
    ..., "synchronous": ...}``, ``{"type": "store", "url": ...}`` or
    ``{"type": "store", "store": <Store>}`` (a Vercel KV database, say, which the
    caller builds and closes); or any object with ``floor``, ``advance`` and ``close``
    (and optionally ``names``: :class:`ListableWitness`).
    """
    if spec is None or spec == "":
        return None
    if isinstance(spec, str):
        if spec.startswith(("redis://", "rediss://", "unix://", "redis+sentinel://")):
            return StoreWitness(store_from_url(spec))
        return FileWitness(spec)
    if isinstance(spec, dict):
        kind = spec.get("type")
        if kind == "file" and isinstance(spec.get("path"), str):
            return FileWitness(spec["path"], synchronous=spec.get("synchronous", "NORMAL"))
        if kind == "store" and isinstance(spec.get("url"), str):
            return StoreWitness(store_from_url(spec["url"]), prefix=spec.get("prefix", "remember:"))
        if kind == "store" and isinstance(spec.get("store"), Store):
            return StoreWitness(spec["store"], prefix=spec.get("prefix", "remember:"), owns=False)
        raise RememberConfigurationError(
            "witness must be {'type': 'file', 'path': ...} or {'type': 'store', 'url': ...} "
            "(or 'store': a Store)"
        )
    if all(callable(getattr(spec, name, None)) for name in ("floor", "advance", "close")):
        return spec  # type: ignore[return-value]
    raise RememberConfigurationError(
        f"witness must be a path, a redis:// URL, a dict with 'type', or a "
        f"witness object; got {type(spec).__name__}"
    )
