"""A real LangGraph graph keeps its long-term memory in RememberStore.

The graph (``StateGraph`` from the ``langgraph`` package) writes what the user
says into their namespace and recalls it by meaning on the next turn, sync and
async, on every store; bound to a person per request, it cannot reach another's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from remember_sync import Identity, RememberPlugin, identity
from remember_sync.errors import RememberIdentityError
from remember_sync.integrations.langgraph import RememberStore

Factory = Callable[..., RememberPlugin]


class Turn(TypedDict, total=False):
    user: str
    message: str
    recalled: list[str]


def _embed(texts: list[str]) -> list[list[float]]:
    """A tiny bag-of-letters embedder: enough for 'pizza' to find pizza."""
    return [[float(t.lower().count(c)) for c in "aeioupzsht"] for t in texts]


def _graph(store: BaseStore) -> Any:
    def remember(state: Turn, *, store: BaseStore) -> Turn:
        store.put(("users", state["user"], "memories"), uuid.uuid4().hex,
                  {"text": state["message"]})
        return {}

    def recall(state: Turn, *, store: BaseStore) -> Turn:
        hits = store.search(("users", state["user"], "memories"), query=state["message"],
                            limit=2)
        return {"recalled": [h.value["text"] for h in hits]}

    builder = StateGraph(Turn)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(store=store)


def test_a_graph_writes_and_recalls_through_remember_store(make_plugin: Factory) -> None:
    """Two users talk to one graph; each recalls their own memories only, all stored sealed."""
    plugin = make_plugin()
    graph = _graph(RememberStore(plugin, index={"dims": 10, "embed": _embed}))
    graph.invoke({"user": "alice", "message": "I love pizza"})
    graph.invoke({"user": "bob", "message": "I hate spinach"})
    out = graph.invoke({"user": "alice", "message": "pizza tonight?"})
    assert out["recalled"][0] == "pizza tonight?"
    assert "I love pizza" in out["recalled"]
    assert not any("spinach" in r for r in out["recalled"])
    alice = plugin.accessor(Identity(user_id="alice")).entries(scope="user")
    assert len(alice) == 2 and all(k.startswith("langgraph:users/memories:") for k in alice)


def test_a_graph_run_bound_to_a_person_cannot_touch_another(make_plugin: Factory) -> None:
    """Per request the host binds the user: the graph may write their memory, not someone else's."""
    plugin = make_plugin()
    graph = _graph(RememberStore(plugin, index={"dims": 10, "embed": _embed}))
    with identity(user_id="alice", session_id="s-1"):
        assert graph.invoke({"user": "alice", "message": "tea"})["recalled"] == ["tea"]
        with pytest.raises(RememberIdentityError):
            graph.invoke({"user": "bob", "message": "coffee"})
    assert plugin.accessor(Identity(user_id="bob")).entries(scope="user") == {}


def test_a_graph_runs_async(make_plugin: Factory) -> None:
    """``ainvoke`` goes through ``abatch`` (the store work in a thread, the context kept)."""
    plugin = make_plugin()
    graph = _graph(RememberStore(plugin, index={"dims": 10, "embed": _embed}))

    async def main() -> list[str]:
        with identity(user_id="carol", session_id="s-2"):
            await graph.ainvoke({"user": "carol", "message": "sushi"})
            out = await graph.ainvoke({"user": "carol", "message": "sushi again"})
            with pytest.raises(RememberIdentityError):
                await graph.ainvoke({"user": "dave", "message": "x"})
        recalled: list[str] = out["recalled"]
        return recalled

    assert asyncio.run(main()) == ["sushi again", "sushi"]


def test_async_methods_keep_the_bound_person(make_plugin: Factory) -> None:
    """``aput``/``asearch``/``alist_namespaces`` (``abatch`` in a worker thread) act for the
    identity bound where they are awaited."""
    plugin = make_plugin()
    store = RememberStore(plugin, index={"dims": 10, "embed": _embed})
    store.put(("users", "bob", "m"), "k", {"text": "bob's pizza"})

    async def main() -> None:
        with identity(user_id="alice", session_id="s-1"):
            await store.aput(("users", "alice", "m"), "k", {"text": "alice's pizza"})
            with pytest.raises(RememberIdentityError):
                await store.aput(("users", "bob", "m"), "k", {"text": "overwritten"})
            hits = await store.asearch(("users",), query="pizza", limit=10)
            assert [h.value["text"] for h in hits] == ["alice's pizza"]
            assert await store.alist_namespaces(prefix=("users", "*")) == [("users", "alice", "m")]
            assert await store.aget(("users", "bob", "m"), "k") is None

    asyncio.run(main())
    bob = store.get(("users", "bob", "m"), "k")
    assert bob is not None and bob.value == {"text": "bob's pizza"}
