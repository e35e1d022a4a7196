"""Subject keys: a random data key per person, kept in a keystore apart from the data.

With ``encryption={"subject_keys": True}`` every entry of a person -- their
user namespace, the ``stateless-user:`` session, and session and tool scope
they write into while signed in -- is sealed under a key derived from that
person's data key, and the envelope names the key by ``"skid"``.  Erasing the
person destroys the data key in the keystore, so every copy of those entries
(replicas, RDB/AOF files, backups) stays sealed for ever: crypto-shredding.

The keystore holds three kinds of record (names below; a store keystore puts
``P + "keystore:"`` in front):

``key:<skid>``
    ``{"subject": H, "kid": ..., "wrapped": <envelope>}``: the data key and the
    user id, sealed (AES-GCM) under a key derived from the master secret for
    this purpose alone, bound to ``H + ":" + skid`` as associated data.
``subject:<H>``
    The person's current key id.
``erased:<H>``
    When the person was erased (a tombstone; their next write gets a new key).

``H`` is the keyed subject hash of :func:`~remember_sync._erasure.user_hashes`
(never the user id).  Entry keys:
``HKDF-SHA256(data key, salt="remember-plugin-v1", info="remember:subject-entry:v1:" +
<the namespace's info>)``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._bounded import BoundedCache
from ._clock import Clock
from ._crypto import (
    HKDF_SALT,
    SUBJECT_KEY_GONE,
    Keyring,
    b64url_decode,
    b64url_encode,
    hkdf_inputs,
    open_sealed,
    parse_envelope,
    seal,
)
from ._erasure import user_hashes
from ._fork import after_fork_in_child
from ._keys import glob_escape
from .errors import RememberConfigurationError, RememberDecryptionError, RememberStoreError
from .identity import STATELESS_USER_PREFIX as _STATELESS
from .identity import is_anonymous
from .stores.base import Store
from .types import Namespace

_WRAP_INFO = b"remember:subject-key-wrap:v1"
_ENTRY_INFO = b"remember:subject-entry:v1:"
#: How long a process trusts a data key it read (or a person's current key id)
#: before asking the keystore again: within this time after an erasure elsewhere,
#: another process may still open (or write under) the destroyed key.
RECHECK_MS = 10_000
_CACHED = 4096
_BATCH = 500


class Backend(Protocol):
    """Where the records live: a file or a second store."""

    def get(self, name: str) -> str | None: ...
    def get_many(self, names: Sequence[str]) -> list[str | None]: ...
    def add(self, name: str, value: str) -> bool: ...
    def swap(self, name: str, expected: str, value: str) -> bool: ...
    def delete(self, *names: str) -> int: ...
    def names(self, head: str) -> list[str]: ...
    def check_apart(self, name: str) -> None: ...
    def scrub(self) -> None: ...
    def close(self) -> None: ...


class StoreKeystore:
    """Records in a second store (another Redis, a Vercel KV database, a MemoryStore).

    :param data_store: the store the entries are in (:meth:`check_apart`).
    :param owns: :meth:`close` closes the store (``False``: the caller's).
    """

    def __init__(
        self, store: Store, *, prefix: str, data_store: Store, owns: bool = False
    ) -> None:
        self.store = store
        self.head = prefix + "keystore:"
        self.data_store = data_store
        self._owns = owns

    def get(self, name: str) -> str | None:
        return self.store.get(self.head + name)

    def get_many(self, names: Sequence[str]) -> list[str | None]:
        return self.store.get_many([self.head + n for n in names]) if names else []

    def add(self, name: str, value: str) -> bool:
        return self.store.set(self.head + name, value, only_if_absent=True)

    def swap(self, name: str, expected: str, value: str) -> bool:
        return self.store.compare_and_set(self.head + name, expected, value)

    def delete(self, *names: str) -> int:
        return self.store.delete(*(self.head + n for n in names)) if names else 0

    def names(self, head: str) -> list[str]:
        cut = len(self.head)
        return [k[cut:] for k in self.store.scan(glob_escape(self.head + head) + "*")]

    def scrub(self) -> None:
        """Nothing to do: a deleted key is gone from the store (no journal of our own)."""

    def check_apart(self, name: str) -> None:
        """Refuse a keystore that is the data's own database through another client:
        the record *name*, just written, must not be visible in the data store."""
        if self.data_store.get(self.head + name) is not None:
            self.delete(name)
            raise RememberConfigurationError(
                "RememberPlugin.init option 'keystore': is the same database as the data "
                "store (through another client), so every backup of the data would hold the "
                "keys: use another Redis or Vercel KV database, or a file"
            )

    def close(self) -> None:
        if self._owns:
            self.store.close()

    def __repr__(self) -> str:
        return f"StoreKeystore({self.store!r})"


#: Connections a forked child inherited: kept, never used or closed (see FileKeystore).
_INHERITED: list[sqlite3.Connection] = []


class FileKeystore:
    """Records in a local SQLite file: created 0600; a file others can read is refused."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                mode = os.fstat(fd).st_mode
            finally:
                os.close(fd)
            if stat.S_IMODE(mode) & 0o077:
                raise RememberConfigurationError(
                    f"RememberPlugin.init option 'keystore': {path!r} is readable by others "
                    f"(mode {stat.S_IMODE(mode):o}); chmod 600 it"
                )
            self._db = self._connect()
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS records (name TEXT PRIMARY KEY, value TEXT)"
            )
        except (OSError, sqlite3.Error) as exc:
            raise RememberConfigurationError(
                f"RememberPlugin.init option 'keystore': file {path!r} is unusable: {exc}"
            ) from exc
        self._lock = threading.Lock()
        after_fork_in_child(self._reopen)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        # A deleted record's bytes are overwritten with zeros, not left in a free page.
        db.execute("PRAGMA secure_delete=ON")
        return db

    def _reopen(self) -> None:
        # An SQLite connection must not cross a fork: the child opens its own and never
        # closes the parent's (closing it could release locks the parent holds).
        _INHERITED.append(self._db)
        self._lock = threading.Lock()
        self._db = self._connect()

    def _run(self, sql: str, args: Sequence[object] = ()) -> sqlite3.Cursor:
        try:
            with self._lock:
                return self._db.execute(sql, tuple(args))
        except sqlite3.Error as exc:
            raise RememberStoreError(f"keystore file {self.path!r} failed: {exc}") from exc

    def get(self, name: str) -> str | None:
        row = self._run("SELECT value FROM records WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def get_many(self, names: Sequence[str]) -> list[str | None]:
        return [self.get(n) for n in names]

    def add(self, name: str, value: str) -> bool:
        cursor = self._run("INSERT OR IGNORE INTO records VALUES (?, ?)", (name, value))
        return cursor.rowcount == 1

    def swap(self, name: str, expected: str, value: str) -> bool:
        cursor = self._run(
            "UPDATE records SET value = ? WHERE name = ? AND value = ?", (value, name, expected)
        )
        return cursor.rowcount == 1

    def delete(self, *names: str) -> int:
        gone = 0
        for name in names:
            gone += self._run("DELETE FROM records WHERE name = ?", (name,)).rowcount
        return gone

    def scrub(self) -> None:
        """Leave no copy of deleted records: the database zeroes them (``secure_delete``);
        the write-ahead log, which still holds the pages as they were, is checkpointed
        into it and truncated to nothing.

        :raises RememberStoreError: the log could not be truncated (a reader held it
            for the whole busy timeout): the deleted records may remain in ``-wal``.
        """
        busy, _, _ = self._run("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise RememberStoreError(
                f"keystore file {self.path!r}: its write-ahead log could not be truncated "
                "(another connection kept reading); the destroyed keys may remain in its "
                "-wal file until the next checkpoint"
            )

    def names(self, head: str) -> list[str]:
        rows = self._run(
            "SELECT name FROM records WHERE substr(name, 1, ?) = ?", (len(head), head)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def check_apart(self, name: str) -> None:
        """A file is never the data store."""

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"FileKeystore({self.path!r})"


_URL_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://")


def keystore_from(
    spec: object, data_store: Store, prefix: str, store_from_url: Callable[[str], Store]
) -> Backend:
    """The keystore the ``keystore=`` option names: a file path, a ``redis://`` URL (a
    second Redis, built by *store_from_url*), or a second store.

    :raises RememberConfigurationError: naming ``keystore``.
    """
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, str) and spec.startswith(_URL_SCHEMES):
        return StoreKeystore(
            store_from_url(spec), prefix=prefix, data_store=data_store, owns=True
        )
    if isinstance(spec, str) and spec:
        return FileKeystore(spec)
    if isinstance(spec, Store):
        if spec is data_store:
            raise RememberConfigurationError(
                "RememberPlugin.init option 'keystore': must be kept apart from the data "
                "(a second store or a file), not the store the entries are in"
            )
        return StoreKeystore(spec, prefix=prefix, data_store=data_store)
    raise RememberConfigurationError(
        "RememberPlugin.init option 'keystore': must be a file path or a second Store; "
        f"got {type(spec).__name__}"
    )


def subject_of(ns: Namespace, writer: str | None) -> str | None:
    """The person an entry of *ns* written by *writer* belongs to, or ``None``."""
    if ns.scope == "user":
        user = ns.user
    elif ns.scope == "global":
        return None
    elif ns.session is not None and ns.session.startswith(_STATELESS):
        user = ns.session[len(_STATELESS) :]
    else:
        user = writer
    return None if user is None or is_anonymous(user) else user


class SubjectKeys:
    """The keyring's :class:`~remember_sync._crypto.SubjectSealer`: per-person data keys.

    :param keyring: the master secrets (they wrap the data keys).
    :param backend: the keystore.
    :param clock: epoch milliseconds (how long cached keys are trusted).
    :param owns: :meth:`close` closes the backend.
    """

    def __init__(self, keyring: Keyring, backend: Backend, clock: Clock, *, owns: bool) -> None:
        self.keyring = keyring
        self.backend = backend
        self.clock = clock
        self._owns = owns
        self._new_caches()
        after_fork_in_child(self._new_caches)

    def _new_caches(self) -> None:
        #: skid -> (data key, when read)
        self._keys: BoundedCache[str, tuple[bytes, int]] = BoundedCache(_CACHED)
        #: user -> (skid, when read)
        self._current: BoundedCache[str, tuple[str, int]] = BoundedCache(_CACHED)
        #: (skid, scope, session, user, tool) -> the entry AEAD
        self._aeads: BoundedCache[tuple[str, str, str | None, str | None, str | None], AESGCM]
        self._aeads = BoundedCache(_CACHED)

    def close(self) -> None:
        if self._owns:
            self.backend.close()

    # -- wrapping ----------------------------------------------------------------------

    def _wrap(self, subject: str, skid: str, user: str, data_key: bytes) -> str:
        keyring = self.keyring
        payload = json.dumps({"user": user, "key": b64url_encode(data_key)}).encode("utf-8")
        wrapped = seal(
            payload, keyring.purpose_keys(_WRAP_INFO)[0], kid=keyring.primary_kid,
            aad=f"{subject}:{skid}".encode(),
        )
        return json.dumps({"subject": subject, "kid": keyring.primary_kid, "wrapped": wrapped})

    def _unwrap(self, skid: str, record: str) -> tuple[str, str, bytes, str | None]:
        """(subject hash, user, data key, wrapping kid) of a key record."""
        try:
            obj = json.loads(record)
            subject = obj["subject"]
            payload = json.loads(
                open_sealed(
                    obj["wrapped"], self.keyring.purpose_keys(_WRAP_INFO),
                    f"{subject}:{skid}".encode(),
                )
            )
            data_key = b64url_decode(payload["key"])
            user = payload["user"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RememberDecryptionError(f"subject key {skid!r} is not a key record") from exc
        if len(data_key) != 32 or not isinstance(user, str) or not isinstance(subject, str):
            raise RememberDecryptionError(f"subject key {skid!r} is not a key record")
        kid = obj.get("kid")
        return subject, user, data_key, kid if isinstance(kid, str) else None

    def _fresh(self, when: int) -> bool:
        return 0 <= self.clock() - when < RECHECK_MS

    def data_key(self, skid: str) -> bytes:
        """The data key *skid* names (cached for :data:`RECHECK_MS`).

        :raises RememberDecryptionError: it is gone
            (:data:`~remember_sync._crypto.SUBJECT_KEY_GONE`).
        """
        found = self._keys.get(skid)
        if found is not None and self._fresh(found[1]):
            return found[0]
        record = self.backend.get("key:" + skid)
        if record is None:
            self._forget(skid)
            raise RememberDecryptionError(SUBJECT_KEY_GONE)
        data_key = self._unwrap(skid, record)[2]
        self._keys.put(skid, (data_key, self.clock()))
        return data_key

    def _forget(self, skid: str) -> None:
        self._keys.pop(skid)
        self._aeads = BoundedCache(_CACHED)

    def _aead(self, skid: str, ns: Namespace) -> AESGCM:
        data_key = self.data_key(skid)  # checks the key is (still) there
        cache_key = (skid, ns.scope, ns.session, ns.user, ns.tool)
        found = self._aeads.get(cache_key)
        if found is None:
            info = _ENTRY_INFO + hkdf_inputs("", ns)[1]
            derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=HKDF_SALT, info=info)
            found = AESGCM(derived.derive(data_key))
            self._aeads.put(cache_key, found)
        return found

    # -- the sealer --------------------------------------------------------------------

    def open_subject(
        self, skid: str, ns: Namespace, iv: bytes, sealed: bytes, aad: bytes | None
    ) -> bytes:
        """Decrypt an entry sealed under subject key *skid* (see :class:`SubjectSealer`)."""
        try:
            return self._aead(skid, ns).decrypt(iv, sealed, aad)
        except InvalidTag:
            raise RememberDecryptionError(
                "entry could not be decrypted with its subject key (tampered, or moved from "
                "another key)"
            ) from None

    def seal_subject(
        self, text: bytes, ns: Namespace, aad: bytes, user: str | None, like: str | None
    ) -> str | None:
        """*text* sealed for the person of *ns* (see :class:`SubjectSealer`)."""
        person = subject_of(ns, user)
        if person is not None:
            skid = self.current(person)
        elif like is not None and '"skid":"' in like:
            found = parse_envelope(like).skid
            if found is None:
                return None
            skid = found
        else:
            return None
        return seal(text, self._aead(skid, ns), skid=skid, aad=aad)

    def current(self, user: str) -> str:
        """The key id *user*'s entries are sealed under now; a new key on the first write
        (or the first after an erasure)."""
        found = self._current.get(user)
        if found is not None and self._fresh(found[1]):
            return found[0]
        hashes = user_hashes(self.keyring, user)
        for subject in hashes:
            skid = self.backend.get("subject:" + subject)
            if skid is not None and self.backend.get("key:" + skid) is not None:
                self._current.put(user, (skid, self.clock()))
                return skid
        skid = self._create(user, hashes[0])
        self._current.put(user, (skid, self.clock()))
        return skid

    def _create(self, user: str, subject: str) -> str:
        """A new data key for *user*, recorded, or the one another writer recorded first."""
        skid = b64url_encode(os.urandom(12))
        data_key = AESGCM.generate_key(bit_length=256)
        self.backend.add("key:" + skid, self._wrap(subject, skid, user, data_key))
        self.backend.check_apart("key:" + skid)
        pointer = "subject:" + subject
        for _attempt in range(5):
            if self.backend.add(pointer, skid):
                self._keys.put(skid, (data_key, self.clock()))
                return skid
            other = self.backend.get(pointer)
            if other is None:
                continue  # erased meanwhile: try again
            if self.backend.get("key:" + other) is not None:
                self.backend.delete("key:" + skid)  # the other writer's key wins
                return other
            # The pointer names a key that is gone (an erasure raced a rewrap): replace it.
            if self.backend.swap(pointer, other, skid):
                self._keys.put(skid, (data_key, self.clock()))
                return skid
        self.backend.delete("key:" + skid)
        raise RememberStoreError("the keystore changed during every attempt to create a key")

    # -- erasure and rotation ----------------------------------------------------------

    def _records(self) -> list[tuple[str, str]]:
        """Every (skid, record) in the keystore."""
        names = self.backend.names("key:")
        out: list[tuple[str, str]] = []
        for i in range(0, len(names), _BATCH):
            chunk = names[i : i + _BATCH]
            for name, record in zip(chunk, self.backend.get_many(chunk), strict=True):
                if record is not None:
                    out.append((name[len("key:") :], record))
        return out

    def destroy(self, user: str, *, now: int, dry_run: bool) -> int:
        """Destroy every data key of *user* and record the erasure; how many keys.

        With *dry_run*, count them only.
        """
        hashes = user_hashes(self.keyring, user)
        mine: list[str] = []
        for skid, record in self._records():
            try:
                subject = json.loads(record).get("subject")
            except (ValueError, AttributeError):
                continue  # not a record this keystore wrote: not the person's, left
            if subject in hashes:
                mine.append(skid)
        if dry_run:
            return len(mine)
        self.backend.delete(*("key:" + s for s in mine), *("subject:" + h for h in hashes))
        tombstone = "erased:" + hashes[0]
        self.backend.delete(tombstone)
        self.backend.add(tombstone, str(now))
        self.backend.scrub()
        self._current.pop(user)
        for skid in mine:
            self._forget(skid)
        return len(mine)

    def erased_at(self, user: str) -> int | None:
        """When *user* was last erased (epoch ms), from the keystore's tombstone."""
        for subject in user_hashes(self.keyring, user):
            found = self.backend.get("erased:" + subject)
            if found is not None:
                return int(found)
        return None

    def rewrap(self, *, dry_run: bool = False) -> tuple[int, int]:
        """Wrap every data key anew under the primary secret; ``(rewrapped, unreadable)``.

        Entries need no rewrite: their keys derive from the data keys, which do
        not change.  A record no configured secret opens is counted and left.
        """
        done = bad = 0
        primary = self.keyring.primary_kid
        for skid, record in self._records():
            try:
                subject, user, data_key, kid = self._unwrap(skid, record)
            except RememberDecryptionError:
                bad += 1
                continue
            fresh_subject = user_hashes(self.keyring, user)[0]
            if kid == primary and subject == fresh_subject:
                continue
            done += 1
            if dry_run:
                continue
            fresh = self._wrap(fresh_subject, skid, user, data_key)
            if not self.backend.swap("key:" + skid, record, fresh):
                continue  # erased (or rewrapped) meanwhile: never brought back
            if subject != fresh_subject:
                old = "subject:" + subject
                if self.backend.get(old) == skid:
                    self.backend.add("subject:" + fresh_subject, skid)
                    self.backend.delete(old)
        return done, bad

