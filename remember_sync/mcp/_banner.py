"""What ``remember-sync serve`` prints on start: who callers are, what scopes mean, how to connect.

The access token itself is printed only when *show_token* is true, which
``serve`` sets when standard output is a terminal (an interactive user, as
Jupyter does).  Otherwise -- a log file, systemd, CI -- every place the token
would go shows where to read it instead (``$(cat PATH)``).  Nothing here logs.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

#: The npm packages the printed configuration pins (the versions the docs were checked with).
MCP_REMOTE = "mcp-remote@0.15.1"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"

Mode = Literal["token", "no-token", "anonymous", "auth-tokens", "oauth", "verifier"]
_HTTP_OK_FOR_MCP_REMOTE = ("127.0.0.1", "localhost")  # other http:// URLs need --allow-http
_WILDCARD = ("0.0.0.0", "::", "")  # noqa: S104 - names, not a bind


@dataclass(frozen=True)
class Access:
    """Who the callers of a server are, for its startup lines.

    :param mode: ``token`` (a local token; holders are *user*), ``no-token``
        (every caller is *user*), ``anonymous``, ``auth-tokens`` (a token
        table from *auth_tokens_file*), ``oauth`` (access tokens of *issuer*) or
        ``verifier`` (any other verifier).
    :param token: the local token; printed only with ``show_token``.
    :param created: the token file was created by this start.
    """

    mode: Mode
    user: str | None = None
    token_file: Path | None = None
    token: str | None = field(default=None, repr=False)
    created: bool = False
    auth_tokens_file: str | None = None
    principals: int = 0
    issuer: str | None = None

    def summary(self) -> str:
        """The short ``auth:`` part of the first startup line."""
        if self.mode == "token":
            return f"local token (holders are the user {self.user!r})"
        if self.mode == "no-token":
            return f"none, --no-token (every local caller is the user {self.user!r})"
        if self.mode == "anonymous":
            return "none (anonymous callers)"
        if self.mode == "auth-tokens":
            return f"bearer tokens for {self.principals} principal(s)"
        if self.mode == "oauth":
            return f"OAuth access tokens of {self.issuer}"
        return "bearer tokens"


def access_lines(access: Access, scopes: list[str]) -> list[str]:
    """Which mode is on and what each allowed scope means in it."""
    lines: list[str] = []
    if access.mode == "token":
        verb = "created a new" if access.created else "using the"
        lines.append(
            f"{verb} access token in {access.token_file} (mode 0600, reused on restart): "
            f"callers presenting it are the local user {access.user!r}; others get 401"
        )
    elif access.mode == "no-token":
        lines.append(
            f"--no-token: no token is checked; every process that can reach this port "
            f"(any local account, any local program) is the local user {access.user!r}"
        )
    elif access.mode == "anonymous":
        lines.append(
            "--allow-anonymous: callers are anonymous; memory lasts one MCP session and "
            "stateless (2026-07-28) clients get none"
        )
    elif access.mode == "auth-tokens":
        lines.append(
            f"bearer tokens from {access.auth_tokens_file}: each caller is its token's "
            "principal; others get 401"
        )
    elif access.mode == "oauth":
        lines.append(
            f"OAuth: access tokens (JWTs) signed by {access.issuer}; each caller is its token's "
            "sub; others get 401 linking /.well-known/oauth-protected-resource"
        )
    else:
        lines.append("bearer tokens: each caller is the principal its token verifies as")
    meanings = _scope_meanings(access)
    lines.extend(f"  scope {s}: {meanings[s]}" for s in scopes if s in meanings)
    return lines


def _scope_meanings(access: Access) -> dict[str, str]:
    if access.mode == "anonymous":
        return {
            "session": "this MCP session only; refused for stateless (2026-07-28) clients",
            "user": "refused (REMEMBER_IDENTITY_REQUIRED): callers are anonymous",
            "tool": "the running tool, within this MCP session; refused for stateless clients",
            "global": "shared by every caller",
        }
    who = f"the local user {access.user!r}" if access.user else "the token's principal"
    return {
        "session": f"this MCP session; for stateless (2026-07-28) clients, {who} "
        "across their requests",
        "user": f"{who}, across all sessions and clients",
        "tool": "the running tool, for the same caller as session",
        "global": "shared by every caller",
    }


@dataclass(frozen=True)
class _TokenForms:
    """Where a client's token comes from, in each kind of configuration."""

    json: str  # a JSON string value (a desktop host's config)
    shell: str  # a shell word (the Inspector command line)
    ts: str  # a TypeScript expression
    py: str  # a Python expression


def client_lines(access: Access, url: str, *, show_token: bool) -> list[str]:
    """Ready-to-paste configuration for the common clients (indented, unprefixed)."""
    forms = _token_forms(access, show_token=show_token)
    remote_args = ["-y", MCP_REMOTE, url]
    if url.startswith("http://") and not url.startswith(
        tuple(f"http://{h}:" for h in _HTTP_OK_FOR_MCP_REMOTE)
    ):
        remote_args.append("--allow-http")
    server: dict[str, object] = {"command": "npx", "args": remote_args}
    inspector = " ".join(
        shlex.quote(a) for a in ["npx", "-y", INSPECTOR, "--cli", url, "--transport", "http"]
    )
    if forms is None:
        ts = f'new StreamableHTTPClientTransport(new URL("{url}"))'
        py = f'Client("{url}")'
    else:
        # No spaces inside args: some hosts split them (mcp-remote's README); env values may.
        server["args"] = [*remote_args, "--header", "Authorization:${REMEMBER_TOKEN}"]
        server["env"] = {"REMEMBER_TOKEN": f"Bearer {forms.json}"}
        inspector += f' --header "Authorization: Bearer {forms.shell}"'
        ts = (
            f'new StreamableHTTPClientTransport(new URL("{url}"), '
            f"{{ requestInit: {{ headers: {{ Authorization: `Bearer ${{{forms.ts}}}` }} }} }})"
        )
        py = (
            f'Client(streamable_http_client("{url}", http_client=httpx2.AsyncClient('
            f'headers={{"Authorization": "Bearer " + {forms.py}}})))'
        )
    return [
        "  Desktop host (Claude Desktop, Cursor, Windsurf...) via mcp-remote, in its config:",
        "    " + json.dumps({"mcpServers": {"remember": server}}),
        "  MCP Inspector CLI (the UI: the same URL, transport Streamable HTTP, this header):",
        f"    {inspector} --method tools/list",
        "  TypeScript SDK (1.x @modelcontextprotocol/sdk, 2.x @modelcontextprotocol/client):",
        "    " + ts,
        "  Python SDK (mcp):",
        "    " + py,
    ]


def _token_forms(access: Access, *, show_token: bool) -> _TokenForms | None:
    """How each client gets the token; ``None`` when no header is needed."""
    if access.mode in ("no-token", "anonymous"):
        return None
    if access.mode == "token" and access.token_file is not None:
        path = str(access.token_file)
        code_ts = f"readFileSync({json.dumps(path)}, \"utf8\").trim()"
        code_py = f"open({json.dumps(path)}).read().strip()"
        if show_token and access.token:
            return _TokenForms(access.token, access.token, code_ts, code_py)
        shell = f"$(cat {shlex.quote(path)})"
        return _TokenForms(f"<the token in {path}>", shell, code_ts, code_py)
    where = f"<your token from {access.auth_tokens_file}>" if access.auth_tokens_file else ""
    if access.mode == "oauth":
        where = f"<an access token from {access.issuer}>"
    text = where or "<your token>"
    return _TokenForms(text, text, "process.env.REMEMBER_TOKEN", 'os.environ["REMEMBER_TOKEN"]')


def url_for_clients(host: str, port: int, path: str) -> str:
    """The URL a client uses: a wildcard bind address is not one it can connect to."""
    if host in _WILDCARD:
        return f"http://<this-host>:{port}{path}"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"
