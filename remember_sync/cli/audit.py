"""``erase`` (one person, every scope) and ``audit tail|verify|export``."""

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
              [c.store, c.reads, c.as_json], needs_store=True, subs=actions,
              description="Check every event from the checkpoint to the head: an edited, "
              "deleted, reordered, inserted or forged event, or removed last events, is "
              "reported and the exit code is 1. With the application's witness (--witness, or "
              "REMEMBER_INTEGRITY=verified and REMEMBER_WITNESS), a store rolled back as a "
              "whole is reported too.")
    _witness_argument(p)
    p = c.add("export", _cmd_audit_export, "write every event as JSON Lines (after verifying)",
              [c.store, c.reads], needs_store=True, subs=actions,
              description="Write every event (identities decrypted) as JSON Lines; the exit "
              "code is 1 when the trail does not verify (the events are written anyway, with "
              "the problems on standard error).")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE (created with mode 0600; must not exist)")
    _witness_argument(p)


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


def _cmd_audit_verify(args: argparse.Namespace) -> int:
    with _checked_trail(args) as trail:
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
        events = trail.events()
    lines = "".join(json_line(event.as_dict()) + "\n" for event in events)
    if args.output:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(lines)
    else:
        sys.stdout.write(lines)
    _report(result)
    return EXIT_OK if result.ok else EXIT_FAIL
