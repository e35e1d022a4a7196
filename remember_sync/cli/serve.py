"""``remember-sync serve``: run the MCP server on a threaded stdlib WSGI server.

Who the callers are in each mode (the local token file, ``--no-token``,
``--allow-anonymous``, ``--auth-tokens``, ``--oauth-issuer``), the memory
store's bounds and what it prints on start: ``remember-sync serve --help``,
``docs/clients.rst`` and ``docs/mcp.rst``.  Anything but a loopback host needs
``--auth-tokens``, OAuth or ``--allow-anonymous`` (else exit 2), and the access
token is printed only when standard output is a terminal (never into a log).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from .._config import (
    DEFAULT_PATH,
    METRICS_PATH,
    RATE_LIMIT_ENV,
    StoreSettings,
    env_rate_limit,
    store_settings,
)
from .._keys import layout_marker_key
from .._progress import is_tty
from ..errors import RememberError
from ..mcp._banner import Access, access_lines, client_lines, url_for_clients
from ..mcp._ratelimit import check_rate
from ..mcp.app import ended_session_caps, plugin_from_options
from ..mcp.auth import (
    StaticTokenVerifier,
    TokenVerifier,
    check_local_user,
    default_token_file,
    load_or_create_local_token,
)
from ..mcp.httpd import KeepAliveWSGIServer, WSGIApp, make_server
from ..mcp.oauth import OAuthVerifier
from ..mcp.server import McpServer
from ..stores.base import Store
from ..stores.memory import MemoryStore
from ._common import PROG

__all__ = ["run_serve", "run_server"]

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _store_description(chosen: StoreSettings, store: Store) -> str:
    bounds = ""
    if isinstance(store, MemoryStore):
        bounds = f"; at most {_size(store.max_bytes)}, {store.max_entries} entries"
    from .._ops.context import describe_store

    return describe_store(chosen, memory=f"memory (in-process; lost on exit{bounds})")


def _size(nbytes: int | None) -> str:
    mib = 1024 * 1024
    if nbytes is not None and nbytes % mib == 0:
        return f"{nbytes // mib} MiB"
    return f"{nbytes} bytes"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host values a loopback server accepts (a DNS-rebinding guard); None elsewhere."""
    if host not in _LOOPBACK_HOSTS:
        return None
    names = ["127.0.0.1", "localhost", "[::1]"]
    return frozenset(names + [f"{n}:{port}" for n in names])


def _check_usage(args: argparse.Namespace) -> None:
    """Refuse flag combinations that cannot mean anything (argparse exit 2, nothing started)."""
    parser: argparse.ArgumentParser = args.subparser
    loopback = args.host in _LOOPBACK_HOSTS
    if args.oauth_issuer and not args.oauth_audience:
        parser.error("--oauth-issuer needs --oauth-audience (the aud its tokens must name)")
    oauth_extras = [
        flag
        for flag, value in (
            ("--oauth-audience", args.oauth_audience),
            ("--oauth-jwks-url", args.oauth_jwks_url),
            ("--oauth-resource", args.oauth_resource),
        )
        if value
    ]
    if oauth_extras and not args.oauth_issuer:
        parser.error(f"{', '.join(oauth_extras)} only go with --oauth-issuer URL")
    if args.oauth_issuer and (args.user is not None or args.token_file is not None):
        parser.error(
            "--user and --token-file belong to the local token; with --oauth-issuer each "
            "caller is its access token's sub"
        )
    if args.user is not None and (args.auth_tokens or args.allow_anonymous):
        parser.error(
            "--user names the local user of the default token or of --no-token; with "
            "--auth-tokens each token names its principal, and --allow-anonymous has none"
        )
    if args.token_file is not None and (args.auth_tokens or args.allow_anonymous or args.no_token):
        parser.error(
            "--token-file is the local access token of the default mode; it cannot go with "
            "--auth-tokens, --no-token or --allow-anonymous"
        )
    if args.no_token and not loopback:
        parser.error(
            f"--no-token is only allowed on a loopback host (127.0.0.1, ::1, localhost), not "
            f"{args.host!r}: it would make anyone who can reach the port the local user"
        )
    if not loopback and not (args.auth_tokens or args.allow_anonymous or args.oauth_issuer):
        parser.error(
            f"refusing to listen on {args.host!r} without authentication: anyone who can "
            "reach the port could use the memory tools. Pass --auth-tokens FILE or "
            "--oauth-issuer URL (and put TLS in front), or --allow-anonymous to accept "
            "anonymous callers"
        )


def _access(args: argparse.Namespace) -> tuple[Access, TokenVerifier | None]:
    """Who callers are, and the verifier that says so (reads or creates the token file)."""
    if args.auth_tokens:
        table = StaticTokenVerifier.from_file(args.auth_tokens)
        access = Access(
            "auth-tokens", auth_tokens_file=args.auth_tokens, principals=len(table.principals)
        )
        return access, table
    if args.oauth_issuer:
        oauth = OAuthVerifier(
            args.oauth_issuer,
            args.oauth_audience,
            jwks_url=args.oauth_jwks_url,
            resource=args.oauth_resource,
        )
        return Access("oauth", issuer=oauth.issuer), oauth
    if args.allow_anonymous:
        return Access("anonymous"), None
    user = check_local_user(args.user)
    if args.no_token:
        return Access("no-token", user=user), None
    path = Path(os.path.abspath(args.token_file)) if args.token_file else default_token_file()
    token, created = load_or_create_local_token(path)
    access = Access("token", user=user, token_file=path, token=token, created=created)
    return access, StaticTokenVerifier({token: user})


def run_serve(args: argparse.Namespace) -> int:
    """Run ``remember-sync serve`` until Ctrl-C or SIGTERM; return the exit code."""
    _check_usage(args)
    if args.verbose:
        logging.getLogger("remember_sync.mcp.access").setLevel(logging.INFO)
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        chosen = store_settings(os.environ, redis_url=args.redis_url, vercel_kv=args.vercel_kv)
        redis_url = chosen.redis_url
        args.vercel_kv = chosen.kind == "vercel-kv"  # the environment may have chosen it
        plugin = plugin_from_options(
            redis_url=redis_url,
            vercel_kv=args.vercel_kv,
            tools_prefix=args.tools_prefix,
            allowed_scopes=args.allowed_scopes,
            default_ttl=args.default_ttl,
            max_bytes=args.max_bytes,
            max_entries=args.max_entries,
            max_value_bytes=args.max_value_bytes,
            **{
                k: v
                for k in ("integrity", "witness", "keystore")
                if (v := getattr(args, k)) is not None
            },
            **({"audit": True} if args.audit else {}),
            **({"search": {"embedder": args.embedder}} if args.embedder else {}),
            quota_entries=args.quota_entries,
            quota_bytes=args.quota_bytes,
        )
    except RememberError as exc:
        sys.stderr.write(f"{PROG} serve: error: {exc.message}\n")
        return 1
    try:
        if plugin.store_type != "memory":
            try:
                # Fail at start, not on the first tool call: one read of the layout marker.
                plugin.store.get(layout_marker_key(plugin.key_prefix))
            except RememberError as exc:
                from .._ops.context import describe_store, redact, secret_values

                message = redact(exc.message, secret_values(os.environ, chosen))
                sys.stderr.write(
                    f"{PROG} serve: error: cannot reach the store ({describe_store(chosen)}): "
                    f"{message}\n"
                )
                return 1
        try:
            # After the store check: a start that fails creates no token file.
            access, verifier = _access(args)
        except RememberError as exc:
            sys.stderr.write(f"{PROG} serve: error: {exc.message}\n")
            return 1
        if args.host not in _LOOPBACK_HOSTS and access.mode == "anonymous":
            sys.stderr.write(
                f"{PROG} serve: warning: listening on {args.host} with --allow-anonymous: "
                "anyone who can reach this port can use the memory tools\n"
            )
        options: dict[str, Any] = {"token_verifier": verifier, "path": args.path}
        options["rate_limit"] = args.rate_limit or env_rate_limit(os.environ)
        if args.metrics:
            options["metrics_path"] = METRICS_PATH
        if args.cors_origin:
            options["cors_origins"] = list(args.cors_origin)
        if access.mode == "no-token":
            local_user = access.user
            assert local_user is not None
            # Every caller is the local user; no Authorization header is read.
            options["principal_resolver"] = lambda environ: local_user
        try:
            if not args.rate_limit and options["rate_limit"]:
                check_rate(options["rate_limit"], RATE_LIMIT_ENV)  # name the variable if bad
            given = {o: getattr(args, o) for o in ("max_ended_sessions", "max_ended_per_principal")}
            options.update(ended_session_caps(plugin, os.environ, given))
            app = McpServer(plugin, **options)
        except RememberError as exc:
            sys.stderr.write(f"{PROG} serve: error: {exc.message}\n")
            return 1
        return _run(
            app,
            host=args.host,
            port=args.port,
            store=_store_description(chosen, plugin.store),
            access=access,
            trusted_proxies=frozenset(args.trusted_proxy),
        )
    finally:
        plugin.close()


def _default_access(app: McpServer) -> Access:
    verifier = app.token_verifier
    if verifier is None:
        return Access("anonymous")
    if isinstance(verifier, StaticTokenVerifier):
        return Access("auth-tokens", principals=len(verifier.principals))
    if isinstance(verifier, OAuthVerifier):
        return Access("oauth", issuer=verifier.issuer)
    return Access("verifier")


def _describe(app: McpServer, store: str | None, access: Access) -> list[str]:
    keyring = app.plugin.keyring
    secret = keyring.source if keyring is not None else "encryption disabled"
    scopes = app.plugin.tools_options.get("allowed_scopes") or []
    tools = ", ".join(d["name"] for d in app.tool_definitions()) or "none"
    lines = [
        f"store: {store or app.plugin.store_type} | secret: {secret} | auth: {access.summary()}",
        f"tools: {tools}"
        + (
            f"; allowed scopes: {', '.join(scopes)}"
            if app.plugin.tools_options.get("enabled")
            else ""
        ),
    ]
    operations = []
    if app.rate_limiter is not None:
        operations.append(f"rate limit: {app.rate_limiter.rate} per caller")
    if app.metrics_path is not None:
        operations.append(f"metrics: {app.metrics_path} (loopback clients only)")
    if operations:
        lines.append(" | ".join(operations))
    return lines


def _behind(app: WSGIApp, trusted: frozenset[str]) -> WSGIApp:
    """*app* behind the reverse proxies at *trusted* addresses: for a request one of them
    sends, ``REMOTE_ADDR`` becomes the last ``X-Forwarded-For`` entry that is not itself a
    trusted proxy (the nearest client no trusted hop vouches for); any other request's
    ``X-Forwarded-For`` is ignored, since a client may write anything there."""

    def forwarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REMOTE_ADDR") in trusted:
            header = str(environ.get("HTTP_X_FORWARDED_FOR") or "")
            hops = [hop.strip() for hop in header.split(",") if hop.strip()]
            client = next((hop for hop in reversed(hops) if hop not in trusted), None)
            if client is not None:
                environ = {**environ, "REMOTE_ADDR": client}
        return app(environ, start_response)

    return forwarded


def run_server(
    app: McpServer | WSGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    store: str | None = None,
) -> int:
    """Serve *app* on the threaded keep-alive server until Ctrl-C or SIGTERM.

    Use it to run an :class:`McpServer` carrying your own tools::

        if __name__ == "__main__":
            sys.exit(run_server(server, port=8765))

    Prints one line saying where it listens (and, for an :class:`McpServer`,
    which store, secret source and auth it uses -- never a secret).  On a
    loopback host, an :class:`McpServer` without ``allowed_hosts`` only
    accepts loopback ``Host`` headers (a DNS-rebinding guard).
    """
    return _run(app, host=host, port=port, store=store, access=None)


def _run(
    app: McpServer | WSGIApp,
    *,
    host: str,
    port: int,
    store: str | None,
    access: Access | None,
    trusted_proxies: frozenset[str] = frozenset(),
) -> int:
    """:func:`run_server`; with *access* (``serve``) also the identity lines and client configs."""
    try:
        httpd = make_server(host, port, _behind(app, trusted_proxies) if trusted_proxies else app)
    except OSError as exc:
        sys.stderr.write(f"{PROG} serve: error: cannot listen on {host}:{port}: {exc.strerror}\n")
        return 1
    # A plain flag, not a threading.Event: the handler runs in the main thread between
    # two bytecodes, possibly inside Event.wait() holding the Event's lock, and
    # Event.set() would then wait for that lock forever (a server ignoring Ctrl-C).
    stop: list[bool] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.append(True)

    # Installed before the startup line: whoever waits for that line may signal at once.
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        path = DEFAULT_PATH
        lines: list[str] = []
        extra: list[str] = []
        if isinstance(app, McpServer):
            path = app.path or "/"
            if app.allowed_hosts is None:
                # Known only after binding: port 0 picks a free port.
                app.allowed_hosts = _allowed_hosts(host, httpd.server_port)
            lines = _describe(app, store, access or _default_access(app))
            if access is not None:
                scopes = list(app.plugin.tools_options.get("allowed_scopes") or [])
                lines += access_lines(access, scopes)
                lines.append(
                    "connect a client (the token is shown only on a terminal; more in "
                    "docs/clients.rst):"
                )
                extra = client_lines(
                    access,
                    url_for_clients(host, httpd.server_port, path),
                    show_token=is_tty(sys.stdout),
                )
        url = f"http://{_url_host(host)}:{httpd.server_port}{path}"
        # One line says it all (where, which store, which secret source); then the rest.
        head = " | ".join([f"MCP server listening on {url}", *lines[:1]])
        text = "".join(f"{PROG}: {line}\n" for line in [head, *lines[1:]])
        text += "".join(f"{line}\n" for line in extra)
        sys.stdout.write(text + f"{PROG}: Press Ctrl-C to stop.\n")
        sys.stdout.flush()
        return _serve_until_stopped(httpd, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        httpd.server_close()


def _serve_until_stopped(httpd: KeepAliveWSGIServer, stop: list[bool]) -> int:
    worker = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="remember-sync-serve",
        daemon=True,
    )
    worker.start()
    code = 0
    try:
        while not stop:
            time.sleep(0.1)  # a signal handler runs during the sleep, then it resumes
            if not worker.is_alive():  # pragma: no cover - serve_forever died
                sys.stderr.write(f"{PROG} serve: the server loop stopped unexpectedly\n")
                code = 1
                break
    except KeyboardInterrupt:  # pragma: no cover - the signal handler normally catches it
        pass
    finally:
        httpd.shutdown()
        worker.join(timeout=5)
    sys.stdout.write(f"{PROG}: stopped\n")
    sys.stdout.flush()
    return code
