"""Search never returns an entry that ``get`` would not return, whichever process changed it.

Process A searches (so its per-process cache holds decrypted entries); process B --
a real second Python process on the same Redis or Vercel KV store, same secret --
forgets, replaces, erases or rewrites with a short TTL; A's next search agrees with
A's ``get`` and ``list``.  A Hypothesis property interleaves two plugins (separate
caches, one store) over every operation with an injected clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remember_sync import Identity, RememberPlugin
from remember_sync._clock import FakeClock
from remember_sync.stores.memory import MemoryStore
from tests.conftest import TEST_SECRET

ALICE = Identity(session_id="s-alice", user_id="alice")
ROOT = Path(__file__).resolve().parent.parent

# The second process: opens the same store and runs the operations it is given.
_CHILD = """
import json, sys
from remember_sync import Identity, RememberPlugin
where, ops = json.loads(sys.argv[1])
if where["kind"] == "redis":
    plugin = RememberPlugin.init(type="redis", config={"url": where["url"]},
                                 encryption={"secrets": [where["secret"]]},
                                 skip_legacy_purge=True)
else:
    from remember_sync.stores.vercel_kv import VercelKVStore
    plugin = RememberPlugin.init(store=VercelKVStore(where["url"], where["token"], environ={}),
                                 encryption={"secrets": [where["secret"]]},
                                 skip_legacy_purge=True)
mem = plugin.accessor(Identity(session_id="s-alice", user_id="alice"))
for op, *args in ops:
    if op == "erase":
        plugin.erase(user_id=args[0])
    elif op == "set":
        mem.set(args[0], args[1], scope="user", ttl=args[2])
    else:
        getattr(mem, op)(*args, scope="user")
plugin.close()
"""


@pytest.fixture(params=["redis", "vercel_kv"])
def shared(request: pytest.FixtureRequest) -> Iterator[tuple[RememberPlugin, Callable[..., None]]]:
    """Process A's plugin (real clock) and a function running operations in process B."""
    store = request.getfixturevalue(f"{request.param}_store")
    if request.param == "redis":
        where: dict[str, Any] = {"kind": "redis", "url": request.getfixturevalue("redis_url")}
    else:
        from tests.fixtures_kv import KV_TEST_TOKEN  # noqa: PLC0415

        where = {"kind": "kv", "url": request.getfixturevalue("kv_emulator").url,
                 "token": KV_TEST_TOKEN}
    where["secret"] = TEST_SECRET
    plugin = RememberPlugin.init(store=store, encryption={"secrets": [TEST_SECRET]},
                                 skip_legacy_purge=True)
    if plugin.index_backfill is not None:
        assert plugin.index_backfill.wait(30)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def other_process(*ops: list[Any]) -> None:
        subprocess.run([sys.executable, "-c", _CHILD, json.dumps([where, list(ops)])],
                       check=True, timeout=120, env=env)

    yield plugin, other_process
    plugin.close()


def _agrees_with_get(plugin: RememberPlugin, query: str) -> list[str]:
    """A's search hits, each checked against A's ``get`` and ``list`` at that moment."""
    mem = plugin.accessor(ALICE)
    found = [h.key for h in mem.search(query, limit=50)]
    listed = set(mem.list(scope="user"))
    for key in found:
        assert key in listed, (key, listed)
        assert mem.get(key, scope="user") is not None, key
    return sorted(found)


def test_forget_and_replace_in_another_process(shared: Any) -> None:
    """The issue's reproduction: B's forget (the listed count unchanged) is seen by A."""
    plugin, other_process = shared
    mem = plugin.accessor(ALICE)
    mem.set("k-old", "old marimba note", scope="user")
    mem.set("k-upd", "plain note", scope="user")
    assert _agrees_with_get(plugin, "marimba") == ["k-old"]
    other_process(["forget", "k-old"], ["set", "k-new", "new marimba tune", None],
                  ["update", "k-upd", "marimba remix"])
    assert mem.get("k-old", scope="user") is None
    assert _agrees_with_get(plugin, "marimba") == ["k-new", "k-upd"]


def test_erase_in_another_process(shared: Any) -> None:
    """Six entries erased by B (and one written back) never come back through A's search."""
    plugin, other_process = shared
    mem = plugin.accessor(ALICE)
    for i in range(6):
        mem.set(f"e{i}", f"erased marimba {i}", scope="user")
    assert len(_agrees_with_get(plugin, "marimba")) == 6
    other_process(["erase", "alice"], ["set", "after", "marimba after erasure", None])
    assert _agrees_with_get(plugin, "marimba") == ["after"]


def test_short_ttl_rewrite_in_another_process_expires(shared: Any) -> None:
    """B rewrites a cached entry with a one-second TTL: once ``get`` misses it, so does search."""
    plugin, other_process = shared
    mem = plugin.accessor(ALICE)
    mem.set("brief", "marimba lesson", scope="user")
    mem.set("stays", "marimba concert", scope="user")
    assert _agrees_with_get(plugin, "marimba") == ["brief", "stays"]
    other_process(["set", "brief", "marimba lesson moved", 1])
    deadline = time.monotonic() + 10
    while mem.get("brief", scope="user") is not None:  # the TTL runs out (real time)
        assert time.monotonic() < deadline, "the one-second TTL never ran out"
        time.sleep(0.05)
    assert _agrees_with_get(plugin, "marimba") == ["stays"]


# -- the property: two plugins, separate caches, one store, an injected clock ---------------

_KEYS = ["alpha", "beta", "gamma"]
_WORDS = ["marimba", "violin"]
_op = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 1), st.sampled_from(_KEYS),
              st.sampled_from(_WORDS), st.sampled_from([None, 1, 5])),
    st.tuples(st.just("update"), st.integers(0, 1), st.sampled_from(_KEYS),
              st.sampled_from(_WORDS)),
    st.tuples(st.just("forget"), st.integers(0, 1), st.sampled_from(_KEYS)),
    st.tuples(st.just("erase"), st.integers(0, 1)),
    st.tuples(st.just("tick"), st.sampled_from([500, 1_000, 3_000])),
    st.tuples(st.just("search"), st.integers(0, 1), st.sampled_from(_WORDS)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_op, min_size=1, max_size=25))
def test_two_plugins_interleaved_search_agrees_with_get(ops: list[tuple[Any, ...]]) -> None:
    """Every hit of either plugin's search is an entry its ``get`` returns at that moment,
    and every live entry holding the word is found."""
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    plugins = [RememberPlugin.init(store=store, clock=clock, skip_legacy_purge=True,
                                   encryption={"secrets": [TEST_SECRET]}) for _ in range(2)]
    try:
        mems = [p.accessor(ALICE) for p in plugins]
        for op in [*ops, ("search", 0, "marimba"), ("search", 1, "violin")]:
            kind = op[0]
            if kind == "set":
                mems[op[1]].set(op[2], f"a {op[3]} note", scope="user", ttl=op[4])
            elif kind == "update":
                mems[op[1]].update(op[2], f"an {op[3]} update", scope="user")
            elif kind == "forget":
                mems[op[1]].forget(op[2], scope="user")
            elif kind == "erase":
                plugins[op[1]].erase(user_id="alice")
            elif kind == "tick":
                clock.advance(op[1])
            else:
                mem = mems[op[1]]
                hits = {h.key: h.entry.value for h in mem.search(op[2], limit=10)}
                live = {k: mem.get(k, scope="user") for k in _KEYS}
                assert hits == {k: v for k, v in live.items()
                                if v is not None and op[2] in v}, (hits, live)
    finally:
        for p in plugins:
            p.close()
