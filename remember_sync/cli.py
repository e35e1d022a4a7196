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
import importlib.util
import json
import logging
import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ._keys import check_key, check_pattern
from .errors import RememberDecryptionError, RememberError
from .identity import is_anonymous
from .types import BRANDS, SCOPES, Identity, RememberEntry

if TYPE_CHECKING:  # the ops modules are imported when a command runs, not for --help
    from ._ops.context import Opened, StoreChoice
    from ._ops.transfer import ImportRecord

__all__ = ["build_parser", "main"]

PROG = "remember-sync"
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: How many keys a text report names before "... and N more".
SHOWN = 20

Handler = Callable[[argparse.Namespace], int]

_NEEDS_STORE = (
    "needs a real store: give --redis-url URL (or set {env} or REDIS_URL) or --vercel-kv "
    "(or set KV_REST_API_URL and KV_REST_API_TOKEN)"
)
_STORE_EPILOG = (
    "Store: --redis-url URL (or the environment variable {env}, then REDIS_URL, which keep a "
    "password off the command line) or --vercel-kv (KV_REST_API_URL and KV_REST_API_TOKEN; "
    "also chosen by REMEMBER_VERCEL_KV=1 or by those two alone). Secrets come from "
    "REMEMBER_SECRET (or MCP_MEMORY_SECRET / MCP_SESSION_SECRET) plus REMEMBER_PREVIOUS_SECRETS "
    "(comma-separated, older secrets that still decrypt), else --secret-file, else "
    ".frontmcp/remember-secret.json in the working directory. The CLI never creates a secret."
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


def _redis_url(text: str) -> str:
    # The value may carry a password: the message never repeats it.
    schemes = ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://")
    if not text.startswith(schemes):
        raise argparse.ArgumentTypeError(
            "must be a redis://, rediss://, unix://, redis+sentinel:// or rediss+sentinel:// URL"
        )
    return text


# -- the parser ---------------------------------------------------------------------------


def _store_options() -> argparse.ArgumentParser:
    from ._ops.context import REDIS_URL_ENV

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
    from ._ops.context import REDIS_URL_ENV

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
    """Let the MCP server module register ``serve`` (its own options and handler)."""
    if importlib.util.find_spec("remember_sync.mcp") is None:
        return
    if importlib.util.find_spec("remember_sync.mcp.serve") is None:
        return
    # By name, so the package imports cleanly before that module exists.
    serve = importlib.import_module("remember_sync.mcp.serve")
    serve.add_serve_command(subs)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("remember-sync")
    except Exception:  # noqa: BLE001 - not installed (running from a checkout)
        return "unknown"


# -- validation after parsing (still before any I/O) ------------------------------------------


def _identity(args: argparse.Namespace, sub: argparse.ArgumentParser) -> Identity:
    """The identity the options name, checked against what the scope needs (usage errors)."""
    scope, user, session, tool = args.scope, args.user, args.session, args.tool
    if scope == "global":
        unused = [n for n, v in (("user", user), ("session", session), ("tool", tool)) if v]
        if unused:
            sub.error(f"argument --{unused[0]}: not used with --scope global")
    elif scope == "user":
        for name, value in (("session", session), ("tool", tool)):
            if value is not None:
                sub.error(f"argument --{name}: not used with --scope user")
        if user is None or is_anonymous(user):
            sub.error("argument --user: --scope user needs --user USER_ID (signed in, not anon:)")
    else:
        if session is None and (user is None or is_anonymous(user)):
            sub.error(
                f"argument --session: --scope {scope} needs --session SESSION_ID (or --user "
                "USER_ID for that user's stateless session)"
            )
        if session is not None and user is not None:
            sub.error(f"argument --user: not used with --scope {scope} when --session is given")
        if scope == "session" and tool is not None:
            sub.error("argument --tool: not used with --scope session")
        if scope == "tool" and tool is None:
            sub.error("argument --tool: --scope tool needs --tool TOOL")
    return Identity(session_id=session, user_id=user, tool_name=tool)


def _changes_store(args: argparse.Namespace) -> bool:
    """Whether the command writes or deletes entries (a dry run does not)."""
    if args.command in ("set", "forget", "import"):
        return True
    return args.command in ("rotate", "purge-legacy") and not getattr(args, "dry_run", False)


def _store_choice(args: argparse.Namespace, sub: argparse.ArgumentParser) -> StoreChoice:
    from ._config import KV_URL_ENV, PLATFORM_REDIS_URL_ENV, store_settings
    from ._ops.context import REDIS_URL_ENV, StoreChoice
    from .errors import RememberConfigurationError

    if getattr(args, "vercel_kv", False):
        if getattr(args, "redis_url", None) is not None:
            sub.error("argument --vercel-kv: not allowed with argument --redis-url")
        return StoreChoice("vercel-kv")
    try:
        found = store_settings(os.environ, redis_url=getattr(args, "redis_url", None))
    except RememberConfigurationError as exc:
        sub.error(exc.message)
    if found.kind == "vercel-kv":
        choice = StoreChoice("vercel-kv")
    elif found.kind == "redis" and found.redis_url is not None:
        url = found.redis_url
        if found.source != "argument":
            try:
                url = _redis_url(url)
            except argparse.ArgumentTypeError as exc:
                sub.error(f"environment variable {found.source}: {exc}")
        choice = StoreChoice("redis", url)
    else:
        choice = None
    if choice is not None:
        if found.source in (PLATFORM_REDIS_URL_ENV, KV_URL_ENV) and _changes_store(args):
            # A hosting platform's variable may name the application's own (production)
            # store, not one meant for this command: say which store is about to change.
            _stderr(f"{PROG}: store: {choice.describe()} (chosen by {found.source})")
        return choice
    if args.needs_store:
        sub.error(_NEEDS_STORE.format(env=REDIS_URL_ENV))
    return StoreChoice("memory")


# -- running -------------------------------------------------------------------------------


class _Run:
    """Per-invocation state: the store choice and what to scrub from messages."""

    def __init__(self) -> None:
        self.secrets: list[str] = []

    def refresh_secrets(self, store: StoreChoice) -> None:
        from ._ops.context import secret_values

        self.secrets = secret_values(os.environ, store)


_run = _Run()


@contextlib.contextmanager
def _opened(
    args: argparse.Namespace, *, on_decrypt_error: str = "warn", writes: bool = False
) -> Iterator[Opened]:
    """Open the chosen store and build a plugin over it; close the store afterwards."""
    from ._ops.context import SecretChoice, build_plugin, open_store

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


def _stderr(text: str) -> None:
    sys.stderr.write(text + "\n")


def _progress_stream() -> TextIO:
    return sys.stderr


# -- commands ------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._ops.demo import DemoFailed, run_demo

    try:
        run_demo(sys.stdout)
    except DemoFailed as exc:
        _stderr(f"{PROG}: demo failed: {exc}")
        return EXIT_FAIL
    return EXIT_OK


def _cmd_secret_generate(args: argparse.Namespace) -> int:
    from ._secrets import generate_secret

    sys.stdout.write(generate_secret() + "\n")
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


def _read_before_replacing(
    opened: Opened, args: argparse.Namespace, *, twin: bool, done: str, does: str
) -> tuple[bool, bool] | None:
    """Read the entry ``set``/``forget`` is about to replace: (live, unreadable).

    An entry the configured secrets cannot read is another secret's data, or
    tampered with: without ``--include-unreadable`` it is reported and ``None``
    returned, and the caller writes nothing.  *twin*: also read the 1.8.0
    doubled-prefix key (``forget`` deletes it too).  The plugin must be opened
    with ``on_decrypt_error="raise"``.
    """
    core = opened.plugin.core
    ns, head = core.namespace(args.identity, args.scope)
    skey = head + args.key
    places = [skey, core.prefix + skey] if twin and core.read_doubled_prefix else [skey]
    live = False
    for where in places:
        try:
            fields = core.decode_fields(core.store.get(where), ns, skey, core.clock())
            live |= fields is not None
        except RememberDecryptionError as exc:
            if not args.include_unreadable:
                _stderr(
                    f"{PROG}: error: {_redact(exc.message)}; {_UNREAD}, so it was not {done} "
                    f"(nothing changed). --include-unreadable {does} it anyway"
                )
                return None
            return live, True
    return live, False


def _cmd_set(args: argparse.Namespace) -> int:
    from ._ops.inspect import format_ms

    with _opened(args, on_decrypt_error="raise", writes=True) as opened:
        mem = opened.plugin.accessor(args.identity)
        # Read, then write at once: the window is one round trip (no compare-and-set
        # for a whole new entry in the store protocol).
        found = _read_before_replacing(
            opened, args, twin=False, done="overwritten", does="overwrites"
        )
        if found is None:
            return EXIT_FAIL
        mem.set(args.key, args.value, scope=args.scope, ttl=args.ttl, brand=args.brand,
                metadata=args.metadata)
        entry = mem.get_entry(args.key, scope=args.scope)
    unreadable = found[1]
    expires = entry.expires_at if entry is not None else None
    if args.json:
        _print_json({"success": True, "key": args.key, "scope": args.scope, "expiresAt": expires,
                     "unreadable": unreadable})
    else:
        when = "never expires" if expires is None else f"expires {format_ms(expires)}"
        sys.stdout.write(f"stored {args.key!r} in {args.scope} scope ({when})\n")
        if unreadable:
            sys.stdout.write(f"  the entry it replaced: {_UNREAD}; overwritten because of "
                             "--include-unreadable\n")
    return EXIT_OK


def _cmd_forget(args: argparse.Namespace) -> int:
    with _opened(args, on_decrypt_error="raise") as opened:
        # Read, then delete at once: the window is one round trip (the store protocol
        # has no compare-and-delete).
        found = _read_before_replacing(opened, args, twin=True, done="forgotten", does="deletes")
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


def _counts(mapping: dict[str, int]) -> str:
    return "  ".join(f"{k} {v}" for k, v in mapping.items()) or "-"


def _cmd_stats(args: argparse.Namespace) -> int:
    from ._ops.inspect import collect_stats

    with _opened(args) as opened:
        core = opened.plugin.core
        stats = collect_stats(
            core.store, core.prefix, core.codec, now=core.clock(),
            progress_stream=_progress_stream(), read_doubled_prefix=core.read_doubled_prefix,
        )
    # Work left undone: entries that could not be read, or a layout not read at all.
    code = EXIT_FAIL if stats.unreadable or stats.doubled_unread else EXIT_OK
    if args.json:
        data = stats.to_dict()
        data.pop("undecoded")
        _print_json({"store": args.store_choice.describe(), **data})
        return code
    out = sys.stdout.write
    out(f"store:   {args.store_choice.describe()}   prefix: {stats.prefix!r}\n")
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
        line += f"  ({_listed(stats.unreadable_keys, stats.unreadable)})"
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
    from ._clock import system_clock
    from ._ops.context import SecretChoice, build_plugin, open_store
    from ._ops.inspect import Check, run_doctor, secret_check

    choice = args.store_choice
    store = open_store(choice)
    try:
        try:
            opened = build_plugin(
                store,
                prefix=args.prefix,
                secrets=SecretChoice(encryption=not args.plaintext, secret_file=args.secret_file),
                read_doubled_prefix=args.read_doubled_prefix,
            )
        except RememberError as exc:
            # Still check the store: "no secret" and "no store" are worth knowing together.
            secret = Check("secret", "attention", _redact(exc.message))
            codec, now = None, system_clock()
        else:
            secret = secret_check(opened.secret_summary())
            codec, now = opened.plugin.core.codec, opened.plugin.core.clock()
            opened.plugin.close()  # it does not own the store; nothing of it is needed below
        checks = run_doctor(
            store,
            args.prefix,
            secret=secret,
            codec=codec,
            now=now,
            delay_ms=args.legacy_purge_delay_ms,
            memory=choice.kind == "memory",
            progress_stream=_progress_stream(),
            read_doubled_prefix=args.read_doubled_prefix,
        )
    finally:
        store.close()
    attention = [c.name for c in checks if c.status == "attention"]
    if args.json:
        _print_json(
            {
                "store": choice.describe(),
                "prefix": args.prefix,
                "healthy": not attention,
                "checks": [
                    {"name": c.name, "status": c.status, "message": c.message, **c.detail}
                    for c in checks
                ],
            }
        )
    else:
        sys.stdout.write(f"store: {choice.describe()}   prefix: {args.prefix!r}\n")
        for c in checks:
            sys.stdout.write(f"[{c.status}]".ljust(12) + f"{c.name:<8} {c.message}\n")
        if attention:
            sys.stdout.write(f"needs attention: {', '.join(attention)}\n")
        else:
            sys.stdout.write("all good\n")
    return EXIT_FAIL if attention else EXIT_OK


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
    from ._ops.transfer import export_entries

    with _opened(args) as opened:
        if args.decrypted:
            _stderr(
                f"{PROG}: warning: --decrypted writes every value in clear text; protect the "
                "output and delete it when done"
            )
        with _output(args.output) as out:
            result = export_entries(
                opened.plugin.core, out, decrypted=args.decrypted,
                progress_stream=_progress_stream(),
            )
    form = "decrypted entries" if args.decrypted else "encrypted envelopes"
    _stderr(f"exported {result.exported} {form}; skipped {result.expired} expired")
    if result.unreadable:
        _stderr(
            f"{PROG}: {result.unreadable} entries do not decrypt with the configured secrets and "
            f"were NOT exported: {_listed(result.unreadable_keys, result.unreadable)}"
        )
    if result.doubled_unread:
        _stderr(
            f"{PROG}: {result.doubled_unread} keys in 1.8.0's doubled-prefix layout were NOT "
            "exported: pass --read-doubled-prefix if the application reads them"
        )
    return EXIT_FAIL if result.unreadable or result.doubled_unread else EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    from ._ops.transfer import import_entries

    with _opened(args, writes=True) as opened:
        result = import_entries(
            opened.plugin.core, args.records, overwrite=args.overwrite,
            progress_stream=_progress_stream(),
        )
    problems = result.existing or result.unreadable
    if args.json:
        _print_json(result.to_dict())
    else:
        sys.stdout.write(
            f"imported {result.imported} entries; skipped {result.expired} past their deadline\n"
        )
        if result.existing:
            sys.stdout.write(
                f"kept {result.existing} existing entries (use --overwrite to replace them): "
                f"{_listed(result.existing_keys, result.existing)}\n"
            )
        if result.unreadable:
            sys.stdout.write(
                f"{result.unreadable} envelopes do not decrypt with the configured secrets and "
                f"were not imported: {_listed(result.unreadable_keys, result.unreadable)}\n"
            )
    return EXIT_FAIL if problems else EXIT_OK


def _cmd_rotate(args: argparse.Namespace) -> int:
    from ._ops.rotate import rotate

    with _opened(args, writes=True) as opened:
        result = rotate(opened.plugin.core, dry_run=args.dry_run,
                        progress_stream=_progress_stream())
    if args.json:
        _print_json(result.to_dict())
    else:
        verb = "would re-encrypt" if args.dry_run else "re-encrypted"
        sys.stdout.write(
            f"{verb} {result.rotated} of {result.examined} entries; {result.current} already "
            f"current, {result.expired} expired, {result.vanished} gone meanwhile\n"
        )
        if result.unreadable:
            sys.stdout.write(
                f"could not read {result.unreadable} entries (left untouched): "
                f"{_listed(result.unreadable_keys, result.unreadable)}\n"
            )
        if result.contended:
            sys.stdout.write(
                f"{result.contended} entries kept changing; run rotate again: "
                f"{_listed(result.contended_keys, result.contended)}\n"
            )
        if result.moved or result.shadowed:
            sys.stdout.write(
                f"{'would move' if args.dry_run else 'moved'} {result.moved} doubled-prefix "
                f"(1.8.0) entries into the single layout; {result.shadowed} shadowed by "
                "their single-layout twin (re-sealed in place, never deleted)\n"
            )
        if result.doubled_unread:
            sys.stdout.write(
                f"did NOT read {result.doubled_unread} keys in 1.8.0's doubled-prefix layout: "
                "if the application reads them (read_doubled_prefix=True), run again with "
                "--read-doubled-prefix before dropping the old secret\n"
            )
    return EXIT_OK if result.complete else EXIT_FAIL


def _confirm(question: str) -> bool:
    sys.stderr.write(question + " [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _cmd_reindex(args: argparse.Namespace) -> int:
    from ._ops.context import open_store
    from ._ops.reindex import reindex

    store = open_store(args.store_choice)
    try:
        result = reindex(store, args.prefix, progress_stream=_progress_stream())
    finally:
        store.close()
    if args.json:
        _print_json(
            {
                "keys": result.keys,
                "entries": result.entries,
                "indexed": result.indexed,
                "seconds": round(result.seconds, 3),
                "keys_per_second": round(result.rate),
            }
        )
    else:
        sys.stdout.write(
            f"indexed {result.indexed} of {result.entries} entries ({result.keys} keys under "
            f"prefix {args.prefix!r}) in {result.seconds:.1f} s, {result.rate:,.0f} entries/s\n"
        )
    return EXIT_OK


def _cmd_purge_legacy(args: argparse.Namespace) -> int:
    from ._ops.context import open_store
    from ._purge import sweep_legacy

    store = open_store(args.store_choice)
    try:
        counted = sweep_legacy(store, args.prefix, dry_run=True)
        if args.dry_run or counted.found == 0:
            result = counted
        else:
            if not args.yes and not _confirm(
                f"Delete {counted.found} legacy (pre-v2) entries under prefix {args.prefix!r} "
                f"from {args.store_choice.describe()}?"
            ):
                _stderr("aborted: nothing deleted")
                return EXIT_FAIL
            result = sweep_legacy(store, args.prefix)
    finally:
        store.close()
    if args.json:
        _print_json(
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
        _stderr(
            f"{PROG}: the store refused {result.failed_batches} delete batches and "
            f"{result.failed_listings} listings; run again"
        )
        return EXIT_FAIL
    return EXIT_OK


# -- entry point ---------------------------------------------------------------------------


def _validate(args: argparse.Namespace) -> None:
    """Every check that needs no store: usage errors (exit 2) before any I/O."""
    sub: argparse.ArgumentParser = args.subparser
    if getattr(args, "scope", None) is not None:
        args.identity = _identity(args, sub)
    if "redis_url" in vars(args) or "vercel_kv" in vars(args):
        args.store_choice = _store_choice(args, sub)
        _run.refresh_secrets(args.store_choice)
    if getattr(args, "secret_file", None) is not None and getattr(args, "plaintext", False):
        sub.error("argument --secret-file: not allowed with --plaintext")
    if args.command == "export" and args.output is not None and os.path.lexists(args.output):
        sub.error(f"argument -o/--output: {args.output} exists; choose a new file")
    if args.command == "rotate" and args.plaintext:
        sub.error("argument --plaintext: there is nothing to rotate without encryption")
    if args.command == "import":
        args.records = _read_records(args.input, sub)
    if args.command == "purge-legacy":
        from ._purge import nested_prefix, nested_prefix_message

        if not args.prefix:
            sub.error("argument --prefix: the legacy purge is disabled for an empty prefix")
        segment = nested_prefix(args.prefix)
        if segment is not None:
            sub.error(f"argument --prefix: {nested_prefix_message(args.prefix, segment)}")
        if not (args.dry_run or args.yes or sys.stdin.isatty()):
            sub.error("argument --yes: needed when standard input is not a terminal (cron)")


def _read_records(path: str, sub: argparse.ArgumentParser) -> list[ImportRecord]:
    from ._ops.transfer import parse_records

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


def _redact(text: str) -> str:
    from ._ops.context import redact

    return redact(text, _run.secrets)


class _StderrFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {_redact(record.getMessage())}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    parser = build_parser()
    _run.secrets = []
    try:
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None and callable(getattr(args, "func", None)):
            args.handler = args.func  # a subcommand registered with the func convention
        if getattr(args, "handler", None) is None:
            sub = getattr(args, "subparser", parser)
            sub.print_usage(sys.stderr)
            sub.exit(EXIT_USAGE, f"{sub.prog}: error: choose a command (see --help)\n")
        if "subparser" not in vars(args):  # a subcommand registered elsewhere (serve)
            args.subparser = parser
        _validate(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter())
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("remember_sync")
    logger.addHandler(handler)
    try:
        code: int = args.handler(args)
        return code
    except SystemExit as exc:  # a usage error found while running (e.g. rotate --plaintext)
        return exc.code if isinstance(exc.code, int) else EXIT_FAIL
    except RememberError as exc:
        _stderr(f"{PROG}: error: {_redact(exc.message)}")
        return EXIT_FAIL
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            # The reader went away (`| head`): stop quietly, as cat and grep do.
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - swallow the final flush
            return EXIT_FAIL
        _stderr(f"{PROG}: error: {_redact(str(exc))}")
        return EXIT_FAIL
    except KeyboardInterrupt:
        _stderr(f"{PROG}: interrupted")
        return EXIT_INTERRUPTED
    finally:
        logger.removeHandler(handler)
