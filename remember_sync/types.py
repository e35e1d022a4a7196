"""Plain value types shared by every layer: scopes, brands, identities and entries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from ._clock import Clock
from .errors import RememberInputError

__all__ = [
    "BRANDS",
    "SCOPES",
    "BackgroundPurge",
    "BackgroundReindex",
    "Brand",
    "Clock",
    "ErasureReceipt",
    "Identity",
    "JSONValue",
    "KeyCheck",
    "KeyStatus",
    "LayoutMarker",
    "MasterSecrets",
    "Namespace",
    "PurgeCounts",
    "ReindexCounts",
    "RememberEntry",
    "Scope",
    "SearchHit",
    "check_brand",
    "check_scope",
    "identity_part",
]

Scope = Literal["session", "user", "tool", "global"]
SCOPES: Final[tuple[Scope, ...]] = ("session", "user", "tool", "global")

Brand = Literal["approval", "preference", "cache", "state", "conversation", "custom"]
BRANDS: Final[tuple[Brand, ...]] = (
    "approval",
    "preference",
    "cache",
    "state",
    "conversation",
    "custom",
)

JSONValue = None | bool | int | float | str | list[Any] | dict[str, Any]

def check_scope(scope: object) -> Scope:
    """Return *scope* if it is one of :data:`SCOPES`, else raise ``ValueError``."""
    if isinstance(scope, str) and scope in SCOPES:
        return scope
    raise RememberInputError(
        f"scope must be one of {', '.join(SCOPES)}; got {scope!r}", code="REMEMBER_INVALID_SCOPE"
    )


def check_brand(brand: object) -> Brand:
    """Return *brand* if it is one of :data:`BRANDS`, else raise ``ValueError``."""
    if isinstance(brand, str) and brand in BRANDS:
        return brand
    raise RememberInputError(f"brand must be one of {', '.join(BRANDS)}; got {brand!r}")


def identity_part(value: object, name: str) -> str | None:
    """*value* as an identity part: a ``str`` or ``None`` as it is, an ``int`` as its decimal
    string (``42`` and ``"42"`` are one user: database ids are ints).

    :param name: the parameter that gave *value*, for the message.
    :raises RememberInputError: any other type (``bool`` included), naming *name*.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))  # int(): an int subclass's own __str__ must not change the id
    raise RememberInputError(f"{name} must be a str, an int or None; got {type(value).__name__}")


@dataclass(frozen=True, init=False)
class Identity:
    """Who is calling: bound by the host for one request.

    ``session_id`` must be a session the host *verified* (issued itself); an
    unverified client header is never bound here.  An ``int`` part is kept as
    its decimal string (``Identity(user_id=42).user_id == "42"``); any type
    other than ``str``, ``int`` or ``None`` raises
    :class:`~remember_sync.errors.RememberInputError` naming the parameter.
    """

    session_id: str | None = None
    user_id: str | None = None
    tool_name: str | None = None

    def __init__(
        self,
        session_id: str | int | None = None,
        user_id: str | int | None = None,
        tool_name: str | int | None = None,
    ) -> None:
        object.__setattr__(self, "session_id", identity_part(session_id, "session_id"))
        object.__setattr__(self, "user_id", identity_part(user_id, "user_id"))
        object.__setattr__(self, "tool_name", identity_part(tool_name, "tool_name"))

    def with_tool(self, tool_name: str | None) -> Identity:
        """Return a copy with ``tool_name`` replaced."""
        return Identity(self.session_id, self.user_id, tool_name)


@dataclass(frozen=True)
class Namespace:
    """The resolved identity parts one scope is keyed and encrypted by.

    ``session`` is the *session identity* (a verified session id, or
    ``stateless-user:<user>``); parts a scope does not use are ``None``.
    """

    scope: Scope
    session: str | None = None
    user: str | None = None
    tool: str | None = None


@dataclass(frozen=True, init=False)
class RememberEntry:
    """One stored entry.  Times are integer epoch milliseconds."""

    value: Any
    #: One of :data:`BRANDS` when written by us; entries written by other
    #: implementations may carry any string and are returned as they are.
    brand: str | None
    created_at: int
    updated_at: int
    expires_at: int | None = None
    metadata: dict[str, Any] | None = None

    def __init__(
        self,
        value: Any,
        brand: str | None,
        created_at: int,
        updated_at: int,
        expires_at: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        # The read path builds one entry per stored entry: one attribute write
        # instead of the frozen dataclass's six object.__setattr__ calls.
        object.__setattr__(self, "__dict__", {
            "value": value, "brand": brand, "created_at": created_at,
            "updated_at": updated_at, "expires_at": expires_at, "metadata": metadata,
        })

    def is_expired(self, now_ms: int) -> bool:
        """``True`` when ``now_ms >= expires_at`` (the rule on every store)."""
        return self.expires_at is not None and now_ms >= self.expires_at


@dataclass(frozen=True)
class SearchHit:
    """One result of :meth:`RememberAccessor.search <remember_sync.RememberAccessor.search>`.

    :param key: the bare key, as given to ``set``.
    :param scope: the scope it was found in.
    :param score: its relevance (higher is better; comparable within one search only).
    :param entry: the whole entry (value, brand, times, metadata).
    :param written_by: ``"host"`` (application code through an accessor) or the
        name of the memory tool a model called to write it (``"remember_this"``).
    """

    key: str
    scope: Scope
    score: float
    entry: RememberEntry
    written_by: str = "host"

    @property
    def written_at(self) -> int:
        """When the entry was last written (epoch milliseconds; ``entry.updated_at``)."""
        return self.entry.updated_at


@dataclass(frozen=True)
class ErasureReceipt:
    """What :meth:`RememberPlugin.erase <remember_sync.RememberPlugin.erase>` did for one person.

    Counts are entries (storage keys) deleted -- or, with ``dry_run``, that
    would be.  ``unreadable`` is how many of them the configured secrets could
    not open (they lay in the person's namespaces, so they were theirs).  The
    person is named by ``subject``, a keyed hash of the user id, never the id.
    ``mac`` is an HMAC-SHA256 over every other field under a key derived from
    the master secret (empty with encryption disabled); check it with
    :meth:`RememberPlugin.verify_receipt <remember_sync.RememberPlugin.verify_receipt>`.
    """

    #: Keyed hash of the user id (base64url).
    subject: str
    #: Entries in user scope.
    user_entries: int
    #: Entries in the person's sessions (their verified sessions and ``stateless-user:``).
    session_entries: int
    #: Entries in tool scope under those sessions.
    tool_entries: int
    #: Of the entries above, how many could not be decrypted.
    unreadable: int
    #: Session identities erased.
    sessions: int
    #: Sessions that hold entries but have no recorded owner (written before owners
    #: were recorded, or by another implementation): not erased, since they cannot be
    #: attributed to anyone.
    unattributed_sessions: int
    #: Sessions recorded for this person *and* someone else: left as they are.
    shared_sessions: int
    #: When the erasure ran (epoch milliseconds).
    erased_at: int
    #: ``True``: only counted, nothing deleted.
    dry_run: bool
    #: HMAC-SHA256 of the other fields (base64url).
    mac: str
    #: With subject keys: the person's data keys destroyed in the keystore (every
    #: copy of their entries, backups included, is unreadable from then on);
    #: ``None`` without subject keys.
    keys_destroyed: int | None = None

    @property
    def total(self) -> int:
        """Every entry deleted (or counted), all scopes."""
        return self.user_entries + self.session_entries + self.tool_entries

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (the form the audit trail and the CLI print)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if out["keys_destroyed"] is None:
            del out["keys_destroyed"]  # receipts without subject keys: as they always were
        return out


# -- what the plugin shows of its secrets and background work (read-only views) ----------


class MasterSecrets(Protocol):
    """The plugin's master secrets as :attr:`RememberPlugin.keyring
    <remember_sync.RememberPlugin.keyring>` shows them: where they came from and
    their public key ids, never a secret."""

    @property
    def source(self) -> str:
        """Where the first secret came from: ``explicit``, ``env:<NAME>``, ``file:<path>``..."""

    @property
    def kids(self) -> tuple[str, ...]:
        """The public key id of every secret, the primary (signing) one first."""

    @property
    def primary_kid(self) -> str:
        """The key id of the secret new entries are encrypted with."""


class KeyStatus(Protocol):
    """What a check of the secret against the key id the store records found."""

    @property
    def recorded(self) -> str | None:
        """The key id the store records (``None``: nothing recorded yet)."""

    @property
    def matches(self) -> bool:
        """Nothing is recorded, or one of the plugin's secrets is the recorded one."""


class KeyCheck(Protocol):
    """:attr:`RememberPlugin.key_id_check <remember_sync.RememberPlugin.key_id_check>`:
    the read-only, one-shot secret check (``docs/purge.rst``)."""

    @property
    def status(self) -> KeyStatus | None:
        """The outcome once the check ran (``None`` before, or when the store failed)."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the check has run; ``False`` on timeout."""


class LayoutMarker(Protocol):
    """The fleet clock the legacy purge reads from the store."""

    @property
    def version(self) -> int | None:
        """The marker's layout version."""

    @property
    def first_seen_at(self) -> int:
        """Epoch milliseconds when the fleet first reached the current layout."""


class PurgeCounts(Protocol):
    """What one legacy purge sweep did (``docs/purge.rst``)."""

    @property
    def found(self) -> int:
        """Legacy entries found."""

    @property
    def deleted(self) -> int:
        """Keys the store reported deleted."""

    @property
    def kept(self) -> int:
        """Keys under the legacy patterns left alone (not legacy entries of this plugin)."""

    @property
    def failed_batches(self) -> int:
        """Delete batches the store refused (their keys remain)."""

    @property
    def failed_listings(self) -> int:
        """Patterns whose listing failed part-way."""

    @property
    def stopped(self) -> bool:
        """The sweep was interrupted."""

    @property
    def ok(self) -> bool:
        """The sweep completed with no failed batch or listing."""


class BackgroundPurge(Protocol):
    """:attr:`RememberPlugin.legacy_purge <remember_sync.RememberPlugin.legacy_purge>`:
    the background legacy purge, watched from the application (``docs/purge.rst``)."""

    @property
    def state(self) -> str:
        """``pending``, ``armed``, ``swept``, ``stood-down``, ``duplicate`` or ``stopped``."""

    @property
    def last_result(self) -> PurgeCounts | None:
        """The sweep's counts, once it swept."""

    @property
    def marker(self) -> LayoutMarker | None:
        """The fleet clock, once read."""

    @property
    def due_at_ms(self) -> int | None:
        """Epoch ms when the purge window passes, once the marker is read."""

    @property
    def next_wake_ms(self) -> int | None:
        """Length of the wait currently armed (ms), ``None`` when none is."""

    @property
    def key_status(self) -> KeyStatus | None:
        """What the secret check of the purge's first step found."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no step is due or running; ``False`` on timeout."""


class ReindexCounts(Protocol):
    """What the one-time background reindex did."""

    @property
    def keys(self) -> int:
        """Keys found under the prefix."""

    @property
    def entries(self) -> int:
        """Of them, entry keys (the ones an index holds)."""

    @property
    def indexed(self) -> int:
        """Entries put into (or confirmed in) their index."""

    @property
    def seconds(self) -> float:
        """How long the pass took."""

    @property
    def pruned(self) -> int:
        """Index members whose entry was gone, dropped by the prune pass at its end."""


class BackgroundReindex(Protocol):
    """:attr:`RememberPlugin.index_backfill <remember_sync.RememberPlugin.index_backfill>`:
    the fleet's one-time background reindex in index mode (``docs/redis.rst``)."""

    @property
    def state(self) -> str:
        """``idle``, ``running``, ``indexed``, ``elsewhere``, ``duplicate``, ``stood-down``,
        ``stopped`` or ``failed``."""

    @property
    def result(self) -> ReindexCounts | None:
        """What the pass did, when this process ran it."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the pass is over; ``False`` on timeout."""
