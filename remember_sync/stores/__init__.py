"""The stores: opaque strings under full keys (see :mod:`remember_sync.stores.base`).

:class:`MemoryStore`, :class:`RedisStore` (standalone, Sentinel, Cluster) and
:class:`VercelKVStore`, the protocols they implement, and the names their
configuration errors and logs use.  The Redis and Vercel KV names are loaded on
first use, so that importing the package does not import a driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._glob import glob_matcher
from .base import ItemScanner, NamespaceIndex, Store
from .memory import MemoryStore

if TYPE_CHECKING:
    from .redis import RedisOptionError, RedisStore, redacted_url
    from .vercel_kv import VercelKVStore

__all__ = [
    "ItemScanner",
    "MemoryStore",
    "NamespaceIndex",
    "RedisOptionError",
    "RedisStore",
    "Store",
    "VercelKVStore",
    "glob_matcher",
    "redacted_url",
]

#: The names whose modules import a driver, and those modules.
_LAZY = {
    "RedisOptionError": "redis",
    "RedisStore": "redis",
    "redacted_url": "redis",
    "VercelKVStore": "vercel_kv",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
