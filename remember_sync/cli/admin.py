"""The store-wide commands.

``secret``, ``stats``, ``doctor``, ``rotate``, ``reindex``, ``purge-legacy``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import RememberConfigurationError, RememberError
from . import _common
from ._parser import Commands, _non_negative_int

if TYPE_CHECKING:
    from .._ops.embed import EmbedResult
    from .._ops.rotate import RotateResult


def add_secret_command(c: Commands) -> None:
    """``secret generate``."""
    secret = c.add("secret", None, "master-secret helpers", [],
                   description="Master-secret helpers.")
    actions = secret.add_subparsers(dest="secret_command", metavar="ACTION", title="actions")
    c.add("generate", _cmd_secret_generate,
          "print a new master secret (base64url of 32 random bytes)", [], subs=actions,
          description="Print a new master secret: base64url of 32 random bytes. Put it in "
          "REMEMBER_SECRET; when replacing one, move the old one to REMEMBER_PREVIOUS_SECRETS "
          "and run `remember-sync rotate`.")


def add_inspect_commands(c: Commands) -> None:
    """``stats``, ``doctor``."""
    add, store, reads, as_json = c.add, c.store, c.reads, c.as_json
    add("stats", _cmd_stats, "count entries by scope and brand, bytes, expiry, problems",
        [store, reads, as_json], needs_store=True,
        description="Walk the whole store under the prefix and count: entries by scope and "
        "brand, stored bytes, entries expiring within an hour, entries sealed by a previous "
        "secret, unreadable entries, legacy (pre-v2) keys.")

    p = add("doctor", _cmd_doctor, "check secret, store, layout marker, legacy keys, entries",
            [store, reads, as_json],
            description="Check the secret source (never printing a secret), store reachability "
            "and round-trip latency (a probe key is written, read and deleted), the layout "
            "marker and purge window, legacy keys and unreadable entries. Exit code 1 when "
            "something needs attention. Without a store option it checks the secret only "
            "(the in-memory store is empty).")
    p.add_argument("--legacy-purge-delay-ms", type=_non_negative_int, default=86_400_000,
                   metavar="MS", help="the application's legacy_purge_delay_ms "
                   "(default: %(default)s)")


def add_maintenance_commands(c: Commands) -> None:
    """``rotate``, ``reindex``, ``purge-legacy``."""
    add, store, writes, as_json = c.add, c.store, c.writes, c.as_json
    p = add("rotate", _cmd_rotate, "re-encrypt every entry under the first secret",
            [store, writes, as_json], needs_store=True,
            description="Re-encrypt every entry under the first configured secret "
            "(REMEMBER_SECRET=new, REMEMBER_PREVIOUS_SECRETS=old). Idempotent and resumable: "
            "entries already current are skipped. Writes are compare-and-set, so a concurrent "
            "update is never lost; deadlines are kept. Exit code 1 when some entries could not "
            "be read (they are listed) or kept changing.")
    p.add_argument("--dry-run", action="store_true", help="only count what would be rotated")

    p = add("reindex", _cmd_reindex, "builds/repairs the per-namespace listing index",
            [store, writes, as_json], needs_store=True,
            description="Walk the store under the prefix once and put every entry into its "
            "namespace's listing index (entries written by FrontMCP 1.8.0, by releases before "
            "the index, or by a plugin with listing='scan' are in none), then record that the "
            "fleet is indexed: plugins then list each namespace without scanning the database. "
            "Idempotent and safe beside running applications. Values are not read, so the "
            "index is rebuilt without any secret.\n\nWith --embeddings it also seals a search "
            "vector into every entry that has none for the model; only that reads values, so "
            "the secret options and the secret sources below are for --embeddings (with "
            "--embedder).")
    p.add_argument("--embeddings", action="store_true",
                   help="also embed entries for search (see docs/search.rst)")
    p.add_argument("--embedder", metavar="MODULE:NAME",
                   help="the embedder the application configures as search={'embedder': ...}; "
                   "a class is instantiated without arguments")
    p.add_argument("--model", metavar="NAME",
                   help="the application's search={'model': ...}, if it sets one")

    p = add("purge-legacy", _cmd_purge_legacy,
            "delete pre-v2 keys now, without waiting for the purge window",
            [store, as_json], needs_store=True,
            description="Delete the pre-v2 entries (P+'session:*', P+'tool:*', P+'user:*') now, "
            "ignoring the purge window. Only keys whose value is a legacy entry of this plugin "
            "go; hashes, sets, lists, other strings and keys of a nested deployment are kept "
            "(and counted). A prefix inside another deployment's layout (a segment v2, global, "
            "session, tool or user) is refused. Asks for confirmation on a terminal; --yes for "
            "cron.")
    p.add_argument("--dry-run", action="store_true", help="only count, delete nothing")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _cmd_secret_generate(args: argparse.Namespace) -> int:
    from .._secrets import generate_secret

    sys.stdout.write(generate_secret() + "\n")
    return _common.EXIT_OK


def _counts(mapping: dict[str, int]) -> str:
    return "  ".join(f"{k} {v}" for k, v in mapping.items()) or "-"


def _cmd_stats(args: argparse.Namespace) -> int:
    from .._ops.context import describe_store
    from .._ops.inspect import collect_stats

    with _common._opened(args) as opened:
        core = opened.core
        stats = collect_stats(
            core.store, core.prefix, core.codec, now=core.clock(),
            progress_stream=_common._progress_stream(),
            read_doubled_prefix=core.read_doubled_prefix,
        )
    # Work left undone: entries that could not be read, or a layout not read at all.
    code = _common.EXIT_FAIL if stats.unreadable or stats.doubled_unread else _common.EXIT_OK
    if args.json:
        data = stats.to_dict()
        data.pop("undecoded")
        _common._print_json({"store": describe_store(args.store_choice), **data})
        return code
    out = sys.stdout.write
    out(f"store:   {describe_store(args.store_choice)}   prefix: {stats.prefix!r}\n")
    out(f"keys under the prefix:       {stats.keys}\n")
    out(f"entries (readable, live):    {stats.entries}\n")
    out(f"  by scope:                  {_counts(stats.by_scope)}\n")
    out(f"  by brand:                  {_counts(stats.by_brand)}\n")
    out(f"  expiring within an hour:   {stats.expiring_within_hour}\n")
    out(f"  without expiry:            {stats.without_expiry}\n")
    out(f"  sealed by an older secret: {stats.stale}\n")
    out(f"stored bytes:                values {stats.value_bytes:,}  keys {stats.key_bytes:,}\n")
    line = f"unreadable entries:          {stats.unreadable}"
    if stats.unreadable:
        line += f"  ({_common._listed(stats.unreadable_keys, stats.unreadable)})"
    out(line + "\n")
    out(f"legacy (pre-v2) keys:        {stats.legacy}\n")
    out(f"layout marker:               {'present' if stats.marker else 'absent'}\n")
    out(f"other keys:                  {stats.other}\n")
    line = f"doubled-prefix (1.8.0) keys: {stats.doubled}"
    if stats.doubled_unread:
        line += f"  ({stats.doubled_unread} not read: pass --read-doubled-prefix if the app does)"
    elif stats.shadowed:
        line += f"  ({stats.shadowed} shadowed by their single-layout twin)"
    out(line + "\n")
    out(f"unbound (1.8.0) envelopes:   {stats.unbound}\n")
    return code


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .._clock import system_clock
    from .._ops.context import SecretChoice, build_plugin, describe_store, open_store
    from .._ops.inspect import Check, run_doctor, secret_check

    choice = args.store_choice
    store = open_store(choice)
    try:
        try:
            opened = build_plugin(
                store,
                prefix=args.prefix,
                secrets=SecretChoice(encryption=not args.plaintext, secret_file=args.secret_file),
                read_doubled_prefix=args.read_doubled_prefix,
                audit=False,  # doctor writes nothing
            )
        except RememberError as exc:
            # Still check the store: "no secret" and "no store" are worth knowing together.
            secret = Check("secret", "attention", _common._redact(exc.message, args.secrets))
            codec, now = None, system_clock()
        else:
            secret = secret_check(opened.secret_summary())
            codec, now = opened.core.codec, opened.core.clock()
            opened.plugin.close()  # it does not own the store; nothing of it is needed below
        checks = run_doctor(
            store,
            args.prefix,
            secret=secret,
            codec=codec,
            now=now,
            delay_ms=args.legacy_purge_delay_ms,
            memory=choice.kind == "memory",
            progress_stream=_common._progress_stream(),
            read_doubled_prefix=args.read_doubled_prefix,
        )
    finally:
        store.close()
    attention = [c.name for c in checks if c.status == "attention"]
    if args.json:
        _common._print_json(
            {
                "store": describe_store(choice),
                "prefix": args.prefix,
                "healthy": not attention,
                "checks": [
                    {"name": c.name, "status": c.status, "message": c.message, **c.detail}
                    for c in checks
                ],
            }
        )
    else:
        sys.stdout.write(f"store: {describe_store(choice)}   prefix: {args.prefix!r}\n")
        for c in checks:
            sys.stdout.write(f"[{c.status}]".ljust(12) + f"{c.name:<8} {c.message}\n")
        if attention:
            sys.stdout.write(f"needs attention: {', '.join(attention)}\n")
        else:
            sys.stdout.write("all good\n")
    return _common.EXIT_FAIL if attention else _common.EXIT_OK


def _cmd_rotate(args: argparse.Namespace) -> int:
    from .._ops.rotate import rotate
    from .integrity import manifests_kept

    with _common._opened(args, writes=True) as opened, manifests_kept(opened, args.prefix):
        result = rotate(opened.core, dry_run=args.dry_run,
                        progress_stream=_common._progress_stream())
    if args.json:
        _common._print_json(result.to_dict())
    else:
        verb = "would re-encrypt" if args.dry_run else "re-encrypted"
        sys.stdout.write(
            f"{verb} {result.rotated} of {result.examined} entries; {result.current} already "
            f"current, {result.expired} expired, {result.vanished} gone meanwhile\n"
        )
        _report_left(result, "run rotate again")
        if result.moved or result.shadowed:
            sys.stdout.write(
                f"{'would move' if args.dry_run else 'moved'} {result.moved} doubled-prefix "
                f"(1.8.0) entries into the single layout; {result.shadowed} shadowed by "
                "their single-layout twin (re-sealed in place, never deleted)\n"
            )
        if result.rewrapped or result.keys_unreadable:
            sys.stdout.write(
                f"{'would rewrap' if args.dry_run else 'rewrapped'} {result.rewrapped} subject "
                f"keys in the keystore; {result.keys_unreadable} key records no configured "
                "secret opens (left untouched)\n"
            )
        if result.doubled_unread:
            sys.stdout.write(
                f"did NOT read {result.doubled_unread} keys in 1.8.0's doubled-prefix layout: "
                "if the application reads them (read_doubled_prefix=True), run again with "
                "--read-doubled-prefix before dropping the old secret\n"
            )
    return _common.EXIT_OK if result.complete else _common.EXIT_FAIL


def _confirm(question: str) -> bool:
    sys.stderr.write(question + " [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _cmd_reindex(args: argparse.Namespace) -> int:
    from .._ops.context import open_store
    from .._ops.reindex import reindex

    if args.embeddings or args.embedder:
        return _cmd_embed(args)

    store = open_store(args.store_choice)
    try:
        result = reindex(store, args.prefix, progress_stream=_common._progress_stream())
    finally:
        store.close()
    if args.json:
        _common._print_json(
            {
                "keys": result.keys,
                "entries": result.entries,
                "indexed": result.indexed,
                "pruned": result.pruned,
                "seconds": round(result.seconds, 3),
                "keys_per_second": round(result.rate),
            }
        )
    else:
        sys.stdout.write(
            f"indexed {result.indexed} of {result.entries} entries ({result.keys} keys under "
            f"prefix {args.prefix!r}) in {result.seconds:.1f} s, {result.rate:,.0f} entries/s; "
            f"pruned {result.pruned} index members whose entry was gone\n"
        )
    return _common.EXIT_OK


def _cmd_embed(args: argparse.Namespace) -> int:
    from .._ops.embed import embed_entries, embedder_settings

    if not (args.embeddings and args.embedder):
        raise RememberConfigurationError("--embeddings and --embedder go together")
    settings = embedder_settings(args.embedder, args.model)
    with _common._opened(args, writes=True) as opened:
        result = embed_entries(opened.core, settings, progress_stream=_common._progress_stream())
    if args.json:
        _common._print_json(result.to_dict())
    else:
        sys.stdout.write(
            f"embedded {result.embedded} of {result.examined} entries; {result.current} "
            f"already embedded, {result.expired} expired\n"
        )
        _report_left(result, "run again")
    return _common.EXIT_OK if not (result.unreadable or result.contended) else _common.EXIT_FAIL


def _report_left(result: RotateResult | EmbedResult, again: str) -> None:
    """The entries a pass over the store left alone: unreadable, or changing under it."""
    _common._report_keys(result.unreadable, result.unreadable_keys,
                         f"could not read {result.unreadable} entries (left untouched): ")
    _common._report_keys(result.contended, result.contended_keys,
                         f"{result.contended} entries kept changing; {again}: ")


def _cmd_purge_legacy(args: argparse.Namespace) -> int:
    from .._ops.context import describe_store, open_store
    from .._purge import sweep_legacy

    store = open_store(args.store_choice)
    try:
        counted = sweep_legacy(store, args.prefix, dry_run=True)
        if args.dry_run or counted.found == 0:
            result = counted
        else:
            if not args.yes and not _confirm(
                f"Delete {counted.found} legacy (pre-v2) entries under prefix {args.prefix!r} "
                f"from {describe_store(args.store_choice)}?"
            ):
                _common._stderr("aborted: nothing deleted")
                return _common.EXIT_FAIL
            result = sweep_legacy(store, args.prefix)
    finally:
        store.close()
    if args.json:
        _common._print_json(
            {
                "found": result.found,
                "deleted": result.deleted,
                "kept": result.kept,
                "dry_run": result.dry_run,
                "failed_batches": result.failed_batches,
                "failed_listings": result.failed_listings,
            }
        )
    elif result.dry_run:
        sys.stdout.write(
            f"found {result.found} legacy (pre-v2) entries (dry run: nothing deleted); "
            f"{result.kept} other keys under the legacy patterns are kept\n"
        )
    else:
        sys.stdout.write(
            f"deleted {result.deleted} of {result.found} legacy (pre-v2) entries; "
            f"{result.kept} other keys under the legacy patterns are kept\n"
        )
    if not result.ok:
        _common._stderr(
            f"{_common.PROG}: the store refused {result.failed_batches} delete batches and "
            f"{result.failed_listings} listings; run again"
        )
        return _common.EXIT_FAIL
    return _common.EXIT_OK
