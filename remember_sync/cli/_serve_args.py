"""The ``serve`` command's arguments, parsed without importing the server.

Building the CLI's parser imports this module only; the MCP server
(:mod:`remember_sync.cli.serve` and :mod:`remember_sync.mcp`) is imported when
``serve`` runs, or when an option's value must be checked by its rules.
"""

from __future__ import annotations

import argparse
import ipaddress

from .._config import (
    BOUND_ENV,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ENDED_PER_PRINCIPAL,
    DEFAULT_MAX_ENDED_SESSIONS,
    DEFAULT_MAX_ENTRIES,
    DEFAULT_PATH,
    ENDED_ENV,
    MAX_VALUE_BYTES_ENV,
    METRICS_PATH,
    QUOTA_BYTES_ENV,
    QUOTA_ENTRIES_ENV,
    RATE_LIMIT_ENV,
    REDIS_URL_ENV,
    scope_list,
)
from .._core import DEFAULT_MAX_VALUE_BYTES
from ..errors import RememberError
from ._common import _flag, _redis_url
from ._parser import Commands, _int_at_least


def _run_serve(args: argparse.Namespace) -> int:
    from .serve import run_serve

    return run_serve(args)


def _port(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number; got {text!r}") from None
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"must be 0..65535; got {value}")
    return value


_whole = _int_at_least(0, "whole seconds")
_positive = _int_at_least(1, "a whole number")


def _prefix(text: str) -> str:
    if not all(c.isalnum() or c in "_-." for c in text):
        raise argparse.ArgumentTypeError(
            f"may only use letters, digits, '_', '-' and '.' (MCP tool names); got {text!r}"
        )
    return text


def _user(text: str) -> str:
    from ..mcp.auth import check_local_user

    try:
        return check_local_user(text)
    except RememberError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _origin(text: str) -> str:
    from ..mcp._wsgi import check_cors_origin

    try:
        # McpServer's own rule, so a value passing here never fails the start later.
        return check_cors_origin(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a browser origin scheme://host[:port] (http or https, a valid port, no "
            f"path or wildcard); got {text!r}"
        ) from None


def _rate(text: str) -> str:
    from ..mcp._ratelimit import check_rate

    try:
        check_rate(text, "")
    except RememberError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an IP address; got {text!r}") from None


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default: %(default)s, loopback only; another "
        "interface exposes the server to the network: it needs --auth-tokens (and TLS in "
        "front) or an explicit --allow-anonymous)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=8765,
        help="TCP port (default: %(default)s; 0 picks a free one)",
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--redis-url",
        metavar="URL",
        type=_redis_url,
        help=f"keep memory in Redis (or set {REDIS_URL_ENV} or REDIS_URL, which keep a "
        "password off the command line; see docs/configuration.rst); default: in-process "
        "memory",
    )
    store.add_argument(
        "--vercel-kv",
        action="store_true",
        help="keep memory in Vercel KV (KV_REST_API_URL, KV_REST_API_TOKEN)",
    )
    parser.add_argument(
        "--tools-prefix",
        type=_prefix,
        default="",
        metavar="P",
        help="prefix of the memory tool names (e.g. memory_)",
    )
    parser.add_argument(
        "--allowed-scopes",
        type=_flag(scope_list),
        default=["session", "user", "tool"],
        metavar="LIST",
        help="scopes the model may use, comma-separated (default: "
        "session,user,tool; add global only if every caller may read it)",
    )
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument(
        "--auth-tokens",
        metavar="FILE",
        help="require bearer tokens: a file of `token principal` lines (or a "
        "JSON object token -> principal), mode 0600",
    )
    auth.add_argument(
        "--no-token",
        action="store_true",
        help="loopback only: check no token; every caller is the local user (--user). "
        "This trusts every process on this machine, of every account",
    )
    auth.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="check no token; callers are anonymous (no user memory; session memory lasts "
        "one MCP session). Needed to listen on a non-loopback host without --auth-tokens",
    )
    auth.add_argument(
        "--oauth-issuer",
        metavar="URL",
        help="require OAuth access tokens (JWTs) of this authorization server; each caller is "
        "its token's sub. Needs --oauth-audience and the oauth extra "
        "(pip install 'remember-sync[oauth]')",
    )
    parser.add_argument(
        "--oauth-audience",
        metavar="AUD",
        help="the audience (aud) the access tokens must name, e.g. this server's URL",
    )
    parser.add_argument(
        "--oauth-jwks-url",
        metavar="URL",
        help="the issuer's JWKS (default: the jwks_uri of its RFC 8414 / OpenID metadata)",
    )
    parser.add_argument(
        "--oauth-resource",
        metavar="URL",
        help="this server's public MCP URL, published in /.well-known/oauth-protected-resource "
        "(default: from each request's Host; set it behind a proxy)",
    )
    parser.add_argument(
        "--user",
        type=_user,
        metavar="NAME",
        help="the user id of callers holding the local token (or of every caller with "
        "--no-token); default: the OS login name",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="where the local access token is kept (created 0600 when missing, reused on "
        "restart); default: $XDG_CONFIG_HOME/remember-sync/serve-token or "
        "~/.config/remember-sync/serve-token",
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        type=_origin,
        default=[],
        metavar="ORIGIN",
        help="allow browser clients on ORIGIN (scheme://host[:port]) to call the server "
        "(CORS); repeat for several",
    )
    parser.add_argument(
        "--default-ttl",
        type=_whole,
        default=0,
        metavar="SECONDS",
        help="TTL of memories stored without one (default: none)",
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive,
        metavar="N",
        help="bound of the in-process memory store in bytes (default: "
        f"${BOUND_ENV['max_bytes'][0]} or {DEFAULT_MAX_BYTES} = 256 MiB); when full it evicts "
        "from the caller (principal) holding the most",
    )
    parser.add_argument(
        "--integrity",
        choices=("default", "verified"),
        default=None,
        help="verified: every namespace keeps a sealed manifest and reads refuse deletion, "
        "replay and rollback by the store (default: $REMEMBER_INTEGRITY or default; see "
        "docs/verified.rst)",
    )
    parser.add_argument(
        "--witness",
        metavar="W",
        default=None,
        help="with --integrity verified: a file path or a redis:// URL outside the store that "
        "records each namespace's latest state, so a rolled-back store is refused (default: "
        "$REMEMBER_WITNESS)",
    )
    parser.add_argument(
        "--keystore",
        metavar="K",
        default=None,
        help="seal each person's entries under a key of their own kept here, apart from the "
        "store -- a file path or a redis:// URL -- so that erase reaches backups too "
        "(crypto-shredding, docs/audit.rst; default: $REMEMBER_KEYSTORE)",
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        default=None,
        help="record every write in the tamper-evident audit trail (docs/audit.rst; default: "
        "$REMEMBER_AUDIT, else off)",
    )
    parser.add_argument(
        "--max-entries",
        type=_positive,
        metavar="N",
        help="bound of the in-process memory store in entries (default: "
        f"${BOUND_ENV['max_entries'][0]} or {DEFAULT_MAX_ENTRIES})",
    )
    parser.add_argument(
        "--quota-entries",
        type=_positive,
        metavar="N",
        help=f"entries each caller (principal) may hold across all of its scopes (default: "
        f"${QUOTA_ENTRIES_ENV} or none); a write beyond it is a REMEMBER_QUOTA_EXCEEDED "
        "tool error",
    )
    parser.add_argument(
        "--quota-bytes",
        type=_positive,
        metavar="N",
        help=f"bytes (keys and stored values) each caller may hold (default: "
        f"${QUOTA_BYTES_ENV} or none)",
    )
    parser.add_argument(
        "--max-ended-sessions",
        type=_positive,
        metavar="N",
        help="in-process memory store: how many ended sessions (DELETE) the server remembers "
        f"at once (default: ${ENDED_ENV['max_ended_sessions']} or "
        f"{DEFAULT_MAX_ENDED_SESSIONS}); when full, DELETE answers 503",
    )
    parser.add_argument(
        "--max-ended-per-principal",
        type=_positive,
        metavar="N",
        help="each caller's (principal's) share of those, every anonymous caller together "
        f"counting as one (default: ${ENDED_ENV['max_ended_per_principal']} or "
        f"{DEFAULT_MAX_ENDED_PER_PRINCIPAL}); a "
        "caller that fills its share gets 503 for its own DELETE, nobody else does",
    )
    parser.add_argument(
        "--max-value-bytes",
        type=_positive,
        metavar="N",
        help="largest value a memory may hold, in bytes of its JSON text (default: "
        f"${MAX_VALUE_BYTES_ENV} or {DEFAULT_MAX_VALUE_BYTES} = 1 MiB); the HTTP body limit "
        "follows it",
    )
    parser.add_argument(
        "--rate-limit",
        type=_rate,
        metavar="RATE",
        help="at most RATE requests per caller (principal; an anonymous one by address, "
        "however many sessions it opens), e.g. 60/minute, in any moving window; more get 429 "
        "with Retry-After. Shared by every worker through Redis or Vercel KV "
        f"(default: ${RATE_LIMIT_ENV}; none). Needs pip install 'remember-sync[limits]'",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        type=_address,
        metavar="ADDR",
        help="a reverse proxy in front of the server (repeatable): for requests from ADDR "
        "the client's address is the last X-Forwarded-For entry that is not a trusted "
        "proxy (the rate limit counts anonymous callers by it); without it, "
        "X-Forwarded-For is ignored",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help=f"record the remember_sync.* metrics and serve them at {METRICS_PATH} in the "
        "Prometheus text format, to loopback clients only (and with a valid token when "
        "callers need one)",
    )
    parser.add_argument(
        "--embedder",
        metavar="NAME",
        help="rank search_memories by meaning too, with this embedder: 'wordllama' (needs pip "
        "install 'remember-sync[embeddings]'; the model ships in the wheel, loaded offline) "
        "or MODULE:NAME (see docs/search.rst)",
    )
    parser.add_argument(
        "--path", default=DEFAULT_PATH, help="the MCP endpoint path (default: %(default)s)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log every request to standard error"
    )
    parser.set_defaults(handler=_run_serve, needs_store=False, subparser=parser)
    return parser


def add_serve_command(c: Commands) -> None:
    """``serve``."""
    parser = c.add(
        "serve",
        _run_serve,
        "run an MCP server giving models encrypted memory (Streamable HTTP)",
        [],
        description="Run an MCP server (Streamable HTTP, JSON responses) hosting the memory "
        "tools remember_this, recall, forget, list_memories and search_memories. Point any "
        "MCP client at "
        "http://HOST:PORT/mcp. Secrets come from REMEMBER_SECRET; with --redis-url or "
        "--vercel-kv it is required, while the in-memory store falls back to the development "
        "file .frontmcp/remember-secret.json in the working directory.",
    )
    _configure(parser)

