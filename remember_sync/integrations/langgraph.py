"""LangGraph long-term memory on remember_sync: a ``BaseStore`` that is encrypted per person.

::

    from langgraph.graph import StateGraph
    from remember_sync import RememberPlugin
    from remember_sync.integrations.langgraph import RememberStore

    plugin = RememberPlugin.init(type="redis", config={"url": "redis://127.0.0.1:6379/0"})
    store = RememberStore(plugin, user_prefix=("users",))
    graph = StateGraph(State).add_node(...).compile(store=store)

The namespace rule: a namespace ``(*user_prefix, user_id, *rest)`` belongs to
the person *user_id*; its items are kept in that person's ``user`` scope
(encrypted under their keys, counted by their quota, removed by
``plugin.erase(user_id=...)``).  Every other namespace (``("test",)``,
``("docs", "faq")``) is shared and kept in the ``global`` scope.  A ``"*"`` in
*user_prefix* matches any label; ``user_prefix=()`` makes the first label of
every namespace the user id.

Who is asking: a store made by ``RememberStore(plugin)`` follows the identity
the host bound (:func:`remember_sync.identity`, as the WSGI, Flask and Django
integrations and the MCP server do per request): with one bound it sees the
bound person's namespaces and the shared ones, and refuses to write another
person's; with nothing bound (a notebook, a cron job, LangGraph's own tests)
it is the process's view and spans every namespace.  ``store.for_user(id)``
fixes the person regardless of the context.

Requires the ``langgraph`` extra: ``pip install 'remember-sync[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final

try:
    from langgraph.store.base import (
        BaseStore,
        Embeddings,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - exercised by the no-framework import test
    raise ImportError(
        "remember_sync.integrations.langgraph needs LangGraph: "
        "pip install 'remember-sync[langgraph]'"
    ) from exc

from .._embedders import named_embedder
from .._keys import MAX_KEY_BYTES, glob_escape, parse_storage_key
from ..accessor import RememberAccessor
from ..errors import RememberConfigurationError, RememberIdentityError, RememberInputError
from ..identity import _is_bound, current_identity, is_anonymous
from ..plugin import RememberPlugin
from ..types import Identity, RememberEntry, Scope, identity_part
from ._langgraph_layout import (
    MARK,
    NamespaceRule,
    Place,
    check_filter,
    literal_head,
    matches,
    memory_key,
    namespace_matches,
    parse_memory_key,
    path_pattern,
    ranked,
    ttl_seconds,
    vectors_by_op,
)

__all__ = ["RememberStore"]

#: The metadata member holding what LangGraph needs beside the value (vectors, TTL).
_META: Final = "langgraph"
_CONTEXT: Final = object()


@dataclass(frozen=True)
class _View:
    """Whose namespaces one call may see: everyone's (the process) or one person's (or none)."""

    everyone: bool
    user: str | None

    def sees(self, user: str | None) -> bool:
        """Whether this view may read and write namespaces of *user* (``None``: shared)."""
        if user is None:
            return True
        return not is_anonymous(user) and (self.everyone or user == self.user)


@dataclass(frozen=True)
class _Found:
    """One stored item as the store read it."""

    namespace: tuple[str, ...]
    key: str
    memory: str
    user: str | None
    entry: RememberEntry

    def item(self) -> Item:
        return Item(value=self.entry.value, key=self.key, namespace=self.namespace,
                    created_at=_when(self.entry.created_at),
                    updated_at=_when(self.entry.updated_at))  # fmt: skip

    def hit(self, score: float | None) -> SearchItem:
        made, changed = _when(self.entry.created_at), _when(self.entry.updated_at)
        return SearchItem(self.namespace, self.key, self.entry.value, made, changed, score)

    def vectors(self) -> list[list[float]]:
        meta = (self.entry.metadata or {}).get(_META) or {}
        return list((meta.get("vectors") or {}).values())


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


class _Gone(Exception):
    """The item disappeared between a read and its TTL refresh."""


class RememberStore(BaseStore):
    """A LangGraph ``BaseStore`` over a :class:`~remember_sync.RememberPlugin`.

    :param plugin: the plugin that stores, encrypts, counts and audits (not
        closed by the store).
    :param user_prefix: the labels before the user id in a person's namespaces
        (``"*"`` matches any label); other namespaces are shared.
    :param index: LangGraph's ``IndexConfig`` (``embed``, ``dims``, ``fields``)
        for search by meaning; ``embed`` is anything LangGraph accepts (an
        ``Embeddings``, a sync or async function of a list of texts) or
        ``"wordllama"`` (WordLlama's model, from the ``wordllama`` package).
    :param ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes) for puts
        without a ``ttl``, ``refresh_on_read`` (default ``True``).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        plugin: RememberPlugin,
        *,
        user_prefix: Sequence[str] = ("users",),
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        self._plugin = _checked_plugin(plugin)
        labels = tuple(user_prefix)
        if isinstance(user_prefix, str) or any(not isinstance(e, str) or not e for e in labels):
            raise RememberConfigurationError(
                f"user_prefix must be a tuple of non-empty labels; got {user_prefix!r}"
            )
        self._rule = NamespaceRule(labels)
        self._user: object = _CONTEXT
        self.ttl_config = ttl
        self.index_config = index
        self._embeddings: Embeddings | None = None
        self._fields: list[tuple[str, Any]] = []
        if index is not None:
            self._embeddings = _embeddings(index.get("embed"))
            self._fields = [
                (p, p if p == "$" else tokenize_path(p)) for p in (index.get("fields") or ["$"])
            ]

    def for_user(self, user_id: str | int | None) -> RememberStore:
        """This store acting for *user_id* whatever the context binds (``None``: nobody).

        It sees that person's namespaces and the shared ones, and refuses to
        write another person's.
        """
        bound = copy.copy(self)
        bound._user = identity_part(user_id, "user_id")
        return bound

    def __repr__(self) -> str:
        who = "context" if self._user is _CONTEXT else repr(self._user)
        index = "off" if self._embeddings is None else "on"
        return (f"RememberStore(plugin={self._plugin!r}, user_prefix={self._rule.user_prefix!r}, "
                f"index={index}, user={who})")

    # -- who is asking ------------------------------------------------------------------

    def _view(self) -> _View:
        if self._user is not _CONTEXT:
            user = self._user if isinstance(self._user, str) else None
            return _View(False, None if is_anonymous(user) else user)
        if not _is_bound():
            return _View(True, None)
        user = current_identity().user_id
        return _View(False, None if is_anonymous(user) else user)

    def _accessor(self, user: str | None) -> tuple[RememberAccessor, Scope]:
        if user is None:
            return self._plugin.accessor(Identity()), "global"
        return self._plugin.accessor(Identity(user_id=user)), "user"

    # -- the batch ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run *ops* in order; results in the same order."""
        ops = list(ops)
        view = self._checked(ops)
        texts = self._texts(ops)
        emb = self._embeddings
        vectors = emb.embed_documents([t for t, _ in texts]) if emb and texts else []
        queries = self._queries(ops)
        found = {q: emb.embed_query(q) for q in queries} if emb else {}
        return self._run(ops, view, vectors_by_op(texts, vectors), found)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` with the embedder awaited and the store work in a thread."""
        ops = list(ops)
        view = self._checked(ops)
        texts = self._texts(ops)
        emb = self._embeddings
        vectors = await emb.aembed_documents([t for t, _ in texts]) if emb and texts else []
        queries = self._queries(ops)
        found: dict[str, list[float]] = {}
        if emb and queries:
            answers = await asyncio.gather(*(emb.aembed_query(q) for q in queries))
            found = dict(zip(queries, answers, strict=True))
        by_op = vectors_by_op(texts, vectors)
        return await asyncio.to_thread(self._run, ops, view, by_op, found)

    def _checked(self, ops: list[Op]) -> _View:
        """Validate every op before any I/O: nothing is written when one is bad."""
        view = self._view()
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise RememberInputError(f"unknown store operation {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, (GetOp, PutOp)) and not isinstance(op.key, str):
                raise RememberInputError(
                    f"an item key must be a str; got {type(op.key).__name__}"
                )
            if isinstance(op, (SearchOp, ListNamespacesOp)) and min(op.limit, op.offset) < 0:
                raise RememberInputError("limit and offset must not be negative")
            if isinstance(op, SearchOp):
                check_filter(op.filter)
            if isinstance(op, PutOp):
                self._check_put(op, view)
        return view

    def _check_put(self, op: PutOp, view: _View) -> None:
        if not op.namespace:
            raise RememberInputError("a put needs a non-empty namespace")
        place = self._rule.place(op.namespace)
        if len(memory_key(place.path, op.key).encode()) > MAX_KEY_BYTES:
            raise RememberInputError(
                f"namespace {op.namespace!r} and key {op.key[:40]!r}... make a memory key "
                f"over {MAX_KEY_BYTES} bytes; use shorter labels or keys"
            )
        if op.value is not None and not isinstance(op.value, dict):
            raise RememberInputError(
                f"an item value must be a dict; got {type(op.value).__name__}"
            )
        ttl_seconds(op.ttl)
        if op.index is not None and op.index is not False and (
            not isinstance(op.index, list) or not all(isinstance(p, str) for p in op.index)
        ):
            raise RememberInputError("a put's index must be False, None or a list of paths")
        user = place.user
        if user is not None and is_anonymous(user):
            raise RememberIdentityError(
                f"namespace {op.namespace!r} names an anonymous user ({user!r}); user memory "
                "needs an authenticated user id, or use a shared namespace"
            )
        if not view.sees(user):
            raise RememberIdentityError(
                f"this store acts for {'nobody' if view.user is None else 'another person'}: "
                "it cannot write a namespace of another person; bind that person or use "
                "a shared namespace"
            )

    def _texts(self, ops: list[Op]) -> list[tuple[str, tuple[int, str]]]:
        """``(text, (op index, vector path))`` for every text the puts index."""
        if self._embeddings is None:
            return []
        out: list[tuple[str, tuple[int, str]]] = []
        for i, op in enumerate(ops):
            if not isinstance(op, PutOp) or op.value is None or op.index is False:
                continue
            fields = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
            for path, tokens in fields:
                found = get_text_at_path(op.value, tokens)
                if len(found) == 1:
                    out.append((found[0], (i, path)))
                else:
                    out.extend((t, (i, f"{path}.{n}")) for n, t in enumerate(found))
        return out

    @staticmethod
    def _queries(ops: list[Op]) -> list[str]:
        return sorted({op.query for op in ops if isinstance(op, SearchOp) and op.query})

    def _run(
        self,
        ops: list[Op],
        view: _View,
        vectors: dict[int, dict[str, list[float]]],
        queries: dict[str, list[float]],
    ) -> list[Result]:
        results: list[Result] = []
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                results.append(self._get(op, view))
            elif isinstance(op, PutOp):
                self._put(op, vectors.get(i, {}))
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op, view, queries.get(op.query or "")))
            else:
                assert isinstance(op, ListNamespacesOp)
                results.append(self._list_namespaces(op, view))
        return results

    # -- the operations -----------------------------------------------------------------

    def _get(self, op: GetOp, view: _View) -> Item | None:
        place = self._rule.place(op.namespace)
        if not view.sees(place.user):
            return None  # another person's namespace: nothing there for this caller
        accessor, scope = self._accessor(place.user)
        memory = memory_key(place.path, op.key)
        entry = accessor.get_entry(memory, scope=scope)
        if entry is None:
            return None
        found = _Found(op.namespace, op.key, memory, place.user, entry)
        if op.refresh_ttl:
            self._refresh(found)
        return found.item()

    def _put(self, op: PutOp, vectors: dict[str, list[float]]) -> None:
        place = self._rule.place(op.namespace)
        accessor, scope = self._accessor(place.user)
        memory = memory_key(place.path, op.key)
        if op.value is None:
            accessor.forget(memory, scope=scope)
            return
        seconds = ttl_seconds(op.ttl)
        meta: dict[str, Any] = {}
        if vectors:
            meta["vectors"] = vectors
        if seconds is not None:
            meta["ttl"] = seconds
        accessor.set(memory, dict(op.value), scope=scope, ttl=seconds,
                     metadata={_META: meta} if meta else None)  # fmt: skip

    def _refresh(self, found: _Found) -> None:
        """Restart the item's TTL (an item without one is left alone)."""
        meta = (found.entry.metadata or {}).get(_META) or {}
        seconds = meta.get("ttl")
        if not isinstance(seconds, int):
            return

        def same(current: Any) -> Any:
            if not isinstance(current, dict):
                raise _Gone
            return current

        accessor, scope = self._accessor(found.user)
        try:
            accessor.modify(found.memory, same, scope=scope, ttl=seconds)
        except _Gone:
            pass  # deleted meanwhile: nothing to refresh

    def _items(self, prefix: tuple[str, ...], view: _View) -> Iterator[_Found]:
        """Every readable item under *prefix* this view may see."""
        rule = self._rule
        pattern = path_pattern(rule.path_prefix(prefix))
        owners: list[str | None] = [None]
        if rule.may_hold_people(prefix):
            pinned = rule.user_of_prefix(prefix)
            if pinned is not None:
                owners.append(pinned)
            elif view.everyone:
                owners.extend(self._people())
            elif view.user is not None:
                owners.append(view.user)
        for user in owners:
            if not view.sees(user):
                continue
            accessor, scope = self._accessor(user)
            shared_pattern = path_pattern(prefix) if user is None else pattern
            for memory, entry in accessor.entries(scope=scope, pattern=shared_pattern).items():
                parsed = parse_memory_key(memory)
                if parsed is None:
                    continue
                namespace = rule.namespace(Place(user, parsed[0]))
                if namespace[: len(prefix)] == prefix and rule.place(namespace).user == user:
                    yield _Found(namespace, parsed[1], memory, user, entry)

    def _people(self) -> list[str]:
        """Everyone with LangGraph items in this plugin's store (the process view)."""
        prefix = self._plugin.key_prefix
        people: set[str] = set()
        for full in self._plugin.store.scan(glob_escape(prefix) + "v2:user:*" + MARK + "*"):
            parsed = parse_storage_key(prefix, full)
            if parsed is not None and parsed.namespace.user and parsed.key.startswith(MARK):
                people.add(parsed.namespace.user)
        return sorted(people)

    def _search(
        self, op: SearchOp, view: _View, query: list[float] | None
    ) -> list[SearchItem]:
        found = sorted(
            (f for f in self._items(op.namespace_prefix, view)
             if isinstance(f.entry.value, dict) and matches(f.entry.value, op.filter)),
            key=lambda f: (f.namespace, f.key),
        )  # fmt: skip
        page: list[tuple[_Found, float | None]]
        if query is None:
            page = [(f, None) for f in found[op.offset : op.offset + op.limit]]
        else:
            page = ranked(found, lambda f: f.vectors(), query, op.offset, op.limit)
        if op.refresh_ttl:
            for f, _ in page:
                self._refresh(f)
        return [f.hit(score) for f, score in page]

    def _list_namespaces(self, op: ListNamespacesOp, view: _View) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefix: tuple[str, ...] = ()
        for c in conditions:
            if c.match_type == "prefix":
                prefix = tuple(e for e in literal_head(c.path))
                break
        spaces = {
            f.namespace
            for f in self._items(prefix, view)
            if all(namespace_matches(f.namespace, c.match_type, tuple(c.path)) for c in conditions)
        }
        if op.max_depth is not None:
            spaces = {ns[: op.max_depth] for ns in spaces}
        return sorted(spaces)[op.offset : op.offset + op.limit]


def _checked_plugin(plugin: object) -> RememberPlugin:
    if isinstance(plugin, RememberPlugin):
        return plugin
    raise RememberConfigurationError(
        f"RememberStore needs a RememberPlugin; got {type(plugin).__name__}"
    )


def _embeddings(embed: Any) -> Embeddings:
    """LangGraph's ``embed`` setting as an ``Embeddings`` (``"wordllama"``: WordLlama's model)."""
    if embed is None:
        raise RememberConfigurationError("RememberStore index needs 'embed' (an embedder)")
    if embed == "wordllama":
        return _WordLlama()
    return ensure_embeddings(embed)


class _WordLlama(Embeddings):
    """The plugin's ``"wordllama"`` embedder (its model loaded offline from the wheel)."""

    def __init__(self) -> None:
        self._embed = named_embedder("wordllama")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in self._embed(text)] for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]
