"""Verified memory: per-namespace manifests, entry digests and the witness.

With ``integrity="verified"`` every namespace has a **manifest**, stored
beside its entries under ``P + "__manifest__:" + <namespace>`` and sealed
with the namespace's key (the manifest's storage key is the associated data,
so a manifest moved to another namespace does not open).  It records::

    {"c": counter, "x": deadline or 0, "e": {bare key: [digest, deadline or 0, [alts]]}}

``digest`` is a truncated SHA-256 of the entry's stored string exactly as it
was written: an older genuine ciphertext of the same key, a value moved in
from another key and any edit all have another digest.  ``counter`` grows
with every write (``max(previous + 1, now in ms)``, so a namespace that
expired and started over still counts upwards); ``x`` is when the manifest
itself expires.  ``alts`` are the other versions a read accepts while a
two-step write is under way on Redis Cluster (``""``: absent), and that
writer's lease (``"~<epoch ms>"``): until it ends, other writers of the key
wait instead of building on the version being replaced.

A read refuses (:class:`~remember_sync.errors.RememberIntegrityError`) an
entry the manifest lists as live that is missing or has another digest, an
entry the manifest does not list (unless it is a genuine, expired one), a
manifest that does not open, and a manifest older than the **witness**: a
small record outside the store of each namespace's latest counter.  The
memory store needs none of it: nothing outside the process can edit it.

Writes keep the manifest in step: one script (:meth:`commit_manifest`) on a
standalone server, Sentinel and Vercel KV; elsewhere (Redis Cluster, any
other store) an intent-then-commit sequence of single-key steps, argued in
``docs/verified.rst``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ._bounded import BoundedCache
from ._clock import Clock
from ._codec import EntryCodec
from ._crypto import Keyring, seal
from ._fork import after_fork_in_child
from ._keys import glob_escape, storage_namespace
from ._manifest import (
    EMPTY,
    LEASE_MARK,
    LEASE_MS,
    MANIFEST_GRACE_MS,
    Change,
    lease_end,
    leased,
    record_json,
    token,
)
from ._manifest import Manifest as Manifest
from ._manifest import Record as Record
from ._manifest import digest as digest
from ._manifest import manifest_deadline as manifest_deadline
from ._text import TEXT_ERRORS
from ._witness import FileWitness as FileWitness
from ._witness import StoreWitness as StoreWitness
from ._witness import Witness
from ._witness import witness_from as witness_from
from .errors import (
    RememberConfigurationError,
    RememberConflictError,
    RememberDecryptionError,
    RememberIntegrityError,
    RememberStoreError,
)
from .stores.base import ManifestCommit, Store
from .types import Namespace

T = TypeVar("T")
log = logging.getLogger("remember_sync")

#: The values of the ``integrity`` option.
INTEGRITY_MODES = ("default", "verified")
#: How often a namespace's witness floor is read again (a plugin keeps the last one).
WITNESS_REFRESH_MS = 1_000
#: Attempts of a commit against a manifest other writers keep changing.
COMMIT_ATTEMPTS = 64
#: Above this many bytes a cached manifest is not fetched with every read (see ``fetch``).
FETCH_WHOLE_BYTES = 16_384
#: HKDF ``info`` of the key that names namespaces in a witness (never a namespace's info).
WITNESS_INFO = b"remember:witness-names:v1"
_CACHED = 4096
_BATCH = 500
#: What follows ``P`` in the key of an erased namespace's sealed mark (see ``Verifier.end``).
ENDED_HEAD = "__ended__:"
#: The read time of a floor the witness has not been asked about yet.
_NEVER = -(1 << 62)
#: How often a read of an unchanged manifest notes that it was seen (see ``_gone``).
_SEEN_REFRESH_MS = 1_000
#: What a process remembers of a namespace: (highest counter, that manifest's deadline,
#: when the witness was last read, when the manifest was last seen in the store).
Floor = tuple[int, int | None, int, int]



def in_process(store: Store) -> bool:
    """Whether *store* lives in this process's memory, where nobody else can edit it."""
    from .stores.memory import MemoryStore

    return isinstance(store, MemoryStore)


# -- the verifier -----------------------------------------------------------------------------


class Verifier:
    """Verified mode's reads and writes for one plugin.

    :param store: where entries and manifests live.
    :param codec: the plugin's codec (its keyring seals the manifests).
    :param prefix: the key prefix ``P``.
    :param clock: epoch milliseconds.
    :param witness: the record outside the store, or ``None``.
    :param owns_witness: :meth:`close` closes the witness (``False``: the caller's).
    :param sleep: how a writer waits for another one between its steps (tests inject it).
    """

    def __init__(
        self,
        store: Store,
        codec: EntryCodec,
        *,
        prefix: str,
        clock: Clock,
        witness: Witness | None = None,
        owns_witness: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if codec.keyring is None:
            raise RememberConfigurationError(
                "integrity='verified' needs encryption: the secret authenticates the manifests"
            )
        if not codec.bind_key:
            raise RememberConfigurationError(
                "integrity='verified' cannot be combined with encryption.frontmcp_compatible: "
                "a 1.8.0 writer keeps no manifests"
            )
        self.store = store
        self.codec = codec
        self.keyring: Keyring = codec.keyring
        self.prefix = prefix
        self.clock = clock
        self.witness = witness
        self._owns_witness = owns_witness
        self.sleep = sleep
        commit = getattr(store, "commit_manifest", None)
        self._atomic = callable(commit) and not getattr(store, "is_cluster", False)
        self._names_key = self.keyring.purpose_keys(WITNESS_INFO)[0]
        self._reads = callable(getattr(store, "read_with_manifest", None)) and self._atomic
        #: How often a read that found the store inconsistent looks again before refusing:
        #: on a store whose manifest and entries are not read at one instant (Redis
        #: Cluster), an honest writer between its steps can look like an edit once.
        self.read_attempts = 1 if self._atomic else 5
        self._new_caches()
        after_fork_in_child(self._new_caches)

    def _new_caches(self) -> None:
        # Another thread of the parent may have held a cache's lock at the fork (see _fork).
        # manifest key -> (stored string, parsed manifest): reused while the store agrees.
        self._manifests: BoundedCache[str, tuple[str | None, Manifest]] = BoundedCache(_CACHED)
        # manifest key -> (counter, deadline, read at): the witness's floor, refreshed.
        # manifest key -> (counter, deadline, witness read at, manifest last seen at).
        self._floors: BoundedCache[str, Floor] = BoundedCache(_CACHED)

    def close(self) -> None:
        """Close the witness if it was built here (the plugin closes its store)."""
        if self.witness is not None and self._owns_witness:
            self.witness.close()

    # -- manifests ----------------------------------------------------------------------------

    def _aad(self, mkey: str) -> bytes:
        return mkey[len(self.prefix) :].encode("utf-8", TEXT_ERRORS)

    def _seal(self, ns: Namespace, mkey: str, manifest: Manifest) -> str:
        return self._seal_text(manifest.to_json(), ns, mkey)

    def _seal_text(self, text: bytes, ns: Namespace, key: str) -> str:
        """*text* sealed under the namespace's key from the master secret, bound to *key*:
        never under a person's subject key (their erasure must not lock the manifest)."""
        return seal(text, self.keyring.key(ns), kid=self.keyring.primary_kid, aad=self._aad(key))

    def witness_name(self, mkey: str, key: bytes | None = None) -> str:
        """The keyed name of a namespace in the witness (it never sees the namespace);
        *key*: under another secret's name key (:meth:`witness_names`)."""
        mac = hmac.new(key or self._names_key, mkey.encode("utf-8", TEXT_ERRORS), hashlib.sha256)
        return mac.hexdigest()[:40]

    def witness_names(self, mkey: str) -> list[str]:
        """The namespace's name in the witness under every configured secret, newest first."""
        return [self.witness_name(mkey, k) for k in self.keyring.purpose_keys(WITNESS_INFO)]

    def open_manifest(self, ns: Namespace, mkey: str, raw: str | None) -> Manifest:
        """The manifest stored as *raw* (``None``: none), checked against the highest
        counter seen for the namespace (the witness's, and this process's own).

        :raises RememberIntegrityError: it does not open, or is older than what was seen.
        """
        cached = self._manifests.get(mkey)
        if cached is not None and cached[0] == raw:
            manifest = cached[1]
        else:
            manifest = self._parse(ns, mkey, raw)
        return self._check_floor(ns, mkey, manifest, raw)

    def _parse(self, ns: Namespace, mkey: str, raw: str | None) -> Manifest:
        """What the stored manifest *raw* says (cached), no floor checked."""
        if raw is None:
            return EMPTY
        try:
            text = self.keyring.open(raw, ns, self._aad(mkey), bound_only=True)[0]
        except RememberDecryptionError as exc:
            raise RememberIntegrityError(
                f"the manifest of {self._where(ns)} fails its check ({exc.message}): "
                "it was altered, or moved from another namespace"
            ) from exc
        manifest = Manifest.from_json(text)
        self._manifests.put(mkey, (raw, manifest))
        self._raise_floor(mkey, manifest)
        return manifest

    def _check_floor(
        self, ns: Namespace, mkey: str, manifest: Manifest, raw: str | None
    ) -> Manifest:
        """*manifest* (stored as *raw*), unless it is older than the floor: an absent one that
        expired or was erased reads as empty, counting on from the floor (the next write
        counts higher).  A manifest read just before another thread of this process raised
        the floor is no rollback: the store holds a newer one by now."""
        now = self.clock()
        floor = self._floors.get(mkey)
        if self.witness is not None and (floor is None or now - floor[2] >= WITNESS_REFRESH_MS):
            counter, deadline = self.witness.floor(self.witness_name(mkey))
            seen_at = _NEVER if floor is None else floor[3]
            if floor is not None and floor[0] > counter:
                counter, deadline = floor[0], floor[1]  # what this process saw is a floor too
            floor = (counter, deadline, now, seen_at)
            self._floors.put(mkey, floor)
        if floor is None or manifest.counter >= floor[0]:
            if floor is not None and raw is not None and now - floor[3] >= _SEEN_REFRESH_MS:
                self._floors.put(mkey, (floor[0], floor[1], floor[2], now))
            return manifest
        if raw is None and self._gone(ns, mkey, floor, now):
            return Manifest(floor[0])
        current = self.store.get(mkey)
        if current is not None and current != raw:
            if self._parse(ns, mkey, current).counter >= floor[0]:
                return manifest  # read before a newer write of this process: a stale read
        seen = "its witness recorded" if self.witness is not None else "this process saw"
        raise RememberIntegrityError(
            f"the store holds an older state of {self._where(ns)} than {seen} "
            f"(manifest {manifest.counter} < {floor[0]}): the store was rolled "
            "back or its manifest deleted"
        )

    def _gone(self, ns: Namespace, mkey: str, floor: Floor, now: int) -> bool:
        """Whether a namespace whose manifest is absent may honestly be gone: it expired,
        it was erased, or -- known to this process alone, without a witness -- its
        manifest was last seen longer ago than an emptied manifest outlives its last
        entry (another process may have emptied it, and it expired since)."""
        if floor[1] is not None and now >= floor[1]:
            return True
        if self._ended(ns, mkey) >= floor[0]:
            self._floors.put(mkey, (floor[0], now, now, now))
            return True
        return self.witness is None and now - floor[3] >= MANIFEST_GRACE_MS

    def _raise_floor(self, mkey: str, manifest: Manifest, *, witnessed: bool = False) -> None:
        """Remember *manifest*'s counter as a floor; *witnessed*: the witness holds it too
        (this process just advanced it), else the witness is still to be read."""
        floor = self._floors.get(mkey)
        if floor is None or floor[0] < manifest.counter:
            now = self.clock()
            read_at = floor[2] if floor is not None else now if witnessed else _NEVER
            self._floors.put(mkey, (manifest.counter, manifest.deadline, read_at, now))

    # -- erasure -------------------------------------------------------------------------------

    def _ended_key(self, mkey: str) -> str:
        return f"{self.prefix}{ENDED_HEAD}{self.witness_name(mkey)}"

    def _ended(self, ns: Namespace, mkey: str) -> int:
        """The counter at which the namespace was erased (0: never), from its sealed mark."""
        key = self._ended_key(mkey)
        raw = self.store.get(key)
        if raw is None:
            return 0
        try:
            text = self.keyring.open(raw, ns, self._aad(key), bound_only=True)[0]
            counter = json.loads(text)["c"]
        except (RememberDecryptionError, ValueError, KeyError, TypeError) as exc:
            raise RememberIntegrityError(
                f"the erasure mark of {self._where(ns)} fails its check: it was altered"
            ) from exc
        return counter if type(counter) is int else 0

    def end(self, ns: Namespace, mkey: str) -> None:
        """Erase the manifest of *ns*, whose entries were just deleted.

        The manifest key (it names the namespace: a user or session id) is
        deleted.  What is left says only that the namespace ended, and when,
        under the keyed name the witness uses: a sealed mark in the store
        (``P + "__ended__:" + name``) and, with a witness, its record raised to
        that counter with the erasure as the namespace's deadline.  So its
        absence reads as an honest empty namespace, while a copy of the erased
        state put back (an older counter) is still refused.
        """
        now = self.clock()
        name = self.witness_name(mkey)
        try:
            counter = self._parse(ns, mkey, self.store.get(mkey)).counter
        except RememberIntegrityError:
            counter = 0  # an edited manifest: erased all the same
        if self.witness is not None:
            counter = max(counter, self.witness.floor(name)[0])
        floor = self._floors.get(mkey)
        counter = max(counter + 1, now, floor[0] + 1 if floor is not None else 0)
        key = self._ended_key(mkey)
        mark = json.dumps({"c": counter}).encode()
        self.store.set(key, self._seal_text(mark, ns, key))
        if self.witness is not None:
            self.witness.advance(name, counter, now)
        self._floors.put(mkey, (counter, now, now, now))
        self._manifests.pop(mkey)
        self.store.delete(mkey)

    # -- a namespace without its manifest ----------------------------------------------------

    def unlisted(self, ns: Namespace, head: str, expired: Callable[[str, str], bool]) -> None:
        """Refuse a namespace that holds entries but has no manifest.

        Called when the manifest is absent: the namespace's keys are looked
        for (a ``SCAN``); a genuine entry past its own deadline does not count.

        :param expired: ``expired(storage key, stored string)``.
        :raises RememberIntegrityError: an entry lies in a namespace without a manifest.
        """
        found = [k for k in self.store.scan(glob_escape(head) + "*")
                 if storage_namespace(self.prefix, k) == head]
        for start in range(0, len(found), _BATCH):
            chunk = found[start : start + _BATCH]
            for key, raw in zip(chunk, self.store.get_many(chunk), strict=True):
                if raw is not None and not expired(key, raw):
                    raise RememberIntegrityError(
                        f"{self._where(ns)} holds entries but has no manifest: its "
                        "manifest was deleted without the secret"
                    )

    @staticmethod
    def _where(ns: Namespace) -> str:
        return f"the {ns.scope} namespace"

    # -- reads -------------------------------------------------------------------------------

    def accept(
        self,
        ns: Namespace,
        manifest: Manifest,
        bare: str,
        raw: str | None,
        now: int,
        expired: Callable[[str], bool],
    ) -> str | None:
        """*raw*, the stored string of *bare*, if the manifest vouches for it; ``None`` if absent.

        :param expired: whether a stored string is a genuine entry past its deadline
            (an entry the manifest dropped at its deadline that the store has
            not expired yet is absent, not an error).
        :raises RememberIntegrityError: deleted, replayed, altered or inserted.
        """
        rec = manifest.records.get(bare)
        if rec is None:
            if raw is None or expired(raw):
                return None
            raise RememberIntegrityError(
                f"{bare!r} in {self._where(ns)} is in the store but not in its manifest: "
                "written without the secret, or a forgotten entry put back"
            )
        version, deadline, alts = rec
        if deadline is not None and now >= deadline:
            return None
        if raw is None:
            if version == "" or "" in alts:
                return None
            raise RememberIntegrityError(
                f"{bare!r} in {self._where(ns)} is live in its manifest but missing from the "
                "store: deleted without the secret (or evicted: verified mode needs "
                "maxmemory-policy noeviction)"
            )
        found = digest(raw)
        if found == version or found in alts:
            return raw
        raise RememberIntegrityError(
            f"{bare!r} in {self._where(ns)} is not the version its manifest records: "
            "an older copy put back, or another value written without the secret"
        )

    def read_manifest(self, ns: Namespace, mkey: str) -> tuple[str | None, Manifest]:
        """The stored manifest of a namespace and what it says."""
        raw = self.store.get(mkey)
        return raw, self.open_manifest(ns, mkey, raw)

    def fetch(self, mkey: str, keys: Sequence[str]) -> tuple[str | None, list[str | None]]:
        """The stored manifest and the values of *keys*, in one round trip.

        A small manifest comes with the values (``get_many``: the cheapest
        request).  Once the manifest this plugin last saw is over
        :data:`FETCH_WHOLE_BYTES`, a store with ``read_with_manifest``
        (standalone, Sentinel, Vercel KV) sends it back only when it changed.
        """
        cached = self._manifests.get(mkey)
        if self._reads and cached is not None and len(cached[0] or "") > FETCH_WHOLE_BYTES:
            same, raw, values = self.store.read_with_manifest(  # type: ignore[attr-defined]
                mkey, token(cached[0]), keys
            )
            return (cached[0] if same else raw), values
        got = self.store.get_many([mkey, *keys])
        return got[0], got[1:]

    def cached_keys(self, mkey: str) -> list[str] | None:
        """The bare keys of the manifest this plugin last saw for *mkey*, if any."""
        cached = self._manifests.get(mkey)
        return None if cached is None else list(cached[1].records)

    def checked(self, read: Callable[[], T]) -> T:
        """``read()``, looked at again (up to :attr:`read_attempts`) while it finds the store
        inconsistent: a lasting edit is refused every time, a writer between its steps
        moves on."""
        for attempt in range(self.read_attempts - 1):
            try:
                return read()
            except RememberIntegrityError:
                self.sleep(0.001 * (attempt + 1))
        return read()

    # -- writes ------------------------------------------------------------------------------

    def commit(
        self,
        ns: Namespace,
        head: str,
        mkey: str,
        changes: Callable[[Manifest], Mapping[str, Change] | None],
        *,
        known: tuple[str | None, Manifest] | None = None,
    ) -> Manifest | None:
        """Apply ``changes(manifest)`` to the namespace and its manifest; the manifest it changed.

        *changes* sees the current manifest and returns the entries to write
        (bare key -> (stored string or ``None`` to delete, deadline)), or
        ``None`` to give up (the caller's precondition no longer holds): then
        nothing is written and ``None`` is returned.  It may be called again
        with a newer manifest when another writer got there first.

        :param known: the stored manifest and its meaning, when the caller just read them.
        :raises RememberConflictError: other writers changed the manifest every time.
        """
        if known is None:
            cached = self._manifests.get(mkey)
            known = cached if cached is not None else self.read_manifest(ns, mkey)
        raw, base = known
        attempt = waited = 0
        while attempt < COMMIT_ATTEMPTS:
            wanted = changes(base)
            if wanted is None:
                return None
            now = self.clock()
            wait = 0 if self._atomic or waited >= LEASE_MS else leased(base, wanted, now)
            if wait:
                # Another writer is between its steps on one of these keys: building on
                # the version it is replacing would lose its write.  Wait for it (until
                # its lease ends, and never longer than a lease), then look again.
                pause = min(wait, _LEASE_POLL_MS)
                waited += pause
                self.sleep(pause / 1000)
                raw = self.store.get(mkey)
                base = self.open_manifest(ns, mkey, raw)
                continue
            attempt += 1
            final = self._next(base, wanted, now)
            final_raw = self._seal(ns, mkey, final)
            writes = [(head + bare, value, self._ttl(deadline, now)) for bare, (value, deadline)
                      in wanted.items()]
            if self._atomic:
                current = self.store.commit_manifest(  # type: ignore[attr-defined]
                    ManifestCommit(mkey, token(raw), final_raw, self._ttl(final.deadline, now),
                                   writes)
                )
                if current is None:
                    self._committed(mkey, final_raw, final)
                    return base
                current = current or None
                if current == final_raw:  # a resent script found its own first run's result
                    self._committed(mkey, final_raw, final)
                    return base
            else:
                current = self._two_steps(ns, mkey, raw, base, final, wanted, writes, now)
                if current is _DONE:
                    return base
            raw, base = current, self.open_manifest(ns, mkey, current)
        raise RememberConflictError(
            f"the manifest of {self._where(ns)} was changed by other writers during each of "
            f"{COMMIT_ATTEMPTS} attempts; nothing was written"
        )

    def _committed(self, mkey: str, raw: str, manifest: Manifest) -> None:
        self._manifests.put(mkey, (raw, manifest))
        self._raise_floor(mkey, manifest, witnessed=True)
        if self.witness is not None:
            self.witness.advance(self.witness_name(mkey), manifest.counter, manifest.deadline)

    @staticmethod
    def _ttl(deadline: int | None, now: int) -> int | None:
        return None if deadline is None else max(1, deadline - now)

    @staticmethod
    def _next(base: Manifest, wanted: Mapping[str, Change], now: int) -> Manifest:
        records = base.live(now)
        texts = base.member_texts().copy()
        if len(records) != len(texts):  # expired records dropped
            texts = {k: t for k, t in texts.items() if k in records}
        for bare, (value, deadline) in wanted.items():
            if value is None:
                records.pop(bare, None)
                texts.pop(bare, None)
            else:
                rec = records[bare] = (digest(value), deadline, ())
                texts[bare] = record_json(bare, rec)
        return Manifest(
            max(base.counter + 1, now), manifest_deadline(records, now), records, texts
        )

    def _two_steps(
        self,
        ns: Namespace,
        mkey: str,
        raw: str | None,
        base: Manifest,
        final: Manifest,
        wanted: Mapping[str, Change],
        writes: Sequence[tuple[str, str | None, int | None]],
        now: int,
    ) -> Any:
        """A commit as single-key steps (Redis Cluster, other stores): intent, entries, commit.

        1. The manifest records the new versions *and* the old ones as
           acceptable (compare-and-set on the manifest alone).
        2. The entries are written.
        3. The manifest drops the old versions.

        A writer stopped after 1 leaves the old entry, which reads as before;
        after 2, the new one.  Either way an honest entry stays readable, and
        the next operation on the namespace once the lease has run out (or
        ``verify --repair``) settles the record.  Step 2 writes an entry only
        over a version step 1 replaces (:meth:`_replace`).
        """
        records = dict(final.records)
        lease = f"{LEASE_MARK}{now + LEASE_MS}"
        replaced: dict[str, set[str]] = {}
        for bare in wanted:
            old = base.records.get(bare)
            before = {old[0], *old[2]} if old is not None else {""}
            after = records.get(bare, ("", None, ()))
            deadline = after[1] if old is None or old[1] is None or after[1] is None else max(
                after[1], old[1]
            )
            others = sorted(v for v in before - {after[0]} if not v.startswith(LEASE_MARK))
            records[bare] = (after[0], deadline, (*others, lease))
            replaced[bare] = {v for v in before if not v.startswith(LEASE_MARK)}
        intent = Manifest(final.counter, manifest_deadline(records, now), records)
        if not self.write_manifest(ns, mkey, raw, intent):
            return self.store.get(mkey)
        intent_raw = self._manifests.get(mkey)[0]  # type: ignore[index]
        for bare, (key, value, ttl_ms) in zip(wanted, writes, strict=True):
            self._replace(ns, key, replaced[bare], value, ttl_ms)
        self.settle(ns, mkey, {bare: records[bare] for bare in wanted}, intent_raw)
        return _DONE

    def _replace(
        self, ns: Namespace, key: str, versions: set[str], value: str | None, ttl_ms: int | None
    ) -> None:
        """Step 2 for one entry: written only over a version the intent replaces.

        A writer that stalled past its lease finds another writer's newer
        entry there and writes nothing over it.

        :raises RememberConflictError: the entry holds another version by now.
        """
        current = self.store.get(key)
        replace = getattr(self.store, "replace_entry", None)
        if (digest(current) if current is not None else "") in versions:
            if replace is not None:
                if replace(key, current, value, ttl_ms):
                    return
            elif value is None:
                if current is not None:
                    self.store.delete(key)
                return
            elif current is None:
                if self.store.set(key, value, ttl_ms=ttl_ms, only_if_absent=True):
                    return
            elif self.store.compare_and_set(key, current, value, ttl_ms=ttl_ms):
                return
        raise RememberConflictError(
            f"an entry of {self._where(ns)} was written by another writer while this one "
            f"was between its steps (past its {LEASE_MS} ms lease): this write was not made"
        )

    def settle_stale(
        self, ns: Namespace, mkey: str, known: tuple[str | None, Manifest],
        values: Mapping[str, str | None],
    ) -> None:
        """Settle the unfinished two-step writes among *values* (bare key -> stored string,
        as just read and accepted) whose writer's lease has run out.

        Each such record keeps only the version the store holds (rolled forward,
        or back); from then on the other versions are refused again.  Nothing
        happens while a lease runs, or when another writer changed the manifest
        meanwhile (the next operation tries again).  A store that refuses the
        settling write (a read-only user) is logged as a warning; the read is answered.
        """
        raw, manifest = known
        now = self.clock()
        records = dict(manifest.records)
        for bare, value in values.items():
            rec = records.get(bare)
            if rec is None or not rec[2] or lease_end(rec) > now:
                continue
            found = "" if value is None else digest(value)
            if found != rec[0] and found not in rec[2]:
                continue
            if found == "":
                del records[bare]
            else:
                records[bare] = (found, rec[1], ())
        if raw is None or records == manifest.records:
            return
        settled = Manifest(
            max(manifest.counter + 1, now), manifest_deadline(records, now), records
        )
        try:
            self.write_manifest(ns, mkey, raw, settled)
        except RememberStoreError as exc:
            # The read itself succeeded: it is answered; the next operation settles.
            log.warning("remember: settling an unfinished write failed: %s", exc.message)

    def write_manifest(
        self, ns: Namespace, mkey: str, raw: str | None, manifest: Manifest
    ) -> bool:
        """Replace the stored manifest *raw* (``None``: none) by *manifest*; whether it was.

        A compare-and-set on the manifest alone, for ``verify --repair``.
        """
        sealed = self._seal(ns, mkey, manifest)
        ttl = self._ttl(manifest.deadline, self.clock())
        if raw is None:
            placed = self.store.set(mkey, sealed, ttl_ms=ttl, only_if_absent=True)
        else:
            placed = self.store.compare_and_set(mkey, raw, sealed, ttl_ms=ttl)
        if placed:
            self._committed(mkey, sealed, manifest)
        return placed

    def settle(
        self, ns: Namespace, mkey: str, pending: Mapping[str, Record], raw: str | None
    ) -> bool:
        """Step 3: drop the old versions of *pending* records the manifest still holds as is.

        Other writers may have changed the manifest meanwhile: their records
        are kept, only ours are settled.  Returns whether the manifest was written.
        """
        for _ in range(COMMIT_ATTEMPTS):
            manifest = self.open_manifest(ns, mkey, raw)
            now = self.clock()
            records = dict(manifest.records)
            touched = False
            for bare, rec in pending.items():
                if records.get(bare) != rec:
                    continue  # another writer's record now
                touched = True
                if rec[0] == "":
                    del records[bare]
                else:
                    records[bare] = (rec[0], rec[1], ())
            if not touched:
                return False
            settled = Manifest(
                max(manifest.counter + 1, now), manifest_deadline(records, now), records
            )
            if raw is not None and self.write_manifest(ns, mkey, raw, settled):
                return True
            raw = self.store.get(mkey)
        return False


_DONE = object()
_LEASE_POLL_MS = 20
