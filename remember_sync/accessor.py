"""The public accessor: scoped, encrypted memory for one identity.

Every rule and every read and write path lives in :mod:`remember_sync._core`; a
:class:`RememberAccessor` resolves who is calling -- a fixed
:class:`~remember_sync.types.Identity`, or (``plugin.remember``) the identity
bound in the current context on every call -- and hands the call over.
"""

from __future__ import annotations

import builtins
import html
import math
from collections.abc import Callable, Iterable
from typing import Any

from . import _metrics
from ._core import AccessorCore
from .errors import RememberIdentityError, RememberInputError, RememberInputTypeError
from .identity import current_identity
from .types import Identity, RememberEntry, Scope, SearchHit

__all__ = ["RememberAccessor"]


class RememberAccessor:
    """Scoped, encrypted memory for one identity.

    Obtain one from ``plugin.remember`` (the identity bound in the current
    context, read on every call) or ``plugin.accessor(identity)`` (a fixed
    identity: notebooks, cron jobs).  Every method takes ``scope=``
    (``"session"`` by default, ``"user"``, ``"tool"`` or ``"global"``).
    """

    _core: AccessorCore
    _identity: Identity | None

    def __init__(self) -> None:
        raise TypeError(
            "get an accessor from plugin.remember or plugin.accessor(identity), "
            "not by constructing one"
        )

    # -- helpers ------------------------------------------------------------------------

    @property
    def identity(self) -> Identity:
        """The identity this accessor acts for (the context's, when not fixed)."""
        return self._identity if self._identity is not None else current_identity()

    @property
    def _store_kind(self) -> str:
        """The ``store`` attribute of this accessor's measurements (:func:`._metrics.measured`)."""
        return self._core.store_kind

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
        core = self._core
        with core.audited("set", self._identity, scope, key, brand, ttl) as event:
            core.set(self._identity, key, value, scope, ttl, brand, metadata)
            event.outcome = "written"

    def get(self, key: str, *, scope: Scope = "session", default: Any = None) -> Any:
        """The stored value, or *default* when missing, expired or unreadable."""
        fields = self._core.get_fields(self._identity, key, scope)
        return default if fields is None else fields[0]

    def get_entry(self, key: str, *, scope: Scope = "session") -> RememberEntry | None:
        """The whole entry (value, brand, times, metadata), or ``None``."""
        fields = self._core.get_fields(self._identity, key, scope)
        return None if fields is None else RememberEntry(*fields)

    def knows(self, key: str, *, scope: Scope = "session") -> bool:
        """Whether a readable, unexpired entry exists."""
        return self._core.get_fields(self._identity, key, scope) is not None

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

        :raises RememberConflictError: after 64 lost races (``CAS_ATTEMPTS``).
        """
        core = self._core
        with core.audited("update", self._identity, scope, key, None, ttl) as event:
            found = core.update(self._identity, key, scope, value, ttl)
            event.outcome = "updated" if found else "missing"
        return found

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
        64 times (``CAS_ATTEMPTS``), with a short random pause after the first
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
        core = self._core
        with core.audited("modify", self._identity, scope, key, None, ttl) as event:
            new = core.modify(self._identity, key, scope, fn, default, ttl)
            event.outcome = "written"
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

        core = self._core
        with core.audited("increment", self._identity, scope, key, None, ttl) as event:
            result: int | float = core.modify(self._identity, key, scope, add, 0, ttl)
            event.outcome = "written"
        return result

    def forget(self, key: str, *, scope: Scope = "session") -> bool:
        """Delete the entry; return whether something was there."""
        core = self._core
        with core.audited("forget", self._identity, scope, key) as event:
            found = core.forget(self._identity, key, scope)
            event.outcome = "deleted" if found else "absent"
        return found

    def list(self, *, scope: Scope = "session", pattern: str = "*") -> list[str]:
        """Bare keys of readable, unexpired entries matching *pattern*, sorted.

        Only ``*`` and ``?`` are wildcards; every other character is literal.
        """
        return sorted(self._core.entries(self._identity, scope, pattern, None))

    def entries(
        self, *, scope: Scope = "session", pattern: str = "*", brand: str | None = None
    ) -> dict[str, RememberEntry]:
        """Readable, unexpired entries matching *pattern* (and *brand*), in one batched read."""
        return self._core.entries(self._identity, scope, pattern, brand)

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
        core = self._core
        with core.audited("forget_many", self._identity, scope, pattern, brand) as event:
            count = core.forget_many(self._identity, scope, pattern, brand, include_unreadable)
            event.outcome, event.count = "deleted", count
        return count

    def search(
        self,
        query: str,
        *,
        scope: Scope | None = None,
        brand: str | None = None,
        limit: int = 10,
        host_only: bool = False,
    ) -> builtins.list[SearchHit]:
        """The entries that best match *query*, best first (see ``docs/search.rst``).

        Ranked over this identity's own namespaces only: with *scope* ``None``,
        every scope it may use (a scope it cannot use, such as ``user`` for an
        anonymous caller, is skipped); an explicit *scope* it cannot use raises
        as the other methods do.  Expired and unreadable entries are never
        returned.  Matching folds case and accents, stems English endings, and
        tolerates prefixes and one-letter typos; with ``search={"embedder": ...}``
        it also ranks by meaning.

        :param brand: only entries of this brand.
        :param limit: at most this many results (1 to 1000).
        :param host_only: only entries the application wrote, none a model wrote
            through the memory tools.
        :raises ValueError: an empty or too long query, a bad scope, brand or limit.
        :raises TypeError: a query that is not a ``str``.
        :raises RememberIdentityError: *scope* needs an identity this caller lacks.
        """
        hits = self._core.search(self._identity, query, scope, brand, limit, host_only)
        return [
            SearchHit(h.key, h.label, h.score, RememberEntry(*h.fields),  # type: ignore[arg-type]
                      h.written_by or "host")
            for h in hits
        ]

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


#: The methods of :class:`RememberAccessor` that :mod:`._metrics` counts and times.
_MEASURED = (
    "set", "get", "get_entry", "knows", "update", "modify", "increment", "forget", "list",
    "entries", "forget_many",
)  # fmt: skip


class _MeasuredAccessor(RememberAccessor):
    """A :class:`RememberAccessor` whose public methods are measured (``remember_sync.operations``).

    Handed out instead of the plain class while recording is on, so that with
    it off an accessor costs nothing more than before.
    """


for _name in _MEASURED:
    setattr(_MeasuredAccessor, _name, _metrics.measured(_name)(getattr(RememberAccessor, _name)))


def accessor_for(core: AccessorCore, identity: Identity | None = None) -> RememberAccessor:
    """An accessor over *core* for *identity* (``None``: the context's), measured while
    metrics are recorded."""
    accessor = object.__new__(_MeasuredAccessor if _metrics.STATE.on else RememberAccessor)
    accessor._core = core
    accessor._identity = identity
    return accessor
