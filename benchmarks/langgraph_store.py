"""Group ``langgraph``: LangGraph's store operations through RememberStore vs its InMemoryStore.

Both stores hold the same items -- ``ITEMS`` memories of one person, in
``("users", "bench", "memories")`` -- and run the same operation, interleaved
in blocks by :func:`benchmarks.harness.compare`:

* ``put``: replace one item (the value is about 200 bytes of JSON);
* ``get``: read one item;
* ``search``: the first 10 items of the namespace whose ``kind`` field matches;
* ``search (query)``: the 10 items nearest a query by meaning (both stores
  configured with the same small embedder, vectors computed at put time).

RememberStore is bound to the person (``for_user``), as a host binds it per
request; the ratio (``time``) is RememberStore's time / InMemoryStore's, and
what it measures is the price of encryption, the store round trips (Redis)
and decoding: InMemoryStore keeps Python objects in a dict.  There is no
target: the figures are reported, not judged.
"""

from __future__ import annotations

from typing import Any

from remember_sync import RememberPlugin

from .harness import Op, Row, compare

__all__ = ["rows_langgraph"]

ITEMS = 100
NAMESPACE = ("users", "bench", "memories")
DIMS = 16


def _embed(texts: list[str]) -> list[list[float]]:
    """A cheap deterministic embedder (letter counts): the same for both stores."""
    return [[float(t.count(chr(97 + i))) + 0.01 for i in range(DIMS)] for t in texts]


def _value(i: int) -> dict[str, Any]:
    return {"text": f"memory number {i} about topic {i % 7} " + "x" * 120,
            "kind": "fact" if i % 2 else "event", "n": i}  # fmt: skip


def _ops(store: Any) -> dict[str, Op]:
    keys = [f"m{i:03d}" for i in range(ITEMS)]

    def put(i: int) -> object:
        store.put(NAMESPACE, keys[i % ITEMS], _value(i % ITEMS))
        return True

    def get(i: int) -> object:
        if store.get(NAMESPACE, keys[i % ITEMS]) is None:
            raise RuntimeError("the item is missing")
        return True

    def search(i: int) -> object:
        if len(store.search(NAMESPACE, filter={"kind": "fact"}, limit=10)) != 10:
            raise RuntimeError("search found too little")
        return True

    def query(i: int) -> object:
        if len(store.search(NAMESPACE, query=f"topic {i % 7}", limit=10)) != 10:
            raise RuntimeError("search found too little")
        return True

    return {"put": put, "get": get, "search": search, "search (query)": query}


def rows_langgraph(env: Any, sizes: Any) -> list[Row]:
    """``put``/``get``/``search`` through RememberStore vs InMemoryStore, memory and Redis."""
    from langgraph.store.memory import InMemoryStore  # noqa: PLC0415 - optional extra

    from remember_sync.integrations.langgraph import RememberStore  # noqa: PLC0415

    rows: list[Row] = []
    index: Any = {"dims": DIMS, "embed": _embed}
    for kind in ("memory", "redis"):
        plugin: RememberPlugin = env.plugin(kind)
        try:
            ours = RememberStore(plugin, index=index).for_user("bench")
            base = InMemoryStore(index=index)
            for store in (ours, base):
                for i in range(ITEMS):
                    store.put(NAMESPACE, f"m{i:03d}", _value(i))
            mine, theirs = _ops(ours), _ops(base)
            for name, op in mine.items():
                c = compare(op, theirs[name], seconds=sizes.seconds,
                            block_seconds=sizes.block_seconds,
                            min_pairs=sizes.min_pairs)  # fmt: skip
                rows.append(Row.from_comparison(
                    c, group="langgraph", operation=f"RememberStore.{name}", store=kind,
                    baseline="InMemoryStore", ratio_kind="time",
                    note=f"{ITEMS} items of one person",
                ))  # fmt: skip
        finally:
            plugin.close()
        env.flush()
    return rows
