"""Rate limits per principal for the MCP server (``serve --rate-limit 60/minute``).

Counting is done by the ``limits`` library (the ``limits`` extra) with its
*moving window* strategy: at most N requests in any window of the given
length, never a burst of 2N across a window edge.  The counts live where the
plugin's memory lives, so every worker sharing the store shares the limit:

* Redis (standalone, Sentinel or Cluster): the store's own client, through
  ``limits``' Redis storage (one Lua script per request, one key per caller);
* Vercel KV: the same storage and the same Lua scripts, each run as one
  ``EVAL`` through the store's REST client
  (:meth:`~remember_sync.stores.VercelKVStore.run_script`);
* the in-process memory store: ``limits``' memory storage, per process.

The limiter's keys are ``<key prefix>__ratelimit__:...``, a name no memory key
can take (memory keys are ``<prefix>v2:...`` and ``<prefix>global:...``), and
name the caller only by a keyed hash (HMAC under a key derived from the master
secret), never by the principal, session id or address itself.
"""

from __future__ import annotations

import importlib
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import _metrics
from .._crypto import Keyring, b64url_encode
from ..errors import (
    RateLimitOptionError,
    RememberConfigurationError,
    RememberStoreError,
    RememberUnavailableError,
)
from ..stores.base import Store
from ..stores.memory import MemoryStore

#: The name after the key prefix under which the limiter keeps its counts.
RESERVED_NAME = "__ratelimit__"
_INSTALL_HINT = "pip install 'remember-sync[limits]'"


def _limits() -> Any:
    """The ``limits`` package, imported on first use (the ``limits`` extra)."""
    try:
        # By name: its type hints pull redis-py's into the type check, where they clash.
        for name in ("limits", "limits.errors", "limits.storage", "limits.strategies"):
            importlib.import_module(name)
    except ImportError as exc:
        raise RememberConfigurationError(
            f"a rate limit needs the limits package: {_INSTALL_HINT}"
        ) from exc
    return sys.modules["limits"]


def check_rate(text: object, source: str = "rate limit") -> Any:
    """*text* (``"60/minute"``, ``"20/second"``, ``"1000 per hour"``) as a ``limits`` item.

    :param source: what gave it, for the message (``"--rate-limit"``, a variable name).
    :raises RateLimitOptionError: not one rate (a :class:`ValueError` too).
    :raises RememberConfigurationError: the ``limits`` extra is missing.
    """
    limits = _limits()
    items = []
    if isinstance(text, str) and text.strip():
        try:
            items = limits.parse_many(text.strip())
        except ValueError:
            items = []
    if len(items) != 1 or items[0].amount < 1:
        what = f"{source} must" if source else "must"
        raise RateLimitOptionError(
            f"{what} be one rate like 60/minute, 20/second or 1000/hour; got {text!r}", source
        )
    return items[0]


def _storage(store: Store, prefix: str) -> Any:
    """A ``limits`` storage beside *store*: its Redis or REST client, or process memory."""
    limits = _limits()
    key_prefix = prefix + RESERVED_NAME
    if isinstance(store, MemoryStore):
        return limits.storage.MemoryStorage(wrap_exceptions=True)
    kind = _metrics.store_kind(store)
    client = getattr(store, "client", None)
    if kind in ("redis", "redis-cluster") and client is not None:
        return _client_storage(limits, client, key_prefix, None)
    if kind == "vercel-kv" and callable(getattr(store, "run_script", None)):
        return _client_storage(limits, _RestScripts(store), key_prefix, RememberStoreError)
    raise RememberConfigurationError(
        f"a rate limit needs the memory store, Redis or Vercel KV; {type(store).__name__} "
        "has no shared counter the limits package can use (see docs/limits-and-metrics.rst)"
    )


class _RestScripts:
    """What ``limits``' Redis storage asks of a redis-py client for the moving window --
    ``register_script`` -- over a Vercel KV store's REST client (one ``EVAL`` a call)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def register_script(self, script: str | bytes) -> Callable[..., Any]:
        text = script.decode("utf-8") if isinstance(script, bytes) else script

        def run(keys: Sequence[str] = (), args: Sequence[object] = ()) -> Any:
            return self._store.run_script(text, keys, args)

        return run

    def ping(self) -> bool:
        return bool(self._store.run_script("return 1") == 1)


def _client_storage(
    limits: Any, client: Any, key_prefix: str, failures: type[Exception] | None
) -> Any:
    """``limits``' Redis storage over an existing client (redis-py standalone, Sentinel,
    Cluster, as its own Cluster storage does with the client it builds; or
    :class:`_RestScripts`, whose *failures* are the store's errors)."""

    class ClientRedisStorage(limits.storage.RedisStorage):  # type: ignore[misc]
        def __init__(self) -> None:
            self.key_prefix = key_prefix
            self.target_server = "redis"
            self.dependency = self.dependencies["redis"].module
            self.storage = client
            self.initialize_storage("redis://")
            limits.storage.Storage.__init__(self, None, wrap_exceptions=True)

        @property
        def base_exceptions(self) -> Any:
            return failures if failures is not None else super().base_exceptions

    return ClientRedisStorage()


class RateLimiter:
    """At most *rate* requests per caller in any moving window, counted in the store.

    :param rate: ``"60/minute"`` and the like (see :func:`check_rate`).
    :param store: the plugin's store (memory or Redis).
    :param prefix: the plugin's key prefix.
    :param keyring: the master secrets: callers are keyed by an HMAC under them.
    :raises RememberConfigurationError: a bad rate, a store without shared
        counters, or the ``limits`` extra is not installed.
    """

    def __init__(self, rate: str, store: Store, prefix: str, keyring: Keyring) -> None:
        self.item = check_rate(rate)
        self.rate = rate
        self._storage = _storage(store, prefix)
        self._limiter = _limits().strategies.MovingWindowRateLimiter(self._storage)
        self._keyring = keyring

    def __repr__(self) -> str:
        return f"RateLimiter({self.rate!r})"

    def _key(self, caller: str) -> str:
        digest = self._keyring.hmac(b"remember_sync rate limit\x00" + caller.encode("utf-8"))
        return b64url_encode(digest[:18])

    def retry_after(self, caller: str, cost: int = 1) -> int | None:
        """Count *cost* requests of *caller*; ``None`` when allowed, else seconds to wait.

        :param caller: who is asking (see ``SessionGate.rate_callers`` in
            :mod:`remember_sync.mcp._gate`); only its keyed hash reaches the store.
        :raises RememberUnavailableError: the counts cannot be read or written.
        """
        key = self._key(caller)
        failures = (self._storage.base_exceptions, _limits().errors.StorageError)
        try:
            if self._limiter.hit(self.item, key, cost=cost):
                return None
            reset_at = float(self._limiter.get_window_stats(self.item, key).reset_time)
        except failures as exc:
            raise RememberUnavailableError(
                f"the rate limit could not be checked ({type(exc).__name__})", retry_after_s=5
            ) from exc
        return max(1, math.ceil(reset_at - time.time()))
