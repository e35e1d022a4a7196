"""Reindex: bring every entry under the prefix into its namespace's listing index.

Entries written by FrontMCP 1.8.0, by our releases before the index, or by a
plugin in ``listing="scan"`` mode are in no index.  :func:`reindex` walks the
store once (``SCAN`` of ``P*``), hands the entry keys to the store's
:meth:`~remember_sync.stores.base.NamespaceIndex.add_to_index` in batches, and
then records ``P + "__indexed__"``: from then on plugins in index mode list
through the index (until it is recorded they scan).  It is idempotent and safe
beside live writers; ``remember-sync reindex`` runs it on demand and the
plugin runs it once per fleet in the background (:class:`~remember_sync._purge.IndexBackfill`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from .._progress import Progress
from .._purge import ReindexResult, reindex_store
from ..stores.base import Store


def reindex(
    store: Store,
    prefix: str,
    *,
    batch: int = 1000,
    progress_stream: TextIO | None = None,
    should_stop: Callable[[], bool] | None = None,
    clock: Callable[[], int] | None = None,
) -> ReindexResult:
    """Put every entry under *prefix* into its listing index, then record that it is done.

    :param batch: keys per ``add_to_index`` call.
    :param progress_stream: where to draw a progress bar (when it is a TTY).
    :param should_stop: checked between batches; ``True`` ends the pass early
        (and nothing is recorded).
    :raises RememberConfigurationError: the store has no listing index.
    :raises RememberStoreError: the store failed (nothing is recorded).
    """
    bar: Progress | None = None

    def total(n: int) -> None:
        nonlocal bar
        bar = Progress(n, "reindex", stream=progress_stream)

    def advance(n: int) -> None:
        if bar is not None:
            bar.advance(n)

    try:
        return reindex_store(
            store, prefix, batch=batch, on_total=total, on_batch=advance,
            should_stop=should_stop, clock=clock,
        )
    finally:
        if bar is not None:
            bar.close()
