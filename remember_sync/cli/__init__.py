"""The ``remember-sync`` command (also ``python -m remember_sync``).

A thin shell: it parses and validates every argument *before* opening a
store, then calls the plain functions of :mod:`remember_sync._ops` and prints
their results.  Exit codes: ``0`` success, ``1`` failure or something needing
attention, ``2`` bad arguments (nothing was written), ``130`` interrupted.

No secret, token or Redis password is ever printed: not in ``--help``
defaults, not in errors (messages are scrubbed of every secret the command
knows of).  Only ``secret generate`` prints a secret -- the new one it made.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import RememberError, RememberIdentityError
from ..identity import resolve_namespace, session_identity
from ..types import Identity
from ._common import _NEEDS_STORE, EXIT_FAIL, EXIT_INTERRUPTED, EXIT_USAGE, PROG, _redact, _stderr
from ._parser import top_level
from .admin import add_inspect_commands, add_maintenance_commands, add_secret_command
from .audit import add_audit_command, add_erase_command
from .data import add_demo_command, add_entry_commands, add_transfer_commands
from .integrity import add_verify_command

if TYPE_CHECKING:  # the ops modules are imported when a command runs, not for --help
    from .._config import StoreSettings
    from .._ops.transfer import ImportRecord

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand with its options and handler."""
    from ._serve_args import add_serve_command  # the server itself: only when serve runs

    parser, commands = top_level()
    for add_group in (
        add_demo_command,
        add_secret_command,
        add_entry_commands,
        add_inspect_commands,
        add_transfer_commands,
        add_maintenance_commands,
        add_verify_command,
        add_erase_command,
        add_audit_command,
        add_serve_command,
    ):
        add_group(commands)
    return parser


# -- validation after parsing (still before any I/O) ------------------------------------------


#: The identity options each scope reads; any other is a usage error (it would be ignored).
_SCOPE_USES = {
    "global": (),
    "user": ("user",),
    "session": ("session", "user"),
    "tool": ("session", "user", "tool"),
}


def _identity(args: argparse.Namespace, sub: argparse.ArgumentParser) -> Identity:
    """The identity the options name, checked against what the scope needs (usage errors).

    What a scope needs is the library's rule (:func:`resolve_namespace`), not a copy."""
    scope = args.scope
    given = {"session": args.session, "user": args.user, "tool": args.tool}
    for name, value in given.items():
        if value is not None and name not in _SCOPE_USES[scope]:
            sub.error(f"argument --{name}: not used with --scope {scope}")
    if args.session is not None and args.user is not None:
        sub.error(f"argument --user: not used with --scope {scope} when --session is given")
    ident = Identity(session_id=args.session, user_id=args.user, tool_name=args.tool)
    try:
        resolve_namespace(ident, scope, given=True)
    except RememberIdentityError as exc:
        # The option to add: the scope's own part, else the session a tool runs in.
        lacking = "user" if scope == "user" else "session"
        if scope == "tool" and session_identity(ident) is not None:
            lacking = "tool"
        sub.error(f"argument --{lacking}: needed by --scope {scope}. {exc.message}")
    return ident


def _changes_store(args: argparse.Namespace) -> bool:
    """Whether the command writes or deletes entries (a dry run does not)."""
    if args.command in ("set", "forget", "import"):
        return True
    return args.command in ("rotate", "purge-legacy", "erase") and not getattr(
        args, "dry_run", False
    )


def _store_choice(args: argparse.Namespace, sub: argparse.ArgumentParser) -> StoreSettings:
    from .._config import (
        KV_URL_ENV,
        PLATFORM_REDIS_URL_ENV,
        REDIS_URL_ENV,
        StoreSettings,
        store_settings,
    )
    from ..errors import RememberConfigurationError

    redis_url, vercel_kv = getattr(args, "redis_url", None), getattr(args, "vercel_kv", False)
    if vercel_kv and redis_url is not None:
        sub.error("argument --vercel-kv: not allowed with argument --redis-url")
    try:
        found = store_settings(os.environ, redis_url=redis_url, vercel_kv=vercel_kv)
    except RememberConfigurationError as exc:
        sub.error(exc.message)
    if found.kind == "redis":
        _check_redis_url(found.redis_url, found.source, sub)
    if found.kind != "memory":
        if found.source in (PLATFORM_REDIS_URL_ENV, KV_URL_ENV) and _changes_store(args):
            # A hosting platform's variable may name the application's own (production)
            # store, not one meant for this command: say which store is about to change.
            from .._ops.context import describe_store

            _stderr(f"{PROG}: store: {describe_store(found)} (chosen by {found.source})")
        return found
    if args.needs_store:
        sub.error(_NEEDS_STORE.format(env=REDIS_URL_ENV))
    return StoreSettings("memory")


def _check_redis_url(url: str | None, source: str, sub: argparse.ArgumentParser) -> None:
    """A usage error for a Redis URL the store would refuse (a query option, a bad port):
    building a store sends nothing, so this needs no server."""
    from ..errors import RememberConfigurationError
    from ..stores.redis import RedisStore

    assert url is not None
    try:
        RedisStore.from_url(url).close()
    except RememberConfigurationError as exc:
        name = "argument --redis-url" if source == "argument" else f"environment variable {source}"
        sub.error(f"{name}: {exc.message}")


# -- entry point ---------------------------------------------------------------------------


def _validate(args: argparse.Namespace) -> None:
    """Every check that needs no store: usage errors (exit 2) before any I/O."""
    sub: argparse.ArgumentParser = args.subparser
    if getattr(args, "scope", None) is not None:
        args.identity = _identity(args, sub)
    if "redis_url" in vars(args) or "vercel_kv" in vars(args):
        from .._ops.context import secret_values

        args.store_choice = _store_choice(args, sub)
        args.secrets = secret_values(os.environ, args.store_choice)
    if getattr(args, "secret_file", None) is not None and getattr(args, "plaintext", False):
        sub.error("argument --secret-file: not allowed with --plaintext")
    if args.command == "export" and args.output is not None and os.path.lexists(args.output):
        sub.error(f"argument -o/--output: {args.output} exists; choose a new file")
    if args.command == "rotate" and args.plaintext:
        sub.error("argument --plaintext: there is nothing to rotate without encryption")
    if args.command == "import":
        args.records = _read_records(args.input, sub)
    if args.command == "purge-legacy":
        from .._purge import nested_prefix, nested_prefix_message

        if not args.prefix:
            sub.error("argument --prefix: the legacy purge is disabled for an empty prefix")
        segment = nested_prefix(args.prefix)
        if segment is not None:
            sub.error(f"argument --prefix: {nested_prefix_message(args.prefix, segment)}")
        if not (args.dry_run or args.yes or sys.stdin.isatty()):
            sub.error("argument --yes: needed when standard input is not a terminal (cron)")


def _read_records(path: str, sub: argparse.ArgumentParser) -> list[ImportRecord]:
    from .._ops.transfer import parse_records

    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        sub.error(f"argument FILE: cannot read {path}: {exc.strerror}")
    except UnicodeDecodeError:
        sub.error(f"argument FILE: {path} is not UTF-8 text")
    try:
        return parse_records(text.splitlines())
    except RememberError as exc:
        sub.error(f"argument FILE: {path}: {exc.message}")


class _StderrFormatter(logging.Formatter):
    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {_redact(record.getMessage(), self.secrets)}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None:
            sub = getattr(args, "subparser", parser)
            sub.print_usage(sys.stderr)
            sub.exit(EXIT_USAGE, f"{sub.prog}: error: choose a command (see --help)\n")
        _validate(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE

    secrets: list[str] = getattr(args, "secrets", [])
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter(secrets))
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("remember_sync")
    logger.addHandler(handler)
    try:
        code: int = args.handler(args)
        return code
    except SystemExit as exc:  # a usage error found while running (e.g. rotate --plaintext)
        return exc.code if isinstance(exc.code, int) else EXIT_FAIL
    except RememberError as exc:
        _stderr(f"{PROG}: error: {_redact(exc.message, secrets)}")
        return EXIT_FAIL
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            # The reader went away (`| head`): stop quietly, as cat and grep do.
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - swallow the final flush
            return EXIT_FAIL
        _stderr(f"{PROG}: error: {_redact(str(exc), secrets)}")
        return EXIT_FAIL
    except KeyboardInterrupt:
        _stderr(f"{PROG}: interrupted")
        return EXIT_INTERRUPTED
    finally:
        logger.removeHandler(handler)
