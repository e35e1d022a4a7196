"""Where the master secret comes from (SPEC section 4.1).

1. ``encryption.secrets`` / ``encryption.custom_key`` when given.
2. The first non-empty of ``REMEMBER_SECRET``, ``MCP_MEMORY_SECRET``,
   ``MCP_SESSION_SECRET`` (plus ``REMEMBER_PREVIOUS_SECRETS``, comma-separated,
   for rotation).
3. Development: ``.frontmcp/remember-secret.json`` under the working directory,
   created atomically (directory 0700, file 0600); an invalid file is renamed
   aside with a warning, never overwritten.
4. Production (``REMEMBER_ENV=production`` or ``NODE_ENV=production``): a random
   secret kept in this process's memory, with one warning per process.

The environment is read once, when the plugin is built.
"""

from __future__ import annotations

import json
import logging
import os
import secrets as _random
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .crypto import Keyring, b64url_encode
from .errors import RememberConfigurationError

__all__ = [
    "DEFAULT_SECRET_FILE",
    "ENV_SECRET_NAMES",
    "generate_secret",
    "is_production",
    "load_or_create_secret_file",
    "resolve_keyring",
    "validate_secret_file",
]

log = logging.getLogger("remember_sync")

ENV_SECRET_NAMES = ("REMEMBER_SECRET", "MCP_MEMORY_SECRET", "MCP_SESSION_SECRET")
DEFAULT_SECRET_FILE = Path(".frontmcp") / "remember-secret.json"
MIN_FILE_SECRET_CHARS = 32

_production_lock = threading.Lock()
_production_secret: str | None = None


def generate_secret() -> str:
    """A new master secret: base64url of 32 random bytes (43 characters)."""
    return b64url_encode(_random.token_bytes(32))


def is_production(environ: Mapping[str, str]) -> bool:
    """``REMEMBER_ENV=production``, or ``NODE_ENV=production`` for parity with the reference."""
    return (
        environ.get("REMEMBER_ENV", "").strip().lower() == "production"
        or environ.get("NODE_ENV", "").strip().lower() == "production"
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def validate_secret_file(raw: str, now_ms: int) -> str:
    """The secret in a secret file's text; ``ValueError`` saying why it is invalid.

    Valid: a JSON object with a ``secret`` of at least 32 characters, a positive
    integer ``createdAt`` not in the future, and ``version`` 1 (as 1.8.0 checks).
    """
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    secret, created, version = data.get("secret"), data.get("createdAt"), data.get("version")
    if not isinstance(secret, str) or len(secret) < MIN_FILE_SECRET_CHARS:
        raise ValueError(f"secret must be a string of at least {MIN_FILE_SECRET_CHARS} chars")
    if isinstance(created, bool) or not isinstance(created, int) or created <= 0:
        raise ValueError("createdAt must be a positive integer")
    if created > now_ms + 60_000:
        raise ValueError("createdAt is in the future")
    if version != 1:
        raise ValueError("version must be 1")
    return secret


def _create_exclusive(path: Path, now_ms: int) -> bool:
    """Write a new secret file atomically; ``False`` when another process won the race."""
    created_dir = not path.parent.exists()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if created_dir:
        os.chmod(path.parent, 0o700)
    body = json.dumps(
        {"secret": generate_secret(), "createdAt": now_ms, "version": 1}, indent=2
    ).encode("utf-8")
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}.{_random.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            # link() fails if the target exists: an exclusive create of a complete file.
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def load_or_create_secret_file(path: Path) -> str:
    """Read the development secret file, creating it (race-free) when missing.

    :raises RememberConfigurationError: when the file cannot be read or written.
    """
    for _ in range(5):
        now = _now_ms()
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            try:
                _create_exclusive(path, now)
            except OSError as exc:
                raise RememberConfigurationError(
                    f"could not create the development secret file {path}: {exc.strerror}; "
                    "set REMEMBER_SECRET instead"
                ) from exc
            continue  # read back what won (ours or a concurrent process's)
        except OSError as exc:
            raise RememberConfigurationError(
                f"could not read the secret file {path}: {exc.strerror}"
            ) from exc
        try:
            return validate_secret_file(raw, now)
        except ValueError as exc:
            aside = path.with_name(f"{path.name}.invalid-{now}")
            log.warning(
                "remember: the secret file %s is invalid (%s); moved it aside to %s and "
                "creating a new one. Entries encrypted under the old secret are unreadable.",
                path,
                exc,
                aside,
            )
            try:
                os.replace(path, aside)
            except FileNotFoundError:
                pass  # another process moved it first
    raise RememberConfigurationError(f"could not establish a valid secret file at {path}")


def _production_fallback() -> str:
    global _production_secret
    with _production_lock:
        if _production_secret is None:
            _production_secret = generate_secret()
            log.warning(
                "remember: no REMEMBER_SECRET (or MCP_MEMORY_SECRET / MCP_SESSION_SECRET) is set "
                "in production; using a random in-memory secret. Encrypted memory will be "
                "unreadable after a restart and by any other instance sharing the store."
            )
        return _production_secret


def resolve_keyring(
    *,
    secrets: Sequence[str] | None = None,
    custom_key: str | None = None,
    environ: Mapping[str, str] | None = None,
    secret_file: str | os.PathLike[str] | None = None,
) -> Keyring:
    """Build the :class:`Keyring` from options, environment, file or fallback, in that order."""
    env = os.environ if environ is None else environ
    if custom_key is not None and secrets is not None:
        raise RememberConfigurationError(
            "encryption.custom_key and encryption.secrets are exclusive; use secrets=[new, old] "
            "to rotate"
        )
    if custom_key is not None:
        if not isinstance(custom_key, str) or not custom_key:
            raise RememberConfigurationError("encryption.custom_key must be a non-empty string")
        return Keyring([custom_key], source="explicit:custom_key")
    if secrets is not None:
        if isinstance(secrets, str) or not secrets:
            raise RememberConfigurationError(
                "encryption.secrets must be a non-empty list of strings, newest first"
            )
        return Keyring(list(secrets), source="explicit:secrets")
    for name in ENV_SECRET_NAMES:
        value = env.get(name, "")
        if value:
            previous = [s.strip() for s in env.get("REMEMBER_PREVIOUS_SECRETS", "").split(",")]
            return Keyring([value, *[s for s in previous if s]], source=f"env:{name}")
    if is_production(env):
        return Keyring([_production_fallback()], source="ephemeral")
    path = Path(secret_file) if secret_file is not None else Path.cwd() / DEFAULT_SECRET_FILE
    return Keyring([load_or_create_secret_file(path)], source=f"file:{path}")
