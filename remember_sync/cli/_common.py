"""What every command shares: exit codes, messages, argument checks, opening a store, printing."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TextIO, TypeVar

from .._config import check_redis_url
from ..errors import RememberConfigurationError

if TYPE_CHECKING:  # the ops modules are imported when a command runs, not for --help
    from .._ops.context import Opened


PROG = "remember-sync"
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: How many keys a text report names before "... and N more".
SHOWN = 20

Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")

_NEEDS_STORE = (
    "needs a real store: give --redis-url URL (or set {env} or REDIS_URL) or --vercel-kv "
    "(or set KV_REST_API_URL and KV_REST_API_TOKEN)"
)
_STORE_EPILOG = (
    "Store: --redis-url URL (or the environment variable {env}, then REDIS_URL, which keep a "
    "password off the command line) or --vercel-kv (KV_REST_API_URL and KV_REST_API_TOKEN; "
    "also chosen by REMEMBER_VERCEL_KV=1 or by those two alone)."
)
#: Added to the store epilog of the commands that read or write values.
_SECRETS_EPILOG = (
    " Secrets come from REMEMBER_SECRET (or MCP_MEMORY_SECRET / MCP_SESSION_SECRET) plus "
    "REMEMBER_PREVIOUS_SECRETS (comma-separated, older secrets that still decrypt), else "
    "--secret-file, else .frontmcp/remember-secret.json in the working directory. The CLI "
    "never creates a secret."
)


def _flag(check: Callable[[str, str], T]) -> Callable[[str], T]:
    """An argparse type from a check of :mod:`remember_sync._config` (one rule for both)."""

    def convert(text: str) -> T:
        try:
            return check(text, "")
        except RememberConfigurationError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    convert.__name__ = check.__name__
    return convert


# The value may carry a password: the message never repeats it.
_redis_url = _flag(check_redis_url)


@contextlib.contextmanager
def _opened(
    args: argparse.Namespace,
    *,
    on_decrypt_error: Literal["warn", "raise"] = "warn",
    writes: bool = False,
    audit: bool | None = None,
    quota: Mapping[str, int | None] | None = None,
) -> Iterator[Opened]:
    """Open the chosen store and build a plugin over it; close the store afterwards."""
    from .._ops.context import SecretChoice, build_plugin, open_store

    choice = args.store_choice
    store = open_store(choice)
    try:
        opened = build_plugin(
            store,
            prefix=args.prefix,
            secrets=SecretChoice(
                encryption=not args.plaintext,
                secret_file=args.secret_file,
                frontmcp_compatible=writes and getattr(args, "frontmcp_compatible", False),
            ),
            on_decrypt_error=on_decrypt_error,
            read_doubled_prefix=args.read_doubled_prefix,
            # Commands that only read never append to (nor look for) the audit trail.
            audit=audit if audit is not None or writes else False,
            quota=quota,
        )
        with opened.plugin:
            yield opened
    finally:
        store.close()


def _print_json(obj: Any, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def _compact(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _listed(keys: list[str], total: int) -> str:
    shown = ", ".join(repr(k) for k in keys[:SHOWN])
    more = total - min(len(keys), SHOWN)
    return shown + (f" ... and {more} more (use --json for up to 1000)" if more > 0 else "")


def _report_keys(count: int, keys: list[str], message: str) -> None:
    """A report line: *message* then the first keys of *count* (nothing when there are none)."""
    if count:
        sys.stdout.write(f"{message}{_listed(keys, count)}\n")


def _stderr(text: str) -> None:
    sys.stderr.write(text + "\n")


def _progress_stream() -> TextIO:
    return sys.stderr


def _redact(text: str, secrets: Sequence[str]) -> str:
    """*text* without any of *secrets* (``args.secrets``: what this run knows of)."""
    from .._ops.context import redact

    return redact(text, secrets)

