"""Search cost is bounded per query whatever one principal stored, and one principal's
search does not hold up another's.

The crafted vocabulary: 20 entries, about 1.3 MB, of 9-letter words shaped alike
(the same first two and last two letters, or the same first six), searched with 32
unknown words of that shape -- the worst case for prefix and one-typo lookups.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

from remember_sync import Identity, RememberPlugin
from tests.conftest import TEST_SECRET

MALLORY = Identity(session_id="s-mallory", user_id="mallory")
BOB = Identity(session_id="s-bob", user_id="bob")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _word(rng: random.Random, i: int) -> str:
    if i % 2:
        return "ab" + "".join(rng.choices(LETTERS, k=5)) + "yz"
    return "abcdef" + "".join(rng.choices(LETTERS, k=3))


@pytest.fixture(params=["memory", "redis"])
def crafted(request: pytest.FixtureRequest) -> Iterator[RememberPlugin]:
    """A plugin whose store holds Mallory's crafted entries and Bob's one entry."""
    store = request.getfixturevalue(f"{request.param}_store")
    plugin = RememberPlugin.init(store=store, encryption={"secrets": [TEST_SECRET]},
                                 skip_legacy_purge=True, max_value_bytes=1 << 20)
    if plugin.index_backfill is not None:
        assert plugin.index_backfill.wait(30)
    rng = random.Random(7)
    mem = plugin.accessor(MALLORY)
    total = 0
    for n in range(20):
        text = " ".join(_word(rng, i) for i in range(6_550))
        total += len(text)
        mem.set(f"blob{n}", text, scope="user")
    assert total >= 1_300_000
    plugin.accessor(BOB).set("pet", "a tabby cat called Miso", scope="user")
    yield plugin
    plugin.close()


def _query(rng: random.Random) -> str:
    # Unknown words of the stored shape: typo and prefix candidates everywhere.
    return " ".join(_word(rng, i)[:-1] + "q" for i in range(32))


def _timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def test_crafted_vocabulary_search_is_bounded(crafted: RememberPlugin) -> None:
    """32 unknown alike terms over 1.3 MB of alike words: the search's own work (this
    thread's CPU time) under 100 ms, its wall time under 500 ms (medians of 7; the
    machine's load stretches wall time, not work)."""
    mem = crafted.accessor(MALLORY)
    rng = random.Random(1)
    mem.search(_query(rng))  # decrypts and indexes once
    wall, work = [], []
    for _ in range(7):
        query = _query(rng)
        began, began_cpu = time.perf_counter(), time.thread_time()
        mem.search(query)
        work.append(time.thread_time() - began_cpu)
        wall.append(time.perf_counter() - began)
    assert statistics.median(work) < 0.100, work
    assert statistics.median(wall) < 0.500, wall
    # The lookups still work: a one-letter typo and a prefix of a stored word find it.
    word = mem.get("blob0", scope="user").split()[0]
    assert mem.search(word[:4] + "q" + word[5:])
    assert mem.search(word[:7])


def test_other_principal_is_not_held_up(crafted: RememberPlugin) -> None:
    """Bob's one-entry search while Mallory searches her crafted entries in a loop: his
    median time grows by less than 50 ms."""
    mallory, bob = crafted.accessor(MALLORY), crafted.accessor(BOB)
    mallory.search(_query(random.Random(2)))
    alone = [_timed(lambda: bob.search("tabby")) for _ in range(21)]
    stop, begun = threading.Event(), threading.Event()
    searches = 0

    def flood() -> None:
        nonlocal searches
        rng = random.Random(3)
        while not stop.is_set():
            query = _query(rng)
            begun.set()
            mallory.search(query)
            searches += 1

    thread = threading.Thread(target=flood)
    thread.start()
    try:
        together = []
        for _ in range(21):
            begun.clear()
            assert begun.wait(30)  # Mallory's next search has just begun
            together.append(_timed(lambda: bob.search("tabby")))
        assert [h.key for h in bob.search("tabby")] == ["pet"]
    finally:
        stop.set()
        thread.join()
    assert searches > 1
    delay = statistics.median(together) - statistics.median(alone)
    assert delay < 0.050, (round(delay * 1000, 1), alone, together)
