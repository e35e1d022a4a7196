"""Walking a whole store: every key under the prefix, classified and decoded in batches.

``stats``, ``doctor``, ``export`` and ``rotate`` all start here.  The walk
lists keys with one ``SCAN`` of ``glob_escape(prefix) + "*"`` (the list is held
in memory so the progress bar knows the total), then reads values
``batch`` at a time with ``get_many``.

Every layout the plugin reads is walked: with ``read_doubled_prefix`` the
keys 1.8.0's Redis and Vercel KV stores wrote (``P + P + "v2:..."``) are read
and decoded as the entry of their single-layout key, exactly as the accessor
reads them.  A doubled-prefix key whose single-layout twin also exists is
*shadowed*: the application reads the twin, never it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TextIO

from .._codec import EntryCodec
from .._core import AccessorCore
from .._crypto import UNBOUND_REFUSED
from .._keys import ParsedKey, glob_escape, layout_marker_key, parse_doubled_key, parse_storage_key
from .._progress import Progress
from .._purge import LEGACY_SCOPES
from ..errors import RememberDecryptionError
from ..stores.base import Store
from ..types import RememberEntry

#: Values per ``get_many`` round trip.
BATCH = 500
#: How many keys a report lists by name (its counts are always complete).
MAX_LISTED = 1000

#: ``entry``: a ``v2``/``global`` storage key; ``doubled``: one in 1.8.0's doubled-prefix
#: layout (``P + P + ...``); ``legacy``: a pre-``v2`` key the purge deletes; ``marker``:
#: the layout marker; ``other``: anything else under the prefix.
KeyKind = Literal["entry", "doubled", "legacy", "marker", "other"]


def list_keys(store: Store, prefix: str) -> list[str]:
    """Every key under *prefix* (the literal prefix, checked again), each once, sorted."""
    seen: dict[str, None] = {}
    for key in store.scan(glob_escape(prefix) + "*"):
        if key.startswith(prefix):
            seen.setdefault(key, None)
    return sorted(seen)


@dataclass(kw_only=True)
class Report:
    """Base of the operators' reports: counters, and the keys behind some of them.

    Every report counts the entries no configured secret opens (``unreadable``)
    and names the first of them (``unreadable_keys``).
    """

    unreadable: int = 0
    unreadable_keys: list[str] = field(default_factory=list)

    def note(self, kind: str, key: str) -> None:
        """Count one more *kind* (``unreadable``...) and name *key* in ``<kind>_keys``.

        The counts are always complete; a list names at most ``MAX_LISTED`` keys.
        """
        setattr(self, kind, getattr(self, kind) + 1)
        names: list[str] = getattr(self, f"{kind}_keys")
        if len(names) < MAX_LISTED:
            names.append(key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def classify(prefix: str, key: str) -> tuple[KeyKind, ParsedKey | None]:
    """What *key* is, and its namespace and bare key when it is an entry."""
    if key == layout_marker_key(prefix):
        return "marker", None
    try:
        parsed = parse_storage_key(prefix, key)
    except UnicodeDecodeError:
        parsed = None  # percent-encoding that is not UTF-8: not written by us
    if parsed is not None:
        return "entry", parsed
    parsed = parse_doubled_key(prefix, key)
    if parsed is not None:
        return "doubled", parsed
    rest = key[len(prefix) :]
    if prefix and any(rest.startswith(f"{scope}:") for scope in LEGACY_SCOPES):
        return "legacy", None
    return "other", None


@dataclass(frozen=True)
class Item:
    """One entry key as read during a walk.

    :attr key: the full storage key (single layout; for a doubled-prefix entry,
        the key the application reads it as).
    :attr parsed: its namespace and bare key.
    :attr raw: the stored string (``None``: it vanished since the listing).
    :attr entry: the decoded entry (``None`` when vanished or unreadable).
    :attr current: sealed by the primary secret in the configured envelope form.
    :attr error: why it is unreadable.
    :attr stored_at: the key the value was read from (``key`` unless doubled).
    :attr bound: whether the envelope binds its storage key (``None`` when not
        known: vanished, unreadable for another reason, or no encryption).
    :attr shadowed: a doubled-prefix key whose single-layout twin exists (not
        decoded: the application never reads it).
    """

    key: str
    parsed: ParsedKey
    raw: str | None
    entry: RememberEntry | None
    current: bool
    error: str | None
    stored_at: str = ""
    bound: bool | None = None
    shadowed: bool = False

    @property
    def unreadable(self) -> bool:
        return self.error is not None

    @property
    def doubled(self) -> bool:
        """Read from 1.8.0's doubled-prefix layout."""
        return bool(self.stored_at) and self.stored_at != self.key


def read_items(
    store: Store,
    codec: EntryCodec,
    keys: list[str],
    *,
    label: str,
    progress_stream: TextIO | None = None,
    read_doubled_prefix: bool = False,
) -> Iterator[Item]:
    """Read and decode every entry key in *keys*, ``BATCH`` per round trip.

    Legacy, marker and other keys are skipped (and still advance the bar), and
    doubled-prefix keys unless *read_doubled_prefix*.  Unreadable entries are
    yielded with ``error`` set; nothing is logged.
    """
    prefix = codec.prefix
    singles = set(keys) if read_doubled_prefix else set()
    with Progress(len(keys), label, stream=progress_stream) as bar:
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            wanted: list[tuple[str, ParsedKey, str]] = []
            for key in chunk:
                kind, parsed = classify(prefix, key)
                if kind == "entry" or (kind == "doubled" and read_doubled_prefix):
                    assert parsed is not None
                    single = key if kind == "entry" else key[len(prefix) :]
                    if kind == "doubled" and single in singles:
                        yield Item(single, parsed, None, None, False, None, key, None, True)
                        continue
                    wanted.append((single, parsed, key))
            values = store.get_many([k for _, _, k in wanted]) if wanted else []
            for (single, parsed, key), raw in zip(wanted, values, strict=True):
                yield decode_item(codec, single, parsed, raw, stored_at=key)
            bar.advance(len(chunk))


def walk_entries(
    core: AccessorCore, *, label: str, progress_stream: TextIO | None
) -> tuple[int, Iterator[Item]]:
    """The entries under *core*'s prefix, in every layout the plugin reads.

    :returns: how many doubled-prefix keys are not read (``read_doubled_prefix``
        off), and the items (see :func:`read_items`).
    """
    prefix, read_doubled = core.prefix, core.read_doubled_prefix
    keys = list_keys(core.store, prefix)
    unread = 0 if read_doubled else sum(classify(prefix, k)[0] == "doubled" for k in keys)
    items = read_items(
        core.store, core.codec, keys, label=label, progress_stream=progress_stream,
        read_doubled_prefix=read_doubled,
    )
    return unread, items


def decode_item(
    codec: EntryCodec, key: str, parsed: ParsedKey, raw: str | None, *, stored_at: str = ""
) -> Item:
    """Decode one stored value (read from *stored_at*, by default *key*) into an :class:`Item`."""
    at = stored_at or key
    if raw is None:
        return Item(key, parsed, None, None, False, None, at)
    try:
        fields, index, bound = codec.open_fields(raw, parsed.namespace, key)
    except RememberDecryptionError as exc:
        refused = exc.message == UNBOUND_REFUSED
        return Item(key, parsed, raw, None, False, exc.message, at, False if refused else None)
    current = index == 0 and bound == codec.bind_key
    encrypted = codec.keyring is not None
    return Item(
        key, parsed, raw, RememberEntry(*fields), current, None, at,
        bound if encrypted else None,
    )
