"""The command line's parser: argument types, shared option groups, every subcommand."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from .._config import REDIS_URL_ENV
from .._keys import check_key, check_pattern
from ..types import BRANDS, SCOPES
from ._common import _STORE_EPILOG, PROG, Handler, _redis_url
from .admin import (
    _cmd_doctor,
    _cmd_purge_legacy,
    _cmd_reindex,
    _cmd_rotate,
    _cmd_secret_generate,
    _cmd_stats,
)
from .data import (
    _cmd_demo,
    _cmd_export,
    _cmd_forget,
    _cmd_get,
    _cmd_import,
    _cmd_list,
    _cmd_set,
)

# -- argument types (each error names its argument through argparse) ------------------------


def _json_value(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({exc}); quote strings, e.g. '\"dark\"'"
        ) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _json_object(text: str) -> dict[str, Any]:
    value = _json_value(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"source\": \"cli\"}'")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of seconds; got {text!r}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0; got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number; got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0; got {value}")
    return value


def _memory_key(text: str) -> str:
    try:
        return check_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pattern(text: str) -> str:
    try:
        return check_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _identity_part(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text




# -- the parser ---------------------------------------------------------------------------


def _store_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    # --redis-url and --vercel-kv exclude each other (checked in _store_choice: argparse
    # cannot show a mutually exclusive group inside a titled group).
    group = parent.add_argument_group("store")
    group.add_argument(
        "--redis-url",
        metavar="URL",
        type=_redis_url,
        help=f"Redis server, redis://[[user]:password@]host[:port][/db], or Sentinel, "
        f"redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db] (default: "
        f"${REDIS_URL_ENV} if set)",
    )
    group.add_argument(
        "--vercel-kv",
        action="store_true",
        help="Vercel KV / Upstash REST, from KV_REST_API_URL and KV_REST_API_TOKEN",
    )
    group.add_argument(
        "--prefix",
        metavar="P",
        default="remember:",
        help="key prefix the application uses (default: %(default)s)",
    )
    group.add_argument(
        "--read-doubled-prefix",
        action="store_true",
        help="the application sets read_doubled_prefix=True: also read (and rotate, export, "
        "count) the keys 1.8.0 wrote with a doubled prefix (P+P+'v2:...')",
    )
    return parent


def _secret_options(*, writes: bool) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("secrets")
    group.add_argument(
        "--secret-file",
        metavar="PATH",
        help="read the master secret from this remember-secret.json instead of the environment",
    )
    group.add_argument(
        "--plaintext",
        action="store_true",
        help="the store holds unencrypted entries (encryption={'enabled': False})",
    )
    if writes:
        group.add_argument(
            "--frontmcp-compatible",
            action="store_true",
            help="write the reference's envelope (no key binding), readable by "
            "@frontmcp/plugin-remember",
        )
    return parent


def _json_option() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--json", action="store_true", help="print the result as JSON")
    return parent


def _identity_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("scope and identity")
    group.add_argument(
        "--scope", required=True, choices=SCOPES, help="which memory: session, user, tool, global"
    )
    group.add_argument("--user", metavar="USER_ID", type=_identity_part, help="the user id")
    group.add_argument(
        "--session",
        metavar="SESSION_ID",
        type=_identity_part,
        help="the session id (session and tool scope; without it, --user's stateless session)",
    )
    group.add_argument(
        "--tool", metavar="TOOL", type=_identity_part, help="the tool name (tool scope)"
    )
    return parent


class _Formatter(argparse.HelpFormatter):
    """Wraps descriptions paragraph by paragraph (blank lines separate paragraphs)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
        return "\n\n".join(
            textwrap.fill(
                p, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
            )
            for p in paragraphs
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Never break "remember-secret.json" or "--redis-url" at their hyphens.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand with its options and handler."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=_Formatter,
        description="Encrypted, scoped memory for AI-agent tools: try it, inspect and repair a "
        "store, run scheduled jobs.",
        epilog="Start with `remember-sync demo`. `remember-sync COMMAND --help` describes each "
        "command. Commands marked * need a real store (--redis-url or --vercel-kv).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    epilog = _STORE_EPILOG.format(env=REDIS_URL_ENV)
    store, as_json, ident = _store_options(), _json_option(), _identity_options()
    reads, writes = _secret_options(writes=False), _secret_options(writes=True)

    def add(
        name: str,
        handler: Handler,
        help_text: str,
        parents: list[argparse.ArgumentParser],
        *,
        needs_store: bool = False,
        description: str | None = None,
    ) -> argparse.ArgumentParser:
        sub = subs.add_parser(
            name,
            parents=parents,
            help=("* " if needs_store else "") + help_text,
            description=(description or help_text)
            + ("\n\nNeeds a real store (--redis-url or --vercel-kv)." if needs_store else ""),
            epilog=epilog if store in parents else None,
            formatter_class=_Formatter,
        )
        sub.set_defaults(handler=handler, needs_store=needs_store, subparser=sub)
        return sub

    add("demo", _cmd_demo, "a scripted walkthrough on the in-memory store (no server needed)", [])

    secret = subs.add_parser(
        "secret", help="master-secret helpers", description="Master-secret helpers.",
        formatter_class=_Formatter,
    )
    secret_subs = secret.add_subparsers(dest="secret_command", metavar="ACTION", title="actions")
    generate = secret_subs.add_parser(
        "generate",
        help="print a new master secret (base64url of 32 random bytes)",
        description="Print a new master secret: base64url of 32 random bytes. Put it in "
        "REMEMBER_SECRET; when replacing one, move the old one to REMEMBER_PREVIOUS_SECRETS "
        "and run `remember-sync rotate`.",
    )
    generate.set_defaults(handler=_cmd_secret_generate, needs_store=False, subparser=generate)
    secret.set_defaults(handler=None, subparser=secret)

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
            "(exit code 1 when some were kept); entries past their deadline are skipped.")
    p.add_argument("input", metavar="FILE", help="the JSON Lines file, or - for standard input")
    p.add_argument("--overwrite", action="store_true", help="replace entries that exist")

    p = add("rotate", _cmd_rotate, "re-encrypt every entry under the first secret",
            [store, writes, as_json], needs_store=True,
            description="Re-encrypt every entry under the first configured secret "
            "(REMEMBER_SECRET=new, REMEMBER_PREVIOUS_SECRETS=old). Idempotent and resumable: "
            "entries already current are skipped. Writes are compare-and-set, so a concurrent "
            "update is never lost; deadlines are kept. Exit code 1 when some entries could not "
            "be read (they are listed) or kept changing.")
    p.add_argument("--dry-run", action="store_true", help="only count what would be rotated")

    add("reindex", _cmd_reindex, "builds/repairs the per-namespace listing index",
        [store, as_json], needs_store=True,
        description="Walk the store under the prefix once and put every entry into its "
        "namespace's listing index (entries written by FrontMCP 1.8.0, by releases before the "
        "index, or by a plugin with listing='scan' are in none), then record that the fleet is "
        "indexed: plugins then list each namespace without scanning the database. Idempotent "
        "and safe beside running applications. Needs no secret: values are not read.")

    p = add("purge-legacy", _cmd_purge_legacy, "delete pre-v2 keys now (the SPEC section 7 sweep)",
            [store, as_json], needs_store=True,
            description="Delete the pre-v2 entries (P+'session:*', P+'tool:*', P+'user:*') now, "
            "ignoring the purge window. Only keys whose value is a legacy entry of this plugin "
            "go; hashes, sets, lists, other strings and keys of a nested deployment are kept "
            "(and counted). A prefix inside another deployment's layout (a segment v2, global, "
            "session, tool or user) is refused. Asks for confirmation on a terminal; --yes for "
            "cron.")
    p.add_argument("--dry-run", action="store_true", help="only count, delete nothing")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    _add_serve(subs)
    return parser


def _add_serve(subs: Any) -> None:
    """Let the serve module register ``serve`` (its own options and handler)."""
    from .serve import add_serve_command  # the MCP server is imported only when parsing

    add_serve_command(subs)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("remember-sync")
    except Exception:  # noqa: BLE001 - not installed (running from a checkout)
        return "unknown"


# -- validation after parsing (still before any I/O) ------------------------------------------

