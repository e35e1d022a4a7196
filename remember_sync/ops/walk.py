"""Walking a whole store: every key under the prefix, classified and decoded in batches.

``stats``, ``doctor``, ``export`` and ``rotate`` all start here.  The walk
lists keys with one ``SCAN`` of ``glob_escape(prefix) + "*"`` (the list is held
in memory so the progress bar knows the total), then reads values
``batch`` at a time with ``get_many``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TextIO

from ..codec import EntryCodec
from ..errors import RememberDecryptionError
from ..keys import ParsedKey, glob_escape, layout_marker_key, parse_storage_key
from ..progress import Progress
from ..purge import LEGACY_SCOPES
from ..stores.base import Store
from ..types import RememberEntry

__all__ = ["BATCH", "Item", "KeyKind", "classify", "decode_item", "list_keys", "read_items"]

#: Values per ``get_many`` round trip.
BATCH = 500

#: ``entry``: a ``v2``/``global`` storage key; ``legacy``: a pre-``v2`` key the purge
#: deletes; ``marker``: the layout marker; ``other``: anything else under the prefix.
KeyKind = Literal["entry", "legacy", "marker", "other"]


def list_keys(store: Store, prefix: str) -> list[str]:
    """Every key under *prefix* (the literal prefix, checked again), each once, sorted."""
    seen: dict[str, None] = {}
    for key in store.scan(glob_escape(prefix) + "*"):
        if key.startswith(prefix):
            seen.setdefault(key, None)
    return sorted(seen)


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
    rest = key[len(prefix) :]
    if prefix and any(rest.startswith(f"{scope}:") for scope in LEGACY_SCOPES):
        return "legacy", None
    return "other", None


@dataclass(frozen=True)
class Item:
    """One entry key as read during a walk.

    :attr key: the full storage key.
    :attr parsed: its namespace and bare key.
    :attr raw: the stored string (``None``: it vanished since the listing).
    :attr entry: the decoded entry (``None`` when vanished or unreadable).
    :attr current: sealed by the primary secret in the configured envelope form.
    :attr error: why it is unreadable.
    """

    key: str
    parsed: ParsedKey
    raw: str | None
    entry: RememberEntry | None
    current: bool
    error: str | None

    @property
    def unreadable(self) -> bool:
        return self.error is not None


def read_items(
    store: Store,
    codec: EntryCodec,
    keys: list[str],
    *,
    label: str,
    progress_stream: TextIO | None = None,
) -> Iterator[Item]:
    """Read and decode every entry key in *keys*, ``BATCH`` per round trip.

    Legacy, marker and other keys are skipped (and still advance the bar).
    Unreadable entries are yielded with ``error`` set; nothing is logged.
    """
    prefix = codec.prefix
    with Progress(len(keys), label, stream=progress_stream) as bar:
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            wanted: list[tuple[str, ParsedKey]] = []
            for key in chunk:
                kind, parsed = classify(prefix, key)
                if kind == "entry":
                    assert parsed is not None
                    wanted.append((key, parsed))
            values = store.get_many([k for k, _ in wanted]) if wanted else []
            for (key, parsed), raw in zip(wanted, values, strict=True):
                yield decode_item(codec, key, parsed, raw)
            bar.advance(len(chunk))


def decode_item(codec: EntryCodec, key: str, parsed: ParsedKey, raw: str | None) -> Item:
    """Decode one stored value into an :class:`Item`."""
    if raw is None:
        return Item(key, parsed, None, None, False, None)
    try:
        entry, current = codec.decode_detail(raw, parsed.namespace, key)
    except RememberDecryptionError as exc:
        return Item(key, parsed, raw, None, False, exc.message)
    return Item(key, parsed, raw, entry, current, None)

