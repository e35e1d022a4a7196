"""The attacker's hands: raw access to the database behind a store, bypassing remember_sync.

The attacker of verified mode holds the backing store (the Redis server, the
Redis Cluster, the database behind Vercel KV) but neither the process nor
its secret nor the witness.  :class:`RawStore` is what such a person can do
with plain redis-py: read, write, delete any key, and copy the whole database
away and back (``DUMP``/``RESTORE`` with the remaining TTLs).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.cluster


class RawStore:
    """Plain redis-py commands on the database behind a store (standalone, cluster, KV)."""

    def __init__(self, client: redis.Redis | redis.cluster.RedisCluster) -> None:
        self.client: Any = client

    def keys(self, pattern: str = "*") -> list[str]:
        return sorted({k.decode() if isinstance(k, bytes) else k
                       for k in self.client.scan_iter(match=pattern, count=1000)})

    def get(self, key: str) -> str | None:
        raw = self.client.get(key)
        return raw.decode() if isinstance(raw, bytes) else raw

    def set(self, key: str, value: str) -> None:
        self.client.set(key, value)

    def delete(self, *keys: str) -> None:
        for key in keys:
            self.client.delete(key)

    def snapshot(self, pattern: str = "*") -> dict[str, tuple[bytes, int]]:
        """Every key matching *pattern*: its DUMP and remaining TTL (0: none)."""
        out: dict[str, tuple[bytes, int]] = {}
        for key in self.keys(pattern):
            dumped = self.client.dump(key)
            if dumped is not None:
                out[key] = (dumped, max(0, int(self.client.pttl(key))))
        return out

    def restore(self, snap: dict[str, tuple[bytes, int]], pattern: str = "*") -> None:
        """Put the database (the keys matching *pattern*) back as *snap* recorded it."""
        for key in self.keys(pattern):
            self.client.delete(key)
        for key, (dumped, ttl) in snap.items():
            self.client.restore(key, ttl, dumped, replace=True)
