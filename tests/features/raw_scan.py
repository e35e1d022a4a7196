"""Everything a store holds, as text: every key and, per type, every value, member and field.

What someone holding the database (not the secret) can read: a test asserts that
nothing in it names a person after their erasure.
"""

from __future__ import annotations

from typing import Any

import pytest

from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore

#: The fixture of a plain redis-py client on the database behind each store kind.
RAW_CLIENT = {"redis": "redis_client", "redis_cluster": "redis_cluster_client",
              "vercel_kv": "kv_redis"}  # fmt: skip


def _text(raw: Any) -> str:
    return raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else str(raw)


def _redis_texts(client: Any) -> list[str]:
    out: list[str] = []
    for raw_key in client.scan_iter(match="*", count=1000):
        key = _text(raw_key)
        out.append(key)
        kind = _text(client.type(raw_key))
        if kind == "string":
            out.append(_text(client.get(raw_key)))
        elif kind == "zset":
            out += [_text(m) for m in client.zrange(raw_key, 0, -1)]
        elif kind == "hash":
            for field, value in client.hgetall(raw_key).items():
                out += [_text(field), _text(value)]
        elif kind == "set":
            out += [_text(m) for m in client.smembers(raw_key)]
        elif kind == "list":
            out += [_text(m) for m in client.lrange(raw_key, 0, -1)]
        elif kind == "stream":
            for entry_id, fields in client.xrange(raw_key):
                out.append(_text(entry_id))
                for field, value in fields.items():
                    out += [_text(field), _text(value)]
        elif kind != "none":  # vanished since the scan
            raise AssertionError(f"raw scan: {key!r} holds an unexpected type {kind}")
    return out


def raw_texts(store_kind: str, store: Store, request: pytest.FixtureRequest) -> list[str]:
    """Every key, value, member and field of the database behind *store*."""
    if store_kind == "memory":
        assert isinstance(store, MemoryStore)
        keys = list(store.scan("*"))
        values = store.get_many(keys)
        return keys + [v for v in values if v is not None]
    return _redis_texts(request.getfixturevalue(RAW_CLIENT[store_kind]))


def naming(texts: list[str], needles: list[str]) -> list[str]:
    """The texts that contain any of *needles* (for the assertion's message)."""
    return [t for t in texts if any(n in t for n in needles)]
