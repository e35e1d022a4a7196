"""Bearer-token verification for the MCP server.

A *token verifier* is any callable ``token -> principal | None``: it gets the
bearer token of a request (the text after ``Authorization: Bearer``) and
returns the principal it belongs to -- a non-empty string that becomes the
caller's ``user_id`` -- or ``None`` when the token is not valid.  Returning
``None`` or raising answers the request with ``401`` and a
``WWW-Authenticate: Bearer`` header.  Plug in your own (a JWT check, an
introspection call, a database lookup) with ``McpServer(token_verifier=...)``.

:class:`StaticTokenVerifier` is the simple one ``remember-sync serve
--auth-tokens FILE`` uses: a fixed table of tokens, read from a file that
only its owner may read (``chmod 600``).  The file holds one ``token
principal`` pair per line (blank lines and ``#`` comments are skipped), or a
JSON object ``{"<token>": "<principal>", ...}``.

``remember-sync serve`` without authentication on a loopback host uses a
*local token* instead: one random token kept in a private file
(:func:`default_token_file`, read or created by :func:`load_or_create_local_token`)
whose holders are the local user (:func:`check_local_user`).  See
``docs/clients.rst``.

A *host* -- a web framework whose users are already signed in -- tells every
:class:`~remember_sync.mcp.McpServer` built on its plugin who the caller is
with :func:`register_host_auth`; the Flask extension and the Django middleware
do this, so the MCP endpoint they mount takes the app's signed-in user (and
its token verifier) without being told (``docs/authentication.rst``).
"""

from __future__ import annotations

import enum
import getpass
import hashlib
import hmac
import json
import os
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._secrets import check_private_mode, generate_secret, read_or_create_private_file
from ..errors import RememberConfigurationError
from ..identity import is_anonymous

__all__ = [
    "FROM_HOST",
    "HostAuth",
    "PrincipalResolver",
    "StaticTokenVerifier",
    "TokenVerifier",
    "check_local_user",
    "default_token_file",
    "host_auth",
    "load_or_create_local_token",
    "load_token_file",
    "register_host_auth",
]

#: ``token -> principal`` (``None``: not a valid token).
TokenVerifier = Callable[[str], "str | None"]
#: ``WSGI environ -> principal`` (``None``: the host does not know the caller).
PrincipalResolver = Callable[[Mapping[str, Any]], "str | int | None"]

_MIN_TOKEN_CHARS = 16


class _FromHost(enum.Enum):
    FROM_HOST = "from the host"

    def __repr__(self) -> str:
        return "FROM_HOST"


#: The default of ``McpServer(principal_resolver=..., token_verifier=...)``: take
#: what the host registered for the plugin (:func:`register_host_auth`), else none.
FROM_HOST = _FromHost.FROM_HOST


@dataclass(frozen=True)
class HostAuth:
    """How a host identifies callers: what :class:`~remember_sync.mcp.McpServer` inherits.

    :attr principal_resolver: ``environ -> principal | None``, the host's
        signed-in user (asked first).
    :attr token_verifier: ``token -> principal | None`` for callers without
        one, or ``None``.
    :attr host: who registered it, for messages (e.g. ``"Flask app 'shop'"``).
    """

    principal_resolver: PrincipalResolver | None
    token_verifier: TokenVerifier | None
    host: str


# plugin -> (registering owner's key, its HostAuth); a plugin two different hosts registered
# maps to None: nothing says which host's users an MCP server on it should take.
_hosts: weakref.WeakKeyDictionary[Any, tuple[object, HostAuth | None]] = (
    weakref.WeakKeyDictionary()
)
_hosts_lock = threading.Lock()


def register_host_auth(
    plugin: Any,
    owner: object,
    *,
    principal_resolver: PrincipalResolver | None,
    token_verifier: TokenVerifier | None = None,
    host: str,
) -> None:
    """Declare how the host owning *plugin* identifies its callers.

    An :class:`~remember_sync.mcp.McpServer` built later on *plugin* without
    ``principal_resolver``/``token_verifier`` arguments uses these, so a model
    connected to the MCP endpoint acts as the same user the host's own views
    see.  *owner* is a key for the host (the Flask app, ``"django"``): the same
    owner registering again replaces its entry; a second owner registering the
    same plugin makes the choice ambiguous for good (whoever registers later),
    and such a server must then be given its resolver explicitly.
    """
    entry = HostAuth(principal_resolver, token_verifier, host)
    with _hosts_lock:
        known = _hosts.get(plugin)
        if known is not None and (known[1] is None or (known[0] is not owner
                                                       and known[0] != owner)):
            # Once two hosts registered, it stays ambiguous: the first one registering
            # again (Django rebuilds on a settings change) does not make the other's go away.
            _hosts[plugin] = (known[0], None)
        else:
            _hosts[plugin] = (owner, entry)


def host_auth(plugin: Any) -> HostAuth | None:
    """What the host registered for *plugin* (``None``: no host did).

    :raises RememberConfigurationError: two hosts registered *plugin*.
    """
    with _hosts_lock:
        known = _hosts.get(plugin)
    if known is None:
        return None
    if known[1] is None:
        raise RememberConfigurationError(
            "two hosts (Flask apps / Django) registered this plugin with their own users: "
            "give McpServer principal_resolver= (and token_verifier=) explicitly"
        )
    return known[1]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class StaticTokenVerifier:
    """A fixed ``token -> principal`` table.

    Tokens are kept only as SHA-256 digests and compared in constant time.

    :param tokens: ``{token: principal}``.  Each token must be at least 16
        characters; principals must be non-empty and not anonymous
        (``anon:`` ids are refused).
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        table: dict[bytes, str] = {}
        for token, principal in tokens.items():
            if not isinstance(token, str) or len(token) < _MIN_TOKEN_CHARS:
                raise RememberConfigurationError(
                    f"auth tokens must be strings of at least {_MIN_TOKEN_CHARS} characters "
                    "(generate one with `remember-sync secret generate`)"
                )
            if not isinstance(principal, str) or is_anonymous(principal.strip()):
                raise RememberConfigurationError(
                    f"auth token principal {principal!r} must be a non-empty name that does not "
                    "start with 'anon:'"
                )
            table[_digest(token)] = principal.strip()
        if not table:
            raise RememberConfigurationError("the auth tokens table is empty")
        self._table = table

    def __repr__(self) -> str:
        return f"StaticTokenVerifier({len(self._table)} token(s))"

    @property
    def principals(self) -> list[str]:
        """The distinct principals (for a startup line; never the tokens)."""
        return sorted(set(self._table.values()))

    def __call__(self, token: str) -> str | None:
        presented = _digest(token)
        found: str | None = None
        # Walk the whole table with compare_digest so timing does not tell which
        # entry (or how much of a digest) matched.
        for digest, principal in self._table.items():
            if hmac.compare_digest(digest, presented):
                found = principal
        return found

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> StaticTokenVerifier:
        """Read a token file; see :func:`load_token_file`."""
        return cls(load_token_file(path))


def load_token_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """Parse an auth-tokens file into ``{token: principal}``.

    :raises RememberConfigurationError: the file is missing, readable or
        writable by group or others (it holds credentials: ``chmod 600``),
        malformed, or repeats a token.
    """
    file = Path(path)
    try:
        info = file.stat()
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise RememberConfigurationError(
            f"cannot read the auth tokens file {file}: {exc.strerror}"
        ) from exc
    check_private_mode(info, file, "auth tokens file", instead=None)
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            raise RememberConfigurationError(
                f"the auth tokens file {file} is not valid JSON: {exc}"
            ) from exc
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            raise RememberConfigurationError(
                f'the auth tokens file {file} must be a JSON object {{"<token>": "<principal>"}}'
            )
        return dict(data)
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise RememberConfigurationError(
                f"{file}, line {number}: expected `<token> <principal>` (two fields)"
            )
        token, principal = parts
        if token in tokens:
            raise RememberConfigurationError(f"{file}, line {number}: repeats a token")
        tokens[token] = principal
    return tokens


#: A local token: RFC 6750 ``b64token`` characters (safe in an HTTP header), 32 to 512 of them.
_LOCAL_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]{32,512}=*")
_TOKEN_FILE_WHAT = "serve token file"  # noqa: S105 - a description
_TOKEN_FILE_INSTEAD = "pass --token-file PATH (or --no-token)"  # noqa: S105 - advice


def default_token_file(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``serve`` keeps its local token by default.

    ``$XDG_CONFIG_HOME/remember-sync/serve-token`` when ``XDG_CONFIG_HOME`` is
    an absolute path (the XDG rule: a relative one is ignored), else
    ``~/.config/remember-sync/serve-token``.
    """
    env = os.environ if environ is None else environ
    config = env.get("XDG_CONFIG_HOME", "")
    base = Path(config) if config and os.path.isabs(config) else Path.home() / ".config"
    return base / "remember-sync" / "serve-token"


def load_or_create_local_token(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """The local token in *path*, created (:func:`~remember_sync.generate_secret`) when missing.

    A new file is mode 0600 in a 0700 directory, written complete or not at
    all and never through a symlink; an existing one is reused as it is (see
    :func:`~remember_sync._secrets.read_or_create_private_file` for the
    checks: symlinks, group/other access and other owners are refused).

    :returns: ``(token, created)``.
    :raises RememberConfigurationError: the file cannot be used, or does not
        hold exactly one line with one token of at least 32 characters
        (letters, digits and ``-._~+/``).
    """
    file = Path(os.path.abspath(path))
    text, created = read_or_create_private_file(
        file,
        lambda: (generate_secret() + "\n").encode("ascii"),
        what=_TOKEN_FILE_WHAT,
        instead=_TOKEN_FILE_INSTEAD,
    )
    lines = text.splitlines()
    if len(lines) != 1 or not _LOCAL_TOKEN.fullmatch(lines[0]):
        # Never echo the content: it may be a real credential with a typo.
        raise RememberConfigurationError(
            f"the {_TOKEN_FILE_WHAT} {file} must hold exactly one line: one token of at least "
            "32 characters (letters, digits and -._~+/), as `remember-sync serve` writes it; "
            "delete the file to have a new token created, or "
            f"{_TOKEN_FILE_INSTEAD}"
        )
    return lines[0], created


def check_local_user(name: str | None = None) -> str:
    """The principal local-token holders are: *name*, or the OS login name.

    :raises RememberConfigurationError: the name is empty, anonymous (``anon:``),
        has surrounding blanks or control characters, or (no *name*) the login
        name cannot be found.
    """
    if name is None:
        try:
            name = getpass.getuser()
        except (OSError, KeyError) as exc:
            raise RememberConfigurationError(
                "cannot find the OS login name for the local user; pass --user NAME"
            ) from exc
    if (
        is_anonymous(name)
        or name != name.strip()
        or len(name) > 256
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    ):
        raise RememberConfigurationError(
            f"the local user {name!r} is not a usable user id: give a non-empty name of at "
            "most 256 characters, without surrounding blanks or control characters, that does "
            "not start with 'anon:' (an anonymous id)"
        )
    return name
