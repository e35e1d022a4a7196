"""Nightly job: summarise each user's memory into one ``summary`` entry, in Redis.

Run it with the Redis and the master secret your application uses::

    export REMEMBER_SECRET=...          # the application's secret (else nothing decrypts)
    python examples/cron_summary.py --redis-url redis://127.0.0.1:6379/0 alice bob

or with ``REDIS_URL`` in the environment instead of ``--redis-url``.  A crontab
line running it at 03:00 every night, with ``/srv/app/env`` exporting
``REMEMBER_SECRET`` and ``REDIS_URL``::

    0 3 * * * . /srv/app/env && python3 /srv/app/cron_summary.py alice bob

For every user named on the command line it reads all of that user's
``user``-scope entries (except a previous ``summary``) and writes ``summary``
(user scope, brand ``state``): the number of entries, the count per brand,
the keys, and the newest update time.  It prints one line per user, e.g.::

    alice: 3 entries (preference=1, state=2) -> summary written
    bob: 0 entries -> summary written
    done: 2 users summarised

and exits 0.  A configuration or store error (no ``REMEMBER_SECRET``, bad
URL, Redis down) prints one line on stderr and exits 1 without writing
anything: the job never invents a secret of its own (it sets
``encryption={"require_secret": True}``), since entries it wrote with one
would be unreadable to the application.  ``--key-prefix`` must match the application's
``key_prefix`` (default ``remember:``); ``--ttl`` gives the summary a lifetime
in seconds so a stopped job leaves no stale summaries.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence

from remember_sync import Identity, RememberError, RememberPlugin

SUMMARY_KEY = "summary"


def summarise(plugin: RememberPlugin, user: str, ttl: int | None) -> str:
    """Write *user*'s summary entry and return the line to print."""
    mem = plugin.accessor(Identity(user_id=user))
    entries = {k: e for k, e in mem.entries(scope="user").items() if k != SUMMARY_KEY}
    brands = Counter(e.brand or "none" for e in entries.values())
    mem.set(
        SUMMARY_KEY,
        {
            "entries": len(entries),
            "by_brand": dict(sorted(brands.items())),
            "keys": sorted(entries),
            "last_updated_at": max((e.updated_at for e in entries.values()), default=None),
            "generated_at": time.time_ns() // 1_000_000,
        },
        scope="user",
        brand="state",
        ttl=ttl,
        metadata={"job": "cron_summary"},
    )
    counts = ", ".join(f"{b}={n}" for b, n in sorted(brands.items()))
    noun = "entry" if len(entries) == 1 else "entries"
    detail = f" ({counts})" if counts else ""
    return f"{user}: {len(entries)} {noun}{detail} -> {SUMMARY_KEY} written"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("users", nargs="+", help="user ids whose memory to summarise")
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL"), help="default: $REDIS_URL"
    )
    parser.add_argument("--key-prefix", default="remember:")
    parser.add_argument("--ttl", type=int, default=None, help="summary lifetime in seconds")
    args = parser.parse_args(argv)
    if not args.redis_url:
        parser.error("give --redis-url or set REDIS_URL")
    try:
        with RememberPlugin.init(
            type="redis",
            config={"url": args.redis_url},
            key_prefix=args.key_prefix,
            # Without the application's secret this job would read nothing and overwrite
            # every summary with one the application cannot read: refuse to start instead.
            encryption={"require_secret": True},
            # The application's processes handle the one-time legacy purge, not a cron job.
            skip_legacy_purge=True,
        ) as plugin:
            for user in args.users:
                print(summarise(plugin, user, args.ttl), flush=True)
    except RememberError as exc:
        print(f"cron_summary: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    print(f"done: {len(args.users)} user{'s' if len(args.users) != 1 else ''} summarised")
    return 0


if __name__ == "__main__":
    sys.exit(main())
