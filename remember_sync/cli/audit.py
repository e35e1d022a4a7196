"""``erase`` (one person, every scope) and ``audit tail|verify|export|public-key``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._common import EXIT_FAIL, EXIT_OK, PROG, _opened, _print_json, _stderr
from ._parser import Commands, _identity_part, _positive_int

if TYPE_CHECKING:
    from .._audit import AuditTrail, AuditVerification
    from .._ops.context import Opened


def add_erase_command(c: Commands) -> None:
    """``erase``."""
    p = c.add("erase", _cmd_erase, "delete every entry of one person, in every scope",
              [c.store, c.reads, c.as_json], needs_store=True,
              description="Delete every entry of one person: their user scope, every session "
              "recorded as theirs, tool scope under those sessions and their stateless session "
              "(docs/audit.rst). Prints the erasure receipt (with --json as JSON). Sessions "
              "that hold entries but have no recorded owner are counted, never deleted.")
    p.add_argument("--user", required=True, metavar="USER_ID", type=_identity_part,
                   help="the person's user id")
    p.add_argument("--dry-run", action="store_true", help="count only; delete nothing")


def _cmd_erase(args: argparse.Namespace) -> int:
    with _opened(args, writes=True) as opened:
        receipt = opened.plugin.erase(user_id=args.user, dry_run=args.dry_run)
    if args.json:
        _print_json(receipt.as_dict())
        return EXIT_OK
    verb = "would delete" if receipt.dry_run else "deleted"
    sys.stdout.write(
        f"{verb} {receipt.total} entries ({receipt.user_entries} user, "
        f"{receipt.session_entries} session, {receipt.tool_entries} tool; "
        f"{receipt.unreadable} unreadable) in {receipt.sessions} sessions\n"
        f"unattributed sessions (no recorded owner, kept): {receipt.unattributed_sessions}\n"
        f"sessions shared with someone else (kept): {receipt.shared_sessions}\n"
        f"subject {receipt.subject}  at {receipt.erased_at}  mac {receipt.mac}\n"
    )
    return EXIT_OK


def add_audit_command(c: Commands) -> None:
    """``audit tail``, ``audit verify``, ``audit export``."""
    group = c.add("audit", None, "read and check the audit trail", [],
                  description="Read and check the tamper-evident audit trail (docs/audit.rst).")
    actions = group.add_subparsers(dest="audit_command", metavar="ACTION", title="actions")
    p = c.add("tail", _cmd_audit_tail, "print the newest events (JSON Lines)",
              [c.store, c.reads], needs_store=True, subs=actions)
    p.add_argument("-n", "--lines", type=_positive_int, default=20, metavar="N",
                   help="how many events (default: %(default)s)")
    p = c.add("verify", _cmd_audit_verify, "check the chain; exit code 1 if it is broken",
              [c.store, c.reads, c.as_json], subs=actions,
              description="Check every event from the checkpoint to the head: an edited, "
              "deleted, reordered, inserted or forged event, or removed last events, is "
              "reported and the exit code is 1. With the application's witness (--witness, or "
              "REMEMBER_INTEGRITY=verified and REMEMBER_WITNESS), a store rolled back as a "
              "whole is reported too. With --public-key no secret is needed: the signatures "
              "of the blocks, the checkpoint and the head are checked, in the store or in a "
              "signed export (--export).")
    _witness_argument(p)
    p.add_argument("--public-key", metavar="FILE", action="append", default=None,
                   help="verify with this public key (PEM; 'audit public-key') and no secret; "
                   "repeat it for the keys before and after a rotation")
    p.add_argument("--export", metavar="FILE", default=None,
                   help="with --public-key: check this signed export ('audit export --signed') "
                   "instead of the store")
    p.add_argument("--repair", action="store_true",
                   help="first move the events that stopped processes left as intents into "
                   "the chain (those whose lease has expired)")
    p = c.add("export", _cmd_audit_export, "write every event as JSON Lines (after verifying)",
              [c.store, c.reads], needs_store=True, subs=actions,
              description="Write every event (identities decrypted) as JSON Lines; the exit "
              "code is 1 when the trail does not verify (the events are written anyway, with "
              "the problems on standard error).")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE (created with mode 0600; must not exist)")
    p.add_argument("--signed", action="store_true",
                   help="write the records as stored (identities sealed, signatures kept), "
                   "for 'audit verify --public-key FILE --export FILE'")
    _witness_argument(p)
    p = c.add("public-key", _cmd_audit_public_key, "print the key that checks the trail",
              [c.store, c.reads], subs=actions,
              description="Print (or write) the Ed25519 public key that checks the trail's "
              "signatures: give it to an auditor, who runs 'audit verify --public-key FILE' "
              "with no secret (docs/audit.rst).")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE (must not exist)")


def _witness_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--witness", metavar="W", default=None,
                   help="the application's witness (integrity='verified'): a file path or a "
                   "redis:// URL; the trail's head is checked against it")


def _trail(opened: Opened) -> AuditTrail:
    trail = opened.plugin.audit
    assert trail is not None  # opened with audit=True
    return trail


@contextlib.contextmanager
def _checked_trail(args: argparse.Namespace) -> Iterator[AuditTrail]:
    """The trail, its head checked against ``--witness`` when given."""
    from .._ops.verify import open_witness

    witness = open_witness(args.witness)
    try:
        with _opened(args, audit=True) as opened:
            trail = _trail(opened)
            if witness is not None:
                trail._anchor_in(witness)
            yield trail
    finally:
        if witness is not None:
            witness.close()


def _cmd_audit_tail(args: argparse.Namespace) -> int:
    from .._ops.context import json_line

    with _opened(args, audit=True) as opened:
        events = _trail(opened).events(limit=args.lines)
    for event in events:
        sys.stdout.write(json_line(event.as_dict()) + "\n")
    return EXIT_OK


def _report(result: AuditVerification) -> None:
    for problem in result.problems:
        _stderr(f"{PROG}: audit: {problem}")


def _public_verification(args: argparse.Namespace) -> AuditVerification:
    """Verify with public keys only: the signed export, or the store's records."""
    from .._audit import AuditVerification
    from .._audit_sign import RawTrail, load_public_keys, read_raw, verify_public
    from .._ops.context import open_store

    keys = load_public_keys(args.public_key)
    if args.export is not None:
        with open(args.export, encoding="utf-8") as f:
            raw = RawTrail.from_lines(f)
    else:
        if args.store_choice.kind == "memory":
            args.subparser.error("--public-key needs --export FILE or a store "
                                 "(--redis-url or --vercel-kv)")
        store = open_store(args.store_choice)
        try:
            raw = read_raw(store, args.prefix)
        finally:
            store.close()
    count, first, last, problems = verify_public(raw, keys)
    return AuditVerification(ok=not problems, events=count, first_seq=first, last_seq=last,
                             problems=tuple(problems))


def _cmd_audit_verify(args: argparse.Namespace) -> int:
    if args.repair and args.public_key:
        args.subparser.error("--repair needs the secret, not --public-key")
    elif args.public_key:
        result = _public_verification(args)
    elif args.export is not None:
        args.subparser.error("--export needs --public-key")
    elif args.store_choice.kind == "memory":
        args.subparser.error("needs a store (--redis-url or --vercel-kv), or --public-key")
    else:
        with _checked_trail(args) as trail:
            if args.repair:
                moved = trail.recover()
                sys.stderr.write(f"moved {moved} event(s) from intents into the chain\n")
            result = trail.verify()
    if args.json:
        _print_json({"ok": result.ok, "events": result.events, "first_seq": result.first_seq,
                     "last_seq": result.last_seq, "problems": list(result.problems)})
    else:
        state = "verified" if result.ok else "BROKEN"
        sys.stdout.write(f"audit trail {state}: {result.events} events "
                         f"({result.first_seq}..{result.last_seq})\n")
    _report(result)
    return EXIT_OK if result.ok else EXIT_FAIL


def _cmd_audit_export(args: argparse.Namespace) -> int:
    from .._ops.context import json_line

    with _checked_trail(args) as trail:
        result = trail.verify()
        if args.signed:
            lines = "".join(line + "\n" for line in trail._raw().export_lines())
        else:
            lines = "".join(json_line(event.as_dict()) + "\n" for event in trail.events())
    if args.output:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(lines)
    else:
        sys.stdout.write(lines)
    _report(result)
    return EXIT_OK if result.ok else EXIT_FAIL


def _cmd_audit_public_key(args: argparse.Namespace) -> int:
    with _opened(args, audit=True) as opened:
        pem = _trail(opened).public_key()
    if args.output:
        with open(args.output, "x", encoding="ascii") as out:
            out.write(pem)
    else:
        sys.stdout.write(pem)
    return EXIT_OK
