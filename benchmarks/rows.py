"""The rows of ``python -m benchmarks``: each operation next to its baseline.

Every function here takes the running :class:`Environment` and the
:class:`Sizes` and returns :class:`~benchmarks.harness.Row` objects.  Values
are the same 200-byte JSON document everywhere (:data:`VALUE`); the accessor
side is always encrypted (AES-256-GCM, key bound to the storage key) and uses
``session`` scope.
"""

from __future__ import annotations

import binascii
import json
import json.scanner
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.cluster
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from remember_sync import Identity, RememberPlugin
from remember_sync._keys import scope_prefix
from remember_sync.accessor import RememberAccessor
from remember_sync.identity import resolve_namespace
from remember_sync.stores._index_lua import STANDALONE_SLACK_MS
from remember_sync.stores.redis import RedisStore
from remember_sync.testing.kv_emulator import KVEmulator
from remember_sync.testing.redis_server import RedisCluster, RedisServer

from .harness import MIN_ROUNDS, Op, Row, compare, percentile, spread_of
from .langgraph_store import rows_langgraph
from .search import rows_search

__all__ = ["Environment", "FULL", "QUICK", "Sizes", "VALUE", "all_rows"]

SECRET = "benchmark-secret-0123456789abcdef0123456789"
TOKEN = "benchmark-kv-token"
PREFIX = "remember:"
#: The accessor's session and the bare baseline's: equal lengths, so equal key sizes.
SESSION = "bench-session-1"
BARE_SESSION = "bare-session-01"


def _session_head(session: str) -> str:
    """The storage-key head of *session*'s session scope, as code without the library spells it."""
    return f"{PREFIX}v2:session:{session}:"

VALUE: dict[str, Any] = {
    "role": "assistant",
    "topic": "deploy",
    "text": "x" * 129,
    "tokens": 1234,
    "ok": True,
}
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads
VALUE_JSON = _dumps(VALUE)
assert len(VALUE_JSON) == 200, len(VALUE_JSON)

#: Keys each get/set row cycles through (all preloaded for reads).
KEYS = 100


@dataclass(frozen=True)
class Sizes:
    """How long and how big each row runs."""

    #: Seconds of measurement per comparison (both sides together).
    seconds: float = 4.0
    #: Target duration of one block of operations (see :func:`benchmarks.harness.compare`).
    block_seconds: float = 0.025
    #: Fewest throughput pairs (and as many latency pairs) per comparison.
    min_pairs: int = 6
    #: Writes per side and round of the "Redis CPU per write" row.
    cpu_writes: int = 2_000
    #: Entries in the namespace that ``entries()`` reads (row 4).
    entries_keys: int = 100
    #: Keys in the namespace that ``list()`` reads (row 5).
    list_keys: int = 10
    #: Keys of other namespaces in the database for the ``list()`` rows.
    list_db_sizes: tuple[int, ...] = (1_000, 100_000)
    #: The same, memory and Redis only (filled with pipelined bulk writes).
    list_big_db_sizes: tuple[int, ...] = (1_000_000,)
    #: Older (unindexed) entries for the reindex row.
    reindex_keys: int = 100_000
    #: Namespace sizes of the search rows (targets are set for 1,000 and 10,000).
    search_entries: tuple[int, ...] = (1_000, 10_000)
    #: Thread counts of row 6; the first is the reference.
    threads: tuple[int, ...] = (1, 2, 4, 8)
    #: Operations per thread-count run (split between the threads).
    thread_ops: int = 12_000
    #: Interleaved rounds over the thread counts (half of them time each operation).
    thread_rounds: int = 6
    #: Legacy keys for the purge row.
    purge_keys: int = 100_000
    #: Seconds per server for the ``tools/call`` row.
    tools_seconds: float = 5.0
    #: Seconds per server for the ``tools/call`` row under gunicorn (in rounds of 0.5 s).
    gunicorn_seconds: float = 6.0
    #: Groups to run (``None``: all).
    only: frozenset[str] | None = field(default=None)


FULL = Sizes()
QUICK = Sizes(
    seconds=1.0,
    list_db_sizes=(1_000, 20_000),
    list_big_db_sizes=(),
    reindex_keys=20_000,
    cpu_writes=1_000,
    thread_ops=6_000,
    thread_rounds=5,
    purge_keys=20_000,
    tools_seconds=1.5,
    gunicorn_seconds=3.0,
)


def _timing(sizes: Sizes, longer: float = 1.0, blocks: float = 1.0) -> dict[str, Any]:
    return {
        "seconds": sizes.seconds * longer,
        "block_seconds": sizes.block_seconds * blocks,
        "min_pairs": sizes.min_pairs,
    }


# -- the environment: servers on loopback ---------------------------------------------------


class Environment:
    """A redis-server, a 3-primary Redis Cluster and a Vercel KV emulator on 127.0.0.1.

    Use as a context manager: everything started is stopped on exit, including
    on ``KeyboardInterrupt``.
    """

    def __init__(self) -> None:
        self._stack = ExitStack()
        self.redis: RedisServer | None = None
        self.cluster: RedisCluster | None = None
        self.kv: KVEmulator | None = None
        self.redis_version = ""
        #: The ``redis-server`` executable every server of the run was started from.
        self.redis_binary = ""

    def __enter__(self) -> Environment:
        try:
            self.redis = self._stack.enter_context(RedisServer())
            self.redis_binary = self.redis.binary
            self.cluster = self._stack.enter_context(RedisCluster(self.redis_binary))
            # The emulator keeps its data in database 1 of the standalone server.
            self.kv = self._stack.enter_context(
                KVEmulator(f"redis://127.0.0.1:{self.redis.port}/1", TOKEN)
            )
            client = self.redis.client()
            try:
                self.redis_version = str(client.info("server")["redis_version"])
            finally:
                client.close()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def redis_major(self) -> int:
        """The major version of the run's ``redis-server``."""
        return int(self.redis_version.split(".")[0])

    def client(self, db: int = 0) -> redis.Redis:
        """A bare redis-py client with default settings."""
        assert self.redis is not None
        return redis.Redis(host="127.0.0.1", port=self.redis.port, db=db)

    def cluster_client(self) -> redis.cluster.RedisCluster:
        assert self.cluster is not None
        return self.cluster.client()

    def flush(self) -> None:
        """Empty every database of every server."""
        client = self.client()
        try:
            client.flushall()
        finally:
            client.close()
        assert self.cluster is not None
        self.cluster.flushall()

    # -- plugins -------------------------------------------------------------------------

    def plugin(self, kind: str, *, db: int = 0, listing: str = "index") -> RememberPlugin:
        """An encrypted plugin on *kind*: memory, redis, redis-cluster or vercel-kv."""
        common: dict[str, Any] = {
            "encryption": {"secrets": [SECRET]},
            "skip_legacy_purge": True,
            "listing": listing,
        }
        if kind == "memory":
            return RememberPlugin.init(**common)
        if kind == "redis":
            assert self.redis is not None
            return RememberPlugin.init(
                type="redis",
                config={"host": "127.0.0.1", "port": self.redis.port, "db": db},
                **common,
            )
        if kind == "redis-cluster":
            return RememberPlugin.init(store=RedisStore(client=self.cluster_client()), **common)
        if kind == "vercel-kv":
            assert self.kv is not None
            return RememberPlugin.init(type="vercel-kv", url=self.kv.url, token=TOKEN, **common)
        raise ValueError(kind)


@contextmanager
def _plugin(
    env: Environment, kind: str, *, db: int = 0, listing: str = "index"
) -> Iterator[RememberPlugin]:
    plugin = env.plugin(kind, db=db, listing=listing)
    backfill = plugin.index_backfill
    if backfill is not None and not backfill.wait(60):  # its one pass, before any timing
        raise RuntimeError("the background reindex did not finish")
    try:
        yield plugin
    finally:
        plugin.close()
        if kind == "redis-cluster":  # a passed-in client: the plugin leaves it open
            plugin.store.client.close()  # type: ignore[attr-defined]


def _keys(n: int = KEYS) -> list[str]:
    return [f"note-{i:04d}" for i in range(n)]


def _preload(mem: Any, keys: list[str]) -> None:
    for key in keys:
        mem.set(key, VALUE)
    if mem.get(keys[0]) != VALUE:
        raise RuntimeError("the accessor did not read back what it wrote")


# -- row 1: accessor get/set vs bare redis-py --------------------------------------------------

#: Row 1's writes expire after an hour on both sides (``SET ... PX``), as users' usually do.
WRITE_TTL_S = 3600
WRITE_TTL_MS = WRITE_TTL_S * 1000


def _bare_ops(client: Any, keys: list[str]) -> tuple[Op, Op]:
    """A user's own code without the library: JSON-encode and SET PX, GET and JSON-decode."""
    full = [_session_head(BARE_SESSION) + k for k in keys]
    n = len(full)
    get, set_ = client.get, client.set
    for key in full:
        set_(key, VALUE_JSON)

    def bare_get(i: int) -> object:
        return _loads(get(full[i % n]))

    def bare_set(i: int) -> object:
        return set_(full[i % n], _dumps(VALUE), px=WRITE_TTL_MS)

    return bare_get, bare_set


def _index_of(session: str) -> str:
    """The listing index of *session*'s session scope, as code without the library spells it."""
    return f"{PREFIX}__index__:v2:session:{session}:"


def _multi_write(client: redis.Redis, gt: bool) -> Callable[[bytes, bytes], object]:
    """The same writes as an indexed ``set`` in one round trip: one ``MULTI``.

    ``SET ... PX`` of the entry, ``ZADD`` of its deadline (the client's clock)
    to the bare session's index and the index's expiry (``PEXPIREAT ... GT``
    from Redis 7 on, a bare ``PEXPIREAT`` before).  What a user would write
    without the library's rules (see ``docs/benchmarks.rst``).
    """
    index = _index_of(BARE_SESSION).encode()

    def write(key: bytes, value: bytes) -> object:
        deadline = time.time_ns() // 1_000_000 + WRITE_TTL_MS
        pipe = client.pipeline(transaction=True)
        pipe.set(key, value, px=WRITE_TTL_MS)
        pipe.zadd(index, {key: deadline})
        pipe.pexpireat(index, deadline + STANDALONE_SLACK_MS, gt=gt)
        return pipe.execute()

    return write


def _multi_set(client: redis.Redis, keys: list[str], gt: bool) -> Op:
    """``json.dumps`` + :func:`_multi_write` over the bare session's *keys*, cycling."""
    full = [(_session_head(BARE_SESSION) + k).encode() for k in keys]
    n = len(full)
    write = _multi_write(client, gt)

    def multi_set(i: int) -> object:
        return write(full[i % n], _dumps(VALUE).encode())

    return multi_set


def _accessor_ops(
    mem: RememberAccessor, keys: list[str], ttl: int | None = None
) -> tuple[Op, Op]:
    """The accessor's get and set (with *ttl* seconds, or none) over *keys*, cycling."""
    n = len(keys)

    def get(i: int) -> object:
        return mem.get(keys[i % n])

    def set_(i: int) -> object:
        mem.set(keys[i % n], VALUE, ttl=ttl)
        return None

    return get, set_


_MULTI_LABEL = "same writes in one MULTI (redis-py)"


def rows_redis_get_set(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 1: accessor get/set (encrypted, session scope) vs bare redis-py.

    ``set`` writes with a TTL on both sides.  On standalone Redis ``set`` is
    decided against the same writes in one ``MULTI`` and reported against a
    bare ``SET``; on a Cluster against a bare ``SET``.
    """
    rows: list[Row] = []
    for kind in ("redis", "redis-cluster"):
        bare = env.client() if kind == "redis" else env.cluster_client()
        try:
            with _plugin(env, kind) as plugin:
                mem = plugin.accessor(Identity(session_id=SESSION))
                keys = _keys()
                _preload(mem, keys)
                ours_get, ours_set = _accessor_ops(mem, keys, WRITE_TTL_S)
                bare_get, bare_set = _bare_ops(bare, keys)
                bare_label = "json.dumps + redis-py SET PX"
                cases: list[tuple[str, Op, Op, str, float | None]]
                if isinstance(bare, redis.Redis):
                    multi = _multi_set(bare, keys, gt=env.redis_major >= 7)
                    cases = [
                        ("get", ours_get, bare_get, "redis-py GET + json.loads", 1.3),
                        ("set", ours_set, multi, _MULTI_LABEL, 1.3),
                        ("set, vs bare SET", ours_set, bare_set, bare_label, 1.5),
                    ]
                else:
                    cases = [
                        ("get", ours_get, bare_get, "redis-py GET + json.loads", None),
                        ("set", ours_set, bare_set, bare_label, 1.5),
                    ]
                for op, ours, base, label, target in cases:
                    c = compare(ours, base, **_timing(sizes))
                    rows.append(
                        Row.from_comparison(
                            c,
                            group="1",
                            operation=op,
                            store=kind,
                            baseline=label,
                            ratio_kind="time",
                            target=target,
                        )
                    )
        finally:
            bare.close()
    rows.append(_redis_cpu_row(env, sizes))
    rows.append(_index_cost_row(env, sizes, "redis", "1"))
    return rows


#: Commands that run others inside them: INFO commandstats counts the inner ones
#: twice (in the outer command's time and in their own line).
_CONTAINERS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "exec"})
#: The measurement's own commands.
_HOUSEKEEPING = ("config", "info")


def _server_usec(client: redis.Redis, writes: int) -> float:
    """Microseconds of Redis CPU per write since the last ``CONFIG RESETSTAT``.

    The sum of ``usec`` over the top-level commands of ``INFO commandstats``:
    when the window ran scripts or transactions, those (and ``MULTI``) --
    their time includes the commands they ran -- and each write must then be
    exactly one of them; otherwise every command.
    """
    stats: dict[str, Any] = client.info("commandstats")
    lines = {
        name.removeprefix("cmdstat_"): value
        for name, value in stats.items()
        if not name.removeprefix("cmdstat_").startswith(_HOUSEKEEPING)
    }
    outer = {name: v for name, v in lines.items() if name in _CONTAINERS}
    if outer:
        calls = sum(int(v["calls"]) for v in outer.values())
        if calls != writes:
            raise RuntimeError(f"{writes} writes ran {calls} scripts/transactions: {sorted(lines)}")
        outer.update({n: v for n, v in lines.items() if n == "multi"})
        lines = outer
    return sum(float(v["usec"]) for v in lines.values()) / writes


def _redis_cpu_row(env: Environment, sizes: Sizes) -> Row:
    """Row 1: Redis CPU per indexed ``set`` vs the same writes in one ``MULTI``.

    Both sides write keys, values and an index of the same sizes (the MULTI
    side writes a value as long as the accessor's stored envelope, under the
    bare session, whose name is as long).  Rounds alternate which side goes
    first; each side's window starts with ``CONFIG RESETSTAT``.
    """
    rounds = max(sizes.min_pairs, MIN_ROUNDS)
    writes = sizes.cpu_writes
    with _plugin(env, "redis") as plugin:
        mem = plugin.accessor(Identity(session_id=SESSION))
        keys = _keys()
        ours_set = _accessor_ops(mem, keys, WRITE_TTL_S)[1]
        client = env.client()
        try:
            for i in range(len(keys)):
                ours_set(i)
            stored = client.get(_session_head(SESSION) + keys[0])
            if stored is None:
                raise RuntimeError("the accessor's entry is not where the row looks for it")
            full = [(_session_head(BARE_SESSION) + k).encode() for k in keys]
            write = _multi_write(client, gt=env.redis_major >= 7)
            value = b"x" * len(stored)

            def multi_set(i: int) -> object:
                return write(full[i % len(full)], value)

            for i in range(len(keys)):
                multi_set(i)
            usec: dict[str, list[float]] = {"ours": [], "base": []}
            sides = [("ours", ours_set), ("base", multi_set)]
            for rnd in range(rounds):
                for name, op in sides if rnd % 2 == 0 else reversed(sides):
                    client.config_resetstat()
                    for i in range(writes):
                        op(i)
                    usec[name].append(_server_usec(client, writes))
        finally:
            client.close()
    ratios = [o / b for o, b in zip(usec["ours"], usec["base"], strict=True)]
    ours_us, base_us = statistics.median(usec["ours"]), statistics.median(usec["base"])
    return Row(
        group="1",
        operation="Redis CPU per write",
        store="redis",
        ops_per_s=1e6 / ours_us,
        p50_us=None,
        p99_us=None,
        baseline=_MULTI_LABEL,
        baseline_ops_per_s=1e6 / base_us,
        ratio=statistics.median(ratios),
        ratio_kind="time",
        target=2.0,
        note=(
            f"INFO commandstats, usec per write: {ours_us:.1f} (set) vs {base_us:.1f} (MULTI);"
            " ops/s = writes per second of Redis CPU"
        ),
        extra={"usec": usec["ours"], "baseline_usec": usec["base"], "writes": writes},
        spread=spread_of(ratios),
        rounds=rounds,
    )


def _index_cost_row(env: Environment, sizes: Sizes, kind: str, group: str) -> Row:
    """The listing index's write cost: ``set`` keeping it vs ``set`` with ``listing="scan"``."""
    with _plugin(env, kind) as indexed, _plugin(env, kind, db=5, listing="scan") as scanning:
        keys = _keys()
        ours = indexed.accessor(Identity(session_id=SESSION))
        base = scanning.accessor(Identity(session_id=BARE_SESSION))
        _preload(ours, keys)
        _preload(base, keys)
        ours_set = _accessor_ops(ours, keys)[1]
        base_set = _accessor_ops(base, keys)[1]
        c = compare(ours_set, base_set, **_timing(sizes))
    if kind == "redis":
        client = env.client(db=5)
        try:
            client.flushdb()
        finally:
            client.close()
    return Row.from_comparison(
        c,
        group=group,
        operation="set, index upkeep",
        store=kind,
        baseline="set with listing='scan'",
        ratio_kind="time",
        note="what keeping the listing index adds to a write (one Lua script on Redis)",
    )


# -- row 2: memory store vs the inline floor -------------------------------------------------


class _Floor:
    """The cost floor of encrypted memory: a dict, a lock, and the same JSON and AES-GCM work.

    Writes the same entry JSON and the same envelope (``kid``, key-bound AAD)
    as the accessor; reads parse and open it and return the value.  No
    validation, no identity, no expiry -- that is what makes it a floor.
    """

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()
        self.aead = AESGCM(os.urandom(32))

    def set(self, key: str, value: Any) -> None:
        now = time.time_ns() // 1_000_000
        text = _dumps({"value": value, "createdAt": now, "updatedAt": now}).encode()
        iv = os.urandom(12)
        sealed = self.aead.encrypt(iv, text, key.encode())
        envelope = (
            f'{{"alg":"A256GCM","kid":"AAAAAAAA","aad":"key","iv":"{_b64e(iv)}",'
            f'"tag":"{_b64e(sealed[-16:])}","data":"{_b64e(sealed[:-16])}"}}'
        )
        with self.lock:
            self.data[key] = envelope

    def get(self, key: str) -> Any:
        with self.lock:
            envelope = self.data.get(key)
        if envelope is None:
            return None
        env = _loads(envelope)
        plaintext = self.aead.decrypt(
            _b64d(env["iv"]), _b64d(env["data"]) + _b64d(env["tag"]), key.encode()
        )
        return _loads(plaintext)["value"]


_URLSAFE = bytes.maketrans(b"+/", b"-_")
_PADDING = ("", "===", "==", "=")
#: The same two for bytes (the row 4 envelope floor decodes what redis-py returns).
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
_PAD = (b"", b"===", b"==", b"=")


def _b64e(data: bytes) -> str:
    # binascii directly (base64.urlsafe_b64encode is the same work behind more calls):
    # the floor should be the cheapest honest way to do this work.
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").translate(_URLSAFE).decode()


def _b64d(text: str) -> bytes:
    return binascii.a2b_base64(text.replace("-", "+").replace("_", "/") + _PADDING[len(text) % 4])


def rows_memory_floor(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 2: the memory store through the accessor vs :class:`_Floor`."""
    rows: list[Row] = []
    with _plugin(env, "memory") as plugin:
        mem = plugin.accessor(Identity(session_id=SESSION))
        keys = _keys()
        _preload(mem, keys)
        floor = _Floor()
        full = [_session_head(BARE_SESSION) + k for k in keys]
        for key in full:
            floor.set(key, VALUE)
        if floor.get(full[0]) != VALUE:
            raise RuntimeError("the floor did not read back what it wrote")
        n = len(keys)
        label = "dict+Lock+AES-GCM+JSON inline"
        ours_get, ours_set = _accessor_ops(mem, keys)

        def floor_get(i: int) -> object:
            return floor.get(full[i % n])

        def floor_set(i: int) -> object:
            floor.set(full[i % n], VALUE)
            return None

        for op, ours, base in (("get", ours_get, floor_get), ("set", ours_set, floor_set)):
            c = compare(ours, base, **_timing(sizes))
            rows.append(
                Row.from_comparison(
                    c,
                    group="2",
                    operation=op,
                    store="memory",
                    baseline=label,
                    ratio_kind="time",
                    target=2.0,
                )
            )
    rows.append(_index_cost_row(env, sizes, "memory", "2"))
    return rows


# -- row 3: update vs get + set -----------------------------------------------------------------


def _update_ops(mem: RememberAccessor, keys: list[str]) -> tuple[Op, Op]:
    """``update`` and ``get`` + ``set`` over *keys*, cycling."""
    n = len(keys)

    def update(i: int) -> object:
        if not mem.update(keys[i % n], VALUE):
            raise RuntimeError("update found no entry")
        return True

    def get_set(i: int) -> object:
        key = keys[i % n]
        mem.get(key)
        mem.set(key, VALUE)
        return True

    return update, get_set


def rows_update(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 3: atomic ``update`` vs ``get`` then ``set`` through the accessor."""
    rows: list[Row] = []
    for kind in ("memory", "redis", "redis-cluster"):
        with _plugin(env, kind) as plugin:
            mem = plugin.accessor(Identity(session_id=SESSION))
            keys = _keys()
            _preload(mem, keys)
            update, get_set = _update_ops(mem, keys)
            rows.append(
                _cas_row(plugin, update, get_set, sizes, "3", "update", kind, "get + set", 1.2)
            )
    return rows


def _cas_row(
    plugin: RememberPlugin,
    ours: Op,
    base: Op,
    sizes: Sizes,
    group: str,
    operation: str,
    store: str,
    baseline: str,
    target: float,
) -> Row:
    """A 'time' row of a compare-and-set write through the accessor vs *baseline*.

    Fails loudly if the compare-and-set ever retried: nothing else writes during it.
    """
    c = compare(ours, base, **_timing(sizes))
    if plugin.stats()["cas_retries"]:
        raise RuntimeError(f"{operation} retried its compare-and-set with no concurrent writer")
    return Row.from_comparison(
        c,
        group=group,
        operation=operation,
        store=store,
        baseline=f"{baseline} (accessor)",
        ratio_kind="time",
        target=target,
    )


# -- row 4: entries() vs one get per key ----------------------------------------------------


def _entries_ops(mem: RememberAccessor, keys: list[str]) -> tuple[Op, Op]:
    """One ``entries()`` call, and one ``get`` per key."""

    def batched(i: int) -> object:
        return mem.entries()

    def one_by_one(i: int) -> object:
        return [mem.get(k) for k in keys]

    return batched, one_by_one


def _list_op(mem: RememberAccessor) -> Op:
    def list_keys(i: int) -> object:
        return mem.list()

    return list_keys


_FLOOR_NOTES = {
    "entries() floor, binary": (
        "SCAN+MGET pipelined; bare iv||ciphertext||tag values; AES-GCM + JSON scan per value"
    ),
    "entries() floor, envelope": (
        "SCAN+MGET pipelined; the accessor's own stored envelopes; base64 + AES-GCM"
        " + JSON scan per value"
    ),
}

#: json's C scanner, as the library uses: json.loads adds about 3 us per value
#: (encoding detection, the decoder's Python wrapper), which is not a floor.
_scan = json.scanner.make_scanner(json.JSONDecoder())


def _pipelined_read(client: redis.Redis, glob: bytes, keys: list[bytes]) -> list[bytes]:
    """One round trip: ``SCAN`` of *glob* (one page) and ``MGET`` of *keys*."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("SCAN", 0, "MATCH", glob, "COUNT", 1000)
    pipe.execute_command("MGET", *keys)
    (_cursor, page), values = pipe.execute()
    if len(page) != len(keys):
        raise RuntimeError("a floor's SCAN did not see every key")
    return list(values)


def _binary_floor(client: redis.Redis, n: int) -> Op:
    """The least work any encrypted ``entries()`` of *n* keys can do.

    Writes *n* entries (the accessor's plaintext JSON) as bare binary
    ``iv || ciphertext || tag`` values, bound to their key, and returns an
    operation that reads them as ``entries()`` does at best: one pipelined
    ``SCAN`` + ``MGET`` of keys it already knows, then per value only the
    AES-GCM decryption and one parse by json's C scanner.  No envelope, no
    base64, no checks, no entry objects.
    """
    aead = AESGCM(os.urandom(32))
    head = _session_head(BARE_SESSION)
    full = [(head + k).encode() for k in _keys(n)]
    now = time.time_ns() // 1_000_000
    text = _dumps({"value": VALUE, "createdAt": now, "updatedAt": now}).encode()
    pipe = client.pipeline(transaction=False)
    for key in full:
        iv = os.urandom(12)
        pipe.set(key, iv + aead.encrypt(iv, text, key))
    pipe.execute()
    glob = head.encode() + b"*"
    decrypt = aead.decrypt

    def floor(i: int) -> object:
        values = _pipelined_read(client, glob, full)
        pairs = zip(full, values, strict=True)
        return [_scan(decrypt(v[:12], v[12:], k).decode(), 0)[0]["value"] for k, v in pairs]

    return floor


def _envelope_floor(plugin: RememberPlugin, ident: Identity, n: int) -> Op:
    """The least work ``entries()`` can do on the values the accessor stored.

    Reads the accessor's own keys and envelopes (the same bytes ``entries()``
    reads) in one pipelined ``SCAN`` + ``MGET``, and per value does only what
    the envelope format needs: base64url-decode IV, tag and data at the
    offsets of the first envelope, AES-GCM with the key-bound associated data,
    and one JSON scan.  No checks, no expiry, no entry objects.
    """
    prefix = plugin.key_prefix
    ns = resolve_namespace(ident, "session", given=True)
    head = scope_prefix(prefix, ns)
    keyring = plugin.keyring
    if keyring is None:
        raise RuntimeError("the benchmark plugin must encrypt")
    decrypt = keyring.key(ns, 0).decrypt
    full = [(head + k).encode() for k in _keys(n)]
    cut = len(prefix)
    glob = head.encode() + b"*"
    store: Any = plugin.store
    client: redis.Redis = store.client
    j = _pipelined_read(client, glob, full)[0].index(b'"iv":"') + 6
    a2b = binascii.a2b_base64

    def floor(i: int) -> object:
        out = []
        for k, v in zip(full, _pipelined_read(client, glob, full), strict=True):
            raw = v.translate(_TO_STANDARD)
            ivtag = a2b(raw[j : j + 16] + raw[j + 25 : j + 47] + b"==")
            data = raw[j + 57 : -2]
            sealed = a2b(data + _PAD[len(data) % 4]) + ivtag[12:]
            out.append(_scan(decrypt(ivtag[:12], sealed, k[cut:]).decode(), 0)[0]["value"])
        return out

    return floor


def rows_entries(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 4: ``entries()`` of N keys vs N ``get`` calls (a speed-up), and its floor on Redis."""
    rows: list[Row] = []
    n = sizes.entries_keys
    targets = {"redis": 10.0, "redis-cluster": None, "vercel-kv": 25.0}
    timing = _timing(sizes, 1.5)
    for kind in ("redis", "redis-cluster", "vercel-kv"):
        env.flush()
        with _plugin(env, kind) as plugin:
            ident = Identity(session_id="bench-entries-1")
            mem = plugin.accessor(ident)
            keys = _keys(n)
            _preload(mem, keys)
            if len(mem.entries()) != n:
                raise RuntimeError("entries() did not return every key")
            batched, one_by_one = _entries_ops(mem, keys)
            measured = [(f"entries() of {n}", compare(batched, one_by_one, **timing))]
            if kind == "redis":
                # The binary floor's keys live in database 1: its SCAN walks a database
                # of n keys, as the others' do.
                bare = env.client(db=1)
                try:
                    floors = (
                        ("entries() floor, envelope", _envelope_floor(plugin, ident, n)),
                        ("entries() floor, binary", _binary_floor(bare, n)),
                    )
                    for name, floor in floors:
                        if floor(0) != [VALUE] * n:
                            raise RuntimeError(f"{name} did not read back what was written")
                        measured.append((name, compare(floor, one_by_one, **timing)))
                    # Relative to its own floor: does not depend on the machine's speed.
                    c = compare(batched, floors[0][1], **timing)
                    own_floor = Row.from_comparison(
                        c,
                        group="4",
                        operation=f"entries() of {n}, vs its floor",
                        store=kind,
                        baseline="entries() floor, envelope",
                        ratio_kind="time",
                        target=1.6,
                        note=(
                            "index read (ZRANGE+MGET pipelined) + decoding vs SCAN+MGET + decoding"
                        ),
                    )
                finally:
                    bare.flushdb()
                    bare.close()
            for operation, c in measured:
                rows.append(
                    Row.from_comparison(
                        c,
                        group="4",
                        operation=operation,
                        store=kind,
                        baseline=f"{n} x get()",
                        ratio_kind="speedup",
                        target=None if operation in _FLOOR_NOTES else targets[kind],
                        note=_FLOOR_NOTES.get(operation, ""),
                    )
                )
            if kind == "redis":
                rows.append(own_floor)
            if env.kv is not None:
                env.kv.reset_log()  # the emulator records every request; keep it small
    env.flush()
    return rows


# -- row 5: list() as the database grows -------------------------------------------------------


def _fill_redis(client: Any, others: int) -> None:
    """*others* keys of other namespaces, pipelined ``MSET`` of 1,000 (per slot on a cluster)."""
    cluster = isinstance(client, redis.cluster.RedisCluster)
    pipe = client.pipeline(transaction=False)
    batch: dict[str, str] = {}
    for i in range(others):
        key = _session_head(f"other-{i:07d}") + "note"
        if cluster:
            pipe.set(key, "x")
            if (i + 1) % 10_000 == 0:
                pipe.execute()
            continue
        batch[key] = "x"
        if len(batch) == 1000:
            pipe.mset(batch)
            batch = {}
            if (i + 1) % 100_000 == 0:
                pipe.execute()
    if batch:
        pipe.mset(batch)
    pipe.execute()


@contextmanager
def _list_pair(env: Environment, kind: str, others: int) -> Iterator[tuple[RememberPlugin, ...]]:
    """Two plugins of *kind*: one on a database holding only the namespace, one beside
    *others* keys of other namespaces.  Redis: databases 2 and 3; Vercel KV: a second
    emulator on database 2 beside the environment's (database 1); Cluster: a second
    3-primary cluster; memory: two stores."""
    with ExitStack() as stack:
        if kind == "redis":
            alone = stack.enter_context(_plugin(env, kind, db=2))
            filled = stack.enter_context(_plugin(env, kind, db=3))
            fill: Any = env.client(db=3)
            stack.callback(fill.close)
        elif kind == "vercel-kv":
            assert env.redis is not None
            second = stack.enter_context(
                KVEmulator(f"redis://127.0.0.1:{env.redis.port}/2", TOKEN)
            )
            alone = RememberPlugin.init(
                type="vercel-kv", url=second.url, token=TOKEN, skip_legacy_purge=True,
                encryption={"secrets": [SECRET]},
            )
            stack.callback(alone.close)
            filled = stack.enter_context(_plugin(env, kind))
            fill = env.client(db=1)
            stack.callback(fill.close)
        elif kind == "redis-cluster":
            other = stack.enter_context(RedisCluster())
            client = other.client()
            stack.callback(client.close)
            alone = RememberPlugin.init(
                store=RedisStore(client=client), skip_legacy_purge=True,
                encryption={"secrets": [SECRET]},
            )
            stack.callback(alone.close)
            filled = stack.enter_context(_plugin(env, kind))
            fill = env.cluster_client()
            stack.callback(fill.close)
        else:
            alone = stack.enter_context(_plugin(env, kind))
            filled = stack.enter_context(_plugin(env, kind))
            fill = None
        for plugin in (alone, filled):
            backfill = plugin.index_backfill
            if backfill is not None and not backfill.wait(60):
                raise RuntimeError("the background reindex did not finish")
        if fill is not None:
            _fill_redis(fill, others)
        else:
            store = filled.store
            for i in range(others):
                store.set(_session_head(f"other-{i:07d}") + "note", "x")
        yield alone, filled


def rows_list(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 5: ``list()`` of a small namespace in a database holding many other keys.

    With the listing index the namespace is read without walking the database,
    so the ratio stays near 1 however many other keys there are.
    """
    rows: list[Row] = []
    keys = _keys(sizes.list_keys)
    for kind in ("memory", "redis", "redis-cluster", "vercel-kv"):
        big = sizes.list_big_db_sizes if kind in ("memory", "redis") else ()
        for others in (*sizes.list_db_sizes, *big):
            env.flush()
            with _list_pair(env, kind, others) as (alone, filled):
                accessors = [p.accessor(Identity(session_id=SESSION)) for p in (alone, filled)]
                for mem in accessors:
                    _preload(mem, keys)
                    if mem.list() != sorted(keys):
                        raise RuntimeError("list() returned the wrong keys")
                c = compare(
                    _list_op(accessors[1]), _list_op(accessors[0]), **_timing(sizes, 1.0, 2.0)
                )
            rows.append(
                Row.from_comparison(
                    c,
                    group="5",
                    operation=f"list() of {len(keys)}, db {others:,}",
                    store=kind,
                    baseline=f"list() of {len(keys)}, db {len(keys)}",
                    ratio_kind="time",
                    target=1.5 if others <= 100_000 else 2.0,
                )
            )
            if env.kv is not None:
                env.kv.reset_log()
    env.flush()
    return rows


# -- row 9: reindex of older entries ----------------------------------------------------------


def rows_reindex(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 9: ``remember-sync reindex`` of older (unindexed) entries, vs a bare SCAN walk.

    Rounds of freshly filled databases (the walk in database 7, the reindex in
    6, the same keys in each), alternating which goes first.
    """
    from remember_sync._ops.reindex import reindex

    rounds = max(sizes.min_pairs, MIN_ROUNDS)
    n = max(1, sizes.reindex_keys // rounds)
    env.flush()
    assert env.redis is not None
    client, walked_db = env.client(db=6), env.client(db=7)
    store = RedisStore(port=env.redis.port, db=6)
    seconds: dict[str, list[float]] = {"scan": [], "reindex": []}
    try:
        for rnd in range(rounds):
            for db in (client, walked_db):
                db.flushdb()
                _fill_redis(db, n)  # n namespaces of one entry, written without the index
            for side in ("scan", "reindex") if rnd % 2 == 0 else ("reindex", "scan"):
                if side == "scan":
                    began = time.perf_counter()
                    walked = sum(1 for _ in walked_db.scan_iter(match=f"{PREFIX}*", count=1000))
                    seconds["scan"].append(time.perf_counter() - began)
                    if walked != n:
                        raise RuntimeError(f"SCAN walked {walked} keys, not {n}")
                else:
                    result = reindex(store, PREFIX)
                    seconds["reindex"].append(result.seconds)
                    if result.indexed != n:
                        raise RuntimeError(f"reindex indexed {result.indexed} of {n} entries")
            indexes = sum(1 for _ in client.scan_iter(match=f"{PREFIX}__index__:*", count=1000))
            if indexes != n:
                raise RuntimeError(f"reindex left {indexes} indexes for {n} entries")
    finally:
        store.close()
        for db in (client, walked_db):
            db.flushdb()
            db.close()
    ratios = [s / r for r, s in zip(seconds["reindex"], seconds["scan"], strict=True)]
    return [
        Row(
            group="9",
            operation=f"reindex of {n:,} older entries",
            store="redis",
            ops_per_s=n / statistics.median(seconds["reindex"]),
            p50_us=None,
            p99_us=None,
            baseline="SCAN COUNT 1000 of the same keys",
            baseline_ops_per_s=n / statistics.median(seconds["scan"]),
            ratio=statistics.median(ratios),
            ratio_kind="throughput",
            note="entries indexed per second (remember-sync reindex), a fresh database per round",
            extra={"seconds": seconds["reindex"], "scan_seconds": seconds["scan"]},
            spread=spread_of(ratios),
            rounds=rounds,
        )
    ]


# -- row 6: threads on the memory store -------------------------------------------------------


#: Builds one thread's operation: called with the thread's index before the clock
#: starts, returns ``pair(i)`` doing one set and one get of key number *i*.
PairMaker = Callable[[int], Callable[[int], None]]


def _accessor_pairs(plugin: RememberPlugin) -> PairMaker:
    keys = _keys()
    n = len(keys)

    def make(index: int) -> Callable[[int], None]:
        mem = plugin.accessor(Identity(session_id=f"bench-thread-{index}"))
        mem.set(keys[0], VALUE)  # derive this thread's key before the clock starts

        def pair(i: int) -> None:
            mem.set(keys[i % n], VALUE)
            mem.get(keys[i % n])

        return pair

    return make


def _floor_pairs(floor: _Floor) -> PairMaker:
    def make(index: int) -> Callable[[int], None]:
        full = [_session_head(f"bench-thread-{index}") + k for k in _keys()]
        n = len(full)

        def pair(i: int) -> None:
            floor.set(full[i % n], VALUE)
            floor.get(full[i % n])

        return pair

    return make


def _thread_run(make: PairMaker, threads: int, ops: int, timed: bool) -> tuple[float, list[float]]:
    """Run *ops* set+get pairs split over *threads*; return (wall seconds, latencies)."""
    per_thread = max(1, ops // threads)
    barrier = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            pair = make(index)
            barrier.wait()
            clock = time.perf_counter
            if timed:
                out = latencies[index]
                for i in range(per_thread):
                    began = clock()
                    pair(i)
                    out.append((clock() - began) / 2)
            else:
                for i in range(per_thread):
                    pair(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    barrier.wait()
    began = time.perf_counter()
    for t in workers:
        t.join()
    wall = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"a benchmark thread failed: {errors[0]!r}") from errors[0]
    return wall / (2 * per_thread * threads), [x for part in latencies for x in part]


def rows_threads(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 6: aggregate ops/s of the memory store with 1, 2, 4, 8 threads.

    The inline floor of row 2 (a dict, a lock, AES-GCM and JSON, no library)
    runs with 1 and with the most threads in the same rounds: its ratio is
    what threads cost this machine for the same kind of work.
    """
    first, most = sizes.threads[0], max(sizes.threads)
    sides = [(t, "memory") for t in sizes.threads] + [(t, "floor") for t in (first, most)]
    per_op: dict[tuple[int, str], list[float]] = {side: [] for side in sides}
    latencies: dict[tuple[int, str], list[float]] = {side: [] for side in sides}
    with _plugin(env, "memory") as plugin:
        makers = {"memory": _accessor_pairs(plugin), "floor": _floor_pairs(_Floor())}
        for maker in makers.values():
            _thread_run(maker, 1, min(sizes.thread_ops, 2000), False)  # warm-up
        for rnd in range(2 * sizes.thread_rounds):
            timed = rnd % 2 == 1
            for threads, kind in sides if (rnd // 2) % 2 == 0 else reversed(sides):
                if timed and kind == "floor":
                    continue  # the floor's throughput is what counts; its latency is row 2's
                seconds, lat = _thread_run(makers[kind], threads, sizes.thread_ops, timed)
                if timed:
                    latencies[threads, kind].extend(lat)
                else:
                    per_op[threads, kind].append(seconds)
    rows: list[Row] = []
    for threads, kind in sides:
        if kind == "floor" and threads == first:
            continue  # the floor's own baseline
        ref = per_op[first, kind]
        ratios = [r / o for o, r in zip(per_op[threads, kind], ref, strict=True)]
        plural = "s" if threads > 1 else ""
        rows.append(
            Row(
                group="6",
                operation=f"{'floor ' if kind == 'floor' else ''}set+get, {threads} thread{plural}",
                store="memory",
                ops_per_s=1.0 / statistics.median(per_op[threads, kind]),
                p50_us=_us(latencies[threads, kind], 0.5),
                p99_us=_us(latencies[threads, kind], 0.99),
                baseline=f"{'floor' if kind == 'floor' else 'same'}, {first} thread",
                baseline_ops_per_s=1.0 / statistics.median(ref),
                ratio=statistics.median(ratios),
                ratio_kind="throughput",
                target=0.7 if threads == most and kind == "memory" else None,
                note=_THREADS_FLOOR_NOTE if kind == "floor" else "",
                extra={"rounds": len(per_op[threads, kind])},
                spread=spread_of(ratios),
                rounds=len(ratios),
            )
        )
    return rows


def _us(samples: list[float], q: float) -> float | None:
    return percentile(samples, q) * 1e6 if samples else None


_THREADS_FLOOR_NOTE = (
    "row 2's inline floor (dict+Lock+AES-GCM+JSON, no library) in the same rounds:"
    " what threads cost this machine"
)


# -- row 7: the legacy purge and tools/call ------------------------------------------------


def rows_purge(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 7a: :mod:`benchmarks.purge` (its own redis-server), rounds of both methods."""
    from . import purge

    rounds = max(sizes.min_pairs, MIN_ROUNDS)
    per_round = max(1, sizes.purge_keys // rounds)
    base, ours = purge.run(per_round, rounds=rounds)
    return [
        Row(
            group="7",
            operation=f"legacy purge of {per_round:,} keys",
            store="redis",
            ops_per_s=ours["keys_per_s"],
            p50_us=None,
            p99_us=None,
            baseline="SCAN COUNT 100 + DEL per key",
            baseline_ops_per_s=base["keys_per_s"],
            ratio=ours["ratio"],
            ratio_kind="speedup",
            note="keys deleted per second; a fresh keyspace per method and round"
            " (benchmarks/purge.py)",
            extra={
                "seconds": ours["round_seconds"],
                "baseline_seconds": base["round_seconds"],
                "commands": ours["commands"],
                "baseline_commands": base["commands"],
            },
            spread=spread_of(ours["ratios"]),
            rounds=rounds,
        )
    ]


def rows_tools(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 7b: :mod:`benchmarks.mcp_tools`: ``tools/call recall`` req/s vs a bare WSGI app."""
    from . import mcp_tools

    rounds = max(sizes.min_pairs, MIN_ROUNDS)
    base, ours = mcp_tools.run(sizes.tools_seconds, rounds=rounds)
    return [
        Row(
            group="7",
            operation=f"tools/call recall, {ours['clients']} clients",
            store="memory (HTTP)",
            ops_per_s=ours["requests_per_s"],
            p50_us=None,
            p99_us=None,
            baseline="bare WSGI app, canned reply",
            baseline_ops_per_s=base["requests_per_s"],
            ratio=ours["ratio"],
            ratio_kind="throughput",
            note="requests per second over HTTP keep-alive, servers taking turns"
            " (benchmarks/mcp_tools.py)",
            extra={"seconds": ours["seconds"], "baseline_seconds": base["seconds"]},
            spread=spread_of(ours["ratios"]),
            rounds=rounds,
        )
    ]


def rows_gunicorn(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 7c: :mod:`benchmarks.gunicorn_tools`: ``recall`` under gunicorn vs a canned app."""
    from . import gunicorn_tools

    assert env.redis is not None
    # Database 2: 0 belongs to the other rows, 1 to the KV emulator.
    out = gunicorn_tools.run(
        f"redis://127.0.0.1:{env.redis.port}/2",
        sizes.gunicorn_seconds,
        min_pairs=sizes.min_pairs,
    )
    settings = f"-w {out['workers']} --threads {out['threads']}"
    return [
        Row(
            group="7",
            operation=f"tools/call recall, gunicorn {settings}, {out['clients']} clients",
            store="redis (HTTP)",
            ops_per_s=out["mcp_rps"],
            p50_us=out["mcp_p50_us"],
            p99_us=out["mcp_p99_us"],
            baseline="canned WSGI app, same gunicorn",
            baseline_ops_per_s=out["canned_rps"],
            ratio=out["ratio"],
            ratio_kind="throughput",
            target=0.5,
            note=(
                "requests per second, keep-alive clients with a session each, rounds"
                " alternating (benchmarks/gunicorn_tools.py)"
            ),
            spread=spread_of(out["ratios"]),
            rounds=len(out["ratios"]),
            extra={
                "pairs": out["pairs"],
                "ratios": out["ratios"],
                "reply_bytes": out["reply_bytes"],
                "baseline_p50_us": out["canned_p50_us"],
                "baseline_p99_us": out["canned_p99_us"],
            },
        )
    ]


# -- row 8: modify / increment vs get + update ----------------------------------------------


def _counter_ops(mem: RememberAccessor, keys: list[str]) -> dict[str, tuple[Op, Op]]:
    """Read-modify-write over *keys*, cycling: ``increment`` and ``modify``.

    Each next to the same change done as ``get`` then ``update`` (which can lose
    a concurrent change): the number plus one, and :data:`VALUE` with its
    ``tokens`` plus one.
    """
    n = len(keys)

    def bump(value: dict[str, Any]) -> dict[str, Any]:
        return {**value, "tokens": value["tokens"] + 1}

    def increment(i: int) -> object:
        return mem.increment(keys[i % n])

    def get_update_number(i: int) -> object:
        key = keys[i % n]
        if not mem.update(key, mem.get(key) + 1):
            raise RuntimeError("update found no entry")
        return True

    def modify(i: int) -> object:
        return mem.modify(keys[i % n], bump)

    def get_update_value(i: int) -> object:
        key = keys[i % n]
        if not mem.update(key, bump(mem.get(key))):
            raise RuntimeError("update found no entry")
        return True

    return {"increment": (increment, get_update_number), "modify": (modify, get_update_value)}


def rows_modify(env: Environment, sizes: Sizes) -> list[Row]:
    """Row 8: exact ``increment`` / ``modify`` vs ``get`` then ``update`` through the accessor."""
    rows: list[Row] = []
    for kind in ("memory", "redis"):
        with _plugin(env, kind) as plugin:
            mem = plugin.accessor(Identity(session_id=SESSION))
            counters = [f"count-{i:04d}" for i in range(KEYS)]
            for key in counters:
                mem.set(key, 0)
            keys = _keys()
            _preload(mem, keys)
            for operation, on in (("increment", counters), ("modify", keys)):
                ours, base = _counter_ops(mem, on)[operation]
                rows.append(
                    _cas_row(plugin, ours, base, sizes, "8", operation, kind, "get + update", 1.3)
                )
    return rows


#: Group name -> (title, function), in table order.
GROUPS: dict[str, tuple[str, Callable[[Environment, Sizes], list[Row]]]] = {
    "1": ("accessor get/set vs bare redis-py", rows_redis_get_set),
    "2": ("memory store vs the inline floor", rows_memory_floor),
    "3": ("update vs get + set", rows_update),
    "4": ("entries() vs one get per key", rows_entries),
    "5": ("list() as the database grows", rows_list),
    "6": ("memory store, threads", rows_threads),
    "7a": ("legacy purge", rows_purge),
    "7b": ("tools/call", rows_tools),
    "7c": ("tools/call under gunicorn", rows_gunicorn),
    "8": ("modify / increment vs get + update", rows_modify),
    "9": ("reindex of older entries", rows_reindex),
    "peer": ("set/get vs cachelib's RedisCache", lambda env, sizes: _peer_rows(env, sizes)),
    "langgraph": ("RememberStore vs LangGraph's InMemoryStore", rows_langgraph),
    "metrics": ("metrics on vs off", lambda env, sizes: _metrics_rows(env, sizes)),
    "search": ("search with the WordLlama embedder; set with it vs without", rows_search),
}


def _peer_rows(env: Environment, sizes: Sizes) -> list[Row]:
    from .peers import rows_peer  # imports this module

    return rows_peer(env, sizes)


def _metrics_rows(env: Environment, sizes: Sizes) -> list[Row]:
    from .metrics import rows_metrics  # imported when the group runs

    return rows_metrics(env, sizes)


def all_rows(
    env: Environment,
    sizes: Sizes,
    progress: Callable[[str], None] = lambda message: None,
) -> list[Row]:
    """Run every group (or ``sizes.only``) in table order."""
    rows: list[Row] = []
    for name, (title, fn) in GROUPS.items():
        if sizes.only is not None and name not in sizes.only and name[0] not in sizes.only:
            continue
        began = time.perf_counter()
        progress(f"[{name}] {title} ...")
        rows.extend(fn(env, sizes))
        progress(f"[{name}] {title}: {time.perf_counter() - began:.1f} s")
    return rows
