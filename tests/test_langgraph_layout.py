"""Properties of RememberStore's layout: memory keys are injective and round-trip, and a
person's bound view never returns another person's item, whatever the labels."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remember_sync import RememberPlugin
from remember_sync.integrations._langgraph_layout import (
    NamespaceRule,
    memory_key,
    parse_memory_key,
)
from remember_sync.integrations.langgraph import RememberStore
from tests.conftest import TEST_SECRET

# LangGraph's label rules: non-empty, no ".", no NUL.  Look-alike material on purpose.
LABEL = st.text(alphabet=st.sampled_from("ab:/%*?~-_ é"), min_size=1, max_size=6)
KEY = st.text(alphabet=st.sampled_from("ab:/%*?é"), max_size=6)
NAMESPACE = st.lists(LABEL, min_size=1, max_size=4).map(tuple)


@given(path=st.lists(LABEL, max_size=4).map(tuple), key=KEY)
def test_memory_keys_round_trip(path: tuple[str, ...], key: str) -> None:
    """parse(memory_key(path, key)) gives back exactly (path, key)."""
    assert parse_memory_key(memory_key(path, key)) == (path, key)


@given(a=st.tuples(st.lists(LABEL, max_size=3).map(tuple), KEY),
       b=st.tuples(st.lists(LABEL, max_size=3).map(tuple), KEY))
def test_memory_keys_are_injective(a: tuple[Any, str], b: tuple[Any, str]) -> None:
    """Two different (path, key) pairs never share a memory key."""
    if a != b:
        assert memory_key(*a) != memory_key(*b)


@given(namespace=NAMESPACE, prefix=st.lists(st.sampled_from(["users", "*", "x"]), max_size=2))
def test_the_rule_places_and_restores_every_namespace(
    namespace: tuple[str, ...], prefix: list[str]
) -> None:
    """place() then namespace() is the identity, and only matching namespaces name a person."""
    rule = NamespaceRule(tuple(prefix))
    place = rule.place(namespace)
    assert rule.namespace(place) == namespace
    if place.user is not None:
        assert namespace[len(prefix)] == place.user


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=st.lists(st.tuples(LABEL, st.lists(LABEL, max_size=2).map(tuple), KEY),
                    min_size=1, max_size=8),
    me=LABEL,
    prefix=st.lists(LABEL | st.just("users"), max_size=3).map(tuple),
)
def test_a_bound_view_never_returns_another_person(
    writes: list[tuple[str, tuple[str, ...], str]], me: str, prefix: tuple[str, ...]
) -> None:
    """Whoever wrote what, a store bound to *me* returns only *me*'s items and shared ones,
    from search and list_namespaces with any prefix or wildcard spelling."""
    with RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, skip_legacy_purge=True) as p:
        store = RememberStore(p)
        for user, rest, key in writes:
            if user.startswith("anon:"):
                continue
            store.put(("users", user, *rest), key, {"by": user})
        mine = store.for_user(me)
        for item in mine.search(prefix, limit=1000):
            assert item.namespace[0] != "users" or item.namespace[1] == me
            assert item.value["by"] == me
        for spaces in (mine.list_namespaces(prefix=prefix, limit=1000),
                       mine.list_namespaces(suffix=prefix, limit=1000),
                       mine.list_namespaces(prefix=("*",) + prefix, limit=1000)):
            assert all(ns[0] != "users" or len(ns) < 2 or ns[1] == me for ns in spaces)
