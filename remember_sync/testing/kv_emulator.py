"""An Upstash-REST (Vercel KV) emulator backed by a real ``redis-server``.

Vercel KV speaks Upstash's REST protocol, which cannot be reached from a test
machine.  :class:`KVEmulator` speaks the same protocol on ``127.0.0.1`` and
forwards every command to a real Redis, so a client is tested against Redis's
own semantics (expiry, ``NX``, Lua, ``SCAN`` cursors) rather than a fake::

    from remember_sync.testing.kv_emulator import KVEmulator
    from remember_sync.testing.redis_server import RedisServer

    with RedisServer() as redis_server, KVEmulator(redis_server.url, "t0ken") as kv:
        plugin = RememberPlugin.init(type="vercel-kv", url=kv.url, token="t0ken")

What it implements (and what the upstash-redis client relies on):

* ``POST /`` with a JSON array command body (``["SET", "k", "v", "PX", 1000]``);
  ``POST /pipeline`` and ``POST /multi-exec`` with an array of such arrays
  (``/multi-exec`` runs them between ``MULTI`` and ``EXEC``); the path form
  ``/set/key/value`` (``GET`` or ``POST``; a ``POST`` body is the last argument).
* ``Authorization: Bearer <token>`` (or ``?_token=``); anything else gets HTTP
  401 ``{"error": "Unauthorized"}``.
* Replies ``{"result": ...}`` (HTTP 200) or ``{"error": "ERR ..."}`` (HTTP 400,
  Redis's own error text); a pipeline answers 200 with one such object per
  command.  Numbers stay numbers, nil is ``null``, arrays nest.
* With ``Upstash-Encoding: base64`` every string in a result is base64 of its
  bytes -- recursively inside arrays, the ``SCAN`` cursor included -- except
  the status reply ``OK``.  Without it, strings are sent as UTF-8 text.
* HTTP/1.1 keep-alive on a threaded server, with Nagle's algorithm disabled
  on every accepted socket (``TCP_NODELAY``) as a real edge would.

Fault injection for reliability tests: :meth:`KVEmulator.inject` makes the next
*n* requests answer with a status, answer late, drop the connection or send a
malformed (or any given) body.  Every request is recorded
(:attr:`KVEmulator.requests`) so a test can count round trips; the record is
made *before* the answer is sent, so a client holding its reply always finds
its request in the log.

The emulator talks RESP2 to Redis itself (a few dozen lines, below) rather
than through redis-py, because redis-py hides two things the REST protocol
exposes: whether a string was a status reply (``OK``) or a bulk string, and the
exact error text (redis-py strips ``ERR`` prefixes).
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import socket
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote_to_bytes, urlsplit

import redis

__all__ = ["Fault", "KVEmulator", "RecordedRequest"]

log = logging.getLogger("remember_sync.testing.kv_emulator")

#: Commands that would leave a pooled Redis connection in another state
#: (transactions, pub/sub, another database) or end it.  Upstash refuses the
#: raw transaction commands over HTTP too: ``/multi-exec`` is the way.
_NOT_AVAILABLE = frozenset(
    {
        "AUTH", "DISCARD", "EXEC", "HELLO", "MONITOR", "MULTI", "PSUBSCRIBE", "PSYNC",
        "PUNSUBSCRIBE", "QUIT", "RESET", "SELECT", "SHUTDOWN", "SSUBSCRIBE", "SUBSCRIBE",
        "SUNSUBSCRIBE", "SYNC", "UNSUBSCRIBE", "UNWATCH", "WATCH",
    }
)  # fmt: skip


# -- a minimal RESP2 client ----------------------------------------------------------------


class _Status(str):
    """A RESP simple-string reply (``+OK``), as opposed to a bulk string."""


class _RespError:
    """A RESP error reply, kept as a value: inside ``EXEC`` replies it is one element."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _BackendError(Exception):
    """Redis could not be reached or broke the protocol (the emulator answers 500)."""


Reply = Any  # _Status | bytes | int | None | _RespError | list[Reply]


def _pack(args: Sequence[bytes]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


class _RedisConnection:
    """One RESP2 connection: send commands, read their replies in order."""

    def __init__(self, options: dict[str, Any], timeout: float) -> None:
        host = str(options.get("host") or "127.0.0.1")
        port = int(options.get("port") or 6379)
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise _BackendError(f"cannot connect to redis at {host}:{port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = self._sock.makefile("rb")
        try:
            password = options.get("password")
            if password:
                username = options.get("username")
                auth = [b"AUTH"] + ([str(username).encode()] if username else [])
                self._expect_ok(auth + [str(password).encode()])
            db = int(options.get("db") or 0)
            if db:
                self._expect_ok([b"SELECT", str(db).encode()])
        except BaseException:
            self.close()
            raise

    def _expect_ok(self, command: list[bytes]) -> None:
        (reply,) = self.execute([command])
        if isinstance(reply, _RespError):
            raise _BackendError(f"redis refused {command[0].decode()}: {reply.message}")

    def execute(self, commands: Sequence[Sequence[bytes]]) -> list[Reply]:
        """Send *commands* in one write and read one reply per command."""
        try:
            self._sock.sendall(b"".join(_pack(c) for c in commands))
            return [self._read() for _ in commands]
        except (OSError, ValueError) as exc:
            raise _BackendError(f"redis connection failed: {exc}") from exc

    def _read(self) -> Reply:
        line = self._reader.readline()
        if not line.endswith(b"\r\n"):
            raise _BackendError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return _Status(rest.decode("utf-8", "replace"))
        if kind == b"-":
            return _RespError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self._reader.read(size + 2)
            if len(data) != size + 2:
                raise _BackendError("redis closed the connection mid-reply")
            return data[:-2]
        if kind == b"*":
            count = int(rest)
            if count < 0:
                return None
            return [self._read() for _ in range(count)]
        raise _BackendError(f"unexpected RESP reply type {kind!r}")

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            self._sock.close()


class _RedisPool:
    """Idle connections to the backing Redis, one borrowed per HTTP request."""

    def __init__(self, redis_url: str, timeout: float) -> None:
        # redis-py parses the URL (host, port, db, credentials); we only borrow its parser.
        self._options = dict(redis.ConnectionPool.from_url(redis_url).connection_kwargs)
        self._timeout = timeout
        self._idle: list[_RedisConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[_RedisConnection]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = _RedisConnection(self._options, self._timeout)
        try:
            yield conn
        except BaseException:
            conn.close()  # its state is unknown: never hand it out again
            raise
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# -- protocol helpers ------------------------------------------------------------------------


class _BadRequest(Exception):
    """The HTTP request itself is invalid: HTTP 400 with this message."""


class _NestedError(Exception):
    """An error reply nested inside an array (only ``EXEC`` replies may hold one)."""


def _to_json(reply: Reply, b64: bool) -> Any:
    """A Redis reply as the REST API's JSON ``result``."""
    if isinstance(reply, _Status):
        if not b64 or reply == "OK":
            return str(reply)
        return base64.b64encode(reply.encode("utf-8")).decode("ascii")
    if isinstance(reply, bytes):
        if b64:
            return base64.b64encode(reply).decode("ascii")
        return reply.decode("utf-8", "replace")
    if isinstance(reply, list):
        return [_to_json(item, b64) for item in reply]
    if isinstance(reply, _RespError):
        raise _NestedError(reply.message)
    return reply  # int or None


def _reply_object(reply: Reply, b64: bool) -> dict[str, Any]:
    if isinstance(reply, _RespError):
        return {"error": reply.message}
    try:
        return {"result": _to_json(reply, b64)}
    except _NestedError as exc:
        return {"error": str(exc)}


def _command_args(command: object) -> list[bytes]:
    """Validate one JSON command and turn it into Redis arguments."""
    if not isinstance(command, list) or not command:
        raise _BadRequest("ERR failed to parse command: expected a non-empty JSON array")
    args: list[bytes] = []
    for item in command:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise _BadRequest(
                "ERR failed to parse command: arguments must be strings or numbers, "
                f"got {type(item).__name__}"
            )
        try:
            args.append(str(item).encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise _BadRequest("ERR failed to parse command: invalid unicode") from exc
    name = args[0].decode("utf-8", "replace").upper()
    if name in _NOT_AVAILABLE:
        raise _BadRequest(f"ERR Command is not available: '{name.lower()}'")
    return args


def _command_list(body: bytes) -> list[list[bytes]]:
    try:
        commands = json.loads(body)
    except ValueError as exc:
        raise _BadRequest("ERR failed to parse pipeline request: invalid JSON") from exc
    if not isinstance(commands, list):
        raise _BadRequest("ERR failed to parse pipeline request: expected an array of commands")
    return [_command_args(c) for c in commands]


# -- faults and records --------------------------------------------------------------------


@dataclass
class Fault:
    """What :meth:`KVEmulator.inject` does to the next requests.

    Faults happen before the command reaches Redis, except ``delay``: a delayed
    request still runs afterwards (as on a slow network, the client may have
    given up by then).
    """

    status: int | None = None
    delay: float = 0.0
    close_connection: bool = False
    malformed: bool = False
    error: str = "ERR injected fault"
    remaining: int | None = 1  # None: every request until clear_faults()
    body: bytes | None = None  # answer with exactly these bytes (HTTP status, or 200)


    def describe(self) -> str:
        parts = []
        if self.delay:
            parts.append(f"delay={self.delay}")
        if self.status is not None:
            parts.append(f"status={self.status}")
        if self.close_connection:
            parts.append("close_connection")
        if self.malformed:
            parts.append("malformed")
        if self.body is not None:
            parts.append(f"body={len(self.body)}B")
        return ",".join(parts) or "none"


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the emulator received.

    ``commands`` holds the parsed JSON commands as sent (a single command is a
    one-item list), so a test can check argument types -- e.g. that a SCAN
    cursor was sent as a string.
    """

    method: str
    path: str
    commands: tuple[tuple[Any, ...], ...]
    status: int | None  # the answer's status, recorded before it is sent; None: dropped
    fault: str | None
    encoding: str | None = None  # the Upstash-Encoding header
    authorized: bool | None = None  # None: a fault answered before the token was checked


# -- the HTTP side -----------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Keep-alive handler threads sit in readline() until the client hangs up;
    # stop() closes their sockets instead of joining them.
    block_on_close = False
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], emulator: KVEmulator) -> None:
        self.emulator = emulator
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self._open_lock:
            self._open.add(sock)
        return sock, address

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_open_connections(self) -> None:
        with self._open_lock:
            socks = list(self._open)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # TCP_NODELAY on the accepted socket
    wbufsize = 1 << 16  # headers and body leave in one segment
    server: _Server

    def setup(self) -> None:
        super().setup()
        nodelay = self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        self.server.emulator._count_connection(bool(nodelay))

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kv-emulator: " + format, *args)

    def do_POST(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    # -- responses --

    @staticmethod
    def _json(payload: Any) -> bytes:
        return json.dumps(payload, separators=(",", ":")).encode("utf-8")

    def _send_raw(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # -- the request --

    def _handle(self) -> None:
        emulator = self.server.emulator
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            self._send_raw(400, self._json({"error": "ERR invalid Content-Length"}))
            return
        body = self.rfile.read(length) if length > 0 else b""
        split = urlsplit(self.path)
        path = split.path.rstrip("/")
        with emulator._in_flight():
            recorded: list[tuple[Any, ...]] = []
            self._record_commands(path, body, recorded)
            self._authorized: bool | None = None
            fault = emulator._take_fault()
            status, answer = self._answer(emulator, fault, split.query, path, body)
            # Recorded before a byte of the answer leaves: a client that has its
            # reply always finds its request in the log (reading it after the
            # reply raced with this thread when the record came last).
            emulator._record(
                RecordedRequest(
                    method=self.command,
                    path=split.path,
                    commands=tuple(recorded),
                    status=status,
                    fault=fault.describe() if fault else None,
                    encoding=self.headers.get("Upstash-Encoding"),
                    authorized=self._authorized,
                )
            )
        if status is None or answer is None:
            self.close_connection = True
            return
        try:
            self._send_raw(status, answer)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. timed out)

    def _answer(
        self, emulator: KVEmulator, fault: Fault | None, query: str, path: str, body: bytes
    ) -> tuple[int | None, bytes | None]:
        """The status and body to send (``None``: drop the connection); runs the command."""
        if fault is not None:
            if fault.delay:
                emulator._wait(fault.delay)
            if fault.close_connection:
                return None, None
            if fault.body is not None:
                return fault.status or 200, fault.body
            if fault.status is not None:
                return fault.status, self._json({"error": fault.error})
            if fault.malformed:
                return 200, b'{"result": "trunc'
        self._authorized = emulator._authorized(self.headers.get("Authorization"), query)
        if not self._authorized:
            return 401, self._json({"error": "Unauthorized"})
        b64 = (self.headers.get("Upstash-Encoding") or "").lower() == "base64"
        try:
            status, payload = self._dispatch(emulator, path, body, b64)
        except _BadRequest as exc:
            status, payload = 400, {"error": str(exc)}
        except _BackendError as exc:
            log.warning("kv-emulator: backend failure: %s", exc)
            status, payload = 500, {"error": f"ERR {exc}"}
        except Exception:  # noqa: BLE001 - a bug here must answer, not hang the client
            log.exception("kv-emulator: internal error")
            status, payload = 500, {"error": "ERR internal emulator error"}
        return status, self._json(payload)

    def _record_commands(self, path: str, body: bytes, recorded: list[tuple[Any, ...]]) -> None:
        """Keep what was asked, as JSON types, for the request log (best effort)."""
        if path in ("", "/pipeline", "/multi-exec"):
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                return
            if path == "" and isinstance(parsed, list):
                recorded.append(tuple(parsed))
            elif isinstance(parsed, list):
                recorded.extend(tuple(c) if isinstance(c, list) else (c,) for c in parsed)
        else:
            recorded.append(tuple(self._path_command(path, body)))

    def _path_command(self, path: str, body: bytes) -> list[str]:
        args = [unquote_to_bytes(p).decode("utf-8", "replace") for p in path.split("/") if p]
        if body and self.command == "POST":
            args.append(body.decode("utf-8", "replace"))
        return args

    def _dispatch(
        self, emulator: KVEmulator, path: str, body: bytes, b64: bool
    ) -> tuple[int, Any]:
        if path == "" and self.command == "POST":
            try:
                command = json.loads(body)
            except ValueError as exc:
                raise _BadRequest("ERR failed to parse command: invalid JSON") from exc
            (reply,) = emulator._execute([_command_args(command)])
            obj = _reply_object(reply, b64)
            return (400 if "error" in obj else 200), obj
        if path == "/pipeline" and self.command == "POST":
            commands = _command_list(body)
            replies = emulator._execute(commands) if commands else []
            return 200, [_reply_object(r, b64) for r in replies]
        if path == "/multi-exec" and self.command == "POST":
            commands = _command_list(body)
            if not commands:
                return 200, []
            replies = emulator._execute([[b"MULTI"], *commands, [b"EXEC"]])
            exec_reply = replies[-1]
            if isinstance(exec_reply, _RespError):
                # Queue-time errors abort the whole transaction (EXECABORT).
                queued = [r.message for r in replies[1:-1] if isinstance(r, _RespError)]
                detail = f" ({queued[0]})" if queued else ""
                return 400, {"error": exec_reply.message + detail}
            if not isinstance(exec_reply, list):
                raise _BackendError(f"unexpected EXEC reply {exec_reply!r}")
            return 200, [_reply_object(r, b64) for r in exec_reply]
        if path == "":
            raise _BadRequest("ERR failed to parse command: no command given")
        args = _command_args(self._path_command(path, body))
        (reply,) = emulator._execute([args])
        obj = _reply_object(reply, b64)
        return (400 if "error" in obj else 200), obj


# -- the emulator --------------------------------------------------------------------------------


class KVEmulator:
    """An Upstash-REST server on ``host:port`` (a free port by default) in front of Redis.

    :param redis_url: the backing Redis (``redis://127.0.0.1:<port>/0``); the
        emulator borrows connections from its own small pool.
    :param token: the bearer token clients must send.
    :param host: interface to listen on (loopback by default; keep it so).
    :param port: ``0`` picks a free port; read :attr:`url` after :meth:`start`.
    :param redis_timeout: socket timeout towards Redis, in seconds.
    """

    def __init__(
        self,
        redis_url: str,
        token: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        redis_timeout: float = 10.0,
    ) -> None:
        if not token:
            raise ValueError("the emulator needs a non-empty token")
        self.redis_url = redis_url
        self._token = token
        self._host = host
        self._port = port
        self._pool = _RedisPool(redis_url, redis_timeout)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self._requests: list[RecordedRequest] = []
        self._busy = 0  # requests read but not yet recorded (see wait_idle)
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Event()
        self.connections_accepted = 0
        self.nodelay_connections = 0

    # -- lifecycle --

    def start(self) -> KVEmulator:
        """Bind, start serving in a daemon thread and return ``self``."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), self)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"kv-emulator:{server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, drop open connections and close the Redis connections."""
        server, self._server = self._server, None
        if server is None:
            return
        self._wake.set()
        server.shutdown()
        server.close_open_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.close()
        self._pool = _RedisPool(self.redis_url, self._pool._timeout)  # restartable

    def __enter__(self) -> KVEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://host:port`` -- what ``KV_REST_API_URL`` would hold."""
        if self._server is None:
            raise RuntimeError("the emulator is not running: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def token(self) -> str:
        """The bearer token this emulator accepts (a test credential)."""
        return self._token

    # -- fault injection --

    def inject(
        self,
        *,
        status: int | None = None,
        delay: float = 0.0,
        close_connection: bool = False,
        malformed: bool = False,
        times: int | None = 1,
        error: str = "ERR injected fault",
        body: bytes | None = None,
    ) -> None:
        """Apply a fault to the next *times* requests (``None``: all, until :meth:`clear_faults`).

        ``status``: answer with this HTTP status and ``{"error": error}``;
        ``delay``: wait this many seconds, then answer (the command still runs);
        ``close_connection``: drop the connection without an answer;
        ``malformed``: answer 200 with a truncated JSON body;
        ``body``: answer with exactly these bytes (a hostile or broken reply:
        deep nesting, wrong types, bad base64), with HTTP ``status`` or 200.  Faults queue: a second
        :meth:`inject` applies after the first is used up.
        """
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        if not (status is not None or delay or close_connection or malformed or body is not None):
            raise ValueError("inject() needs at least one fault")
        with self._lock:
            self._faults.append(
                Fault(status, float(delay), close_connection, malformed, error, times, body)
            )

    def clear_faults(self) -> None:
        """Forget pending faults and cut short any injected delay in progress."""
        with self._lock:
            self._faults.clear()
            wake, self._wake = self._wake, threading.Event()
        wake.set()

    def _take_fault(self) -> Fault | None:
        with self._lock:
            if not self._faults:
                return None
            fault = self._faults[0]
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.popleft()
            return fault

    def _wait(self, seconds: float) -> None:
        with self._lock:
            wake = self._wake
        wake.wait(seconds)

    # -- the request log --

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received since the last :meth:`reset_log`."""
        with self._lock:
            return list(self._requests)

    def reset_log(self) -> None:
        """Forget recorded requests and connection counts."""
        with self._lock:
            self._requests.clear()
            self.connections_accepted = 0
            self.nodelay_connections = 0

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no request is between "read" and "recorded"; ``False`` on timeout.

        A request whose client gave up (a timeout during an injected delay)
        still runs and is recorded afterwards; a test that resets the log or
        the database calls this first so that such a straggler cannot land in
        the next test's log or data.
        """
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    @contextmanager
    def _in_flight(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                if self._busy == 0:
                    self._idle.notify_all()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _count_connection(self, nodelay: bool) -> None:
        with self._lock:
            self.connections_accepted += 1
            self.nodelay_connections += int(nodelay)

    # -- the Redis side --

    def _authorized(self, header: str | None, query: str) -> bool:
        given = ""
        if header and header[:7].lower() == "bearer ":
            given = header[7:].strip()
        elif query:
            given = (parse_qs(query).get("_token") or [""])[0]
        return bool(given) and hmac.compare_digest(given.encode(), self._token.encode())

    def _execute(self, commands: Sequence[Sequence[bytes]]) -> list[Reply]:
        with self._pool.connection() as conn:
            return conn.execute(commands)

    def __repr__(self) -> str:
        where = self.url if self._server is not None else "stopped"
        return f"KVEmulator({where}, redis={self.redis_url!r})"
