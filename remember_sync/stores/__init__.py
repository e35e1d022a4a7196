"""The stores: opaque strings under full keys (see :mod:`remember_sync.stores.base`).

The Redis and Vercel KV names are loaded on first use: importing the package imports no driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._glob import glob_matcher
from .base import ItemScanner, ManifestCommit, NamespaceIndex, OwnedWrite, OwnedWrites, Store
from .memory import MemoryStore

if TYPE_CHECKING:
    from .redis import RedisOptionError, RedisStore, redacted_url
    from .vercel_kv import VercelKVStore

__all__ = [
    "ItemScanner", "ManifestCommit", "MemoryStore", "NamespaceIndex", "OwnedWrite",
    "OwnedWrites", "RedisOptionError", "RedisStore", "Store", "VercelKVStore", "glob_matcher",
    "redacted_url",
]  # fmt: skip

#: The names whose modules import a driver, and those modules.
_LAZY = dict.fromkeys(("RedisOptionError", "RedisStore", "redacted_url"), "redis")
_LAZY["VercelKVStore"] = "vercel_kv"


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
