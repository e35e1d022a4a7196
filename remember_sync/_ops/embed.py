"""``reindex --embeddings``: seal a vector into every entry that has none for the model.

Entries written before an embedder was configured (or under another model)
are embedded on each process's first search, in memory only; this writes the
vectors into the entries themselves, once, so no process has to.  Each entry
is rewritten by compare-and-set against exactly the text read: a concurrent
write wins and that entry is read again.  The entry text is otherwise kept as
it is (value, brand, times, metadata, who wrote it); its deadline is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TextIO

from .._codec import entry_json
from .._core import CAS_ATTEMPTS, AccessorCore
from .._search import (
    SearchSettings,
    build_settings,
    embedding_member,
    load_embedder,
    stored_vector,
)
from ..errors import RememberConfigurationError, RememberDecryptionError
from .walk import Item, Report, walk_entries

#: The members of the entry JSON written from its fields (the rest are kept as read).
_FIELDS = frozenset({"value", "brand", "createdAt", "updatedAt", "expiresAt", "metadata"})


@dataclass
class EmbedResult(Report):
    """What ``reindex --embeddings`` did (counts, and up to 1000 keys of each problem)."""

    examined: int = 0
    embedded: int = 0
    current: int = 0
    expired: int = 0
    contended: int = 0
    contended_keys: list[str] = field(default_factory=list)


def embedder_settings(spec: str, model: str | None = None) -> SearchSettings:
    """The search settings of the embedder named ``"module:attribute"`` (and *model*)."""
    options: dict[str, Any] = {"embedder": load_embedder(spec)}
    if model is not None:
        options["model"] = model
    return build_settings(options)


def embed_entries(
    core: AccessorCore,
    settings: SearchSettings,
    *,
    dry_run: bool = False,
    progress_stream: TextIO | None = None,
) -> EmbedResult:
    """Seal ``settings.embedder``'s vector into every live, readable entry lacking one.

    :raises RememberConfigurationError: *settings* has no embedder.
    """
    if settings.embedder is None:
        raise RememberConfigurationError("reindex --embeddings needs an embedder (--embedder)")
    result = EmbedResult()
    _, items = walk_entries(core, label="embed", progress_stream=progress_stream)
    for item in items:
        if item.raw is None or item.doubled:
            continue
        result.examined += 1
        outcome = _embed_one(core, settings, item, dry_run)
        if outcome in ("unreadable", "contended"):
            result.note(outcome, item.key)
        else:
            setattr(result, outcome, getattr(result, outcome) + 1)
    return result


def _embed_one(core: AccessorCore, settings: SearchSettings, item: Item, dry_run: bool) -> str:
    ns, bare = item.parsed.namespace, item.parsed.key
    raw = item.raw
    for _attempt in range(CAS_ATTEMPTS):
        if raw is None:
            return "current"  # gone meanwhile: nothing to embed
        opened = core.codec.records_many([raw], ns, [item.key])[0]
        if isinstance(opened, RememberDecryptionError):
            return "unreadable"
        fields, obj = opened
        now = core.clock()
        if fields[4] is not None and now >= fields[4]:
            return "expired"
        if stored_vector(obj.get("embedding"), settings.model) is not None:
            return "current"
        if dry_run:
            return "embedded"
        value, brand, created, updated, expires, metadata = fields
        extras = {k: v for k, v in obj.items() if k not in _FIELDS}
        extras["embedding"] = embedding_member(settings, bare, value, brand, metadata)
        fresh = core.seal_checked(
            entry_json(value, brand, created, updated, expires, metadata, extras), ns, item.key,
            like=raw,
        )
        if core.store.compare_and_set(item.key, raw, fresh, ttl_ms=core.ttl_ms(expires, now)):
            return "embedded"
        raw = core.store.get(item.key)
    return "contended"
