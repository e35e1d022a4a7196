"""A writer for the crash test: audited ``set`` in a loop, printing each returned write."""

from __future__ import annotations

import json
import sys

from remember_sync import Identity, RememberPlugin
from remember_sync.stores.redis import RedisStore
from tests.conftest import TEST_SECRET


def main() -> None:
    url, start, audit = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    plugin = RememberPlugin.init(
        store=RedisStore.from_url(url), encryption={"secrets": [TEST_SECRET]},
        skip_legacy_purge=True, audit=audit,
    )
    mem = plugin.accessor(Identity("s-1", "alice"))
    i = start
    while True:
        mem.set(f"k{i}", i)
        sys.stdout.write(f"{i}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    main()
