"""Where a LangGraph item lives in remember_sync, and the pure parts of its store contract.

No I/O and no LangGraph import here: the namespace rule (which namespace
element names the person), the memory key a namespace and an item key map to,
LangGraph's filter operators, cosine similarity and the TTL conversion.
:mod:`remember_sync.integrations.langgraph` does the reading and writing.

A memory key is ``"langgraph:" + "/".join(enc(e) for e in path) + ":" + enc(key)``,
where *path* is the namespace without the user element and ``enc`` percent-encodes
every character but ``A-Za-z0-9_.-~``: encoded labels hold no ``/``, ``:``, ``*``
or ``?``, so the key is injective and a prefix of it is a literal pattern.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import quote, unquote

from ..errors import RememberInputError

T = TypeVar("T")

#: Every memory key the store writes starts with this.
MARK: Final = "langgraph:"


def _enc(text: str) -> str:
    return quote(text, safe="", encoding="utf-8", errors="strict")


@dataclass(frozen=True)
class Place:
    """Where one namespace lives: a person's user scope (*user*) or the global scope (``None``)."""

    user: str | None
    path: tuple[str, ...]


@dataclass(frozen=True)
class NamespaceRule:
    """Which namespaces name a person: ``(*user_prefix, user_id, ...)``.

    A ``"*"`` in *user_prefix* matches any label.  Every other namespace is shared.
    """

    user_prefix: tuple[str, ...]

    @property
    def position(self) -> int:
        """The index of the user element."""
        return len(self.user_prefix)

    def _prefix_matches(self, labels: Sequence[str]) -> bool:
        return all(p == "*" or p == e for p, e in zip(self.user_prefix, labels, strict=False))

    def place(self, namespace: tuple[str, ...]) -> Place:
        """The person *namespace* belongs to (or none) and its path without the user element."""
        k = self.position
        if len(namespace) > k and self._prefix_matches(namespace):
            return Place(namespace[k], namespace[:k] + namespace[k + 1 :])
        return Place(None, namespace)

    def namespace(self, place: Place) -> tuple[str, ...]:
        """The LangGraph namespace of *place* (the inverse of :meth:`place`)."""
        if place.user is None:
            return place.path
        k = self.position
        return place.path[:k] + (place.user,) + place.path[k:]

    def may_hold_people(self, prefix: tuple[str, ...]) -> bool:
        """Whether a namespace under *prefix* can name a person."""
        return self._prefix_matches(prefix)

    def user_of_prefix(self, prefix: tuple[str, ...]) -> str | None:
        """The person a search *prefix* pins, when it reaches the user element."""
        k = self.position
        return prefix[k] if len(prefix) > k and self._prefix_matches(prefix) else None

    def path_prefix(self, prefix: tuple[str, ...]) -> tuple[str, ...]:
        """*prefix* without its user element (the stored path every match starts with)."""
        k = self.position
        return prefix[:k] + prefix[k + 1 :] if len(prefix) > k else prefix


def memory_key(path: tuple[str, ...], key: str) -> str:
    """The memory key of item *key* at *path*."""
    return MARK + "/".join(_enc(e) for e in path) + ":" + _enc(key)


def path_pattern(path_prefix: tuple[str, ...]) -> str:
    """A pattern matching every memory key whose path starts with *path_prefix* (a superset)."""
    return MARK + "/".join(_enc(e) for e in path_prefix) + "*"


@functools.lru_cache(maxsize=65_536)
def parse_memory_key(memory: str) -> tuple[tuple[str, ...], str] | None:
    """``(path, key)`` of a memory key this store wrote, else ``None`` (pure, so cached)."""
    if not memory.startswith(MARK):
        return None
    head, sep, key = memory[len(MARK) :].rpartition(":")
    if not sep or ":" in head:
        return None
    try:
        path = tuple(unquote(e, errors="strict") for e in head.split("/")) if head else ()
        item = unquote(key, errors="strict")
    except UnicodeDecodeError:
        return None
    if any(not e or _enc(e) != raw for e, raw in zip(path, head.split("/"), strict=False)):
        return None
    return (path, item) if _enc(item) == key else None


def ttl_seconds(minutes: float | None) -> int | None:
    """LangGraph's TTL (minutes, a float) as remember_sync's (whole seconds, rounded up)."""
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)):
        raise RememberInputError(f"ttl must be a number of minutes; got {type(minutes).__name__}")
    if not math.isfinite(minutes) or minutes <= 0:
        raise RememberInputError(f"ttl must be a positive number of minutes; got {minutes!r}")
    return max(1, math.ceil(minutes * 60))


# -- filters and ranking ------------------------------------------------------------------


def matches(value: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    """Whether *value* satisfies a LangGraph search filter (JSON-like comparison)."""
    return not wanted or all(_compare(value.get(k), v) for k, v in wanted.items())


def _compare(item: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(item, op, arg) for op, arg in wanted.items())
        return isinstance(item, dict) and all(_compare(item.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(item, (list, tuple))
            and len(item) == len(wanted)
            and all(_compare(i, w) for i, w in zip(item, wanted, strict=True))
        )
    return bool(item == wanted)


def check_filter(wanted: Any) -> None:
    """Refuse a filter that is not a dict or names an operator LangGraph does not have."""
    if wanted is None:
        return
    if not isinstance(wanted, dict):
        raise RememberInputError(f"a search filter must be a dict; got {type(wanted).__name__}")
    for name, arg in wanted.items():
        if isinstance(name, str) and name.startswith("$") and name not in _OPERATORS:
            raise RememberInputError(
                f"unsupported filter operator {name!r}; use $eq, $ne, $gt, $gte, $lt or $lte"
            )
        if isinstance(arg, dict):
            check_filter(arg)


_OPERATORS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


def _operator(item: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(item == arg)
    if op == "$ne":
        return bool(item != arg)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise RememberInputError(
            f"unsupported filter operator {op!r}; use $eq, $ne, $gt, $gte, $lt or $lte"
        )
    try:
        left, right = float(item), float(arg)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field does not match a numeric comparison
    return {
        "$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right
    }[op]  # fmt: skip


def best_cosine(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> float | None:
    """The highest cosine similarity of *query* to any of *vectors* (``None``: no vectors)."""
    if not vectors:
        return None
    qn = math.sqrt(sum(a * a for a in query))
    best = -math.inf
    for v in vectors:
        vn = math.sqrt(sum(b * b for b in v))
        score = sum(a * b for a, b in zip(query, v, strict=False)) / (qn * vn) if qn and vn else 0.0
        best = max(best, score)
    return best


def namespace_matches(
    namespace: tuple[str, ...], kind: str, path: tuple[str, ...]
) -> bool:
    """LangGraph's ``MatchCondition``: *path* (``"*"`` any label) at the start or the end."""
    if len(namespace) < len(path):
        return False
    if kind == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif kind == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise RememberInputError(f"unsupported match type {kind!r}; use 'prefix' or 'suffix'")
    return all(p == "*" or e == p for e, p in pairs)


def literal_head(path: Sequence[str]) -> Iterator[str]:
    """The labels of a prefix condition before its first wildcard."""
    for label in path:
        if label == "*":
            return
        yield label


def ranked(
    found: list[T], vectors: Callable[[T], Sequence[Sequence[float]]], query: Sequence[float],
    offset: int, limit: int,
) -> list[tuple[T, float | None]]:
    """LangGraph's vector ranking: best cosine over an item's vectors, unscored items last."""
    scored: list[tuple[float, int, T]] = []
    scoreless: list[T] = []
    for n, f in enumerate(found):
        score = best_cosine(query, vectors(f))
        if score is None:
            scoreless.append(f)
        else:
            scored.append((score, n, f))
    scored.sort(key=lambda t: (-t[0], t[1]))
    page: list[tuple[T, float | None]] = [(f, s) for s, _, f in scored[offset:][:limit]]
    if len(page) < limit:
        skip = max(0, offset - len(scored))
        page.extend((f, None) for f in scoreless[skip : skip + limit - len(page)])
    return page


def vectors_by_op(
    texts: list[tuple[str, tuple[int, str]]], vectors: Sequence[Sequence[float]]
) -> dict[int, dict[str, list[float]]]:
    """The embedder's *vectors* for *texts*, as ``{op index: {field path: vector}}``."""
    if len(vectors) != len(texts):
        raise RememberInputError(
            f"the embedder returned {len(vectors)} vectors for {len(texts)} texts"
        )
    out: dict[int, dict[str, list[float]]] = {}
    for (_, (i, path)), vector in zip(texts, vectors, strict=True):
        out.setdefault(i, {})[path] = [float(x) for x in vector]
    return out
