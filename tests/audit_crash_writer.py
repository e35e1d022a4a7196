"""A writer for the crash test: audited ``set`` in a loop, printing each returned write.

Arguments: the store (``redis`` or ``kv``), its URL, the first key's number, the
``audit`` option as JSON, and the lease of its intents in milliseconds.
"""

from __future__ import annotations

import json
import sys

from remember_sync import Identity, RememberPlugin
from remember_sync.stores.base import Store
from remember_sync.stores.redis import RedisStore
from remember_sync.stores.vercel_kv import VercelKVStore
from tests.conftest import TEST_SECRET
from tests.fixtures_kv import KV_TEST_TOKEN


def crash_store(kind: str, url: str) -> Store:
    """The store the crash test names: ``redis`` (a URL, cluster ones too) or ``kv``."""
    if kind == "kv":
        return VercelKVStore(url, KV_TEST_TOKEN, environ={})
    return RedisStore.from_url(url)


def main() -> None:
    kind, url, start, audit = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    plugin = RememberPlugin.init(
        store=crash_store(kind, url), encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True, audit=audit,
    )
    assert plugin.audit is not None
    plugin.audit._lease_ms = int(sys.argv[5])  # a short lease: the test recovers sooner
    mem = plugin.accessor(Identity("s-1", "alice"))
    i = start
    while True:
        mem.set(f"k{i}", i)
        sys.stdout.write(f"{i}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    main()
