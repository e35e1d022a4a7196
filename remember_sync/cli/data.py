"""The entry commands: ``demo``, ``list``, ``get``, ``set``, ``forget``, ``export``, ``import``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from .._config import KEYSTORE_ENV, QUOTA_BYTES_ENV, QUOTA_ENTRIES_ENV, quota_settings
from ..errors import DemoFailed, RememberDecryptionError
from ..types import BRANDS, RememberEntry
from ._common import (
    EXIT_FAIL,
    EXIT_OK,
    PROG,
    _compact,
    _listed,
    _opened,
    _print_json,
    _progress_stream,
    _redact,
    _report_keys,
    _stderr,
)
from ._parser import (
    Commands,
    _int_at_least,
    _json_object,
    _json_value,
    _memory_key,
    _pattern,
    _positive_int,
)

_whole_number = _int_at_least(1, "a whole number")

if TYPE_CHECKING:  # the ops modules are imported when a command runs, not for --help
    from .._ops.context import Opened


def add_demo_command(c: Commands) -> None:
    """``demo``."""
    c.add("demo", _cmd_demo, "a scripted walkthrough on the in-memory store (no server needed)", [])


def add_entry_commands(c: Commands) -> None:
    """``list``, ``get``, ``set``, ``forget``."""
    add, store, reads, writes = c.add, c.store, c.reads, c.writes
    ident, as_json = c.ident, c.as_json
    p = add("list", _cmd_list, "list the keys of one scope and identity",
            [store, reads, ident, as_json], needs_store=True)
    p.add_argument("--pattern", type=_pattern, default="*",
                   help="only keys matching this; * and ? are the only wildcards (default: *)")
    p.add_argument("--brand", choices=BRANDS, help="only entries of this brand")

    p = add("get", _cmd_get, "print one entry's value (JSON)", [store, reads, ident, as_json],
            needs_store=True, description="Print one entry's value as JSON; with --json the "
            "whole entry. Exit code 1 when there is no such entry.")
    p.add_argument("key", metavar="KEY", type=_memory_key, help="the memory key")

    p = add("set", _cmd_set, "store one entry", [store, writes, ident, as_json],
            needs_store=True, description="Store one entry, replacing the one under KEY. An "
            "entry the configured secrets cannot read is not overwritten (exit code 1) unless "
            "--include-unreadable is given.")
    p.add_argument("key", metavar="KEY", type=_memory_key, help="the memory key")
    p.add_argument("value", metavar="VALUE", type=_json_value,
                   help="the value as JSON (a string needs quotes: '\"dark\"')")
    p.add_argument("--ttl", type=_positive_int, metavar="SECONDS", help="expire after SECONDS")
    p.add_argument("--brand", choices=BRANDS, help="what kind of memory this is")
    p.add_argument("--metadata", type=_json_object, metavar="JSON",
                   help="a JSON object stored with the entry")
    p.add_argument("--include-unreadable", action="store_true",
                   help="overwrite the entry even if the configured secrets cannot read it")

    p = add("forget", _cmd_forget, "delete one entry", [store, reads, ident, as_json],
            needs_store=True, description="Delete one entry. An entry the configured secrets "
            "cannot read is not deleted (exit code 1) unless --include-unreadable is given.")
    p.add_argument("key", metavar="KEY", type=_memory_key, help="the memory key")
    p.add_argument("--include-unreadable", action="store_true",
                   help="delete the entry even if the configured secrets cannot read it")


def add_transfer_commands(c: Commands) -> None:
    """``export``, ``import``."""
    add, store, reads, writes, as_json = c.add, c.store, c.reads, c.writes, c.as_json
    p = add("export", _cmd_export, "write every entry as JSON Lines", [store, reads],
            needs_store=True,
            description="Write every readable, unexpired entry under the prefix as JSON Lines: "
            "by default the encrypted envelopes with their storage keys (without the prefix) "
            "and deadlines; with --decrypted the entries in clear. Unreadable entries are "
            "reported and left out (exit code 1).")
    p.add_argument("--decrypted", action="store_true",
                   help="write values in clear (a warning is printed; protect the file)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE (created with mode 0600; must not exist) instead of "
                   "standard output")

    p = add("import", _cmd_import, "load entries from JSON Lines", [store, writes, as_json],
            needs_store=True,
            description="Load entries written by `export` (either form). The whole input is "
            "checked before anything is written. Existing keys are kept unless --overwrite "
            "(exit code 1 when some were kept); entries past their deadline are skipped. With "
            f"a quota (--quota-entries/--quota-bytes, else ${QUOTA_ENTRIES_ENV} / "
            f"${QUOTA_BYTES_ENV}, as the server reads them) every entry is charged to its "
            "principal and one that would take it over the quota is not imported (exit code 1).")
    p.add_argument("input", metavar="FILE", help="the JSON Lines file, or - for standard input")
    p.add_argument("--overwrite", action="store_true", help="replace entries that exist")
    p.add_argument("--quota-entries", type=_whole_number, metavar="N",
                   help=f"every principal's quota of entries (default: ${QUOTA_ENTRIES_ENV}); "
                   "give the server's")
    p.add_argument("--quota-bytes", type=_whole_number, metavar="N",
                   help=f"every principal's quota of bytes (default: ${QUOTA_BYTES_ENV})")
    p.add_argument("--ignore-quota", action="store_true",
                   help="import entries even past their principal's quota (still charged, so "
                   "the principal must forget some before writing more)")


def _cmd_demo(args: argparse.Namespace) -> int:
    from .._ops.demo import run_demo

    try:
        run_demo(sys.stdout)
    except DemoFailed as exc:
        _stderr(f"{PROG}: demo failed: {exc}")
        return EXIT_FAIL
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    with _opened(args) as opened:
        mem = opened.plugin.accessor(args.identity)
        found = mem.entries(scope=args.scope, pattern=args.pattern, brand=args.brand)
        # A fresh plugin per command: every unreadable key counted was met by this listing.
        unreadable = opened.plugin.stats()["unreadable"]
    keys = sorted(found)
    if args.json:
        _print_json(
            {"scope": args.scope, "keys": keys, "count": len(keys), "unreadable": unreadable}
        )
    else:
        for key in keys:
            sys.stdout.write(key + "\n")
    if unreadable:
        _stderr(
            f"{PROG}: {unreadable} entries in {args.scope} scope do not decrypt with the "
            "configured secrets and are not listed"
        )
        return EXIT_FAIL
    return EXIT_OK


def _entry_dict(key: str, scope: str, entry: RememberEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "scope": scope, "value": entry.value}
    out["brand"] = entry.brand
    out["createdAt"] = entry.created_at
    out["updatedAt"] = entry.updated_at
    out["expiresAt"] = entry.expires_at
    out["metadata"] = entry.metadata
    return out


def _cmd_get(args: argparse.Namespace) -> int:
    with _opened(args, on_decrypt_error="raise") as opened:
        entry = opened.plugin.accessor(args.identity).get_entry(args.key, scope=args.scope)
    if entry is None:
        _stderr(f"{PROG}: no entry {args.key!r} in {args.scope} scope")
        return EXIT_FAIL
    if args.json:
        _print_json(_entry_dict(args.key, args.scope, entry))
    else:
        sys.stdout.write(_compact(entry.value) + "\n")
    return EXIT_OK


_UNREAD = "it could not be read with the configured secret(s)"


class _Unreadable(RememberDecryptionError):
    """The entry ``set`` would replace cannot be read (it is left as it is)."""


def _refuse_unreadable(args: argparse.Namespace, message: str, done: str, does: str) -> int:
    """Report an entry the configured secrets cannot read, left as it is (another
    secret's data, or tampered with); the exit status."""
    _stderr(
        f"{PROG}: error: {_redact(message, args.secrets)}; {_UNREAD}, so it was not {done} "
        f"(nothing changed). --include-unreadable {does} it anyway"
    )
    return EXIT_FAIL


def _read_before_forgetting(opened: Opened, args: argparse.Namespace) -> tuple[bool, bool] | None:
    """Read the entry ``forget`` is about to delete, and its 1.8.0 doubled-prefix twin
    (deleted too): (live, unreadable).

    Without ``--include-unreadable`` an unreadable one is reported and ``None``
    returned, and the caller deletes nothing.  The plugin must be opened with
    ``on_decrypt_error="raise"``.
    """
    core = opened.core
    ns, head = core.namespace(args.identity, args.scope)
    skey = head + args.key
    places = [skey, core.prefix + skey] if core.read_doubled_prefix else [skey]
    live = False
    for where in places:
        try:
            fields = core.decode_fields(core.store.get(where), ns, skey, core.clock())
            live |= fields is not None
        except RememberDecryptionError as exc:
            if not args.include_unreadable:
                _refuse_unreadable(args, exc.message, "forgotten", "deletes")
                return None
            return live, True
    return live, False


def _cmd_set(args: argparse.Namespace) -> int:
    from .._ops.inspect import format_ms

    replaced_unreadable = False

    def unreadable(key: str, exc: RememberDecryptionError) -> Exception | None:
        # Another secret's data, or tampered with: replaced only when asked to.
        nonlocal replaced_unreadable
        if args.include_unreadable:
            replaced_unreadable = True
            return None
        return _Unreadable(exc.message)

    with _opened(args, on_decrypt_error="raise", writes=True) as opened:
        core = opened.core
        who, key, scope, ttl, brand = args.identity, args.key, args.scope, args.ttl, args.brand
        # By compare-and-set against what it read, as every read-then-write.
        try:
            with core.audited("set", who, scope, key, brand, ttl) as event:
                expires = core.set(who, key, args.value, scope, ttl, brand, args.metadata,
                                   unreadable)  # fmt: skip
                event.outcome = "written"
        except _Unreadable as exc:
            return _refuse_unreadable(args, exc.message, "overwritten", "overwrites")
    if args.json:
        _print_json({"success": True, "key": args.key, "scope": args.scope, "expiresAt": expires,
                     "unreadable": replaced_unreadable})
    else:
        when = "never expires" if expires is None else f"expires {format_ms(expires)}"
        sys.stdout.write(f"stored {args.key!r} in {args.scope} scope ({when})\n")
        if replaced_unreadable:
            sys.stdout.write(f"  the entry it replaced: {_UNREAD}; overwritten because of "
                             "--include-unreadable\n")
    return EXIT_OK


def _cmd_forget(args: argparse.Namespace) -> int:
    with _opened(args, on_decrypt_error="raise", writes=True) as opened:
        # Read, then delete at once: the window is one round trip (the store protocol
        # has no compare-and-delete).
        found = _read_before_forgetting(opened, args)
        if found is None:
            return EXIT_FAIL
        deleted = opened.plugin.accessor(args.identity).forget(args.key, scope=args.scope)
    live, unreadable = found
    # An expired entry still stored is deleted as cleanup, but was not there for any reader.
    existed = deleted and (live or unreadable)
    if args.json:
        _print_json({"key": args.key, "scope": args.scope, "existed": existed,
                     "unreadable": unreadable})
    elif existed:
        sys.stdout.write(f"forgot {args.key!r} in {args.scope} scope\n")
        if unreadable:
            sys.stdout.write(f"  {_UNREAD}; deleted because of --include-unreadable\n")
    else:
        sys.stdout.write(f"{args.key!r} was not in {args.scope} scope (nothing to forget)\n")
    return EXIT_OK


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    # 0600 and exclusive: an export holds every entry (in clear with --decrypted).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        yield fh


def _cmd_export(args: argparse.Namespace) -> int:
    from .._ops.transfer import export_entries

    with _opened(args) as opened:
        if args.decrypted:
            _stderr(
                f"{PROG}: warning: --decrypted writes every value in clear text; protect the "
                "output and delete it when done"
            )
        with _output(args.output) as out:
            result = export_entries(
                opened.core, out, decrypted=args.decrypted,
                progress_stream=_progress_stream(),
            )
    form = "decrypted entries" if args.decrypted else "encrypted envelopes"
    _stderr(f"exported {result.exported} {form}; skipped {result.expired} expired")
    if result.unreadable:
        _stderr(
            f"{PROG}: {result.unreadable} entries do not decrypt with the configured secrets and "
            f"were NOT exported: {_listed(result.unreadable_keys, result.unreadable)}"
        )
    if result.need_keystore:
        _stderr(
            f"{PROG}: {result.need_keystore} of them are sealed with a person's own key (their "
            f"envelope names a subject key, \"skid\") and no keystore is configured: set "
            f"{KEYSTORE_ENV} to the keystore the application uses (docs/audit.rst)"
        )
    if result.doubled_unread:
        _stderr(
            f"{PROG}: {result.doubled_unread} keys in 1.8.0's doubled-prefix layout were NOT "
            "exported: pass --read-doubled-prefix if the application reads them"
        )
    return EXIT_FAIL if result.unreadable or result.doubled_unread else EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    from .._ops.transfer import import_entries
    from .integrity import manifests_kept

    quota = quota_settings(os.environ, args.quota_entries, args.quota_bytes)
    if args.ignore_quota and quota is None:
        args.subparser.error(
            "--ignore-quota charges each entry to its principal beyond the quota: give the "
            f"server's quota (--quota-entries/--quota-bytes or {QUOTA_ENTRIES_ENV})"
        )
    with _opened(args, writes=True, quota=quota) as opened, manifests_kept(opened, args.prefix):
        result = import_entries(
            opened.core, args.records, overwrite=args.overwrite,
            ignore_quota=args.ignore_quota, progress_stream=_progress_stream(),
        )
    problems = result.existing or result.unreadable or result.over_quota
    if args.json:
        _print_json(result.to_dict())
    else:
        sys.stdout.write(
            f"imported {result.imported} entries; skipped {result.expired} past their deadline\n"
        )
        _report_keys(result.existing, result.existing_keys,
                     f"kept {result.existing} existing entries (use --overwrite to replace them): ")
        _report_keys(result.unreadable, result.unreadable_keys,
                     f"{result.unreadable} envelopes do not decrypt with the configured secrets "
                     "and were not imported: ")
        _report_keys(result.over_quota, result.over_quota_keys,
                     f"{result.over_quota} entries were NOT imported, each would take its "
                     "principal over its quota (--ignore-quota imports them, charged): ")
        _report_keys(result.uncharged, result.uncharged_keys,
                     f"{result.uncharged} entries were imported uncharged, the file does not "
                     "tell whose they are (a host's own session id, or the session of a user "
                     "with no user-scope entry in the file): ")
    return EXIT_FAIL if problems else EXIT_OK
