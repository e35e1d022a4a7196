"""Owned writes (:class:`~remember_sync.stores.base.OwnedWrites`) of :class:`RedisStore`.

The protocol and the ledger's layout are in :mod:`remember_sync.stores._quota_lua`:
standalone and Sentinel servers run the quota check, the write (the same
write script as an unowned write, wrapped) and the accounting in one script;
a cluster reserves on the ledger's node before the write and restores the
reservation when the write does not happen.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ..errors import RememberStoreError
from . import _index_lua as index_lua
from . import _quota_lua as quota_lua
from . import base as contract  # the argument checks every store makes first
from ._redis_cas import new_token
from .base import IndexOf, OwnedWrite, Quota, quota_exceeded
from .base import to_bytes as _b

log = logging.getLogger("remember_sync")

_CHUNK = 1000
_VERDICTS = {quota_lua.OVER_ENTRIES: "entries", quota_lua.OVER_BYTES: "bytes"}


def quota_args(quota: Quota | None) -> list[str]:
    """The entry and byte quotas as script arguments (``-1``: no bound)."""
    entries, nbytes = quota if quota is not None else (None, None)
    return ["-1" if entries is None else str(entries), "-1" if nbytes is None else str(nbytes)]


@functools.lru_cache(maxsize=4096)
def _ledger_keys(owner: str) -> tuple[bytes, bytes]:
    return _b(owner), _b(quota_lua.sizes_key(owner))


def _ledger(owner: str) -> list[bytes]:
    """The ledger's two keys as sent (cached: every write of an owner names them)."""
    return list(_ledger_keys(owner))


def refused(reply: int, quota: Quota | None) -> bool:
    """Raise the quota error a script's *reply* stands for; else whether it wrote."""
    which = _VERDICTS.get(reply)
    if which is not None:
        assert quota is not None
        raise quota_exceeded(which, quota)
    return reply == 1


def quota_write(
    write: OwnedWrite, index_of: IndexOf | None, marker: str | None = None
) -> tuple[str, list[str], list[str]]:
    """The quota script that does *write* (its name in :data:`~._quota_lua.SCRIPTS`), its
    keys (the ledger first) and its arguments (the quotas first); *index_of*: the
    store's, if it keeps indexes; *marker*: the entry's compare-and-set marker, if the
    store keeps them (a compare-and-set then records its token, as an unowned one does).
    """
    px = "" if write.ttl_ms is None else str(write.ttl_ms)
    keys = [write.owner, quota_lua.sizes_key(write.owner), write.key]
    if write.expected is None:
        name, args = "QUOTA_SET", [write.value, px, "1" if write.only_if_absent else ""]
    else:
        name, args = "QUOTA_CAS", [write.expected, write.value, px]
    index = None
    if index_of is not None:
        index = write.index_key if write.index_key is not None else index_of(write.key)
    if index is not None:
        name += "_INDEXED"
        keys.append(index)
    if marker is not None and write.expected is not None:
        if index is None:
            name = "QUOTA_CAS_MARKED"
        keys.append(marker)
        args += [new_token().hex(), str(index_lua.CAS_TOKEN_MS), ""]
    return name, keys, quota_args(write.quota) + args


class OwnedRedisWrites:
    """Mixed into :class:`~remember_sync.stores.redis.RedisStore`: the owned writes."""

    _cluster: bool
    _index_of: Any
    #: ``write_owned`` reads :attr:`OwnedWrite.index_key` (see there).
    uses_index_key = True

    def _eval_reply(
        self, name: str, keys: list[bytes], args: list[bytes], operation: str
    ) -> int:  # pragma: no cover - RedisStore's
        raise NotImplementedError

    def _script(
        self, name: str, keys: list[bytes], args: list[bytes], operation: str
    ) -> Any:  # pragma: no cover - RedisStore's
        raise NotImplementedError

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:  # pragma: no cover - RedisStore's
        raise NotImplementedError

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:  # pragma: no cover - RedisStore's
        raise NotImplementedError

    def delete(self, *keys: str) -> int:  # pragma: no cover - RedisStore's
        raise NotImplementedError

    def _cas_marker(self, key: str) -> bytes | None:  # pragma: no cover - RedisStore's
        raise NotImplementedError

    def write_owned(self, write: OwnedWrite) -> bool:
        """:meth:`set` / :meth:`compare_and_set` charged to its owner (one script; a
        cluster: reserve, write, restore on failure).  ``group`` is unused: Redis never
        evicts for the library."""
        contract.check_owned(write)
        if self._cluster:
            return self._write_reserved(write)
        marker = None if write.expected is None else self._cas_marker(write.key)
        name, keys, args = quota_write(
            write, self._index_of, None if marker is None else marker.decode("ascii")
        )
        sent = _ledger(write.owner) + [_b(k) for k in keys[2:]]
        reply = self._eval_reply(name, sent, [_b(a) for a in args], "SET (with quota)")
        return refused(reply, write.quota)

    def _write_reserved(self, write: OwnedWrite) -> bool:
        key, value, quota, ttl_ms = write.key, write.value, write.quota, write.ttl_ms
        ledger = _ledger(write.owner)
        size = len(_b(key)) + len(_b(value))
        px = "" if ttl_ms is None else str(ttl_ms)
        reserve = [key, str(size), px, *quota_args(quota)]
        verdict, score, old_size, old_score = self._script(
            "QUOTA_RESERVE", ledger, [_b(a) for a in reserve], "quota reserve"
        )
        refused(int(verdict), quota)
        undo = [_b(key), _b(str(size)), _b(_text(score)), _b(_text(old_size)),
                _b(_text(old_score))]  # fmt: skip
        try:
            if write.expected is None:
                written = self.set(key, value, ttl_ms=ttl_ms, only_if_absent=write.only_if_absent)
            else:
                written = self.compare_and_set(key, write.expected, value, ttl_ms=ttl_ms)
        except Exception:
            try:
                self._script("QUOTA_RESTORE", ledger, undo, "quota restore")
            except RememberStoreError as exc:
                # The write's own error is what the caller needs; the charge stays (the
                # owner pays for an entry that may not exist: the safe side).
                log.warning("remember: a quota reservation could not be undone: %s", exc.message)
            raise
        if not written:
            self._script("QUOTA_RESTORE", ledger, undo, "quota restore")
        return written

    def delete_owned(self, owner: str, *keys: str) -> int:
        """:meth:`delete` refunding *owner*: in the same script on a standalone server,
        after the ``UNLINK`` on a cluster."""
        contract.check_keys(keys)
        contract.check_key(owner)
        if not keys:
            return 0
        ledger = _ledger(owner)
        if self._cluster:
            removed = self.delete(*keys)
            for start in range(0, len(keys), _CHUNK):
                dropped = [_b(k) for k in keys[start : start + _CHUNK]]
                self._script("QUOTA_DROP", ledger, dropped, "quota drop")
            return removed
        groups: dict[str, list[str]] = {}
        if self._index_of is None:
            plain = list(dict.fromkeys(keys))
        else:
            groups, plain = contract.group_by_index(keys, self._index_of)
        removed = 0
        for start in range(0, len(plain), _CHUNK):
            entries = [_b(k) for k in plain[start : start + _CHUNK]]
            removed += self._eval_reply("QUOTA_DELETE", ledger + entries, [], "UNLINK (with quota)")
        for index, members in groups.items():
            for start in range(0, len(members), _CHUNK):
                entries = [_b(index), *(_b(k) for k in members[start : start + _CHUNK])]
                removed += self._eval_reply(
                    "QUOTA_DELETE_INDEXED", ledger + entries, [], "UNLINK (indexed, with quota)"
                )
        return removed

    def owner_usage(self, owner: str) -> tuple[int, int]:
        """The live entries and bytes charged to *owner* (expired ones pruned first)."""
        contract.check_key(owner)
        ledger = _ledger(owner)
        entries, nbytes = self._script("QUOTA_USAGE", ledger, [], "quota usage")
        return int(entries), int(nbytes)


def _text(reply: Any) -> str:
    return reply.decode("ascii") if isinstance(reply, bytes) else str(reply)
