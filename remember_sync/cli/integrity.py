"""``remember-sync verify [--repair]``: verified mode's check of a whole store."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import RememberIntegrityError
from ._common import EXIT_FAIL, EXIT_OK, _listed, _opened, _print_json, _progress_stream
from ._parser import Commands

if TYPE_CHECKING:
    from .._ops.context import Opened


#: ``remember-sync verify --help``'s description.
_VERIFY_DESCRIPTION = (
    "Walk every namespace under the prefix (session, user, tool, global) and report each "
    "integrity violation of verified mode: an entry its manifest lists as live that is "
    "missing or holds another version, an entry outside its manifest, a manifest that fails "
    "its check or is older than the witness, entries without a manifest, and (with --witness) "
    "a namespace the witness recorded that the store no longer has. Exit code 1 when there "
    "is any. --repair rebuilds every manifest from what the secret can read now (entries it "
    "cannot open are reported and left in place): the one command that moves an existing "
    "store into verified mode, and the way to settle what a crashed writer left. Repair "
    "accepts the store as it is now."
)


def add_verify_command(c: Commands) -> None:
    """``verify``."""
    p = c.add("verify", _cmd_verify, "check every namespace's manifest (verified mode); --repair",
              [c.store, c.reads, c.as_json], needs_store=True, description=_VERIFY_DESCRIPTION)
    p.add_argument("--repair", action="store_true",
                   help="rebuild the manifests from the readable entries")
    p.add_argument("--witness", metavar="W", default=None,
                   help="the application's witness: a file path or a redis:// URL "
                   "(default: $REMEMBER_WITNESS)")


def _cmd_verify(args: argparse.Namespace) -> int:
    from .._config import integrity_settings
    from .._ops.verify import open_witness, verify_store

    witness = open_witness(args.witness or integrity_settings(os.environ)[1])
    try:
        with _opened(args) as opened:
            core = opened.core
            result = verify_store(
                core.store, args.prefix, core.codec, clock=core.clock, witness=witness,
                repair=args.repair, progress_stream=_progress_stream(),
            )
    finally:
        if witness is not None:
            witness.close()
    if args.json:
        _print_json(result.to_dict())
    else:
        out = sys.stdout.write
        out(f"{result.namespaces} namespaces ({result.manifests} with a manifest), "
            f"{result.entries} entries, {result.violation_count} violations, "
            f"{result.pending} unfinished two-step writes\n")
        if result.violations:
            out(f"violations: {_listed(result.violations, result.violation_count)}\n")
        for warning in result.warnings:
            out(f"warning: {warning}\n")
        if args.repair:
            out(f"repaired {result.repaired} manifests; {result.unreadable} entries the secret "
                "cannot read were left in place and stay outside their manifest\n")
    if args.repair:
        return EXIT_FAIL if result.unreadable else EXIT_OK
    return EXIT_FAIL if result.violation_count else EXIT_OK


@contextlib.contextmanager
def manifests_kept(opened: Opened, prefix: str) -> Iterator[None]:
    """Around a command that rewrites entries directly (``rotate``, ``import``).

    On a store in verified mode (it has manifests): refuse to start unless the
    store verifies, then rebuild the manifests from what the command left
    (``verify --repair``), so verified readers accept the rewritten entries.
    Readers may refuse an entry between its rewrite and the rebuild.
    """
    from .._config import integrity_settings
    from .._keys import MANIFEST_HEAD, glob_escape
    from .._ops.verify import open_witness, verify_store

    core = opened.core
    if next(iter(core.store.scan(glob_escape(prefix + MANIFEST_HEAD) + "*")), None) is None:
        yield  # default mode: nothing to keep
        return
    witness = open_witness(integrity_settings(os.environ)[1])
    try:
        found = verify_store(core.store, prefix, core.codec, clock=core.clock, witness=witness)
        if found.violation_count:
            raise RememberIntegrityError(
                f"the store is in verified mode and fails verification "
                f"({found.violation_count} violations): run `remember-sync verify` first"
            )
        yield
        verify_store(core.store, prefix, core.codec, clock=core.clock, witness=witness,
                     repair=True)
    finally:
        if witness is not None:
            witness.close()
