"""The ``peer`` group of ``python -m benchmarks``: what a sync Python user would pick instead.

cachelib's :class:`~cachelib.redis.RedisCache` (pallets-eco; the cache behind
Flask-Caching) on the same ``redis-server`` as the accessor: ``set`` with the
same TTL and ``get`` of the same 200-byte value, interleaved in short blocks
by :func:`benchmarks.harness.compare`.  cachelib pickles the value and keeps
it in clear under its own prefix; the accessor encrypts it (AES-256-GCM, key
bound to the storage key), checks the key and scope rules and keeps the
namespace's listing index.  The ratio is ours over cachelib's time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remember_sync import Identity

from .harness import Op, Row, compare

if TYPE_CHECKING:
    from .rows import Environment, Sizes

#: Targets, ours over cachelib's time: ``set`` and ``get``.
SET_TARGET = 1.3
GET_TARGET = 1.2


def _cachelib_ops(port: int, keys: list[str], ttl_s: int, value: object) -> tuple[Op, Op, object]:
    """cachelib's get and set over *keys*, cycling, and the cache (to close)."""
    from cachelib import RedisCache

    cache = RedisCache(host="127.0.0.1", port=port, key_prefix="peer:", default_timeout=ttl_s)
    n = len(keys)
    for key in keys:
        cache.set(key, value)

    def get(i: int) -> object:
        return cache.get(keys[i % n])

    def set_(i: int) -> object:
        return cache.set(keys[i % n], value, timeout=ttl_s)

    return get, set_, cache


def rows_peer(env: Environment, sizes: Sizes) -> list[Row]:
    """``set`` and ``get`` through the accessor vs cachelib's ``RedisCache``, same Redis."""
    from . import rows as r

    assert env.redis is not None
    out: list[Row] = []
    with r._plugin(env, "redis") as plugin:
        mem = plugin.accessor(Identity(session_id=r.SESSION))
        keys = r._keys()
        r._preload(mem, keys)
        ours_get, ours_set = r._accessor_ops(mem, keys, r.WRITE_TTL_S)
        peer_get, peer_set, cache = _cachelib_ops(env.redis.port, keys, r.WRITE_TTL_S, r.VALUE)
        if peer_get(0) != r.VALUE:
            raise RuntimeError("cachelib did not read back what it wrote")
        try:
            for op, ours, base, target in (
                ("set", ours_set, peer_set, SET_TARGET),
                ("get", ours_get, peer_get, GET_TARGET),
            ):
                c = compare(ours, base, **r._timing(sizes))
                out.append(
                    Row.from_comparison(
                        c,
                        group="peer",
                        operation=op,
                        store="redis",
                        baseline="cachelib RedisCache (pickle, clear text)",
                        ratio_kind="time",
                        target=target,
                    )
                )
        finally:
            cache._write_client.close()  # type: ignore[attr-defined]
            cache._read_client.close()  # type: ignore[attr-defined]
    return out
