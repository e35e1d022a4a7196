"""``export`` and ``import``: a store's entries as JSON Lines, and back.

The two record forms (envelope, the default, and ``--decrypted``) are
``docs/cli.rst``.  An envelope's storage key is written *without the prefix*
because its ciphertext is bound to that key, so it can be imported under
another prefix.  In a decrypted record ``storageKey`` is informational;
``scope``, ``session``/``user``/``tool`` and ``key`` say where the entry goes.
Deadlines are absolute (``expiresAt``, epoch ms), and export must decrypt an
entry to learn its deadline: one that does not decrypt is reported and left
out, never exported with a made-up lifetime.

With a quota configured (``RememberPlugin.init(quota=...)``; the command reads
the server's ``REMEMBER_QUOTA_*``), import charges every entry to its
principal through the core's own write, and an entry that would take its
principal over the quota is not written (``ignore_quota``: written and charged
all the same).  A record names its namespace, not its principal; the
principal is read from it as far as it tells (:class:`_Principals`), and an
entry whose owner it does not tell is written uncharged and reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from .._codec import check_json_value, entry_json
from .._core import AccessorCore
from .._crypto import Keyring, parse_envelope
from .._keys import check_key, parse_storage_key, storage_key
from .._progress import Progress
from .._sessions import SessionSigner
from ..errors import RememberDecryptionError, RememberError, RememberInputError, RememberQuotaError
from ..identity import STATELESS_USER_PREFIX, is_anonymous
from ..types import SCOPES, Identity, Namespace, RememberEntry
from .context import json_line
from .walk import Report, walk_entries


@dataclass
class ExportResult(Report):
    """What ``export`` wrote and what it could not."""

    exported: int = 0
    expired: int = 0
    #: Of the unreadable, those sealed with a person's own key (the envelope names a
    #: subject key, ``skid``) while no keystore is configured.
    need_keystore: int = 0
    #: Doubled-prefix keys not read because ``read_doubled_prefix`` is off.
    doubled_unread: int = 0


#: The longest ``writtenBy`` (a tool's name) an imported record may carry.
_MAX_WRITER = 256


def _decrypted_record(
    rel_key: str, ns: Namespace, key: str, entry: RememberEntry, written_by: str | None
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "storageKey": rel_key, "scope": ns.scope, "session": ns.session, "user": ns.user,
        "tool": ns.tool, "key": key, "value": entry.value, "brand": entry.brand,
        "createdAt": entry.created_at, "updatedAt": entry.updated_at,
        "expiresAt": entry.expires_at, "metadata": entry.metadata, "writtenBy": written_by,
    }
    # A scope's unused identity parts are None (Namespace), and so are absent options.
    return {k: v for k, v in record.items() if v is not None or k == "value"}


def _names_subject_key(stored: str) -> bool:
    """Whether *stored* is an envelope sealed with a person's own key (it names a ``skid``)."""
    try:
        return parse_envelope(stored).skid is not None
    except RememberDecryptionError:
        return False


def export_entries(
    core: AccessorCore,
    out: TextIO,
    *,
    decrypted: bool = False,
    progress_stream: TextIO | None = None,
) -> ExportResult:
    """Write every readable, unexpired entry under the prefix to *out* as JSON Lines.

    Every layout the plugin reads is exported (``core.read_doubled_prefix``): a
    doubled-prefix entry is written under the storage key the application reads
    it as, so an import puts it in the single layout.  Without that option,
    doubled-prefix keys are not read and are counted in ``doubled_unread``.
    """
    result = ExportResult()
    prefix = core.prefix
    keyring = core.codec.keyring
    result.doubled_unread, items = walk_entries(
        core, label="export", progress_stream=progress_stream
    )
    for item in items:
        if item.shadowed or item.raw is None:
            continue  # shadowed: the application reads (and we export) its twin
        if item.entry is None:
            result.note("unreadable", item.stored_at)
            if keyring is not None and keyring.subjects is None and _names_subject_key(item.raw):
                result.need_keystore += 1
            continue
        now = core.clock()
        entry = item.entry
        if entry.is_expired(now):
            result.expired += 1
            continue
        rel = item.key[len(prefix) :]
        if decrypted:
            ns = item.parsed.namespace
            record = _decrypted_record(
                rel, ns, item.parsed.key, entry, _written_by(core, item.raw, ns, item.key)
            )
        else:
            record = {
                "storageKey": rel,
                "stored": item.raw,
                "expiresAt": entry.expires_at,
                "ttlMs": None if entry.expires_at is None else entry.expires_at - now,
            }
        out.write(json_line(record) + "\n")
        result.exported += 1
    out.flush()
    return result


def _written_by(core: AccessorCore, raw: str, ns: Namespace, skey: str) -> str | None:
    """The tool that wrote the stored entry (``writtenBy``, sealed in it), ``None``: the host."""
    opened = core.codec.records_many([raw], ns, [skey])[0]
    if isinstance(opened, RememberDecryptionError):
        return None  # it decoded a moment ago (walk_entries): not an entry of a tool
    writer = opened[1].get("writtenBy")
    return writer if isinstance(writer, str) else None


@dataclass(frozen=True)
class ImportRecord:
    """One parsed line: where it goes and what to store (before encryption checks)."""

    line: int
    namespace: Namespace
    key: str
    #: An envelope to store verbatim (``None`` for a decrypted record).
    stored: str | None
    #: The entry of a decrypted record (``None`` for an envelope).
    entry: RememberEntry | None
    #: The tool that wrote a decrypted record's entry (``None``: the host).
    written_by: str | None = None


@dataclass
class ImportResult(Report):
    """What ``import`` wrote and what it skipped."""

    imported: int = 0
    existing: int = 0
    expired: int = 0
    existing_keys: list[str] = field(default_factory=list)
    #: Entries not written: they would take their principal over its quota.
    over_quota: int = 0
    over_quota_keys: list[str] = field(default_factory=list)
    #: Entries written without a charge: the record does not tell whose they are.
    uncharged: int = 0
    uncharged_keys: list[str] = field(default_factory=list)


def _bad(line: int, message: str) -> RememberInputError:
    return RememberInputError(f"line {line}: {message}")


def _opt_int(obj: dict[str, Any], name: str, line: int) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(line, f"{name} must be a non-negative integer (epoch ms)")
    return value


def _identity_part(obj: dict[str, Any], name: str, line: int) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise _bad(line, f"a {obj['scope']}-scope record needs a non-empty string {name!r}")
    return value


def _parse_decrypted(obj: dict[str, Any], line: int) -> ImportRecord:
    scope = obj.get("scope")
    if scope not in SCOPES:
        raise _bad(line, f"scope must be one of {', '.join(SCOPES)}")
    if scope == "global":
        ns = Namespace("global")
    elif scope == "user":
        ns = Namespace("user", user=_identity_part(obj, "user", line))
    elif scope == "session":
        ns = Namespace("session", session=_identity_part(obj, "session", line))
    else:
        ns = Namespace(
            "tool",
            tool=_identity_part(obj, "tool", line),
            session=_identity_part(obj, "session", line),
        )
    key = obj.get("key")
    try:
        check_key(key)
        check_json_value(obj["value"], "value")
        metadata = obj.get("metadata")
        if metadata is not None:
            if not isinstance(metadata, dict):
                raise _bad(line, "metadata must be a JSON object")
            check_json_value(metadata, "metadata")
    except (ValueError, TypeError) as exc:
        raise _bad(line, str(exc)) from None
    assert isinstance(key, str)
    brand = obj.get("brand")
    if brand is not None and not isinstance(brand, str):
        raise _bad(line, "brand must be a string")
    created = _opt_int(obj, "createdAt", line)
    updated = _opt_int(obj, "updatedAt", line)
    if created is None or updated is None:
        raise _bad(line, "createdAt and updatedAt are required (epoch ms)")
    entry = RememberEntry(
        value=obj["value"],
        brand=brand,
        created_at=created,
        updated_at=updated,
        expires_at=_opt_int(obj, "expiresAt", line),
        metadata=metadata,
    )
    writer = obj.get("writtenBy")
    if writer is not None and (
        not isinstance(writer, str) or not 0 < len(writer) <= _MAX_WRITER
    ):
        raise _bad(line, f"writtenBy must be a tool's name (a str of 1 to {_MAX_WRITER} chars)")
    return ImportRecord(line, ns, key, None, entry, None if writer == "host" else writer)


def _parse_envelope(obj: dict[str, Any], line: int) -> ImportRecord:
    rel = obj.get("storageKey")
    stored = obj.get("stored")
    if not isinstance(rel, str) or not isinstance(stored, str):
        raise _bad(line, "an envelope record needs string storageKey and stored")
    try:
        parsed = parse_storage_key("", rel)
    except UnicodeDecodeError:
        parsed = None
    if parsed is None:
        raise _bad(line, f"storageKey {rel!r} is not a v2 or global storage key")
    return ImportRecord(line, parsed.namespace, parsed.key, stored, None)


def parse_records(lines: Iterable[str]) -> list[ImportRecord]:
    """Parse JSON Lines; the first malformed line raises ``RememberInputError`` naming it."""
    records: list[ImportRecord] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _bad(number, f"not JSON ({exc.msg})") from None
        except RecursionError:
            raise _bad(number, "nested too deeply") from None
        if not isinstance(obj, dict):
            raise _bad(number, "not a JSON object")
        if "stored" in obj:
            records.append(_parse_envelope(obj, number))
        elif "value" in obj:
            records.append(_parse_decrypted(obj, number))
        else:
            raise _bad(number, "neither an envelope record (stored) nor a decrypted one (value)")
    return records


class _Principals:
    """Whose each imported entry is, as far as the records tell.

    The principal is :func:`~remember_sync.identity.principal_of`'s: a user-scope
    entry is its user's, and so is one under a ``stateless-user:<user>`` session;
    an entry of an MCP session is the session's when a configured secret signed
    that session id for an anonymous caller, else the user's it was signed for,
    among the users the records name (one HMAC per such user, once per session).
    A host's own session id, or an MCP session of a user the records name
    nowhere, does not tell: ``None``.
    """

    def __init__(self, keyring: Keyring | None, records: Sequence[ImportRecord]) -> None:
        self._signer = None if keyring is None else SessionSigner(keyring)
        users: set[str] = set()
        for rec in records:
            user, session = rec.namespace.user, rec.namespace.session or ""
            if session.startswith(STATELESS_USER_PREFIX):
                user = session[len(STATELESS_USER_PREFIX) :]
            if user is not None and not is_anonymous(user):
                users.add(user)
        self._users = sorted(users)
        self._sessions: dict[str, Identity | None] = {}

    def of(self, ns: Namespace) -> Identity | None:
        """An identity the core charges as *ns*'s principal; ``None`` when unknown."""
        session = ns.session
        if session is None or session.startswith(STATELESS_USER_PREFIX):
            user = ns.user if session is None else session[len(STATELESS_USER_PREFIX) :]
            # An anonymous user id names no one (no write of the library makes such a record).
            return None if is_anonymous(user) else Identity(user_id=user)
        if session not in self._sessions:
            self._sessions[session] = self._session_owner(session)
        return self._sessions[session]

    def _session_owner(self, session: str) -> Identity | None:
        signer = self._signer
        if signer is None:
            return None
        if signer.signed_for(session, None):
            return Identity(session_id=session)
        for user in self._users:
            if signer.signed_for(session, user):
                return Identity(session_id=session, user_id=user)
        return None


def _sealed(core: AccessorCore, rec: ImportRecord, skey: str) -> str:
    """A decrypted record's entry sealed for *skey*, with who wrote it (a model's write
    stays one) and, with an embedder, its vector.

    :raises RememberInputError: naming the record's line.
    """
    entry = rec.entry
    assert entry is not None
    try:
        extras = core.search_extras(
            rec.key, entry.value, entry.brand, entry.metadata, rec.written_by
        )
        text = entry_json(entry.value, entry.brand, entry.created_at, entry.updated_at,
                          entry.expires_at, entry.metadata, extras)
        return core.seal_checked(text, rec.namespace, skey)
    except RememberError as exc:
        raise _bad(rec.line, exc.message) from None


def import_entries(
    core: AccessorCore,
    records: list[ImportRecord],
    *,
    overwrite: bool = False,
    ignore_quota: bool = False,
    progress_stream: TextIO | None = None,
) -> ImportResult:
    """Store *records* under the core's prefix.

    Every record is checked first (envelopes must decrypt with the configured
    secrets; decrypted records are encrypted), then written.  Without
    *overwrite* a key that exists is left alone (only-if-absent) and reported.
    With a quota configured each entry is charged to its principal (see the
    module); one that would take it over the quota is not written and is
    reported, unless *ignore_quota* (then it is written and charged).
    """
    result = ImportResult()
    prefix = core.prefix
    ready: list[tuple[Namespace, str, str, int | None]] = []
    for rec in records:
        skey = storage_key(prefix, rec.namespace, rec.key)
        if rec.stored is not None:
            try:
                entry = core.codec.decode(rec.stored, rec.namespace, skey)
            except RememberDecryptionError:
                result.note("unreadable", skey)
                continue
            ready.append((rec.namespace, skey, rec.stored, entry.expires_at))
        else:
            assert rec.entry is not None
            ready.append((rec.namespace, skey, _sealed(core, rec, skey), rec.entry.expires_at))
    principals = None if core.charges is None else _Principals(core.codec.keyring, records)
    with Progress(len(ready), "import", stream=progress_stream) as bar:
        for ns, skey, stored, expires_at in ready:
            bar.advance()
            now = core.clock()
            ttl_ms = core.ttl_ms(expires_at, now)
            if expires_at is not None and expires_at <= now:
                result.expired += 1
                continue
            owner = None if principals is None or ns.scope == "global" else principals.of(ns)
            try:
                if owner is not None:
                    written = core.write(
                        owner, ns, skey, stored, ttl_ms=ttl_ms, only_if_absent=not overwrite,
                        charge_only=ignore_quota,
                    )  # fmt: skip
                else:
                    written = core.store.set(
                        skey, stored, ttl_ms=ttl_ms, only_if_absent=not overwrite
                    )
            except RememberQuotaError:
                result.note("over_quota", skey)
                continue
            if not written:
                result.note("existing", skey)
                continue
            result.imported += 1
            if principals is not None and owner is None and ns.scope != "global":
                result.note("uncharged", skey)
    if core.audit is not None:
        core.audit.record("import", None, None, outcome="imported", count=result.imported)
    return result
