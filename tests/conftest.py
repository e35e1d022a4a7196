"""Shared fixtures: an injectable clock, the store matrix, plugin factories.

The store matrix is the list ``STORE_KINDS``; every kind ``k`` has a fixture
named ``<k>_store`` that yields a fresh, empty store (each store's fixtures
live in their own plugin module listed in ``pytest_plugins``).  The store
conformance suite and the accessor suite run unchanged on every kind.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from remember_sync import RememberPlugin
from remember_sync._clock import FakeClock
from remember_sync.stores.base import Store
from remember_sync.stores.memory import MemoryStore

pytest_plugins: list[str] = [
    "tests.fixtures_redis",
    "tests.fixtures_redis_tls",
    "tests.fixtures_kv",
]

#: Every store the conformance and accessor suites run on.
STORE_KINDS: list[str] = ["memory", "redis", "redis_cluster", "vercel_kv"]

TEST_SECRET = "test-secret-0123456789abcdef0123456789"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run the 60 s soak tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _isolated_secret_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No test sees the developer's secrets, writes a secret file into the checkout, or
    leaves a ``serve`` token in the user's config directory (children inherit the env)."""
    for name in (
        "REMEMBER_SECRET",
        "MCP_MEMORY_SECRET",
        "MCP_SESSION_SECRET",
        "REMEMBER_PREVIOUS_SECRETS",
        "REMEMBER_REQUIRE_SECRET",
        "REMEMBER_ENV",
        "NODE_ENV",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture
def memory_store() -> Iterator[Store]:
    # Real time: the cross-store suite polls for expiry as it must on Redis.
    # MemoryStore's own tests drive its expiry with an injected clock.
    store = MemoryStore()
    yield store
    store.close()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(store_kind: str, request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store of every kind in ``STORE_KINDS``."""
    value: Store = request.getfixturevalue(f"{store_kind}_store")
    return value


@pytest.fixture
def make_plugin(
    store: Store, clock: FakeClock
) -> Iterator[Callable[..., RememberPlugin]]:
    """Build plugins over the current test store, with the fake clock and a test secret."""
    made: list[RememberPlugin] = []

    def factory(**options: Any) -> RememberPlugin:
        options.setdefault("store", store)
        options.setdefault("clock", clock)
        options.setdefault("skip_legacy_purge", True)
        encryption = options.setdefault("encryption", {})
        # A fixed test secret unless the test chooses (secrets=None: from the environment).
        if encryption.get("enabled", True) and "custom_key" not in encryption:
            encryption.setdefault("secrets", [TEST_SECRET])
        plugin = RememberPlugin.init(**options)
        made.append(plugin)
        if plugin.index_backfill is not None:
            # The one-time background reindex writes bookkeeping keys: let it finish, so
            # a test's before/after snapshots of the store see the same keys.
            assert plugin.index_backfill.wait(30)
        return plugin

    yield factory
    for plugin in made:
        plugin.close()


@pytest.fixture
def plugin(make_plugin: Callable[..., RememberPlugin]) -> RememberPlugin:
    return make_plugin()


@pytest.fixture
def plugins() -> Iterator[Callable[..., RememberPlugin]]:
    """Build real-clock plugins with the test secret over the store they are given (closed,
    with that store, at the end of the test)."""
    made: list[RememberPlugin] = []

    def factory(**options: Any) -> RememberPlugin:
        options.setdefault("skip_legacy_purge", True)
        options.setdefault("encryption", {"secrets": [TEST_SECRET]})
        plugin = RememberPlugin.init(**options)
        made.append(plugin)
        return plugin

    yield factory
    for plugin in made:
        plugin.close()


def require_component(name: str, available: bool, why: str) -> None:
    """Skip a test whose real component is missing -- or fail under ``CI``.

    CI must never silently skip a store or a server: a missing component there
    is a broken install step.
    """
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{name} is required under CI but is not available: {why}")
    pytest.skip(f"{name} not available: {why}")


def stored_key(plugin: RememberPlugin, key: str, scope: str = "session") -> str:
    """The one storage key holding *key* in *scope*, found through the store's public SCAN.

    ``P + "global:" + key``, or ``P + "v2:" + scope + ":" + <namespace> + ":" + key``
    (SPEC section 4); the listing index's keys end with ``:`` and never match.  The
    test must have written exactly one *key* in *scope*.
    """
    head = f"{plugin.key_prefix}global:" if scope == "global" else f"{plugin.key_prefix}v2:{scope}:"
    found = [k for k in plugin.store.scan(f"{head}*") if k.endswith(f":{key}")]
    assert len(found) == 1, found
    return found[0]


def scan_items(store: Any, pattern: str, **options: Any) -> list[tuple[str, str]]:
    """Every ``(key, value)`` pair of ``store.scan_pages(pattern)``, the pages flattened."""
    return [item for page in store.scan_pages(pattern, **options) for item in page]


def run_threads(target: Callable[[int], object], count: int, timeout: float | None = None) -> None:
    """Run ``target(0)`` ... ``target(count - 1)`` on as many threads; join each (bounded by
    *timeout* seconds when given)."""
    threads = [threading.Thread(target=target, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
