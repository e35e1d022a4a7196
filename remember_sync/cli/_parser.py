"""The command line's parser: argument types, shared option groups, every subcommand."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable
from typing import Any

from .._config import REDIS_URL_ENV
from .._keys import check_key, check_pattern
from ..types import SCOPES
from ._common import _SECRETS_EPILOG, _STORE_EPILOG, PROG, Handler, _redis_url

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


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type: a base-10 int of at least *minimum* (*what* names the unit)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}; got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a whole number of seconds")
_non_negative_int = _int_at_least(0, "a whole number")


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
        f"redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db], or "
        f"Cluster, redis+cluster://[[user]:password@]host:port[,host:port...] (default: "
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


class Commands:
    """Adds the subcommands: the option groups they share, one formatter, the store epilog.

    :param subs: the top-level parser's subparsers.
    """

    def __init__(self, subs: Any) -> None:
        self.subs = subs
        self.epilog = _STORE_EPILOG.format(env=REDIS_URL_ENV)
        self.store, self.as_json = _store_options(), _json_option()
        self.ident = _identity_options()
        self.reads, self.writes = _secret_options(writes=False), _secret_options(writes=True)

    def add(
        self,
        name: str,
        handler: Handler | None,
        help_text: str,
        parents: list[argparse.ArgumentParser],
        *,
        needs_store: bool = False,
        description: str | None = None,
        subs: Any = None,
    ) -> argparse.ArgumentParser:
        """One subcommand (of *subs*, default the top level's) run by *handler*."""
        sub: argparse.ArgumentParser = (subs or self.subs).add_parser(
            name,
            parents=parents,
            help=("* " if needs_store else "") + help_text,
            description=(description or help_text)
            + ("\n\nNeeds a real store (--redis-url or --vercel-kv)." if needs_store else ""),
            epilog=self._epilog(parents),
            formatter_class=_Formatter,
        )
        sub.set_defaults(handler=handler, needs_store=needs_store, subparser=sub)
        return sub

    def _epilog(self, parents: list[argparse.ArgumentParser]) -> str | None:
        """Where the store comes from; and the secrets, for commands that take them."""
        if self.store not in parents:
            return None
        secrets = self.reads in parents or self.writes in parents
        return self.epilog + (_SECRETS_EPILOG if secrets else "")


def top_level() -> tuple[argparse.ArgumentParser, Commands]:
    """The ``remember-sync`` parser, without subcommands, and what adds them."""
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
    return parser, Commands(subs)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("remember-sync")
    except Exception:  # noqa: BLE001 - not installed (running from a checkout)
        return "unknown"
