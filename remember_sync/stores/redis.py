"""Redis store: standalone servers, Redis Cluster, or a client you already have.

Commands are the plain ones (``SET ... PX``, ``SET ... NX``, ``GET``,
``MGET``, ``UNLINK``, ``SCAN ... MATCH ... COUNT``); ``compare_and_set`` is a
three-line Lua script on a single key, so it is atomic and cluster-safe.
On a :class:`redis.cluster.RedisCluster` client, multi-key reads and deletes
are split per hash slot (one ``MGET``/``UNLINK`` per slot, pipelined per node)
and ``SCAN`` walks every primary.

Keys and values are text.  They are sent as UTF-8 bytes and replies are
decoded here, so a passed-in client works whether or not it was built with
``decode_responses=True``.

Every driver exception is translated in :func:`_mapped` -- the one place, by
the table :data:`EXCEPTION_MAP` -- into
:class:`~remember_sync.errors.RememberStoreError` (or
:class:`~remember_sync.errors.RememberConfigurationError` for rejected
credentials, missing ACL permissions and rejected TLS certificates), with the
driver's exception as ``__cause__``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
from collections.abc import Callable, Iterator, Mapping, MutableSet, Sequence
from typing import Any, TypeVar

import redis
import redis.cluster
import redis.exceptions as rx
import redis.sentinel
from redis.exceptions import NoScriptError

from .._bounded import BoundedCache
from .._fork import after_fork_in_child
from .._glob import glob_matcher
from ..errors import (
    RedisOptionError,
    RememberConfigurationError,
    RememberError,
    RememberStoreError,
)
from . import _index_lua as index_lua
from . import _quota_lua as quota_lua
from ._manifest_lua import COMMIT_MANIFEST, READ_WITH_MANIFEST, REPLACE_ENTRY, script_input
from ._owned_redis import OwnedRedisWrites
from ._redis_cas import key_slot, new_token, slot_tag
from ._redis_connect import (
    CLUSTER_SCHEMES,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RETRIES,
    DEFAULT_SOCKET_TIMEOUT,
    DEFAULT_WAIT_TIMEOUT_MS,
    SENTINEL_SCHEMES,
    TLS_FILES,
    ClusterURL,
    NoPrimaryFound,
    SentinelURL,
    check_connection_options,
    check_options,
    check_sentinels,
    check_url_userinfo,
    connection_retry,
    parse_cluster_url,
    parse_sentinel_url,
    redacted_url,
    sentinel_master,
    split_url_options,
    worst_case_seconds,
)
from ._redis_tls import sends_no_client_cert, tls_cause
from .base import (
    CAS_LUA_SCRIPT,
    TEXT_ERRORS,
    IndexOf,
    ManifestCommit,
    MarkerOf,
    check_key,
    check_keys,
    check_scan,
    check_write,
    group_by_index,
    merged_index_of,
    to_bytes,
    to_text,
)

log = logging.getLogger("remember_sync")

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_RETRIES",
    "DEFAULT_SOCKET_TIMEOUT",
    "DEFAULT_WAIT_TIMEOUT_MS",
    "RedisOptionError",
    "RedisStore",
    "redacted_url",
    "worst_case_seconds",
]

#: Keys per MGET/UNLINK command: bounds the size of one request and reply.
_CHUNK = 1000
#: scan_pages and index_pages remember the keys of this many pages (of at most _GUESS_KEYS keys).
_GUESS_PAGES = 512
_GUESS_KEYS = 500


# What each driver exception means to the caller (STYLE 13): an outage or a server error
# (RememberStoreError: retry later), or a configuration mistake -- credentials, ACL, cluster
# policy -- that retrying or reporting as an outage would hide (RememberConfigurationError).
_STORE = (RememberStoreError, "{text}")
_CREDENTIALS = (
    RememberConfigurationError,
    "the server rejected the credentials ({text}); check the Redis password (and username) "
    "in config / the URL",
)
_PERMISSION = (
    RememberConfigurationError,
    "the Redis user lacks a permission ({text}); grant it the string, scan, scripting and "
    "sorted-set commands of the ACL in docs/redis.rst (the listing index's; or set "
    "listing='scan')",
)

#: Exception classes of recent redis-py releases (a connection or cluster outage).
_NEWER_ERRORS = ("MaxClientsReachedError", "RedisClusterUnreachableError")

#: Every exception class of redis-py on its own row (a new one fails a test until it has one):
#: the remember error it becomes, and that error's message.
EXCEPTION_MAP: dict[type[BaseException], tuple[type[RememberError], str]] = {
    **dict.fromkeys(
        # Connection errors are retried first (connection_retry); an error reply (WRONGTYPE,
        # OOM, READONLY during a failover, NOSCRIPT after the reload...) is the server's.
        (rx.RedisError, rx.ConnectionError, rx.TimeoutError, rx.BusyLoadingError,
         rx.MaxConnectionsError, rx.ExternalAuthProviderError, rx.ResponseError,
         rx.NoScriptError, rx.ExecAbortError, rx.ModuleError, rx.NoSuchFieldsetError,
         rx.OutOfMemoryError, rx.ReadOnlyError, rx.TryAgainError, rx.DataError,
         rx.InvalidResponse, rx.ChildDeadlockedError, rx.ClusterError, rx.ClusterDownError,
         rx.MasterDownError, rx.ClusterCrossSlotError, rx.AskError, rx.MovedError,
         rx.RedisClusterException, rx.SlotNotCoveredError, redis.sentinel.SlaveNotFoundError,
         redis.sentinel.ReplicaNotFoundError,
         # Never raised by the store's commands (no pub/sub, WATCH, locks or transactions).
         rx.PubSubError, rx.WatchError, rx.LockError, rx.LockNotOwnedError,
         rx.CrossSlotTransactionError, rx.InvalidPipelineStack,
         # Newer redis-py releases only (8.x): mapped where they exist.
         *(getattr(rx, name) for name in _NEWER_ERRORS if hasattr(rx, name))),
        _STORE,
    ),
    rx.AuthenticationError: _CREDENTIALS,
    rx.AuthenticationWrongNumberOfArgsError: _CREDENTIALS,
    rx.AuthorizationError: _PERMISSION,
    rx.NoPermissionError: _PERMISSION,
    rx.IncorrectPolicyType: (RememberConfigurationError, "{text}"),
    # redis-py appends every sentinel client's full repr: the first sentence is kept.
    redis.sentinel.MasterNotFoundError: (
        RememberStoreError,
        "{first} by the sentinels (none reachable, or the primary is down and no replica has "
        "been promoted yet)",
    ),
    NoPrimaryFound: (RememberStoreError, "{detail}"),
    # A client built with decode_responses=True, reading bytes that are not UTF-8.
    UnicodeError: (RememberStoreError, "not UTF-8 text ({text})"),
}  # fmt: skip

#: What the store's calls catch: every mapped class.
_DRIVER_ERRORS = tuple(EXCEPTION_MAP)


def _mapped(
    operation: str, exc: BaseException, *, no_client_cert: bool = False
) -> RememberError:
    """The remember error for a redis-py exception (raise it ``from exc``): its row of the map.

    *no_client_cert*: the store connects with TLS and sends no client
    certificate (see :func:`~remember_sync.stores._redis_tls.tls_cause`).
    """
    text = str(exc)
    kind, template = next(EXCEPTION_MAP[c] for c in type(exc).__mro__ if c in EXCEPTION_MAP)
    if "executing the script can't run this command" in text:
        kind, template = _PERMISSION  # a command a script runs, refused by the ACL
    message = template.format(
        text=text, first=text.split(" : ", 1)[0], detail=getattr(exc, "detail", text)
    )
    if kind is RememberStoreError:
        tls = tls_cause(exc, no_client_cert=no_client_cert)
        if tls is not None:
            kind = RememberConfigurationError if tls.configuration else RememberStoreError
            message = f"{message} -- {tls.hint}"
    return kind(f"Redis {operation} failed: {message}")


@contextlib.contextmanager
def _translate(operation: str, no_client_cert: bool = False) -> Iterator[None]:
    """Map redis-py exceptions raised inside the block to the remember error tree.

    The single-command methods catch :data:`_DRIVER_ERRORS` inline instead (a
    generator-based context manager costs a few microseconds per call); both
    go through :func:`_mapped`.
    """
    try:
        yield
    except _DRIVER_ERRORS as exc:
        raise _mapped(operation, exc, no_client_cert=no_client_cert) from exc


# The one rule for bytes (base.to_bytes, base.to_text) round-trips keys that are not
# valid UTF-8 (written by someone else) exactly, so scan -> delete can address them.
_b = to_bytes


def _s(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else to_text(raw)


def _decoded(pairs: Sequence[tuple[bytes | str, bytes | str | None]]) -> list[tuple[str, str]]:
    """A page of ``(key, value)`` replies as text, without the keys that have no value.

    Replies are bytes, or str from a decoding client; a listed key whose entry is
    gone by the time its value is read has none.
    """
    live = [(k, v) for k, v in pairs if v is not None]
    try:
        return [
            (k.decode("utf-8", TEXT_ERRORS), v.decode("utf-8", TEXT_ERRORS))  # type: ignore[union-attr]
            for k, v in live
        ]
    except AttributeError:  # a client built with decode_responses=True
        return [(_s(k), _s(v)) for k, v in live]


def _matching(members: list[Any], pattern: bytes) -> list[tuple[Any, str]]:
    """The *members* (bytes, or str) that ``MATCH`` *pattern* keeps on the server, with their text.

    The server compares bytes: ``?`` and ``[...]`` take one byte, not one character.
    A glob of literals and ``*`` only, all ASCII, matches a text exactly when it
    matches its bytes, so the text is matched then (the usual case: no second decode).
    """
    matches = glob_matcher(pattern.decode("latin-1"))  # one character per byte
    if pattern.isascii() and b"?" not in pattern and b"[" not in pattern:
        try:
            return [(m, n) for m in members if matches(n := m.decode("utf-8", TEXT_ERRORS))]
        except AttributeError:  # a client built with decode_responses=True
            return [(m, m) for m in members if matches(m)]
    return [(m, _s(m)) for m in members if matches(_b(_s(m)).decode("latin-1"))]


_Parsed = TypeVar("_Parsed", SentinelURL, ClusterURL)


def _parsed_url(url: str, parse: Callable[[str], _Parsed]) -> _Parsed:
    """*url* parsed by *parse*; a malformed one is named without its password."""
    try:
        return parse(url)
    except ValueError as exc:
        raise RememberConfigurationError(
            f"invalid Redis url {redacted_url(url)!r}: {exc}"
        ) from None


def _options_beside(
    parsed: SentinelURL | ClusterURL, given: Mapping[str, Any], also: set[str], kind: str
) -> dict[str, Any]:
    """The keyword options given beside a ``redis+<kind>://`` URL (credentials, TLS
    files, and *also*), with what the URL says winning, as with ``redis://`` URLs."""
    allowed = {"password", "username", "ssl_check_hostname", *TLS_FILES, *also}
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise RedisOptionError(unknown[0], f"not accepted with a redis+{kind}:// URL")
    options = dict(given)
    for name in ("password", "username", "db"):
        value = getattr(parsed, name, None)
        if value is not None:
            options[name] = value
    return options


class RedisStore(OwnedRedisWrites):
    """A :class:`~remember_sync.stores.base.Store` on Redis, Redis Sentinel or Redis Cluster.

    Either give connection settings (the store creates its own client and
    :meth:`close` closes it) or ``client=`` -- a :class:`redis.Redis` or
    :class:`redis.cluster.RedisCluster` you built -- which is used as is and
    never closed by the store.  Every bad setting raises
    :class:`RedisOptionError` (a
    :class:`RememberConfigurationError`) naming it.

    :param host: server host name.
    :param port: server port.
    :param password: ``AUTH`` password (``None``: no authentication); with
        Sentinel, the data nodes' password.
    :param db: database number (standalone and Sentinel).
    :param ssl: connect with TLS.
    :param username: ACL user name (Redis 6+), with *password*.
    :param client: an existing client.  The connection settings above must then be
        left at their defaults, and the timeouts and ``retries`` do not apply:
        they are whatever that client was built with.
    :param socket_timeout: seconds to wait for a reply (``None``: forever).  A
        timeout is not retried.
    :param socket_connect_timeout: seconds to wait for a connection (``None``: forever).
    :param retries: how many times a connection error (refused, reset, no primary)
        is retried, with exponential backoff, before :class:`RememberStoreError`.
    :param ssl_ca_certs: CA bundle to verify the server with (TLS only).
    :param ssl_certfile: client certificate (TLS only).
    :param ssl_keyfile: client certificate's key (TLS only).
    :param ssl_check_hostname: whether the server certificate must name the host.
    :param sentinels: ``[(host, port), ...]`` of Redis Sentinels; with
        *service_name*, the store talks to that service's primary and follows
        it through failovers (redis-py's :class:`redis.sentinel.Sentinel`).
    :param service_name: the Sentinel service (``sentinel monitor <name> ...``).
    :param sentinel_kwargs: redis-py keyword arguments for the connections to the
        sentinels themselves, merged over the data connections' timeouts and TLS
        settings (e.g. ``{"password": ...}`` when the sentinels need one).
    :param wait_replicas: after each write, ``WAIT`` for this many replicas
        (0: do not wait); fewer acknowledging raises :class:`RememberStoreError`
        with code ``REMEMBER_REPLICATION_INCOMPLETE``.
    :param wait_timeout_ms: how long ``WAIT`` may block (default
        :data:`DEFAULT_WAIT_TIMEOUT_MS`).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6379,
        password: str | None = None,
        db: int = 0,
        ssl: bool = False,
        *,
        username: str | None = None,
        client: redis.Redis | redis.cluster.RedisCluster | None = None,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT,
        socket_connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        ssl_ca_certs: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_check_hostname: bool | None = None,
        sentinels: Sequence[tuple[str, int]] | None = None,
        service_name: str | None = None,
        sentinel_kwargs: Mapping[str, Any] | None = None,
        wait_replicas: int = 0,
        wait_timeout_ms: int | None = None,
    ) -> None:
        # The arguments by name; those that default to None are left out when None.
        options: dict[str, Any] = {k: v for k, v in locals().items() if k not in ("self", "client")}
        tls_names = (*TLS_FILES, "ssl_check_hostname")
        for name in (*tls_names, "sentinels", "service_name", "sentinel_kwargs", "wait_timeout_ms"):
            if options[name] is None:
                del options[name]
        tls_options = {k: options[k] for k in tls_names if k in options}
        check_options(options, tls=ssl)
        if client is not None:
            self._use_client(client, options)
            self._init(client, False, wait=(wait_replicas, wait_timeout_ms))
            return
        conn: dict[str, Any] = {
            "password": password,
            "username": username,
            "db": db,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_connect_timeout,
            "retry": connection_retry(retries),
        }
        if ssl:
            conn.update(ssl=True, **tls_options)
        manager = None
        if sentinels is None and service_name is None:
            if sentinel_kwargs is not None:
                raise RedisOptionError("sentinel_kwargs", "only applies with sentinels")
            built: redis.Redis = redis.Redis(host=host, port=port, **conn)
        else:
            if sentinels is None or service_name is None:
                missing = "sentinels" if sentinels is None else "service_name"
                raise RedisOptionError(missing, "Sentinel needs both sentinels and service_name")
            if host != "127.0.0.1" or port != 6379:
                raise RedisOptionError("host", "not used with sentinels: they name the primary")
            built, manager = sentinel_master(
                check_sentinels(sentinels),
                service_name,
                sentinel_kwargs=sentinel_kwargs,
                connection_kwargs=conn,
            )
        self._init(built, True, manager=manager, wait=(wait_replicas, wait_timeout_ms))

    @staticmethod
    def _use_client(client: object, options: Mapping[str, Any]) -> None:
        """Refuse a *client* that is not a redis-py client, or connection settings beside it."""
        if not isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
            raise RememberConfigurationError(
                "client must be a redis.Redis or redis.cluster.RedisCluster; "
                f"got {type(client).__name__}"
            )
        defaults = {"host": "127.0.0.1", "port": 6379, "password": None, "db": 0, "ssl": False}
        ignored = {"socket_timeout", "socket_connect_timeout", "retries", "wait_replicas"}
        ignored |= {"wait_timeout_ms"}
        clash = [
            name
            for name, value in options.items()
            if name not in ignored and value != defaults.get(name)
        ]
        if clash:
            # Silently ignoring them would connect somewhere the caller did not ask for.
            raise RememberConfigurationError(
                f"RedisStore got client= and {', '.join(clash)}; configure the connection "
                "on the client you pass"
            )

    def _init(
        self,
        client: redis.Redis | redis.cluster.RedisCluster,
        owns: bool,
        *,
        manager: redis.sentinel.Sentinel | None = None,
        wait: tuple[int, int | None] = (0, None),
    ) -> None:
        # redis-py's types describe sync and asyncio clients at once; Any keeps the
        # calls below readable, and every result is checked/decoded here anyway.
        self._client: Any = client
        self._owns = owns
        self._sentinel = manager
        self._cluster = isinstance(client, redis.cluster.RedisCluster)
        #: TLS without a client certificate: a closed connection's error gets a hint.
        self._no_client_cert = sends_no_client_cert(client)
        replicas, timeout_ms = wait
        if replicas and self._cluster:
            raise RedisOptionError(
                "wait_replicas",
                "not supported on Redis Cluster: WAIT only covers the one node it is sent to",
            )
        #: (replicas, timeout ms) for WAIT after each write, or None.
        self._wait = (replicas, timeout_ms or DEFAULT_WAIT_TIMEOUT_MS) if replicas else None
        #: The listing index (use_index): key -> index name, or None while it is off.
        self._index_of: IndexOf | None = None
        #: The compare-and-set markers (use_cas_markers), or None.
        self._marker_of: MarkerOf | None = None
        names = ["SET_INDEXED", "CAS_INDEXED", "CAS_MARKED", "DELETE_INDEXED", "INDEX_ADD"]
        names += ["INDEX_PRUNE", "INDEX_EXPIRE"]
        sources = {name: getattr(index_lua, name) for name in (*names, "PRUNE_MISSING", "REINDEX")}
        sources["CAS"] = CAS_LUA_SCRIPT
        sources["COMMIT_MANIFEST"] = COMMIT_MANIFEST
        sources["READ_WITH_MANIFEST"] = READ_WITH_MANIFEST
        sources["REPLACE_ENTRY"] = REPLACE_ENTRY
        sources.update(quota_lua.SCRIPTS)
        self._scripts = {name: client.register_script(text) for name, text in sources.items()}
        # The keys a page held last time: (pattern, count, cursor) for a SCAN page
        # (standalone), (index, pattern, count, cursor) for an index page.
        self._guesses: BoundedCache[tuple[Any, ...], list[Any]] = BoundedCache(_GUESS_PAGES)
        after_fork_in_child(self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        # The cache's lock may have been held by another thread at the fork (see _fork);
        # redis-py's pools make their own connections in the child.
        self._guesses = BoundedCache(_GUESS_PAGES)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT,
        socket_connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        wait_replicas: int = 0,
        wait_timeout_ms: int | None = None,
        **client_options: Any,
    ) -> RedisStore:
        """A store on the server named by *url*.

        ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` for TLS and
        ``unix:///path.sock?db=N`` are parsed by :meth:`redis.Redis.from_url`;
        ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]``
        (``rediss+sentinel://`` for TLS) names Sentinels and a service, here.
        Extra keyword arguments go to redis-py (values in the URL win over them;
        with a Sentinel URL only the RedisStore options are accepted).  A URL's
        query may hold only the options in ``URL_OPTIONS`` of
        ``_redis_connect`` (``?socket_timeout=2``, ``?ssl_cert_reqs=none`` in a
        ``rediss://`` URL, ...), each checked like the keyword argument; any
        other name is a :class:`RedisOptionError` naming it.
        ``redis+cluster://[[user]:password@]host[:port][,host[:port]...]``
        (``rediss+cluster://`` for TLS) names Redis Cluster nodes to start from
        (database 0, no query).  The store owns the client.  For other Cluster
        settings build a :class:`redis.cluster.RedisCluster` yourself and pass
        it as ``client=``.
        """
        if not isinstance(url, str) or not url:
            raise RememberConfigurationError("Redis url must be a non-empty string")
        scheme = url.partition("://")[0].lower()
        if scheme in (*SENTINEL_SCHEMES, "redis", "rediss"):
            try:
                check_url_userinfo(url)
            except ValueError as exc:
                raise RememberConfigurationError(
                    f"invalid Redis url {redacted_url(url)!r}: {exc}"
                ) from None
        timeouts: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_connect_timeout,
            "retries": retries,
            "wait_replicas": wait_replicas,
        }
        if wait_timeout_ms is not None:
            timeouts["wait_timeout_ms"] = wait_timeout_ms
        if scheme in SENTINEL_SCHEMES:
            return cls._from_sentinel_url(url, timeouts, client_options)
        if scheme in CLUSTER_SCHEMES:
            return cls._from_cluster_url(url, timeouts, client_options)
        if "sentinel_kwargs" in client_options:
            raise RedisOptionError("sentinel_kwargs", "only applies with a redis+sentinel:// URL")
        tls = scheme == "rediss" or client_options.get("ssl") is True
        # The query's options are checked here and passed as keywords, never left in
        # the URL for redis-py to hand, unchecked, to every connection it opens.
        bare_url, in_url = split_url_options(url, tls=tls)
        path = bare_url.partition("://")[2].rpartition("@")[2].partition("/")[2]
        if "db" in in_url and scheme != "unix" and path.strip("/"):
            raise RedisOptionError("url", "names the database twice (in the path and ?db=)")
        settings = {**client_options, **timeouts, **in_url}  # the URL wins, as in redis-py
        check_options(settings, tls=tls)
        wait = (settings.pop("wait_replicas"), settings.pop("wait_timeout_ms", None))
        settings["retry"] = connection_retry(settings.pop("retries"))
        settings["decode_responses"] = False
        try:
            client = redis.Redis.from_url(bare_url, **settings)
            check_connection_options(client.connection_pool)
        except (ValueError, TypeError) as exc:
            raise RememberConfigurationError(
                f"invalid Redis url {redacted_url(url)!r}: {exc}"
            ) from exc
        kwargs = client.connection_pool.connection_kwargs
        if kwargs.get("ssl_cert_reqs") in ("none", ssl.CERT_NONE):
            # Opt-in only (the URL says so), but worth one line in every log.
            log.warning(
                "remember_sync: the Redis URL sets ssl_cert_reqs=none: the server's TLS "
                "certificate is NOT verified (anyone on the path can read and change the "
                "memory); prefer ssl_ca_certs"
            )
        store = cls.__new__(cls)
        store._init(client, True, wait=wait)
        return store

    @classmethod
    def _from_sentinel_url(
        cls, url: str, timeouts: dict[str, Any], client_options: dict[str, Any]
    ) -> RedisStore:
        parsed = _parsed_url(url, parse_sentinel_url)
        options = _options_beside(parsed, client_options, {"db", "sentinel_kwargs"}, "sentinel")
        return cls(
            sentinels=parsed.sentinels,
            service_name=parsed.service_name,
            ssl=parsed.ssl,
            **timeouts,
            **options,
        )

    @classmethod
    def _from_cluster_url(
        cls, url: str, timeouts: dict[str, Any], client_options: dict[str, Any]
    ) -> RedisStore:
        parsed = _parsed_url(url, parse_cluster_url)
        options = _options_beside(parsed, client_options, set(), "cluster")
        check_options({**options, **timeouts}, tls=parsed.ssl)
        nodes = [
            redis.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call]
            for host, port in parsed.nodes
        ]
        try:
            # The client asks a startup node for the slot map as it is built.
            client = redis.cluster.RedisCluster(
                startup_nodes=nodes, ssl=parsed.ssl, decode_responses=False,
                socket_timeout=timeouts["socket_timeout"],
                socket_connect_timeout=timeouts["socket_connect_timeout"], **options,
            )  # fmt: skip
        except (rx.RedisError, rx.RedisClusterException) as exc:
            raise RememberStoreError(
                f"cannot reach the Redis Cluster at {redacted_url(url)!r} "
                f"({type(exc).__name__}: {redacted_url(str(exc))})"
            ) from None
        store = cls.__new__(cls)
        store._init(
            client, True, wait=(timeouts["wait_replicas"], timeouts.get("wait_timeout_ms"))
        )
        return store

    # -- introspection ------------------------------------------------------------

    @property
    def client(self) -> redis.Redis | redis.cluster.RedisCluster:
        """The redis-py client in use."""
        client: redis.Redis | redis.cluster.RedisCluster = self._client
        return client

    @property
    def is_cluster(self) -> bool:
        """Whether the client is a :class:`redis.cluster.RedisCluster`."""
        return self._cluster

    def ping(self) -> bool:
        """Check that the server (every primary, on a cluster) answers."""
        with _translate("PING", self._no_client_cert):
            return bool(self._client.ping())

    # -- the Store protocol -----------------------------------------------------------

    def get(self, key: str) -> str | None:
        check_key(key)
        try:
            name = key.encode("utf-8", TEXT_ERRORS)  # _b, inline: the hot path
            # What client.get() sends (keys= lets a client-side cache see the key).
            raw = self._client.execute_command("GET", name, keys=[name])
            if raw is None or isinstance(raw, str):
                return raw
            return str(raw.decode("utf-8", TEXT_ERRORS))  # _s, inline
        except _DRIVER_ERRORS as exc:
            raise _mapped("GET", exc, no_client_cert=self._no_client_cert) from exc

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        check_keys(keys)
        if not self._cluster and 0 < len(keys) <= _CHUNK:
            # One MGET as get() sends its GET: without redis-py's mget wrapper and a
            # generator context manager, which cost more than a small MGET itself.
            names = [_b(k) for k in keys]
            try:
                values = self._client.execute_command("MGET", *names, keys=names)
            except _DRIVER_ERRORS as exc:
                raise _mapped("MGET", exc, no_client_cert=self._no_client_cert) from exc
            return [None if v is None else _s(v) for v in values]
        out: list[str | None] = []
        with _translate("MGET", self._no_client_cert):
            for start in range(0, len(keys), _CHUNK):
                chunk = [_b(k) for k in keys[start : start + _CHUNK]]
                if self._cluster:
                    # One MGET per hash slot, pipelined per node, re-ordered as asked.
                    values = self._client.mget_nonatomic(chunk)
                else:
                    values = self._client.mget(chunk)
                out += [None if v is None else _s(v) for v in values]
        return out

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        """``SET ... PX ... NX``; an indexed key, standalone: one script that keeps its index.

        With compare-and-set markers (:meth:`use_cas_markers`) an only-if-absent
        write is the compare-and-set script expecting no entry, so that a resend
        after a lost reply answers "written" as it does for a compare-and-set.
        """
        check_write(key, value, ttl_ms)
        if only_if_absent and self._marker_of is not None:
            marker = self._cas_marker(key)
            if marker is not None:  # a create that a resend cannot report as lost
                return self._conditional_set(key, None, value, ttl_ms, marker)
        index = None if self._index_of is None else self._index_of(key)
        if index is not None:
            if not self._cluster:
                px = b"" if ttl_ms is None else str(ttl_ms).encode()
                script_args = [_b(value), px, b"1" if only_if_absent else b""]
                return self._eval("SET_INDEXED", [_b(key), _b(index)], script_args, "SET")
        # execute_command, not client.set(): the same SET without redis-py's keyword
        # parsing, which costs more than the rest of this method.
        args: list[Any] = ["SET", _b(key), _b(value)]
        if ttl_ms is not None:
            args += ["PX", ttl_ms]
        if only_if_absent:
            args.append("NX")
        if index is not None:  # a cluster: the index step and the SET in one round trip
            redo = functools.partial(self._client.execute_command, *args)
            return bool(self._with_index_add(index, [(key, ttl_ms)], (args, _b(key)), redo, "SET"))
        try:
            if self._wait is None:
                done = self._client.execute_command(*args)
            else:
                done, acked = self._with_wait(args)
                if done:
                    self._check_replicas("SET", acked)
        except _DRIVER_ERRORS as exc:
            raise _mapped("SET", exc, no_client_cert=self._no_client_cert) from exc
        return bool(done)

    def _with_wait(self, *commands: list[Any], wait: bool = True) -> list[Any]:
        """Run *commands* (then ``WAIT`` if *wait*) in one round trip; their replies, then WAIT's.

        A failing command raises here (WAIT still ran after it, harmlessly).
        """
        pipe = self._client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        if wait:
            assert self._wait is not None
            pipe.execute_command("WAIT", *self._wait)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _check_replicas(self, operation: str, acked: Any) -> None:
        """Raise if ``WAIT`` reported fewer replicas than ``wait_replicas``."""
        assert self._wait is not None
        wanted, timeout_ms = self._wait
        if int(acked) < wanted:
            raise RememberStoreError(
                f"Redis {operation}: written on the primary but confirmed by only {int(acked)} "
                f"of {wanted} replica(s) within {timeout_ms} ms (WAIT); it may be lost if the "
                "primary fails before replicating it",
                code="REMEMBER_REPLICATION_INCOMPLETE",
            )

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        """The compare-and-set script; with markers (:meth:`use_cas_markers`) a resend is safe.

        redis-py sends a command again when the connection fails after sending
        it; the call's token, recorded in the entry's marker by the write that
        landed, makes the resend answer "written" instead of comparing again.  A
        call whose outcome stays unknown (a timeout, or every retry failed)
        raises :class:`RememberStoreError` saying so.
        """
        check_write(key, value, ttl_ms, expected)
        return self._conditional_set(key, expected, value, ttl_ms, self._cas_marker(key))

    def _conditional_set(
        self, key: str, expected: str | None, value: str, ttl_ms: int | None, marker: bytes | None
    ) -> bool:
        """The compare-and-set (*expected* ``None``: a create, only with a *marker*)."""
        args = [b"" if expected is None else _b(expected), _b(value)]
        args.append(b"" if ttl_ms is None else str(ttl_ms).encode())
        if marker is not None:
            args += [new_token(), str(index_lua.CAS_TOKEN_MS).encode()]
            args.append(b"1" if expected is None else b"")
        index = None if self._index_of is None else self._index_of(key)
        try:
            if index is not None:
                if not self._cluster:
                    keys = [_b(key), _b(index)] if marker is None else [_b(key), _b(index), marker]
                    return self._eval("CAS_INDEXED", keys, args, "compare-and-set")
            name, keys = ("CAS", [_b(key)]) if marker is None else ("CAS_MARKED", [_b(key), marker])
            redo = functools.partial(self._eval, name, keys, args, "compare-and-set")
            if index is None:
                return redo()
            # A cluster: the index step and the script in one round trip.
            command = ["EVALSHA", self._scripts[name].sha, len(keys), *keys, *args]
            pair = (command, _b(key))
            done = self._with_index_add(index, [(key, ttl_ms)], pair, redo, "compare-and-set")
            return int(done) == 1
        except RememberStoreError as exc:
            if isinstance(exc.__cause__, (rx.ConnectionError, rx.TimeoutError)):
                raise RememberStoreError(
                    f"{exc.message} -- its outcome is unknown: the write may have been applied"
                ) from exc.__cause__
            raise

    def use_cas_markers(self, marker_of: MarkerOf) -> None:
        """Keep a compare-and-set marker beside each entry *marker_of* names (see above)."""
        if not callable(marker_of):
            raise RememberConfigurationError("marker_of must be a callable")
        self._marker_of = marker_of

    def _cas_marker(self, key: str) -> bytes | None:
        """*key*'s marker (in its hash slot on a cluster), or ``None`` when it has none."""
        if self._marker_of is None:
            return None
        if not self._cluster:
            name = self._marker_of(key, "")
            return None if name is None else _b(name)
        slot = key_slot(_b(key))
        name = self._marker_of(key, slot_tag(slot))
        if name is None or key_slot(_b(name)) != slot:
            return None  # a prefix whose own braces move the marker's slot
        return _b(name)

    def delete(self, *keys: str) -> int:
        check_keys(keys)
        if self._index_of is not None and keys:
            return self._delete_indexed(keys)
        return self._unlink(keys)

    def _unlink(self, keys: Sequence[str]) -> int:
        removed = 0
        with _translate("UNLINK", self._no_client_cert):
            if self._wait is not None and keys:
                chunks = [
                    ["UNLINK", *(_b(k) for k in keys[start : start + _CHUNK])]
                    for start in range(0, len(keys), _CHUNK)
                ]
                *counts, acked = self._with_wait(*chunks)
                removed = sum(int(n) for n in counts)
                if removed:
                    self._check_replicas("UNLINK", acked)
                return removed
            for start in range(0, len(keys), _CHUNK):
                chunk = [_b(k) for k in keys[start : start + _CHUNK]]
                # On a cluster redis-py splits UNLINK per hash slot and sums the
                # counts, so a batch may mix keys of any slots.
                removed += int(self._client.unlink(*chunk))
        return removed

    # -- verified mode's atomic commit (see remember_sync._integrity) -------------------

    def commit_manifest(self, commit: ManifestCommit) -> str | None:
        """Write *commit*'s entries and manifest in one script if the stored manifest is
        still the one it expects.

        Returns ``None`` when written, else the manifest the store holds (``""``
        for none), having written nothing.  Standalone and Sentinel only: on a
        cluster the keys lie in different hash slots.
        """
        if self._cluster:
            raise RememberConfigurationError("commit_manifest needs one server, not a cluster")
        names, values = script_input(commit)
        keys, args = [_b(k) for k in names], [_b(v) for v in values]
        script = self._scripts["COMMIT_MANIFEST"]
        command = ["EVALSHA", script.sha, len(keys), *keys, *args]
        run: Any = (
            self._client.execute_command  # the write's hot path: no pipeline
            if self._wait is None
            else lambda *c: self._with_wait(list(c))
        )
        with _translate("EVALSHA (commit manifest)", self._no_client_cert):
            try:
                reply = run(*command)
            except NoScriptError:  # a restarted server: nothing ran; load, run again
                self._client.script_load(script.script)
                reply = run(*command)
        done, current = reply if self._wait is None else reply[0]
        if int(done) == 1:
            if self._wait is not None:
                self._check_replicas("commit manifest", reply[1])
            return None
        return _s(current)

    def read_with_manifest(
        self, manifest_key: str, seen: str | None, keys: Sequence[str]
    ) -> tuple[bool, str | None, list[str | None]]:
        """The manifest (unless its token is *seen*) and the values of *keys*, in one script.

        Returns ``(unchanged, manifest or None, values)``.  Standalone and Sentinel only.
        """
        if self._cluster:
            raise RememberConfigurationError("read_with_manifest needs one server, not a cluster")
        script = self._scripts["READ_WITH_MANIFEST"]
        names = [_b(manifest_key), *(_b(k) for k in keys)]
        command = ["EVALSHA", script.sha, len(names), *names, _b(seen or "")]
        with _translate("EVALSHA (read with manifest)", self._no_client_cert):
            try:
                same, manifest, values = self._client.execute_command(*command)
            except NoScriptError:  # a restarted server: load, run again
                self._client.script_load(script.script)
                same, manifest, values = self._client.execute_command(*command)
        text = _s(manifest) if manifest else None
        return int(same) == 1, text, [None if v is None else _s(v) for v in values]

    def replace_entry(
        self, key: str, expected: str | None, value: str | None, ttl_ms: int | None
    ) -> bool:
        """Write *value* (``None``: delete) under *key* only while it holds *expected*
        (``None``: nothing); whether it was written.  One single-key script, on a
        cluster too: verified mode's step (2) of a two-step write.
        """
        px = b"" if ttl_ms is None else str(ttl_ms).encode()
        args = [_b(expected or ""), _b(value or ""), px]
        return self._eval("REPLACE_ENTRY", [_b(key)], args, "replace entry")

    # -- the listing index (NamespaceIndex) --------------------------------------------

    def use_index(self, index_of: IndexOf) -> bool:
        """Keep a sorted-set index per namespace from now on (see ``docs/redis.rst``).

        Returns ``False``: entries already in the database are found only after
        a reindex.
        """
        self._index_of = merged_index_of(self._index_of, index_of)
        return False

    def _eval(self, name: str, keys: list[bytes], args: list[bytes], operation: str) -> bool:
        """Run script *name* (and ``WAIT`` when configured); whether it returned 1."""
        return self._eval_reply(name, keys, args, operation) == 1

    def _eval_reply(self, name: str, keys: list[bytes], args: list[bytes], operation: str) -> int:
        """Run script *name* (and ``WAIT`` when configured); its integer reply.

        A positive reply means something was written: only then is ``WAIT``'s count
        checked.  ``EVALSHA``, and ``SCRIPT LOAD`` + one retry on ``NOSCRIPT`` (a
        restarted or failed-over server has an empty script cache).
        """
        script = self._scripts[name]
        command = ["EVALSHA", script.sha, len(keys), *keys, *args]
        try:
            if self._wait is None:
                # execute_command, not script(): the same EVALSHA without redis-py's
                # argument handling (a write's hot path).
                try:
                    done = self._client.execute_command(*command)
                except NoScriptError:  # a restarted server: nothing ran; load, run again
                    self._client.script_load(script.script)
                    done = self._client.execute_command(*command)
                return int(done)
            try:
                done, acked = self._with_wait(command)
            except NoScriptError:  # nothing was written; WAIT ran for nothing
                self._client.script_load(script.script)
                done, acked = self._with_wait(command)
            if int(done) > 0:
                self._check_replicas(operation, acked)
            return int(done)
        except _DRIVER_ERRORS as exc:
            raise _mapped(operation, exc, no_client_cert=self._no_client_cert) from exc

    def _script(self, name: str, keys: list[bytes], args: list[bytes], operation: str) -> Any:
        """Run script *name* (redis-py's ``Script``: ``NOSCRIPT`` handled); its reply."""
        with _translate(operation, self._no_client_cert):
            return self._scripts[name](keys=keys, args=args, client=self._client)

    def _index_add(self, index: str, members: Sequence[tuple[str, int | None]]) -> None:
        """Cluster, step one of a write: add *members* (key, PX ms or None) to *index*."""
        args = self._index_add_args(members)
        with _translate("index add", self._no_client_cert):
            self._scripts["INDEX_ADD"](keys=[_b(index)], args=args, client=self._client)

    def _with_index_add(
        self,
        index: str,
        members: Sequence[tuple[str, int | None]],
        command: tuple[list[Any], bytes],
        redo: Callable[[], Any],
        operation: str,
    ) -> Any:
        """Cluster: :meth:`_index_add` and the entry's ``(command, key)``, in one round trip.

        Returns the command's reply.  Both are written before either reply is
        read, the index node's first: a client that dies between the two sends
        leaves only the member, which reads verify away.  The two nodes may run
        them in either order; the superset argument (``docs/redis.rst``) only
        needs the add to have happened when the write returns, which holds: a
        step that did not answer cleanly (a redirect, a lost connection,
        ``NOSCRIPT``) is done again on its own through the client's usual path,
        the index step first (:meth:`_index_add`), then the entry's (*redo*,
        whose reply is returned).  A timeout is not repeated (see
        ``_redis_connect``).
        """
        add = ["EVALSHA", self._scripts["INDEX_ADD"].sha, 1, _b(index)]
        add += self._index_add_args(members)
        added, reply = self._send_pair((add, _b(index)), command)
        for failed in (added, reply):
            if isinstance(failed, rx.TimeoutError):
                raise _mapped(operation, failed, no_client_cert=self._no_client_cert) from failed
        if isinstance(added, Exception):
            try:
                self._index_add(index, members)
            except RememberStoreError as exc:
                if isinstance(reply, Exception):
                    raise
                raise RememberStoreError(
                    f"{exc.message} -- the entry was written, but is not listed until it is "
                    "written again or a reindex runs"
                ) from exc.__cause__
        if not isinstance(reply, Exception):
            return reply
        try:
            return redo()
        except _DRIVER_ERRORS as exc:
            raise _mapped(operation, exc, no_client_cert=self._no_client_cert) from exc

    def _send_pair(self, *commands: tuple[list[Any], bytes]) -> list[Any]:
        """Cluster: each ``(command, key)`` sent to its key's primary, then each reply read.

        Every reply, or the exception that took its place (a command that could
        not be sent gets a :class:`redis.exceptions.ConnectionError`).  Commands
        for one node share one connection, in order.
        """
        replies: list[Any] = [rx.ConnectionError("not sent")] * len(commands)
        held: dict[str, tuple[Any, Any, list[list[Any]]]] = {}  # node -> pool, connection, sent
        order: list[Any] = []  # each command's connection
        try:
            try:
                for command, key in commands:
                    node = self._client.get_node_from_key(key)
                    if node.name not in held:
                        pool = self._client.get_redis_connection(node).connection_pool
                        held[node.name] = (pool, pool.get_connection(), [])
                    held[node.name][2].append(command)
                    order.append(held[node.name][1])
                for _, connection, batch in held.values():  # in the order of first use
                    connection.send_packed_command(connection.pack_commands(batch))
            except _DRIVER_ERRORS:
                for _, connection, _ in held.values():
                    connection.disconnect()  # a reply may be unread
                order = []  # not all sent: each is done again on its own
            for n, connection in enumerate(order):
                try:
                    replies[n] = connection.read_response()
                except (rx.ResponseError, rx.ConnectionError, rx.TimeoutError) as exc:
                    replies[n] = exc  # an error reply, or a connection redis-py closed
        except BaseException:
            for _, connection, _ in held.values():
                connection.disconnect()  # replies may be unread: never reused as they are
            raise
        finally:
            for pool, connection, _ in held.values():
                pool.release(connection)
        return replies

    def _index_add_args(self, members: Sequence[tuple[str, int | None]]) -> list[bytes]:
        """INDEX_ADD's arguments: the grace, then each member and its PX ms ("" for none)."""
        args = [str(index_lua.CLUSTER_SLACK_MS).encode()]
        for key, ttl_ms in members:
            args += [_b(key), b"" if ttl_ms is None else str(ttl_ms).encode()]
        return args

    def _index_remove(self, index: str, keys: Sequence[str]) -> None:
        """Cluster, step two of a delete: drop *keys* from *index* unless added recently.

        A member added within the grace may belong to a writer between its two
        steps (added, not yet written): it stays, and a later read drops it.
        """
        args = [str(index_lua.CLUSTER_SLACK_MS).encode()]
        for key in keys:
            args += [_b(key), b""]
        with _translate("index remove", self._no_client_cert):
            self._scripts["INDEX_PRUNE"](keys=[_b(index)], args=args, client=self._client)

    def _delete_indexed(self, keys: Sequence[str]) -> int:
        assert self._index_of is not None
        groups, plain = group_by_index(keys, self._index_of)
        removed = self._unlink(plain) if plain else 0
        if self._cluster:
            # Entries first, then the index: it stays a superset of what exists.
            indexed = [k for members in groups.values() for k in members]
            removed += self._unlink(indexed)
            for index, members in groups.items():
                for start in range(0, len(members), _CHUNK):
                    self._index_remove(index, members[start : start + _CHUNK])
            return removed
        script = self._scripts["DELETE_INDEXED"]
        commands = [
            ["EVALSHA", script.sha, 1 + len(chunk), _b(index), *(_b(k) for k in chunk)]
            for index, members in groups.items()
            for chunk in (members[i : i + _CHUNK] for i in range(0, len(members), _CHUNK))
        ]
        with _translate("UNLINK (indexed)", self._no_client_cert):
            try:
                replies = self._run_all(commands)
            except NoScriptError:  # a restarted server: load and run again (deletes repeat)
                self._client.script_load(script.script)
                replies = self._run_all(commands)
        if self._wait is not None and commands:
            *counts, acked = replies
            count = sum(int(n) for n in counts)
            if count:
                self._check_replicas("UNLINK", acked)
            return removed + count
        return removed + sum(int(n) for n in replies)

    def _run_all(self, commands: list[list[Any]]) -> list[Any]:
        """*commands* in one pipeline (then ``WAIT`` when configured); their replies."""
        return self._with_wait(*commands, wait=self._wait is not None and bool(commands))

    def index_pages(
        self, index: str, pattern: str, *, count: int = 1000
    ) -> Iterator[list[tuple[str, str]]]:
        """Yield the live ``(key, value)`` pairs of *index* matching *pattern*.

        Standalone: an index of at most *count* members is read whole with
        ``ZRANGE`` (the glob matched here, byte by byte as the server does), a
        bigger one in ``ZSCAN`` pages; either is pipelined with an ``MGET`` of
        the members it matched last time (one round trip when nothing changed);
        members that are no entry are dropped by a script that re-checks them.
        Cluster: the page's members (candidates), then their values per hash
        slot; a member without a value is left out but kept (a writer may be
        between its two steps).
        """
        check_scan(pattern, count)
        check_key(index)
        if self._cluster:
            return self._cluster_index_pages(_b(index), _b(pattern), count)
        return self._index_pages(_b(index), _b(pattern), count)

    def _index_pages(
        self, index: bytes, pattern: bytes, count: int
    ) -> Iterator[list[tuple[str, str]]]:
        # See index_pages; no script (the cheapest read), and members new since the last
        # read take a second MGET.
        where = (index, pattern, count)
        guess = self._guesses.get(where)
        with _translate("index read", self._no_client_cert):
            values: list[Any] = []
            try:
                if guess:
                    pipe = self._client.pipeline(transaction=False)
                    pipe.execute_command("ZRANGE", index, 0, count)
                    pipe.execute_command("MGET", *guess)
                    members, values = pipe.execute()
                else:
                    members = self._client.execute_command("ZRANGE", index, 0, count)
            except UnicodeError:
                # A client built with decode_responses=True and a member (or remembered
                # value) that is not UTF-8: the pages' server-side MATCH leaves out the
                # members the glob does not cover, and reports the others.
                members = None
            if members is None or len(members) > count:
                self._guesses.pop(where)  # not to be fetched again while the pages serve
                yield from self._index_scan_pages(index, pattern, count)
                return
            named = _matching(members, pattern)
            members = [m for m, _ in named]
            self._remember(where, members)
            if members != guess:
                known = dict(zip(guess or (), values, strict=True))
                new = [m for m in members if m not in known]
                if new:
                    known.update(zip(new, self._client.mget(new), strict=True))
                values = [known[m] for m in members]
            gone = [m for m, v in zip(members, values, strict=True) if v is None]
            if gone:
                self._scripts["PRUNE_MISSING"](keys=[index], args=gone, client=self._client)
        try:
            page = [
                (n, v.decode("utf-8", TEXT_ERRORS))
                for (_, n), v in zip(named, values, strict=True)
                if v is not None
            ]
        except AttributeError:
            page = [(n, _s(v)) for (_, n), v in zip(named, values, strict=True) if v is not None]
        if page:
            yield page

    def _index_scan_pages(
        self, index: bytes, pattern: bytes, count: int
    ) -> Iterator[list[tuple[str, str]]]:
        # As _scan_pages: a ZSCAN page of the index, with an MGET of the members that
        # page held last time in the same round trip.
        seen: set[bytes | str] = set()
        cursor: Any = 0
        while True:
            where = (index, pattern, count, str(cursor).encode())
            guess = self._guesses.get(where)
            with _translate("index read", self._no_client_cert):
                values: list[Any] = []
                if guess:
                    pipe = self._client.pipeline(transaction=False)
                    pipe.zscan(index, cursor, match=pattern, count=count)
                    pipe.execute_command("MGET", *guess)
                    (after, scored), values = pipe.execute()
                else:
                    after, scored = self._client.zscan(index, cursor, match=pattern, count=count)
                members = [m for m, _ in scored]
                self._remember(where, members)
                if members == guess:
                    known = dict(zip(members, values, strict=True))
                else:
                    known = dict(zip(guess or (), values, strict=True))
                    missing = [m for m in dict.fromkeys(members) if m not in known]
                    if missing:
                        known.update(zip(missing, self._client.mget(missing), strict=True))
                fresh = [m for m in dict.fromkeys(members) if m not in seen]
                seen.update(fresh)
                gone = [m for m in fresh if known[m] is None]
                if gone:
                    self._scripts["PRUNE_MISSING"](keys=[index], args=gone, client=self._client)
            page = _decoded([(m, known[m]) for m in fresh])
            if page:
                yield page
            cursor = int(after)
            if cursor == 0:
                return

    def _cluster_index_pages(
        self, index: bytes, pattern: bytes, count: int
    ) -> Iterator[list[tuple[str, str]]]:
        # Candidates from the index, verified by MGET (per slot); candidates without an
        # entry are dropped only if nobody added them for longer than the grace.
        seen: set[bytes | str] = set()
        cursor: Any = 0
        grace = str(index_lua.CLUSTER_SLACK_MS).encode()
        while True:
            with _translate("index read", self._no_client_cert):
                cursor, scored = self._client.zscan(index, cursor, match=pattern, count=count)
                fresh = [(m, s) for m, s in dict(scored).items() if m not in seen]
                seen.update(m for m, _ in fresh)
                values = self._client.mget_nonatomic([m for m, _ in fresh]) if fresh else []
                gone: list[Any] = []
                for (member, score), value in zip(fresh, values, strict=True):
                    if value is None:
                        gone += [member, str(int(score)).encode()]
                if gone:
                    self._scripts["INDEX_PRUNE"](
                        keys=[index], args=[grace, *gone], client=self._client
                    )
            page = _decoded([(m, v) for (m, _), v in zip(fresh, values, strict=True)])
            if page:
                yield page
            if int(cursor) == 0:
                return

    def prune_indexes(self, pattern: str, *, count: int = 1000) -> int:
        """Cluster: settle every index key matching *pattern*, without reading any entry's value.

        For each index (``SCAN`` of every primary): its members (``ZSCAN``),
        their entries' ``PTTL`` (per hash slot, pipelined), then the members
        whose entry is missing are dropped under the rule every drop follows
        (:data:`~._index_lua.INDEX_PRUNE`: unchanged score, older than the
        grace), and the index's expiry is set from its live entries
        (:data:`~._index_lua.INDEX_EXPIRE`, only while no writer added since and
        none may be in flight).  An index left empty is gone.  Returns how many
        members were dropped.  A standalone server keeps its indexes exact
        itself: nothing to do, 0.
        """
        check_scan(pattern, count)
        if not self._cluster:
            return 0
        return sum(self._prune_index(index, count) for index in self._scan(_b(pattern), count))

    def _prune_index(self, index: str, count: int) -> int:
        name = _b(index)
        grace = str(index_lua.CLUSTER_SLACK_MS).encode()
        with _translate("index prune", self._no_client_cert):
            try:
                scored = list(self._client.zscan_iter(name, count=count))
            except rx.ResponseError as exc:
                if "WRONGTYPE" in str(exc):
                    return 0  # not a sorted set: nobody's index, left as it is
                raise
            if not scored:
                return 0
            top = max(score for _, score in scored)
            gone: list[Any] = []
            longest: int | None = None  # the longest remaining life of a live entry
            for start in range(0, len(scored), _CHUNK):
                part = scored[start : start + _CHUNK]
                for (member, score), ttl in zip(part, self._pttls(part), strict=True):
                    if ttl == -2:
                        gone.append((member, score))
                    elif longest != -1:
                        longest = -1 if ttl == -1 else max(longest or 0, ttl)
            dropped = 0
            for start in range(0, len(gone), _CHUNK):
                args = [grace]
                for member, score in gone[start : start + _CHUNK]:
                    args += [member, str(int(score)).encode()]
                dropped += int(
                    self._scripts["INDEX_PRUNE"](keys=[name], args=args, client=self._client)
                )
            self._scripts["INDEX_EXPIRE"](
                keys=[name],
                args=[grace, str(int(top)).encode(), b"" if longest is None else str(longest)],
                client=self._client,
            )
        return dropped

    def _pttls(self, scored: list[tuple[Any, float]]) -> list[int]:
        """The ``PTTL`` of each member's key (per hash slot, pipelined): -2 missing, -1 none."""
        pipe = self._client.pipeline(transaction=False)
        for member, _ in scored:
            pipe.pttl(member)
        return [int(ttl) for ttl in pipe.execute()]

    def add_to_index(self, keys: Sequence[str]) -> int:
        """Put existing *keys* into their indexes with their current deadlines.

        Standalone: one script per batch (atomic: a key deleted meanwhile is
        skipped).  Cluster: their ``PTTL`` (pipelined), then one index script
        per index; a key deleted in between leaves a member that reads drop.
        """
        if self._index_of is None:
            raise RememberConfigurationError("add_to_index needs use_index() first")
        check_keys(keys)
        groups, _ = group_by_index(keys, self._index_of)
        pairs = [(k, index) for index, members in groups.items() for k in members]
        added = 0
        if not self._cluster:
            for start in range(0, len(pairs), _CHUNK):
                chunk = pairs[start : start + _CHUNK]
                with _translate("reindex", self._no_client_cert):
                    added += int(
                        self._scripts["REINDEX"](
                            keys=[_b(k) for k, _ in chunk],
                            args=[_b(i) for _, i in chunk],
                            client=self._client,
                        )
                    )
            return added
        for start in range(0, len(pairs), _CHUNK):
            chunk = pairs[start : start + _CHUNK]
            with _translate("PTTL", self._no_client_cert):
                pipe = self._client.pipeline(transaction=False)
                for key, _ in chunk:
                    pipe.pttl(_b(key))
                ttls = pipe.execute()
            live: dict[str, list[tuple[str, int | None]]] = {}
            for (key, index), ttl in zip(chunk, ttls, strict=True):
                if int(ttl) != -2:
                    live.setdefault(index, []).append((key, None if int(ttl) < 0 else int(ttl)))
            for index, members in live.items():
                self._index_add(index, members)
                added += len(members)
        return added

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        """Yield the keys matching *pattern* on the server (every primary of a cluster).

        ``SCAN`` may return a key more than once (while the keyspace is being
        rehashed, or during a slot migration); each key is yielded once.
        Errors while iterating are raised as :class:`RememberStoreError` too.
        """
        check_scan(pattern, count)
        return self._scan(_b(pattern), count)

    def _scan(self, pattern: bytes, count: int) -> Iterator[str]:
        seen: set[bytes | str] = set()
        for node in self._scan_nodes():
            cursor: Any = 0
            while True:
                cursor, page = self._scan_page(node, cursor, pattern, count)
                for raw in page:
                    if raw not in seen:
                        seen.add(raw)
                        yield _s(raw)
                if int(cursor) == 0:
                    break

    def _scan_nodes(self) -> list[Any]:
        """What to walk: every primary of a cluster, or ``[None]`` for the one server."""
        if not self._cluster:
            return [None]
        with _translate("SCAN", self._no_client_cert):
            return list(self._client.get_primaries())

    def _scan_page(
        self, node: Any, cursor: Any, pattern: bytes, count: int
    ) -> tuple[Any, list[bytes | str]]:
        """One ``SCAN`` page of *node* (``None``: standalone): the next cursor and keys."""
        with _translate("SCAN", self._no_client_cert):
            if node is None:
                cursor, page = self._client.scan(cursor, match=pattern, count=count)
            else:
                cursors, page = self._client.scan(
                    cursor, match=pattern, count=count, target_nodes=node
                )
                cursor = next(iter(cursors.values()))
        return cursor, list(page)

    def scan_pages(self, pattern: str, *, count: int = 1000) -> Iterator[list[tuple[str, str]]]:
        """Yield the ``(key, value)`` pairs of the keys matching *pattern*, a page at a time.

        Standalone, a page usually costs one round trip: the store remembers
        which keys each ``SCAN`` page held last time and pipelines an ``MGET``
        of those keys right behind the ``SCAN``.  The ``SCAN`` reply decides what
        is yielded; values come from that ``MGET`` (which the server runs after
        the ``SCAN``, as it would run a separate one), and keys it did not cover
        -- new ones -- from a second ``MGET``.  On a cluster every primary is
        walked with ``SCAN`` then ``MGET`` (per hash slot).  A Lua script doing
        both in one call measured slower on a local server (the script's own
        cost exceeded a loopback round trip), and servers that insist on
        declared keys refuse such a script.
        """
        check_scan(pattern, count)
        return self._scan_pages(_b(pattern), count)

    def _scan_pages(self, pattern: bytes, count: int) -> Iterator[list[tuple[str, str]]]:
        seen: set[bytes | str] = set()
        for node in self._scan_nodes():
            cursor: Any = 0
            while True:
                guess = None if node is not None else self._guesses.get((pattern, count, cursor))
                values: list[Any] = []
                if guess:
                    with _translate("SCAN + MGET", self._no_client_cert):
                        pipe = self._client.pipeline(transaction=False)
                        pipe.execute_command("SCAN", cursor, "MATCH", pattern, "COUNT", count)
                        pipe.execute_command("MGET", *guess)
                        (after, page), values = pipe.execute()
                else:
                    after, page = self._scan_page(node, cursor, pattern, count)
                if node is None:
                    self._remember((pattern, count, cursor), page)
                keys = set(page)
                if page == guess and len(keys) == len(page) and seen.isdisjoint(keys):
                    # The usual case: the page holds the keys it held last time, once each.
                    pairs = list(zip(page, values, strict=True))
                    seen |= keys
                else:
                    pairs = self._page_values(node, page, seen, guess, values)
                found = _decoded(pairs)
                if found:
                    yield found
                cursor = int(after)
                if cursor == 0:
                    break

    def _page_values(
        self,
        node: Any,
        page: list[bytes | str],
        seen: MutableSet[bytes | str],
        guess: list[bytes | str] | None,
        values: list[Any],
    ) -> list[tuple[bytes | str, Any]]:
        """The page's keys not yet seen, with values from the guessed ``MGET`` or a new one."""
        fresh = list(dict.fromkeys(raw for raw in page if raw not in seen))
        seen |= set(fresh)
        known: dict[bytes | str, Any] = dict(zip(guess or (), values, strict=True))
        missing = [raw for raw in fresh if raw not in known]
        if missing:
            with _translate("MGET", self._no_client_cert):
                if node is None:
                    known.update(zip(missing, self._client.mget(missing), strict=True))
                else:
                    more = self._client.mget_nonatomic(missing)
                    known.update(zip(missing, more, strict=True))
        return [(raw, known[raw]) for raw in fresh]

    def _remember(self, where: tuple[Any, ...], page: list[Any]) -> None:
        """Keep a page's keys for the next walk (a bounded cache; large pages are not kept)."""
        if not page or len(page) > _GUESS_KEYS:
            self._guesses.pop(where)
        else:
            self._guesses.put(where, page)

    def close(self) -> None:
        """Close the client if this store created it; a passed-in client is left open."""
        if self._owns:
            with _translate("close", self._no_client_cert):
                self._client.close()
                if self._sentinel is not None:
                    self._sentinel.close()

    def __repr__(self) -> str:
        kind = "cluster" if self._cluster else "sentinel" if self._sentinel else "standalone"
        owner = "own client" if self._owns else "passed-in client"
        return f"RedisStore({kind}, {owner})"
