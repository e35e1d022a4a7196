"""How :class:`~remember_sync.stores.redis.RedisStore` connects: options, timeouts, Sentinel.

Everything here runs once, when a store is built: the checks of the
connection options (each failure a :class:`RedisOptionError` naming the
option), the retry policy, the ``redis+sentinel://`` URL parser, and the
Sentinel-managed client (redis-py's :class:`redis.sentinel.Sentinel`; no
discovery of our own).

Timeouts (see ``docs/redis.rst``, "Timeouts"): a timeout is never retried --
the server is there but silent, and waiting again only multiplies the wait --
while a connection error (refused, reset, "no master", "the master is now a
replica") is retried ``retries`` times with backoff
``min(BACKOFF_CAP, BACKOFF_BASE * 2**n)``.  So one call waits for at most one
timeout.  Rejected credentials and rejected TLS certificates are not retried
either: they are configuration mistakes (:func:`._redis_tls.tls_cause`).

When the sentinels find no primary, redis-py keeps only each failure's class
name (``network:ConnectionError``); :class:`_Sentinel` then connects to the
sentinels once more, briefly, to name the cause (:class:`NoPrimaryFound`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote

import redis
import redis.sentinel
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AuthenticationError, AuthorizationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from ..errors import RedisOptionError
from ._redis_tls import tls_cause

#: Seconds to wait for a reply (a frozen server fails a call after this).
DEFAULT_SOCKET_TIMEOUT = 1.0
#: Seconds to wait for a TCP (and TLS) connection (an unreachable host).
DEFAULT_CONNECT_TIMEOUT = 0.5
#: Retries of a connection error (refused, reset, no master); timeouts are not retried.
DEFAULT_RETRIES = 2
#: Backoff before retry n (1-based): ``min(BACKOFF_CAP, BACKOFF_BASE * 2**n)`` seconds.
BACKOFF_BASE = 0.025
BACKOFF_CAP = 0.25
#: ``WAIT`` timeout when ``wait_replicas`` is set without ``wait_timeout_ms``.
DEFAULT_WAIT_TIMEOUT_MS = 100
#: Port of a sentinel named without one in a ``redis+sentinel://`` URL.
SENTINEL_PORT = 26379
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
#: A Redis Cluster named by its nodes: ``redis+cluster://host:port[,host:port...]``.
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
#: Port of a cluster node named without one.
CLUSTER_PORT = 6379
#: Connect and reply timeout (at most) of the one-off check of a sentinel, after "no master".
PROBE_TIMEOUT = 0.5

# Wrong credentials or a missing ACL permission: retrying cannot help.
_NOT_RETRIED = (AuthenticationError, AuthorizationError)

_T = TypeVar("_T")


class _ConnectionRetry(Retry):
    """redis-py's :class:`Retry` on connection errors; never on rejected credentials/certs."""

    def call_with_retry(
        self,
        do: Callable[[], _T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> _T:
        def retryable(error: Exception) -> bool:
            if isinstance(error, _NOT_RETRIED):
                return False
            if isinstance(error, NoPrimaryFound) and error.timed_out:
                return False  # sentinels that are there but silent: a timeout
            cause = tls_cause(error)
            if cause is not None and cause.configuration:
                return False
            return is_retryable is None or is_retryable(error)

        return super().call_with_retry(do, fail, retryable, with_failure_count)


def connection_retry(retries: int) -> Retry:
    """The retry policy of every connection the store makes (see the module docstring)."""
    backoff = ExponentialBackoff(cap=BACKOFF_CAP, base=BACKOFF_BASE) if retries else NoBackoff()
    return _ConnectionRetry(backoff, retries, supported_errors=(RedisConnectionError,))


def worst_case_seconds(
    socket_timeout: float, socket_connect_timeout: float, retries: int
) -> float:
    """The documented upper bound of one call against a frozen or unreachable server.

    At most one attempt waits for a timeout (connect, then a reply); every
    other attempt failed fast with a connection error and is followed by a
    backoff.  redis-py nests the connect retry inside the command retry, so
    the backoffs are bounded by ``(retries + 3) * B`` with ``B`` the sum of
    one retry loop's backoffs.
    """
    one_loop = sum(min(BACKOFF_CAP, BACKOFF_BASE * 2**n) for n in range(1, retries + 1))
    return float(socket_connect_timeout + socket_timeout + (retries + 3) * one_loop)


# -- option checks ----------------------------------------------------------------------


def _number(name: str, value: object, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        extra = " or None" if allow_none else ""
        raise RedisOptionError(name, f"must be a positive number of seconds{extra}; got {value!r}")


def _whole(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RedisOptionError(name, f"must be an int >= {minimum}; got {value!r}")
    return value


def _text(name: str, value: object, *, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, str) or not value:
        raise RedisOptionError(name, f"must be a non-empty str; got {type(value).__name__}")


#: TLS options passed through to redis-py under the same names (only with TLS on).
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def check_options(options: Mapping[str, Any], *, tls: bool) -> None:
    """Check the connection options present in *options* (redis-py names, see RedisStore).

    *tls* says whether the connection uses TLS (``ssl=True`` or a ``rediss`` URL):
    certificate options without it are refused rather than silently ignored.
    """
    for name in ("host", "service_name"):
        if name in options:
            _text(name, options[name], allow_none=False)
    for name in ("password", "username"):
        if options.get(name) is not None and not isinstance(options[name], str):
            raise RedisOptionError(name, f"must be a str; got {type(options[name]).__name__}")
    if "port" in options:
        port = _whole("port", options["port"], 1)
        if port > 65535:
            raise RedisOptionError("port", f"must be 1..65535; got {port}")
    if "db" in options:
        _whole("db", options["db"], 0)
    for name in ("ssl", "ssl_check_hostname"):
        if name in options and not isinstance(options[name], bool):
            raise RedisOptionError(name, f"must be True or False; got {options[name]!r}")
    for name in TLS_FILES:
        if options.get(name) is not None:
            _text(name, options[name])
            if not tls:
                raise RedisOptionError(name, "needs TLS: set ssl=True or use a rediss:// URL")
    if "socket_timeout" in options:
        _number("socket_timeout", options["socket_timeout"], allow_none=True)
    if "socket_connect_timeout" in options:
        _number("socket_connect_timeout", options["socket_connect_timeout"], allow_none=True)
    if "retries" in options:
        _whole("retries", options["retries"], 0)
    if "sentinels" in options:
        check_sentinels(options["sentinels"])
    if options.get("sentinel_kwargs") is not None:
        kwargs = options["sentinel_kwargs"]
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            detail = "must be a dict of redis-py keyword options"
            raise RedisOptionError("sentinel_kwargs", detail)
    _check_wait(options)


def _check_wait(options: Mapping[str, Any]) -> None:
    replicas = _whole("wait_replicas", options.get("wait_replicas", 0), 0)
    if "wait_timeout_ms" not in options:
        return
    timeout_ms = _whole("wait_timeout_ms", options["wait_timeout_ms"], 1)  # WAIT 0 blocks forever
    if not replicas:
        raise RedisOptionError("wait_timeout_ms", "only applies with wait_replicas >= 1")
    socket_timeout = options.get("socket_timeout", DEFAULT_SOCKET_TIMEOUT)
    if socket_timeout is not None and timeout_ms >= socket_timeout * 1000:
        raise RedisOptionError(
            "wait_timeout_ms",
            f"must be shorter than socket_timeout ({socket_timeout} s), or the reply to WAIT "
            "would time out first",
        )


def check_sentinels(value: object) -> list[tuple[str, int]]:
    """``[(host, port), ...]``: a non-empty sequence of host/port pairs."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise RedisOptionError("sentinels", "must be a non-empty list of (host, port) pairs")
    out: list[tuple[str, int]] = []
    for item in value:
        ok = isinstance(item, Sequence) and not isinstance(item, (str, bytes)) and len(item) == 2
        if ok:
            host, port = item
            ok = isinstance(host, str) and bool(host) and not isinstance(port, bool)
            ok = ok and isinstance(port, int) and 0 < port < 65536
        if not ok:
            raise RedisOptionError(
                "sentinels", f"each entry must be a (host, port) pair; got {item!r}"
            )
        out.append((host, port))
    return out


# -- URLs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SentinelURL:
    """A parsed ``redis+sentinel://`` / ``rediss+sentinel://`` URL."""

    sentinels: list[tuple[str, int]]
    service_name: str
    db: int | None
    username: str | None
    password: str | None
    ssl: bool


@dataclass(frozen=True)
class ClusterURL:
    """A parsed ``redis+cluster://`` / ``rediss+cluster://`` URL."""

    nodes: list[tuple[str, int]]
    username: str | None
    password: str | None
    ssl: bool


def _host_port(text: str, what: str = "sentinel", port: int = SENTINEL_PORT) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{what} {text!r}: write an IPv6 host in brackets, [::1]:{port}")
        port_text = rest[1:]
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
        if ":" in host or "[" in host or "]" in host:
            raise ValueError(f"{what} {text!r}: write an IPv6 host in brackets, [::1]:{port}")
    if not host:
        raise ValueError(f"{what} {text!r} has no host")
    if not port_text:
        return host, port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{what} {text!r} has a bad port")
    return host, int(port_text)


def _url_parts(url: str, schemes: Sequence[str]) -> tuple[str, str, str | None, str | None, str]:
    """``(scheme, hosts, username, password, path)`` of a URL naming several hosts."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in schemes:
        raise ValueError(f"not a {' or '.join(s + '://' for s in schemes)} URL")
    check_url_userinfo(url)
    if "?" in rest or "#" in rest:
        raise ValueError("query strings are not supported; pass options in config")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    return scheme.lower(), hosts, username, password, path


def parse_cluster_url(url: str) -> ClusterURL:
    """``redis+cluster://[user:password@]host[:port][,host[:port]...]``.

    Each host is a startup node (one is enough: the client asks it for the
    others); ``rediss+cluster://`` connects with TLS.  A cluster has database 0
    only, so there is no path.  Raises :class:`ValueError` with a message that
    never contains the password.
    """
    scheme, hosts, username, password, path = _url_parts(url, CLUSTER_SCHEMES)
    if path.strip("/"):
        raise ValueError("a cluster has database 0 only: the URL takes no path")
    nodes = [_host_port(h, "node", CLUSTER_PORT) for h in hosts.split(",") if h]
    if not nodes:
        raise ValueError("names no cluster node")
    return ClusterURL(nodes, username, password, scheme == "rediss+cluster")


#: Characters that end the user-info part of a URL early unless percent-encoded.
_USERINFO_BREAKERS = "/?#"


def check_url_userinfo(url: str) -> None:
    """Refuse a URL whose user name or password holds an unencoded ``/``, ``?`` or ``#``.

    A URL parser ends the host part at the first of them, so the rest of the
    password would be read as a path or query (and echoed in error messages).
    Raises :class:`ValueError` with a message that repeats no part of the URL.
    """
    rest = url.partition("://")[2]
    netloc = rest
    for breaker in _USERINFO_BREAKERS:
        netloc = netloc.partition(breaker)[0]
    userinfo, at, _ = rest.rpartition("@")
    if at and "@" not in netloc and any(c in userinfo for c in _USERINFO_BREAKERS):
        raise ValueError(
            "the user name or password holds '/', '?' or '#' (or the URL has a stray '@'): "
            "percent-encode them in the URL ('/' as %2F, '?' as %3F, '#' as %23, '@' as %40)"
        )


def parse_sentinel_url(url: str) -> SentinelURL:
    """``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service_name[/db]``.

    ``rediss+sentinel://`` connects with TLS (to the sentinels and the data
    nodes).  The user name and password are the data nodes' (see
    ``sentinel_kwargs`` for sentinels that need their own).  Raises
    :class:`ValueError` with a message that never contains the password.
    """
    scheme, hosts, username, password, path = _url_parts(url, SENTINEL_SCHEMES)
    sentinels = [_host_port(h) for h in hosts.split(",") if h]
    if not sentinels:
        raise ValueError("names no sentinel host")
    parts = [p for p in path.split("/") if p]
    if not parts or len(parts) > 2:
        raise ValueError("the path must be /service_name or /service_name/db")
    db = None
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise ValueError(f"db {parts[1]!r} is not a whole number")
        db = int(parts[1])
    return SentinelURL(
        sentinels, unquote(parts[0]), db, username, password, scheme == "rediss+sentinel"
    )


def redacted_url(url: str) -> str:
    """*url* without its password, for messages, whatever its shape.

    The user-info part (everything before the last ``@``) is hidden but for a
    user name that is clearly one; a URL without ``://`` (a mistyped scheme) is
    hidden up to its last ``@``; a ``password=`` query value is hidden too.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        # Where the user-info starts is a guess in a URL of no known shape: hide it all.
        _, at, after = url.rpartition("@")
        return _redacted_query(f"***@{after}" if at else url)
    # The last "@" of the whole rest, not of the part before the first "/": a
    # password with an unencoded "/", "?" or "#" is hidden whole too.
    userinfo, at, after = rest.rpartition("@")
    if not at:
        return _redacted_query(url)
    user, colon, _ = userinfo.partition(":")
    if not colon or any(c in user for c in _USERINFO_BREAKERS):
        user = ""  # "secret@host" may be a password alone
    return _redacted_query(f"{scheme}://{user}:***@{after}")


def _redacted_query(url: str) -> str:
    """*url* with the value of every query item whose name holds ``password`` hidden."""
    base, question, query = url.partition("?")
    if not question:
        return url
    items = []
    for item in query.split("&"):
        name, equals, _ = item.partition("=")
        items.append(f"{name}=***" if equals and "password" in name.lower() else item)
    return f"{base}?{'&'.join(items)}"


#: The options a ``redis://``, ``rediss://`` or ``unix://`` URL's query may hold, each
#: checked like the keyword argument of the same name; ``ssl_cert_reqs`` (``none``,
#: ``optional``, ``required``) only in a ``rediss://`` URL.
URL_OPTIONS = (
    "db",
    "retries",
    "socket_connect_timeout",
    "socket_timeout",
    "ssl_ca_certs",
    "ssl_cert_reqs",
    "ssl_certfile",
    "ssl_check_hostname",
    "ssl_keyfile",
    "wait_replicas",
    "wait_timeout_ms",
)
_WHOLE_URL_OPTIONS = frozenset({"db", "retries", "wait_replicas", "wait_timeout_ms"})
_CERT_REQS = ("none", "optional", "required")
_BOOLEAN_TEXT = {"true": True, "1": True, "yes": True, "on": True}
_BOOLEAN_TEXT |= {"false": False, "0": False, "no": False, "off": False}


def _url_value(name: str, text: str) -> object:
    """The typed value of query option *name* (the text itself when it does not convert:
    the keyword check then names what is wrong with it)."""
    try:
        if name in _WHOLE_URL_OPTIONS:
            return int(text, 10)
        if name in ("socket_timeout", "socket_connect_timeout"):
            return float(text)
    except ValueError:
        return text
    if name == "ssl_check_hostname":
        return _BOOLEAN_TEXT.get(text.lower(), text)
    return text


def split_url_options(url: str, *, tls: bool) -> tuple[str, dict[str, Any]]:
    """*url* without its query, and the query's options, typed and checked.

    Only :data:`URL_OPTIONS` are accepted, each checked as the keyword argument
    of the same name would be, so no option reaches a redis-py connection that
    would refuse it later (a ``TypeError`` on every call).

    :raises RedisOptionError: (``option="url"``) an unknown or repeated name, or
        a bad value; the message names the query option, never the password.
    """
    base, _, query = url.partition("#")[0].partition("?")
    options: dict[str, Any] = {}
    for name, text in parse_qsl(query, keep_blank_values=True):
        if name not in URL_OPTIONS:
            raise _url_option_error(name, "is not accepted")
        if name in options:
            raise _url_option_error(name, "is given twice")
        options[name] = _url_value(name, text)
    if "ssl_cert_reqs" in options:
        reqs = str(options["ssl_cert_reqs"]).lower()
        if not tls:
            raise _url_option_error("ssl_cert_reqs", "needs a rediss:// URL")
        if reqs not in _CERT_REQS:
            raise _url_option_error("ssl_cert_reqs", f"must be {', '.join(_CERT_REQS)}")
        options["ssl_cert_reqs"] = reqs
    for name, value in options.items():
        try:
            if name == "wait_timeout_ms":
                _whole(name, value, 1)
            elif name != "ssl_cert_reqs":
                check_options({name: value}, tls=tls)
        except RedisOptionError as exc:
            raise _url_option_error(name, exc.detail) from None
    return base, options


def _url_option_error(name: str, detail: str) -> RedisOptionError:
    return RedisOptionError(
        "url", f"query option {name!r} {detail} (a Redis URL accepts {', '.join(URL_OPTIONS)})"
    )


def check_connection_options(pool: redis.ConnectionPool) -> None:
    """Refuse a keyword a pool's connections would not take (redis-py raises it only
    later, as a ``TypeError`` on every call that opens a connection)."""
    accepted: set[str] = set()
    for cls in pool.connection_class.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        parameters = inspect.signature(init).parameters.values()
        accepted |= {p.name for p in parameters if p.kind in _NAMED}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    unknown = sorted(set(pool.connection_kwargs) - accepted)
    if unknown:
        name = pool.connection_class.__name__
        raise RedisOptionError(unknown[0], f"is not an option of redis-py's {name}")


_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


# -- Sentinel ------------------------------------------------------------------------------


def sentinel_master(
    sentinels: list[tuple[str, int]],
    service_name: str,
    *,
    sentinel_kwargs: Mapping[str, Any] | None,
    connection_kwargs: dict[str, Any],
) -> tuple[redis.Redis, redis.sentinel.Sentinel]:
    """A client of *service_name*'s primary, found (and re-found after a failover) by redis-py.

    The sentinels get the data connections' timeouts and TLS settings but not
    their credentials; *sentinel_kwargs* (redis-py's name) is merged over that,
    e.g. ``{"password": ...}`` for sentinels with ``requirepass``.  Sentinels
    are asked in turn, so their clients do not retry.
    """
    for_sentinels: dict[str, Any] = {
        k: v
        for k, v in connection_kwargs.items()
        if k.startswith("socket_") or k.startswith("ssl")
    }
    # A sentinel's reply is tiny: wait at most PROBE_TIMEOUT for it, so that the
    # sentinels, asked in turn, cannot add up to more than the request-path bound.
    if for_sentinels.get("socket_timeout") is not None:
        for_sentinels["socket_timeout"] = min(for_sentinels["socket_timeout"], PROBE_TIMEOUT)
    for_sentinels["retry"] = connection_retry(0)
    for_sentinels.update(sentinel_kwargs or {})
    # Typed as Any: redis-py's annotations of Sentinel differ between its releases.
    sentinel_class: Any = _Sentinel
    manager = sentinel_class(sentinels, sentinel_kwargs=for_sentinels, **connection_kwargs)
    primary: redis.Redis = manager.master_for(service_name)
    return primary, manager


class NoPrimaryFound(redis.sentinel.MasterNotFoundError):
    """redis-py's "no master" error, saying why: ``detail`` is a whole sentence, no password.

    A :class:`redis.sentinel.MasterNotFoundError` (so redis-py retries it as a
    connection error), with the failing sentinel's exception as ``__cause__``
    when one failed.
    """

    def __init__(self, detail: str, *, timed_out: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        #: A sentinel did not answer in time: not retried (see the module docstring).
        self.timed_out = timed_out


class _Sentinel(redis.sentinel.Sentinel):
    """redis-py's :class:`~redis.sentinel.Sentinel`, whose "no master" error names its cause.

    Discovery is redis-py's own; only its failure is explained.  If every
    sentinel answered, none knows a usable primary.  If some failed, redis-py
    kept only their exception classes, so :func:`_probe` connects to the
    sentinels once more -- on this failure path only, each attempt bounded by
    :data:`PROBE_TIMEOUT` -- and the first failure is reported.
    """

    def discover_master(self, service_name: str) -> tuple[str, int]:
        try:
            parent: Any = super()  # redis-py's annotations differ between its releases
            found: tuple[str, int] = parent.discover_master(service_name)
        except redis.sentinel.MasterNotFoundError as exc:
            # redis-py (8.1) lists the sentinels that failed after " : "; none: all answered.
            if " : " not in str(exc):
                raise NoPrimaryFound(
                    f"No master found for {service_name!r}: the sentinels answer, but none "
                    "reports a usable primary (it is down and no replica has been promoted "
                    "yet, or service_name is wrong)"
                ) from None
            # redis-py lists "<sentinel> - network:TimeoutError" (8.x; TimeoutError(...) before)
            if "TimeoutError" in str(exc).partition(" : ")[2]:
                raise NoPrimaryFound(
                    f"No master found for {service_name!r}: a sentinel did not answer in "
                    "time (frozen, overloaded or unreachable) and none reported a usable "
                    "primary",
                    timed_out=True,
                ) from None
            failed = _probe(self.sentinels)
            if failed is None:  # they answer now: a transient failure
                raise NoPrimaryFound(
                    f"No master found for {service_name!r}: a sentinel did not answer (it "
                    "does now) and none reported a usable primary"
                ) from None
            where, error = failed
            raise NoPrimaryFound(
                f"No master found for {service_name!r}: sentinel {where} failed: {error}"
            ) from error
        return found


def _probe(sentinels: Sequence[redis.Redis]) -> tuple[str, RedisError] | None:
    """Connect to each sentinel and ``PING`` it (no retry); the first failure, or ``None``.

    Uses each sentinel's own connection settings (TLS, credentials) with both
    timeouts capped at :data:`PROBE_TIMEOUT`, on a connection of its own that is
    closed at once (the sentinel's pool is not touched).
    """
    for client in sentinels:
        pool = client.connection_pool
        kwargs = dict(pool.connection_kwargs)
        for name in ("socket_timeout", "socket_connect_timeout"):
            kwargs[name] = min(kwargs.get(name) or PROBE_TIMEOUT, PROBE_TIMEOUT)
        kwargs["retry"] = Retry(NoBackoff(), 0)
        where = f"{kwargs.get('host')}:{kwargs.get('port')}"
        connection = pool.connection_class(**kwargs)
        try:
            connection.connect()  # TCP, TLS, AUTH: where a wrong CA or password shows
            connection.send_command("PING")
            connection.read_response()
        except RedisError as error:
            return where, error
        finally:
            connection.disconnect()
    return None
