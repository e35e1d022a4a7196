"""One conformance suite for the store protocol, run unchanged on every store kind.

Expiry: the memory store runs on the injected test clock, which jumps; a server expires
keys on its own clock, so the suite waits -- explicitly, for the key to be gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from remember_sync.errors import RememberInputError, RememberInputTypeError
from remember_sync.stores.base import ItemScanner, Store, to_bytes, to_text
from remember_sync.stores.memory import MemoryStore
from tests.conftest import FakeClock, scan_items

#: Expire(key, ttl_ms): let *key*, written with *ttl_ms*, expire; fail if it does not.
Expire = Callable[[str, int], None]


@pytest.fixture
def memory_store(clock: FakeClock) -> Iterator[Store]:
    """The memory store of this suite: on the test clock (see ``expire``)."""
    store = MemoryStore(clock=clock)
    yield store
    store.close()


@pytest.fixture
def expire(store: Store, store_kind: str, clock: FakeClock) -> Expire:
    """Let a key's TTL run out: the memory store's clock jumps, a server's is waited for."""

    def run_out(key: str, ttl_ms: int) -> None:
        if store_kind == "memory":
            clock.advance(ms=ttl_ms)
            assert store.get(key) is None
            return
        deadline = time.monotonic() + 5 + ttl_ms / 1000
        while store.get(key) is not None:
            assert time.monotonic() < deadline, f"{key} outlived its TTL of {ttl_ms} ms by 5 s"
            time.sleep(0.005)

    return run_out


def test_get_missing_returns_none(store: Store) -> None:
    """A key never written reads as None."""
    assert store.get("t:missing") is None


def test_set_then_get_round_trips_any_text(store: Store) -> None:
    """Values are opaque strings returned byte-for-byte, unicode and JSON included."""
    value = '{"alg":"A256GCM","x":"h\u00e9llo \u2713 \U0001f389 \\n \\"q\\""}\x01\x7f'
    assert store.set("t:k", value) is True
    assert store.get("t:k") == value


def test_set_overwrites(store: Store) -> None:
    """A second set replaces the first value."""
    store.set("t:k", "a")
    store.set("t:k", "b")
    assert store.get("t:k") == "b"


def test_set_without_ttl_clears_previous_ttl(store: Store, expire: Expire) -> None:
    """set() without ttl_ms removes an earlier expiry."""
    store.set("t:k", "a", ttl_ms=50)
    store.set("t:probe", "p", ttl_ms=50)  # expires no sooner than the first t:k would
    store.set("t:k", "b")
    expire("t:probe", 50)
    assert store.get("t:k") == "b"


def test_ttl_expires_key(store: Store, expire: Expire) -> None:
    """A key written with ttl_ms disappears from get, get_many and scan."""
    store.set("t:short", "v", ttl_ms=30)
    store.set("t:long", "v", ttl_ms=60_000)
    expire("t:short", 30)
    assert store.get_many(["t:short", "t:long"]) == [None, "v"]
    assert sorted(store.scan("t:*")) == ["t:long"]


def test_only_if_absent(store: Store) -> None:
    """only_if_absent writes once and never overwrites."""
    assert store.set("t:marker", "first", only_if_absent=True) is True
    assert store.set("t:marker", "second", only_if_absent=True) is False
    assert store.get("t:marker") == "first"


def test_get_many_keeps_order_and_marks_missing(store: Store) -> None:
    """get_many returns values in the order asked, None where absent."""
    store.set("t:a", "1")
    store.set("t:c", "3")
    assert store.get_many(["t:c", "t:b", "t:a"]) == ["3", None, "1"]
    assert store.get_many([]) == []


def test_get_many_across_many_keys(store: Store) -> None:
    """get_many over hundreds of keys (several cluster slots) is complete and ordered."""
    keys = [f"t:many:{i}" for i in range(300)]
    for i, key in enumerate(keys):
        store.set(key, str(i))
    asked = keys[::-1] + ["t:many:absent"]
    assert store.get_many(asked) == [str(i) for i in range(299, -1, -1)] + [None]


def test_compare_and_set_replaces_only_expected_value(store: Store) -> None:
    """CAS writes when the current value equals expected, and only then."""
    store.set("t:k", "old")
    assert store.compare_and_set("t:k", "other", "new") is False
    assert store.get("t:k") == "old"
    assert store.compare_and_set("t:k", "old", "new") is True
    assert store.get("t:k") == "new"


def test_compare_and_set_on_absent_key_writes_nothing(store: Store) -> None:
    """CAS never creates a key (an update cannot resurrect a forgotten entry)."""
    assert store.compare_and_set("t:gone", "x", "y") is False
    assert store.get("t:gone") is None


def test_compare_and_set_applies_ttl(store: Store, expire: Expire) -> None:
    """CAS with ttl_ms sets the new expiry; without it the key persists."""
    store.set("t:k", "a", ttl_ms=60_000)
    assert store.compare_and_set("t:k", "a", "b", ttl_ms=30) is True
    expire("t:k", 30)
    store.set("t:p", "a", ttl_ms=50)
    store.set("t:probe", "p", ttl_ms=50)  # expires no sooner than the first t:p would
    assert store.compare_and_set("t:p", "a", "b") is True
    expire("t:probe", 50)
    assert store.get("t:p") == "b"


def test_delete_counts_existing_keys(store: Store) -> None:
    """delete returns how many of the keys existed."""
    store.set("t:a", "1")
    store.set("t:b", "2")
    assert store.delete("t:a", "t:b", "t:none") == 2
    assert store.delete("t:a") == 0
    assert store.delete() == 0
    assert store.get("t:a") is None


def test_scan_matches_glob_and_yields_each_key_once(store: Store) -> None:
    """scan covers every matching key exactly once, over thousands of keys."""
    wanted = {f"ns:a:{i}" for i in range(2500)}
    for key in wanted:
        store.set(key, "v")
    for i in range(300):
        store.set(f"ns:b:{i}", "v")
    found = list(store.scan("ns:a:*"))
    assert len(found) == len(wanted)
    assert set(found) == wanted


def test_scan_question_mark_and_escapes(store: Store) -> None:
    """`?` matches one character; escaped `*`, `?`, `[`, `]`, `\\` match only themselves."""
    for key in ["p:ab", "p:abc", "p:a*", "p:a?", "p:a[x]", "p:a\\", "p:aX"]:
        store.set(key, "v")
    assert sorted(store.scan("p:a?")) == sorted(["p:ab", "p:a*", "p:a?", "p:a\\", "p:aX"])
    assert list(store.scan("p:a\\*")) == ["p:a*"]
    assert list(store.scan("p:a\\?")) == ["p:a?"]
    assert list(store.scan("p:a\\[x\\]")) == ["p:a[x]"]
    assert list(store.scan("p:a\\\\")) == ["p:a\\"]


def test_scan_handles_unicode_and_separators(store: Store) -> None:
    """Keys with colons, slashes, spaces and non-ASCII text scan as written."""
    keys = ["u:v2:user:a%3Ab:x:y/\u00fc", "u:v2:user:a%3Ab:with space", "u:v2:user:a%3Ab:\u2713"]
    for key in keys:
        store.set(key, "v")
    assert sorted(store.scan("u:v2:user:a%3Ab:*")) == sorted(keys)


def test_compare_and_set_is_atomic_under_threads(store: Store) -> None:
    """Concurrent CAS increments never lose an update."""
    store.set("t:counter", "0")
    per_thread, threads = 50, 4

    def worker() -> None:
        done = 0
        while done < per_thread:
            current = store.get("t:counter")
            assert current is not None
            if store.compare_and_set("t:counter", current, str(int(current) + 1)):
                done += 1

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert store.get("t:counter") == str(per_thread * threads)


def test_store_rejects_nothing_it_should_accept_empty_value(store: Store) -> None:
    """An empty string is a value, distinct from absence."""
    store.set("t:empty", "")
    assert store.get("t:empty") == ""
    assert store.get_many(["t:empty"]) == [""]


@pytest.mark.parametrize("count", [1, 10])
def test_scan_count_hint_does_not_change_results(store: Store, count: int) -> None:
    """The count hint affects round trips only, never which keys come back."""
    for i in range(25):
        store.set(f"c:{i}", "v")
    assert sorted(store.scan("c:*", count=count)) == sorted(f"c:{i}" for i in range(25))


# -- the optional ItemScanner capability (every built-in store has it) -----------------------


def test_every_built_in_store_scans_items(store: Store) -> None:
    """Memory, Redis, Redis Cluster and Vercel KV all offer keys and values in one pass."""
    assert isinstance(store, ItemScanner)


def test_scan_pages_yields_each_matching_key_once_with_its_value(store: Store) -> None:
    """scan_pages == scan + get_many, over thousands of keys, with the glob rules of scan."""
    assert isinstance(store, ItemScanner)
    wanted = {f"ns:a:{i}": f"value {i} \u2713 \"quoted\"" for i in range(2500)}
    for key, value in wanted.items():
        store.set(key, value)
    for i in range(300):
        store.set(f"ns:b:{i}", "other")
    store.set("ns:a:empty", "")
    wanted["ns:a:empty"] = ""
    found = list(scan_items(store, "ns:a:*"))
    assert len(found) == len(wanted)
    assert dict(found) == wanted
    assert sorted(scan_items(store, "ns:a:1?")) == sorted(
        (f"ns:a:{i}", wanted[f"ns:a:{i}"]) for i in range(10, 20)
    )
    assert list(scan_items(store, "ns:a\\*")) == []


@pytest.mark.parametrize("count", [1, 7])
def test_scan_pages_count_hint_and_expiry(store: Store, count: int, expire: Expire) -> None:
    """Small pages give the same items; expired and deleted keys are left out."""
    assert isinstance(store, ItemScanner)
    for i in range(25):
        store.set(f"c:{i}", str(i))
    store.set("c:gone", "x", ttl_ms=1)
    store.set("c:deleted", "x")
    store.delete("c:deleted")
    expire("c:gone", 1)
    items = list(scan_items(store, "c:*", count=count))
    assert sorted(items) == sorted((f"c:{i}", str(i)) for i in range(25))
    with pytest.raises(RememberInputError):  # at the call, before any iteration
        store.scan_pages("c:*", count=0)
    pages = list(store.scan_pages("c:*", count=count))
    assert all(type(page) is list and page for page in pages)


# -- the contract's argument checks (stores/base.py), the same on every store ------------------

#: Each call breaks the contract in one argument; every store refuses it with this error.
INVALID_CALLS: list[tuple[str, Callable[[Store], object], type[Exception]]] = [
    *(
        (f"set ttl_ms={bad!r}", lambda s, b=bad: s.set("t:k", "v", ttl_ms=b), RememberInputError)
        for bad in (0, -5, 2.5, True, "5")
    ),
    *(
        (
            f"compare_and_set ttl_ms={bad!r}",
            lambda s, b=bad: s.compare_and_set("t:old", "old", "v", ttl_ms=b),
            RememberInputError,
        )
        for bad in (0, -5, 2.5, True, "5")
    ),
    *(
        (f"set key={bad!r}", lambda s, b=bad: s.set(b, "v"), RememberInputTypeError)
        for bad in (5, None, b"t:k", ["t:k"])
    ),
    *(
        (f"set value={bad!r}", lambda s, b=bad: s.set("t:k", b), RememberInputTypeError)
        for bad in (5, None, b"v", {"v": 1})
    ),
    ("set key lone surrogate", lambda s: s.set("t:\ud800", "v"), RememberInputError),
    ("set value lone surrogate", lambda s: s.set("t:k", "v\ud800"), RememberInputError),
    ("compare_and_set key=5", lambda s: s.compare_and_set(5, "old", "v"), RememberInputTypeError),
    (
        "compare_and_set expected=None",
        lambda s: s.compare_and_set("t:old", None, "v"),
        RememberInputTypeError,
    ),
    (
        "compare_and_set value=b'v'",
        lambda s: s.compare_and_set("t:old", "old", b"v"),
        RememberInputTypeError,
    ),
    ("get key=5", lambda s: s.get(5), RememberInputTypeError),
    ("get key=b't:old'", lambda s: s.get(b"t:old"), RememberInputTypeError),
    ("get key lone surrogate", lambda s: s.get("t:\ud800"), RememberInputError),
    ("get_many of a str", lambda s: s.get_many("t:old"), RememberInputTypeError),
    ("get_many key=None", lambda s: s.get_many(["t:old", None]), RememberInputTypeError),
    ("delete key=5", lambda s: s.delete("t:old", 5), RememberInputTypeError),
    ("delete key lone surrogate", lambda s: s.delete("t:\ud800"), RememberInputError),
    ("scan pattern=5", lambda s: s.scan(5), RememberInputTypeError),
    *(
        (f"scan count={bad!r}", lambda s, b=bad: s.scan("t:*", count=b), RememberInputError)
        for bad in (0, -1, 2.5, True, "10")
    ),
    ("scan_pages pattern=None", lambda s: s.scan_pages(None), RememberInputTypeError),
    ("scan_pages count=0", lambda s: s.scan_pages("t:*", count=0), RememberInputError),
]


@pytest.mark.parametrize(
    ("call", "error"), [c[1:] for c in INVALID_CALLS], ids=[c[0] for c in INVALID_CALLS]
)
def test_invalid_arguments_raise_the_same_error_and_write_nothing(
    store: Store, call: Callable[[Store], object], error: type[Exception]
) -> None:
    """Every store checks the contract's arguments alike, at the call, before any I/O."""
    store.set("t:old", "old")
    with pytest.raises(error):
        call(store)
    assert sorted(store.scan("*")) == ["t:old"]
    assert store.get("t:old") == "old"


# -- bytes that are not UTF-8: one lossless rule ---------------------------------------------

#: The fixture holding each store's raw client (``None``: the store is the only way in).
RAW_CLIENTS = {
    "memory": None,
    "redis": "redis_client",
    "redis_cluster": "redis_cluster_client",
    "vercel_kv": "kv_redis",
}


def test_bytes_that_are_not_utf8_read_back_losslessly(
    store: Store, store_kind: str, request: pytest.FixtureRequest
) -> None:
    """Foreign bytes read as text that encodes back to the same bytes (surrogateescape)."""
    written = {b"t:plain": b"v\x80\xff(", b"t:\xff\xfe": b"x"}
    raw_client = RAW_CLIENTS[store_kind]
    for raw_key, raw_value in written.items():
        if raw_client is None:
            store.set(to_text(raw_key), to_text(raw_value))
        else:
            request.getfixturevalue(raw_client).set(raw_key, raw_value)
    keys = sorted(store.scan("t:*"))
    assert [to_bytes(k) for k in keys] == sorted(written)
    assert to_bytes(store.get("t:plain") or "") == b"v\x80\xff("
    assert [to_bytes(v or "") for v in store.get_many(["t:plain"])] == [b"v\x80\xff("]
    pairs = scan_items(store, "t:*")
    assert sorted((to_bytes(k), to_bytes(v)) for k, v in pairs) == sorted(written.items())
    foreign = to_text(b"t:\xff\xfe")  # "t:\udcff\udcfe", as scan yielded it
    if store_kind == "vercel_kv":
        # The REST API's JSON carries Unicode text only: such a key is read, never addressed.
        with pytest.raises(RememberInputError, match="not UTF-8"):
            store.delete(foreign)
    else:
        assert store.get(foreign) == "x"
        assert store.delete(foreign) == 1
