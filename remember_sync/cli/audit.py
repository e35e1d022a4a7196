"""``erase`` (one person, every scope) and ``audit tail|verify|export``."""

from __future__ import annotations

import argparse
import sys

from ._common import EXIT_OK, _opened, _print_json
from ._parser import Commands, _identity_part


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
    with _opened(args) as opened:
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
