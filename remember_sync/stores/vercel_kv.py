"""Vercel KV (Upstash Redis over REST) with ``requests`` only.

Every operation is one ``POST`` of a JSON command array (``["GET", key]``) to
the database URL, authenticated with ``Authorization: Bearer <token>`` and
asking for ``Upstash-Encoding: base64`` so that any value -- control
characters, quotes, emoji -- comes back byte-exact (we decode it ourselves).
Replies are ``{"result": ...}`` or ``{"error": "..."}``.

Round trips: ``get_many`` is one ``MGET``, ``delete`` one ``UNLINK``,
``compare_and_set`` one ``EVAL``, whatever the number of keys; ``scan`` costs
one request per ``SCAN`` page (the cursor is a string and ``"0"`` ends), and so
does ``scan_pages`` -- keys *and* values, through an ``EVAL`` of a read-only
script doing ``SCAN`` + ``MGET`` -- until the server refuses that script (it
finds its keys instead of declaring them); it then takes ``SCAN`` + ``MGET``,
two requests a page.

Failures and retries (see ``docs/vercel-kv.rst``): ``timeout`` bounds a whole
operation, retries included.  A request that certainly never reached the
server (connection refused, connect timeout) is retried for every command.
A request whose outcome is unknown (read timeout, dropped connection, HTTP
5xx, unparsable reply) is retried only for commands that are safe to repeat:
``GET``, ``MGET``, ``SCAN``, the read-only scan script, ``SET`` without ``NX``
and ``UNLINK``.  ``SET ...
NX`` and the compare-and-set ``EVAL`` are not, because a lost reply to a
write that happened would turn into a false "not written".  HTTP 401/403 is
a :class:`~remember_sync.errors.RememberConfigurationError` naming
``KV_REST_API_TOKEN``; everything else that fails is a
:class:`~remember_sync.errors.RememberStoreError` carrying the server's
message.  The token never appears in a message, a log record or ``repr``.
"""

from __future__ import annotations

import binascii
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, MutableSet, Sequence
from typing import Any
from urllib.parse import urlsplit

import requests
import requests.adapters
import requests.auth
import requests.exceptions as rx
import urllib3.exceptions
from urllib3.exceptions import NewConnectionError

from .._config import KV_TOKEN_ENV, KV_URL_ENV
from ..errors import (
    RememberConfigurationError,
    RememberError,
    RememberInputError,
    RememberStoreError,
)
from . import _index_lua as index_lua
from . import _quota_lua as quota_lua
from . import base as contract  # the argument checks every store makes first
from ._manifest_lua import COMMIT_MANIFEST, READ_WITH_MANIFEST, script_input
from ._owned_redis import quota_write, refused
from .base import (
    CAS_LUA_SCRIPT,
    SCAN_ITEMS_LUA_SCRIPT,
    IndexOf,
    ManifestCommit,
    merged_index_of,
    to_text,
)

__all__ = ["VercelKVStore"]

log = logging.getLogger("remember_sync")

_MAX_BACKOFF = 2.0

#: Sessions a forked child inherited from its parent (see ``VercelKVStore._http``).
#: Kept referenced and never touched: closing or collecting one would take urllib3
#: pool locks that a parent thread may have held at the fork.
_INHERITED: list[requests.Session] = []


def _new_session(pool_size: int) -> requests.Session:
    """A session of the store's own: one pool of *pool_size* connections, no driver retries."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(
        pool_connections=1, pool_maxsize=pool_size, max_retries=0
    )
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


class _BearerAuth(requests.auth.AuthBase):
    """Sets the bearer header at send time.

    Passing an auth object (rather than a session header) also stops requests
    from replacing our header with credentials found in ``~/.netrc``, and its
    ``repr`` never shows the token.
    """

    def __init__(self, token: str) -> None:
        self._value = f"Bearer {token}"

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = self._value
        return r

    def __repr__(self) -> str:
        return "_BearerAuth(<redacted>)"


class _Refused(RememberStoreError):
    """The server answered the command with an error (it ran, or was refused)."""


class _AttemptFailed(Exception):
    """One HTTP attempt failed; ``retryable`` says whether sending it again is safe."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


#: Every class of ``requests.exceptions`` on its own row (a new one fails a test until it has
#: one): ``RememberStoreError`` after the retries of the module docs, ``RememberConfiguration
#: Error`` (URL, proxy) at once, ``None``: a warning or re-export that a request never raises.
EXCEPTION_MAP: dict[type[BaseException], type[RememberError] | None] = {
    **dict.fromkeys(
        # Redirects are not followed and replies are parsed by _parse_reply, so the last
        # row's classes are never raised either.
        (rx.RequestException, rx.ConnectionError, rx.ConnectTimeout, rx.ReadTimeout,
         rx.Timeout, rx.SSLError, rx.ProxyError, rx.ChunkedEncodingError,
         rx.ContentDecodingError, rx.HTTPError, rx.RetryError, rx.StreamConsumedError,
         rx.UnrewindableBodyError, rx.TooManyRedirects, rx.InvalidJSONError, rx.JSONDecodeError),
        RememberStoreError,
    ),
    **dict.fromkeys(
        (rx.InvalidURL, rx.InvalidProxyURL, rx.MissingSchema, rx.InvalidSchema, rx.URLRequired,
         rx.InvalidHeader),
        RememberConfigurationError,
    ),
    **dict.fromkeys(
        # requests' BaseHTTPError (urllib3's) and CompatJSONDecodeError (json's); warnings.
        (urllib3.exceptions.HTTPError, json.JSONDecodeError, rx.RequestsWarning,
         rx.FileModeWarning, rx.RequestsDependencyWarning),
        None,
    ),
}  # fmt: skip


def _never_sent(exc: requests.RequestException) -> bool:
    """Whether *exc* proves the request never reached the server (safe to repeat anything)."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError) and exc.args:
        reason = getattr(exc.args[0], "reason", exc.args[0])  # urllib3 MaxRetryError.reason
        return isinstance(reason, NewConnectionError)  # refused, unreachable, DNS failure
    return False


def _redact_request(exc: requests.RequestException) -> None:
    """Drop the bearer header from the request a driver exception keeps a reference to."""
    request = getattr(exc, "request", None)
    headers = getattr(request, "headers", None)
    if headers is not None and "Authorization" in headers:
        headers["Authorization"] = "Bearer <redacted>"


def _check_number(
    name: str, value: object, *, minimum: float, whole: bool = False, inclusive: bool = True
) -> None:
    kinds: tuple[type, ...] = (int,) if whole else (int, float)
    ok = not isinstance(value, bool) and isinstance(value, kinds)
    if ok:
        number = float(value)  # type: ignore[arg-type]
        ok = number >= minimum if inclusive else number > minimum
    if not ok:
        bound = (">= " if inclusive else "> ") + f"{minimum:g}"
        what = "an int" if whole else "a number"
        raise RememberConfigurationError(f"Vercel KV: {name} must be {what} {bound}; got {value!r}")


#: How deep arrays may nest in a result.  The store's commands answer at most two
#: deep (the scan script's ``[cursor, [keys], [values]]``); deeper is not the REST
#: API talking, and the bound keeps :func:`_decode`'s recursion a few frames deep.
_MAX_RESULT_DEPTH = 4


def _parse_reply(content: bytes) -> Any:
    """The JSON of a reply body: the one place where a body is decoded.

    :raises ValueError: for anything that is not JSON -- including nesting
        deeper than the interpreter's recursion limit, which ``json`` reports as
        :class:`RecursionError` (mapped here so it never escapes a store call).
    """
    try:
        return json.loads(content)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _decode(value: Any, depth: int = 0) -> Any:
    """Undo ``Upstash-Encoding: base64``: every string but the status ``OK``, recursively.

    Arrays nested deeper than :data:`_MAX_RESULT_DEPTH` are refused, so the
    recursion is bounded whatever the server sends.
    """
    if type(value) is str:
        return value if value == "OK" else _text(value)
    if type(value) is list:
        if depth >= _MAX_RESULT_DEPTH:
            raise RememberStoreError(
                f"Vercel KV sent a result with arrays nested more than {_MAX_RESULT_DEPTH} deep"
            )
        # Arrays of strings (MGET, SCAN pages) are the bulk of the work: no call per item.
        return [
            _text(item) if type(item) is str and item != "OK" else _decode(item, depth + 1)
            for item in value
        ]
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise RememberStoreError(f"Vercel KV sent an unexpected result type {type(value).__name__}")


def _text(encoded: str) -> str:
    """One base64-encoded result string, decoded."""
    try:
        raw = binascii.a2b_base64(encoded, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise RememberStoreError(
            "Vercel KV sent a result that is not base64 although "
            "'Upstash-Encoding: base64' was requested"
        ) from exc
    # Our own values and keys are always UTF-8.  Bytes written by another program
    # decode losslessly, as on every store (base.to_text); the accessor then reports
    # the entry as unreadable (logged and counted) instead of failing a whole listing.
    return to_text(raw)


class VercelKVStore:
    """A :class:`~remember_sync.stores.base.Store` on Vercel KV / Upstash Redis over REST.

    :param url: the REST URL (``https://<db>.upstash.io``); default
        ``KV_REST_API_URL`` from *environ*.
    :param token: the REST token; default ``KV_REST_API_TOKEN`` from *environ*.
    :param timeout: seconds one operation may take, retries and back-off
        included; each HTTP attempt gets what is left as its connect and read
        timeout.
    :param retries: how many times a failed request may be repeated (see the
        module docs for which failures and commands).
    :param backoff: first back-off delay in seconds, doubled per retry (capped
        at 2 s and at the time left).
    :param environ: where to read the two variables (default ``os.environ``;
        read here, once, never later).
    :param session: a ``requests.Session`` to use (not closed by :meth:`close`);
        by default the store creates and owns one pooled session.  A given
        session belongs to the process that built the store: used in a forked
        child it raises :class:`~remember_sync.errors.RememberConfigurationError`
        (its pooled connections are the parent's).
    :param pool_size: connections kept open per host by the store's own session.

    Fork safety: the store's own session is per process.  Each call checks the
    process id; a forked child (gunicorn ``--preload``, ``multiprocessing``
    with ``fork``) builds a session of its own on first use and never sends
    on, reads from or closes a connection it inherited, so two processes never
    share a keep-alive connection (and never read each other's replies).
    :raises RememberConfigurationError: when the URL or token is missing or invalid.
    """

    #: ``write_owned`` reads :attr:`OwnedWrite.index_key` (see there).
    uses_index_key = True

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.1,
        environ: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
        pool_size: int = 16,
    ) -> None:
        env = os.environ if environ is None else environ
        url = url or env.get(KV_URL_ENV) or None
        token = token or env.get(KV_TOKEN_ENV) or None
        if url is None and token is None:
            raise RememberConfigurationError(
                f"Vercel KV needs its REST URL and token: set {KV_URL_ENV} and "
                f"{KV_TOKEN_ENV} (Vercel dashboard > Storage > your KV database > .env.local), "
                "or pass url= and token="
            )
        if token is None:
            raise RememberConfigurationError(
                f"Vercel KV: {KV_TOKEN_ENV} is not set but {KV_URL_ENV} is; set both or neither"
            )
        if url is None:
            raise RememberConfigurationError(
                f"Vercel KV: {KV_URL_ENV} is not set but {KV_TOKEN_ENV} is; set both or neither"
            )
        if not isinstance(url, str) or not isinstance(token, str):
            raise RememberConfigurationError("Vercel KV: url and token must be strings")
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RememberConfigurationError(
                f"Vercel KV: {KV_URL_ENV} must be an http(s) URL such as "
                "https://<your-db>.upstash.io"
            )
        # requests would reject (and echo!) a header value with whitespace or
        # control characters; refuse it here without showing the token.
        if not all(33 <= ord(c) <= 126 for c in token):
            raise RememberConfigurationError(
                f"Vercel KV: {KV_TOKEN_ENV} contains whitespace or non-printable characters; "
                "copy the token again from the Vercel dashboard"
            )
        _check_number("timeout", timeout, minimum=0.0, inclusive=False)
        _check_number("retries", retries, minimum=0, whole=True)
        _check_number("backoff", backoff, minimum=0.0)
        _check_number("pool_size", pool_size, minimum=1, whole=True)

        self._url = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
        self._host = parts.netloc.rpartition("@")[2]  # never show URL credentials either
        if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            log.warning(
                "remember: Vercel KV URL %s uses plain http: the token travels unencrypted",
                self._host,
            )
        self._secret = token
        self._auth = _BearerAuth(token)
        self._headers = {"Content-Type": "application/json", "Upstash-Encoding": "base64"}
        self._timeout = float(timeout)
        self._retries = retries
        self._backoff = float(backoff)
        self._owns_session = session is None
        self._pool_size = pool_size
        # (process id, session): one tuple, replaced in one assignment, so a
        # thread never pairs one process's id with another's session.
        self._process_session = (
            os.getpid(), session if session is not None else _new_session(pool_size)
        )
        self._closed = False
        # Until the server refuses the scan script once (see scan_pages).
        self._items_by_script = True
        #: The listing index (use_index): key -> index name, or None while it is off.
        self._index_of: IndexOf | None = None

    # -- the Store protocol ---------------------------------------------------------------

    def get(self, key: str) -> str | None:
        contract.check_key(key)
        return self._text_or_none(self._command(["GET", key], idempotent=True))

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        contract.check_keys(keys)
        keys = list(keys)
        if not keys:
            return []
        result = self._command(["MGET", *keys], idempotent=True)
        if not isinstance(result, list) or len(result) != len(keys):
            raise RememberStoreError(
                f"Vercel KV answered MGET of {len(keys)} keys with {self._shape(result)}"
            )
        return [self._text_or_none(value) for value in result]

    def set(
        self, key: str, value: str, *, ttl_ms: int | None = None, only_if_absent: bool = False
    ) -> bool:
        """One ``SET`` request; an indexed key: one ``EVAL`` that keeps its index too."""
        contract.check_write(key, value, ttl_ms)
        px = "" if ttl_ms is None else str(ttl_ms)
        index = None if self._index_of is None else self._index_of(key)
        if index is not None:
            nx = "1" if only_if_absent else ""
            script = ["EVAL", index_lua.SET_INDEXED, "2", key, index, value, px, nx]
            # As SET: without NX the same state however often it runs.
            return self._flag(script, "the indexed SET", idempotent=not only_if_absent)
        command = ["SET", key, value]
        if px:
            command += ["PX", px]
        if only_if_absent:
            command.append("NX")
        # SET without NX writes the same state however often it arrives, so an
        # unknown outcome may be retried; with NX a repeat of a write that did
        # happen would answer "not written", so it is only resent when it
        # provably never left.
        result = self._command(command, idempotent=not only_if_absent)
        if result == "OK":
            return True
        if result is None and only_if_absent:
            return False
        raise RememberStoreError(f"Vercel KV answered SET with {self._shape(result)}")

    def compare_and_set(
        self, key: str, expected: str, value: str, *, ttl_ms: int | None = None
    ) -> bool:
        contract.check_write(key, value, ttl_ms, expected)
        px = "" if ttl_ms is None else str(ttl_ms)
        # Not idempotent: after a lost reply to a swap that happened, a repeat
        # sees the new value and answers False.
        index = None if self._index_of is None else self._index_of(key)
        if index is not None:
            command = ["EVAL", index_lua.CAS_INDEXED, "2", key, index, expected, value, px]
            return self._flag(command, "the indexed compare-and-set", idempotent=False)
        command = ["EVAL", CAS_LUA_SCRIPT, "1", key, expected, value, px]
        return self._flag(command, "the compare-and-set", idempotent=False)

    def delete(self, *keys: str) -> int:
        contract.check_keys(keys)
        if not keys:
            return 0
        if self._index_of is not None:
            return self._delete_indexed(keys)
        # UNLINK's effect is the same however often it runs.  After a lost reply
        # the repeat counts fewer keys -- exactly what the caller would see by
        # repeating the call after an error, but with the deletion confirmed.
        return self._number(["UNLINK", *keys], "UNLINK")

    # -- verified mode's atomic commit (see remember_sync._integrity) -------------------

    def commit_manifest(self, commit: ManifestCommit) -> str | None:
        """Write *commit* in one ``EVAL`` if the stored manifest is still the one it expects.

        As :meth:`remember_sync.stores.redis.RedisStore.commit_manifest`.  Not
        retried after a lost reply (the caller reads the manifest again and
        finds whether its own landed).
        """
        keys, args = script_input(commit)
        command = ["EVAL", COMMIT_MANIFEST, str(len(keys)), *keys, *args]
        result = self._command(command, idempotent=False)
        if not isinstance(result, list) or len(result) != 2:
            raise RememberStoreError(
                f"Vercel KV EVAL (commit manifest): unexpected reply {result!r}"
            )
        done, current = result
        return None if int(done) == 1 else str(current or "")

    def read_with_manifest(
        self, manifest_key: str, seen: str | None, keys: Sequence[str]
    ) -> tuple[bool, str | None, list[str | None]]:
        """As :meth:`remember_sync.stores.redis.RedisStore.read_with_manifest`: one ``EVAL``."""
        command = ["EVAL", READ_WITH_MANIFEST, str(1 + len(keys)), manifest_key, *keys,
                   seen or ""]
        result = self._command(command, idempotent=True)
        if not isinstance(result, list) or len(result) != 3:
            raise RememberStoreError(
                f"Vercel KV EVAL (read with manifest): unexpected reply {result!r}"
            )
        same, manifest, values = result
        return int(same) == 1, manifest or None, [v if v is None else str(v) for v in values]

    # -- owned writes (OwnedWrites) ----------------------------------------------------

    def write_owned(self, write: contract.OwnedWrite) -> bool:
        """:meth:`set` / :meth:`compare_and_set` charged to its owner: one ``EVAL`` that
        checks the quota, writes and accounts (:mod:`~remember_sync.stores._quota_lua`).
        ``group`` is unused: the store never evicts for the library."""
        contract.check_owned(write)
        name, keys, args = quota_write(write, self._index_of)
        command = ["EVAL", quota_lua.SCRIPTS[name], str(len(keys)), *keys, *args]
        # As SET: without NX or an expected value the same state however often it runs.
        idempotent = write.expected is None and not write.only_if_absent
        number = self._number(command, "the SET with quota", idempotent=idempotent)
        return refused(number, write.quota)

    def delete_owned(self, owner: str, *keys: str) -> int:
        """:meth:`delete` refunding *owner*, in the same ``EVAL``."""
        contract.check_keys(keys)
        contract.check_key(owner)
        if not keys:
            return 0
        ledger = [owner, quota_lua.sizes_key(owner)]
        if self._index_of is None:
            groups: dict[str, list[str]] = {}
            plain = list(dict.fromkeys(keys))
        else:
            groups, plain = contract.group_by_index(keys, self._index_of)
        script = quota_lua.SCRIPTS["QUOTA_DELETE"]
        removed = 0
        for start in range(0, len(plain), 1000):
            chunk = [*ledger, *plain[start : start + 1000]]
            removed += self._number(["EVAL", script, str(len(chunk)), *chunk], "the UNLINK")
        script = quota_lua.SCRIPTS["QUOTA_DELETE_INDEXED"]
        for index, members in groups.items():
            for start in range(0, len(members), 1000):
                chunk = [*ledger, index, *members[start : start + 1000]]
                command = ["EVAL", script, str(len(chunk)), *chunk]
                removed += self._number(command, "the indexed UNLINK")  # idempotent as UNLINK
        return removed

    def owner_usage(self, owner: str) -> tuple[int, int]:
        """The live entries and bytes charged to *owner* (expired ones pruned first)."""
        contract.check_key(owner)
        command = ["EVAL", quota_lua.USAGE, "2", owner, quota_lua.sizes_key(owner)]
        result = self._command(command, idempotent=True)
        if not (isinstance(result, list) and len(result) == 2):
            shape = self._shape(result)
            raise RememberStoreError(f"Vercel KV answered the quota usage with {shape}")
        return int(result[0]), int(result[1])

    # -- the listing index (NamespaceIndex) --------------------------------------------

    def use_index(self, index_of: IndexOf) -> bool:
        """Keep a sorted-set index per namespace, in the same request as each write.

        Returns ``False``: entries already in the database are found only after
        a reindex (:func:`remember_sync._ops.reindex.reindex`).
        """
        self._index_of = merged_index_of(self._index_of, index_of)
        return False

    def run_script(
        self, script: str, keys: Sequence[str] = (), args: Sequence[object] = (),
        *, idempotent: bool = False,
    ) -> Any:
        """One ``EVAL`` of *script* through this store's REST client, its reply decoded
        (for a counter of your own beside the store, e.g. the MCP server's rate limit).

        Failures are handled as for the store's own commands (see the module docs);
        a script that is not *idempotent* is not sent again after a lost reply.

        :raises RememberStoreError: the request failed or the script raised.
        """
        contract.check_keys(keys)
        command = ["EVAL", script, str(len(keys)), *keys, *(str(a) for a in args)]
        return self._command(command, idempotent=idempotent)

    def _number(self, command: list[str], what: str, *, idempotent: bool = True) -> int:
        """Run *command*, whose reply is a count: that count (or RememberStoreError)."""
        result = self._command(command, idempotent=idempotent)
        if isinstance(result, int) and not isinstance(result, bool):
            return result
        raise RememberStoreError(f"Vercel KV answered {what} with {self._shape(result)}")

    def _flag(self, command: list[str], what: str, *, idempotent: bool) -> bool:
        """Run *command*, whose reply is 1 (done) or 0 (not done)."""
        done = self._number(command, what, idempotent=idempotent)
        if done not in (0, 1):
            raise RememberStoreError(f"Vercel KV answered {what} with {done}")
        return done == 1

    def _delete_indexed(self, keys: Sequence[str]) -> int:
        assert self._index_of is not None
        groups, plain = contract.group_by_index(keys, self._index_of)
        removed = 0
        if plain:
            removed += self._number(["UNLINK", *plain], "UNLINK")
        for index, members in groups.items():
            for start in range(0, len(members), 1000):
                chunk = members[start : start + 1000]
                command = ["EVAL", index_lua.DELETE_INDEXED, str(1 + len(chunk)), index, *chunk]
                removed += self._number(command, "the indexed UNLINK")  # idempotent as UNLINK
        return removed

    def index_pages(
        self, index: str, pattern: str, *, count: int = 1000
    ) -> Iterator[list[tuple[str, str]]]:
        """Yield the live ``(key, value)`` pairs of *index* matching *pattern*.

        One request per ``ZSCAN`` page of the index (an ``EVAL`` returning the
        members with their values, pruning members whose entry is gone).
        """
        contract.check_scan(pattern, count)
        contract.check_key(index)
        return self._index_pages(index, pattern, str(count))

    def _index_pages(self, index: str, pattern: str, count: str) -> Iterator[list[tuple[str, str]]]:
        seen: set[str] = set()
        cursor, prune = "0", "1"
        while True:
            command = ["EVAL", index_lua.INDEX_PAGE, "1", index, cursor, pattern, count, prune]
            result = self._command(command, idempotent=True)  # prunes only what is gone
            prune = ""
            cursor, keys, values = self._page_reply(result, "the index read")
            found = self._fresh(keys, values, seen)
            if found:
                yield found
            if cursor == "0":
                return

    def add_to_index(self, keys: Sequence[str]) -> int:
        """Put existing *keys* into their indexes: one ``EVAL`` per 500 keys."""
        if self._index_of is None:
            raise RememberConfigurationError("add_to_index needs use_index() first")
        contract.check_keys(keys)
        pairs = [(k, i) for k in dict.fromkeys(keys) if (i := self._index_of(k)) is not None]
        added = 0
        for start in range(0, len(pairs), 500):
            chunk = pairs[start : start + 500]
            command = [
                "EVAL", index_lua.REINDEX, str(len(chunk)),
                *(k for k, _ in chunk), *(i for _, i in chunk),
            ]
            added += self._number(command, "the reindex")
        return added

    def scan(self, pattern: str, *, count: int = 1000) -> Iterator[str]:
        contract.check_scan(pattern, count)
        return self._scan(pattern, count)

    def _scan(self, pattern: str, count: int) -> Iterator[str]:
        seen: set[str] = set()
        cursor = "0"
        while True:
            cursor, keys = self._scan_page(cursor, pattern, str(count))
            for key in keys:
                # SCAN may return a key more than once (e.g. across a rehash).
                if key not in seen:
                    seen.add(key)
                    yield key
            if cursor == "0":
                return

    def _scan_page(self, cursor: str, pattern: str, count: str) -> tuple[str, list[str]]:
        """One ``SCAN`` request: the next cursor and the page's keys."""
        result = self._command(["SCAN", cursor, "MATCH", pattern, "COUNT", count], idempotent=True)
        if (
            not isinstance(result, list)
            or len(result) != 2
            or not isinstance(result[0], str)
            or not isinstance(result[1], list)
        ):
            raise RememberStoreError(f"Vercel KV answered SCAN with {self._shape(result)}")
        return result[0], [key for key in result[1] if isinstance(key, str)]

    def scan_pages(self, pattern: str, *, count: int = 1000) -> Iterator[list[tuple[str, str]]]:
        """Yield the ``(key, value)`` pairs of the keys matching *pattern*, a page at a time.

        One request per ``SCAN`` page: an ``EVAL`` of
        :data:`~remember_sync.stores.base.SCAN_ITEMS_LUA_SCRIPT`, which returns the
        page's keys with their values.  If the server refuses the script (it
        finds its keys rather than declaring them, which a server may forbid),
        the store logs that once and reads each page with ``SCAN`` then
        ``MGET`` from then on: two requests a page, the same result.
        """
        contract.check_scan(pattern, count)
        return self._scan_pages(pattern, str(count))

    def _scan_pages(self, pattern: str, count: str) -> Iterator[list[tuple[str, str]]]:
        seen: set[str] = set()
        cursor = "0"
        while True:
            cursor, keys, values = self._items_page(cursor, pattern, count)
            found = self._fresh(keys, values, seen)
            if found:
                yield found
            if cursor == "0":
                return

    def _items_page(
        self, cursor: str, pattern: str, count: str
    ) -> tuple[str, list[Any], list[Any]]:
        """One ``SCAN`` page from *cursor*: the next cursor, the keys, their values."""
        if self._items_by_script:
            try:
                result = self._command(
                    ["EVAL", SCAN_ITEMS_LUA_SCRIPT, "0", cursor, pattern, count],
                    idempotent=True,  # reads only
                )
            except _Refused as exc:
                self._items_by_script = False
                log.info(
                    "remember: Vercel KV at %s refused the scan script (%s); "
                    "reading with SCAN + MGET from now on",
                    self._host,
                    exc,
                )
            else:
                return self._page_reply(result, "the scan script")
        cursor, keys = self._scan_page(cursor, pattern, count)
        return cursor, keys, self.get_many(keys)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pid, session = self._process_session
        # A forked child never closes the parent's session (see _http).
        if self._owns_session and pid == os.getpid():
            session.close()

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"VercelKVStore(host={self._host!r}{state})"

    # -- HTTP ---------------------------------------------------------------------------------

    @staticmethod
    def _text_or_none(value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        raise RememberStoreError(f"Vercel KV sent {type(value).__name__} where a string was due")

    def _page_reply(self, result: Any, what: str) -> tuple[str, list[str], list[Any]]:
        """A page script's ``[cursor, [keys], [values]]``, or RememberStoreError naming *what*."""
        if (
            isinstance(result, list)
            and len(result) == 3
            and isinstance(result[0], str)
            and isinstance(result[1], list)
            and isinstance(result[2], list)
            and len(result[1]) == len(result[2])
            and all(isinstance(key, str) for key in result[1])
        ):
            return result[0], result[1], result[2]
        raise RememberStoreError(f"Vercel KV answered {what} with {self._shape(result)}")

    def _fresh(
        self, keys: list[str], values: list[Any], seen: MutableSet[str]
    ) -> list[tuple[str, str]]:
        """The page's pairs with a value whose key was not yielded before (now *seen*)."""
        found: list[tuple[str, str]] = []
        for key, value in zip(keys, values, strict=True):
            text = self._text_or_none(value)
            if text is not None and key not in seen:
                seen.add(key)
                found.append((key, text))
        return found

    @staticmethod
    def _shape(result: Any) -> str:
        if isinstance(result, list):
            return f"an array of {len(result)}"
        return f"a {type(result).__name__}"

    def _http(self) -> requests.Session:
        """This process's session: the store's own one, made anew in a forked child.

        Why a new one: a child that went on using the inherited pool would send
        on the parent's keep-alive connection, and whichever process reads next
        takes the other's reply -- another caller's data.  The inherited
        session is parked in :data:`_INHERITED`, never closed: its sockets are
        the parent's too (closing the child's descriptors would send nothing,
        but closing the pool takes urllib3 locks a parent thread may have held
        at the fork, which would hang the child).  Two threads of a child racing
        here may each build a session; one is kept, the other serves its one
        request and is collected in this process -- harmless.
        """
        pid, session = self._process_session
        current = os.getpid()
        if pid == current:
            return session
        if not self._owns_session:
            raise RememberConfigurationError(
                f"Vercel KV: the requests.Session passed as session= belongs to process {pid} "
                f"and cannot be used in forked process {current} (its pooled connections are "
                "shared with the parent); create the store after forking (e.g. in a gunicorn "
                "post_fork hook or a multiprocessing initializer), or leave session= unset so "
                "that the store keeps one session per process"
            )
        _INHERITED.append(session)
        session = _new_session(self._pool_size)
        self._process_session = (current, session)
        return session

    def _command(self, command: list[str], *, idempotent: bool) -> Any:
        """Run one command; return its decoded ``result`` or raise a Remember error."""
        if self._closed:
            raise RememberStoreError(f"{self!r} is closed")
        try:
            body = json.dumps(command, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate cannot be sent as UTF-8
            raise RememberInputError(
                f"Vercel KV {command[0]}: the REST API's JSON carries Unicode text only, not "
                "bytes that are not UTF-8 (a lone surrogate, as in a key another program wrote)"
            ) from exc
        reply = self._send(command[0], body, idempotent=idempotent)
        return _decode(reply)

    def _send(self, name: str, body: bytes, *, idempotent: bool) -> Any:
        """POST *body*, retrying as the module docs say; return the raw ``result``."""
        deadline = time.monotonic() + self._timeout
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise self._failed(f"no answer within {self._timeout:g} s", retryable=False)
                return self._attempt(name, body, remaining, idempotent=idempotent)
            except _AttemptFailed as failure:
                delay = min(self._backoff * 2 ** (attempt - 1), _MAX_BACKOFF)
                if (
                    not failure.retryable
                    or attempt > self._retries
                    or time.monotonic() + delay >= deadline
                ):
                    tries = f" after {attempt} attempts" if attempt > 1 else ""
                    raise RememberStoreError(
                        self._scrub(f"Vercel KV {name} at {self._host} failed{tries}: {failure}")
                    ) from failure.__cause__  # the driver's exception, or None
                log.debug(
                    "remember: Vercel KV %s failed (%s); retry %d of %d in %.3f s",
                    name,
                    self._scrub(str(failure)),
                    attempt,
                    self._retries,
                    delay,
                )
                time.sleep(delay)

    def _attempt(self, name: str, body: bytes, timeout: float, *, idempotent: bool) -> Any:
        """One POST: the ``result``, or :class:`_AttemptFailed` / a final Remember error."""
        # The one place where requests' exceptions are translated, by EXCEPTION_MAP.
        try:
            response = self._http().post(
                self._url,
                data=body,
                headers=self._headers,
                auth=self._auth,
                timeout=(timeout, timeout),
                # A redirected POST would silently turn into a GET: refuse instead.
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            _redact_request(exc)
            kind = next(EXCEPTION_MAP[c] for c in type(exc).__mro__ if c in EXCEPTION_MAP)
            if kind is RememberConfigurationError:
                raise RememberConfigurationError(
                    self._scrub(
                        f"Vercel KV {name} at {self._host}: {type(exc).__name__}: {exc}; "
                        f"check {KV_URL_ENV} and the proxy settings"
                    )
                ) from exc
            never_sent = _never_sent(exc)
            message = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, requests.Timeout):
                what = "could not connect" if never_sent else "no answer"
                message = f"{what} within {timeout:.3g} s ({type(exc).__name__})"
            raise self._failed(message, retryable=idempotent or never_sent) from exc

        status = response.status_code
        if status in (401, 403):
            raise RememberConfigurationError(
                f"Vercel KV at {self._host} rejected the token (HTTP {status}): check "
                f"{KV_TOKEN_ENV} (a read-only token cannot write)"
            )
        if 300 <= status < 400:
            raise RememberStoreError(
                f"Vercel KV at {self._host} answered HTTP {status} (a redirect): set "
                f"{KV_URL_ENV} to the database's REST URL itself"
            )
        try:
            payload = _parse_reply(response.content)
        except ValueError as exc:
            snippet = response.content[:120].decode("utf-8", "replace")
            message = f"HTTP {status} with a body that is not JSON ({exc}): {snippet!r}"
            if status == 200 or status >= 500:
                # A broken reply or a failing proxy: the command may or may not have run.
                raise self._failed(message, retryable=idempotent) from exc
            # Any other status without JSON is not the REST API talking (wrong URL?).
            raise RememberStoreError(
                self._scrub(f"Vercel KV {name} at {self._host}: {message}; check {KV_URL_ENV}")
            ) from None
        error = payload.get("error") if isinstance(payload, dict) else None
        if error is not None and not isinstance(error, str):
            # Never formatted: a deeply nested one would not even render.
            error = f"(an error that is not text but {self._shape(error)})"
        if status >= 500:
            raise self._failed(
                f"HTTP {status}: {error or 'server error'}", retryable=idempotent
            )
        if status != 200 or error is not None:
            raise _Refused(
                self._scrub(f"Vercel KV {name} at {self._host}: {error or f'HTTP {status}'}")
            )
        if not isinstance(payload, dict) or "result" not in payload:
            raise self._failed(
                f"HTTP {status} with an unexpected body shape", retryable=idempotent
            )
        return payload["result"]

    def _failed(self, message: str, *, retryable: bool) -> _AttemptFailed:
        """An attempt failure whose text is scrubbed (it may become a chained context)."""
        return _AttemptFailed(self._scrub(message), retryable=retryable)

    def _scrub(self, text: str) -> str:
        """Never let the token into a message, however a server or driver echoed it."""
        return text.replace(self._secret, "<redacted>")
