"""``remember-sync verify [--repair]``: every integrity violation of a store in verified mode.

The walk lists every key under the prefix once, groups entries and manifests
by namespace (all layouts the storage-key grammar knows: session, user, tool,
global) and checks each namespace as a verified read would: the manifest
opens and is not older than the witness, every live record has its entry
with the recorded digest, and no entry lies outside its manifest (a genuine
entry past its own deadline excepted).

``--repair`` (it needs the secret) rebuilds each namespace's manifest from
what the secret can read now: readable, unexpired entries are recorded as
they are; entries the secret cannot open are reported and left in place,
never deleted; records whose entry is gone are dropped.  It is also how an
existing store moves into verified mode.  Repair accepts the store as it is:
run it after deciding that its current state is the one to trust.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from .._audit import _MAC_INFO as AUDIT_MAC_INFO
from .._audit import AUDIT_HEAD
from .._clock import Clock
from .._codec import EntryCodec
from .._integrity import Manifest, Record, Verifier, digest, manifest_deadline
from .._keys import (
    MANIFEST_HEAD,
    glob_escape,
    manifest_key,
    parse_storage_key,
    storage_namespace,
)
from .._progress import Progress
from .._witness import ListableWitness, Witness, listable, witness_from
from ..errors import RememberDecryptionError, RememberIntegrityError
from ..stores.base import Store
from ..types import Namespace
from .walk import BATCH, MAX_LISTED


@dataclass
class VerifyResult:
    """What :func:`verify_store` found (and repaired)."""

    namespaces: int = 0
    #: Namespaces with a manifest (none: the store was never in verified mode).
    manifests: int = 0
    entries: int = 0
    #: One line per violation: the namespace (scope and a short hash), the key, the problem.
    violations: list[str] = field(default_factory=list)
    violation_count: int = 0
    #: Records of a two-step write that never finished (Redis Cluster).
    pending: int = 0
    repaired: int = 0
    #: Entries the secret cannot open (left in place by a repair).
    unreadable: int = 0
    #: Problems of the store's configuration (``maxmemory-policy``), not of its data.
    warnings: list[str] = field(default_factory=list)

    def add(self, where: str, problem: str) -> None:
        self.violation_count += 1
        if len(self.violations) < MAX_LISTED:
            self.violations.append(f"{where}: {problem}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespaces": self.namespaces,
            "manifests": self.manifests,
            "entries": self.entries,
            "violations": self.violation_count,
            "violation_list": self.violations,
            "pending": self.pending,
            "repaired": self.repaired,
            "unreadable": self.unreadable,
            "warnings": self.warnings,
        }


def open_witness(spec: str | None) -> Witness | None:
    """The witness a ``--witness`` value names: a file path or a ``redis://`` URL."""
    from ..stores.redis import RedisStore  # noqa: PLC0415 - only a Redis witness needs it

    return witness_from(spec, RedisStore.from_url)


def eviction_warning(store: Store) -> str | None:
    """Why the store may delete entries by itself (Redis ``maxmemory-policy``), if it may."""
    client: Any = getattr(store, "client", None)
    if client is None or getattr(store, "is_cluster", False):
        return None
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
    except Exception:  # noqa: BLE001 - CONFIG is often disabled on managed servers
        return "could not read maxmemory-policy: make sure it is noeviction"
    if policy is None:
        return None
    policy = policy.decode() if isinstance(policy, bytes) else str(policy)
    if policy != "noeviction":
        return (
            f"maxmemory-policy is {policy}: an evicted entry reads as deleted "
            "(verified mode needs noeviction)"
        )
    return None


def verify_store(
    store: Store, prefix: str, codec: EntryCodec, *, clock: Clock,
    witness: Witness | None = None, repair: bool = False, progress_stream: TextIO | None = None,
) -> VerifyResult:
    """Check (and with *repair*, rebuild) every namespace's manifest under *prefix*."""
    verifier = Verifier(store, codec, prefix=prefix, clock=clock, witness=witness)
    result = VerifyResult()
    manifests: dict[str, str] = {}  # entry head -> manifest key
    entries: dict[str, list[str]] = {}  # entry head -> its entries' keys
    mhead = prefix + MANIFEST_HEAD
    for key in sorted(set(store.scan(glob_escape(prefix) + "*"))):
        if key.startswith(mhead):
            manifests[prefix + key[len(mhead) :]] = key
        elif parse_storage_key(prefix, key) is not None:
            entries.setdefault(storage_namespace(prefix, key), []).append(key)
    heads = sorted(set(manifests) | set(entries))
    result.manifests = len(manifests)
    # Only a verified store (or one being moved into verified mode) cares how Redis
    # evicts; CONFIG is not in the ACL a default-mode deployment grants.
    warning = eviction_warning(store) if manifests or repair else None
    if warning is not None:
        result.warnings.append(warning)
    progress = Progress(len(heads), label="verify", stream=progress_stream)
    for head in heads:
        progress.advance(1)
        result.namespaces += 1
        _verify_namespace(verifier, head, manifests.get(head), entries.get(head, []), result,
                          repair=repair, codec=codec, clock=clock)
    progress.close()
    found = listable(witness)
    if found is not None:
        _lost_namespaces(verifier, found, [manifests.get(h) or manifest_key(prefix, h)
                                           for h in heads], result, clock())
    return result


def _audit_names(codec: EntryCodec, prefix: str) -> set[str]:
    """The audit trail's names in the witness (it anchors its head there too)."""
    keyring = codec.keyring
    if keyring is None:
        return set()
    text = b"witness-name\x00" + f"{prefix}{AUDIT_HEAD}head".encode()
    return {hashlib.blake2b(text, key=k, digest_size=32).hexdigest()[:40]
            for k in keyring.purpose_keys(AUDIT_MAC_INFO)}


def _lost_namespaces(
    verifier: Verifier, witness: ListableWitness, mkeys: list[str], result: VerifyResult,
    now: int,
) -> None:
    """What the witness recorded and the store lacks: a namespace deleted whole (or rolled
    back to before it existed), unless it expired or was erased (its deadline passed)."""
    known = {name for mkey in mkeys for name in verifier.witness_names(mkey)}
    known |= _audit_names(verifier.codec, verifier.prefix)
    for name, counter, deadline in witness.names():
        if name in known or (deadline is not None and now >= deadline):
            continue
        result.add(
            f"namespace {name[:12]} (a witness name)",
            f"the witness recorded it (counter {counter}) but the store has neither its "
            "manifest nor its entries: deleted whole, or the store rolled back",
        )


def _where(prefix: str, head: str, ns: Namespace | None) -> str:
    tag = hashlib.blake2b(head.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{ns.scope if ns is not None else 'unknown'} namespace #{tag}"


def _verify_namespace(
    verifier: Verifier,
    head: str,
    mkey: str | None,
    keys: list[str],
    result: VerifyResult,
    *,
    repair: bool,
    codec: EntryCodec,
    clock: Clock,
) -> None:
    prefix = verifier.prefix
    parsed = parse_storage_key(prefix, head + "x")
    where = _where(prefix, head, None if parsed is None else parsed.namespace)
    if parsed is None:
        result.add(where, "a manifest for no namespace of the storage-key grammar")
        return
    ns = parsed.namespace
    mkey = mkey or (prefix + MANIFEST_HEAD + head[len(prefix) :])
    raw_manifest = verifier.store.get(mkey)
    manifest: Manifest | None
    try:
        manifest = verifier.open_manifest(ns, mkey, raw_manifest)
    except RememberIntegrityError as exc:
        result.add(where, exc.message)
        manifest = None
    bares = sorted({k[len(head) :] for k in keys} | set(manifest.records if manifest else ()))
    values: dict[str, str | None] = {}
    for start in range(0, len(bares), BATCH):
        chunk = bares[start : start + BATCH]
        values.update(zip(chunk, verifier.store.get_many([head + b for b in chunk]),
                          strict=True))
    result.entries += sum(1 for v in values.values() if v is not None)
    now = clock()

    def expired(skey: str) -> Callable[[str], bool]:
        def check(raw: str) -> bool:
            try:
                deadline = codec.open_fields(raw, ns, skey)[0][4]
            except RememberDecryptionError:
                return False
            return deadline is not None and now >= deadline

        return check

    if manifest is not None:
        result.pending += sum(1 for rec in manifest.records.values() if rec[2])
        for bare in bares:
            try:
                verifier.accept(ns, manifest, bare, values[bare], now, expired(head + bare))
            except RememberIntegrityError as exc:
                result.add(where, exc.message)
    if repair:
        _rebuild(verifier, ns, head, mkey, raw_manifest, manifest, values, result, codec, now)


def _rebuild(
    verifier: Verifier,
    ns: Namespace,
    head: str,
    mkey: str,
    raw_manifest: str | None,
    manifest: Manifest | None,
    values: dict[str, str | None],
    result: VerifyResult,
    codec: EntryCodec,
    now: int,
) -> None:
    """Write the manifest of what the secret can read now, if it differs from the stored one."""
    records: dict[str, Record] = {}
    for bare, raw in values.items():
        if raw is None:
            continue
        try:
            deadline = codec.open_fields(raw, ns, head + bare)[0][4]
        except RememberDecryptionError:
            result.unreadable += 1
            continue
        if deadline is None or now < deadline:
            records[bare] = (digest(raw), deadline, ())
    if manifest is not None and dict(manifest.records) == records:
        return
    witness = verifier.witness
    floor = 0 if witness is None else witness.floor(verifier.witness_name(mkey))[0]
    counter = max((manifest.counter if manifest else 0) + 1, floor + 1, now)
    rebuilt = Manifest(counter, manifest_deadline(records, now), records)
    if verifier.write_manifest(ns, mkey, raw_manifest, rebuilt):
        result.repaired += 1
    else:
        result.add(f"{ns.scope} namespace", "changed during the repair; run it again")
