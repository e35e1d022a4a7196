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
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import RememberConfigurationError
from ..identity import is_anonymous
from ..secret_source import check_private_mode

__all__ = ["StaticTokenVerifier", "TokenVerifier", "load_token_file"]

#: ``token -> principal`` (``None``: not a valid token).
TokenVerifier = Callable[[str], "str | None"]

_MIN_TOKEN_CHARS = 16


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
    check_private_mode(info, file, "auth tokens file")
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
