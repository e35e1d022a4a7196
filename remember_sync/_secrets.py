"""Where the master secret comes from (SPEC section 4.1).

1. ``encryption.secrets`` / ``encryption.custom_key`` when given.
2. The first non-empty of ``REMEMBER_SECRET``, ``MCP_MEMORY_SECRET``,
   ``MCP_SESSION_SECRET`` (plus ``REMEMBER_PREVIOUS_SECRETS``, comma-separated,
   for rotation).
3. With ``encryption={"require_secret": True}`` or ``REMEMBER_REQUIRE_SECRET=1``:
   nothing more -- no configured secret is a :class:`RememberConfigurationError`.
4. Production (``REMEMBER_ENV=production`` or ``NODE_ENV=production``): a random
   secret kept in this process's memory, with one warning per process.
5. Development: ``.frontmcp/remember-secret.json`` under the working directory,
   created atomically (directory 0700, file 0600, a warning naming it); an
   invalid file is moved aside with a warning under a lock, never overwritten;
   a file others may read, or one reached through a symlink, is refused.

The environment is read once, when the plugin is built.
"""

from __future__ import annotations

import json
import logging
import os
import secrets as _random
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ._clock import Clock, system_clock
from ._config import previous_secrets
from ._crypto import Keyring, b64url_encode
from ._fork import ForkSafeLock
from .errors import RememberConfigurationError

log = logging.getLogger("remember_sync")

ENV_SECRET_NAMES = ("REMEMBER_SECRET", "MCP_MEMORY_SECRET", "MCP_SESSION_SECRET")
DEFAULT_SECRET_FILE = Path(".frontmcp") / "remember-secret.json"
MIN_FILE_SECRET_CHARS = 32
#: Environment switch equivalent to ``encryption={"require_secret": True}``.
REQUIRE_SECRET_ENV = "REMEMBER_REQUIRE_SECRET"  # noqa: S105 - a variable name
_TRUTHY = ("1", "true", "yes", "on")
_FALSY = ("", "0", "false", "no", "off")
#: What the messages about the development secret file suggest doing instead.
_SECRET_INSTEAD = "set REMEMBER_SECRET"  # noqa: S105 - advice, not a secret

# A thread of the parent may have held it at a fork (see _fork).  It guards one
# assignment of an immutable str: the child sees the secret or None, never half.
_production_lock = ForkSafeLock()
_production_secret: str | None = None


def generate_secret() -> str:
    """A new master secret (or token): base64url of 32 random bytes (43 characters).

    It never starts with ``-`` or ``_``: a leading ``-`` makes ``--token $T`` or
    ``cmd $SECRET`` read it as an option.  (Redrawing the 2 in 64 such draws
    leaves the other 42 characters uniformly random.)
    """
    while True:
        text = b64url_encode(_random.token_bytes(32))
        if text[0].isalnum():
            return text


def is_production(environ: Mapping[str, str]) -> bool:
    """``REMEMBER_ENV=production``, or ``NODE_ENV=production`` for parity with the reference."""
    return (
        environ.get("REMEMBER_ENV", "").strip().lower() == "production"
        or environ.get("NODE_ENV", "").strip().lower() == "production"
    )


def require_secret_from_env(environ: Mapping[str, str]) -> bool:
    """Whether ``REMEMBER_REQUIRE_SECRET`` asks for a configured secret.

    ``1``, ``true``, ``yes``, ``on`` (any case) turn it on; ``0``, ``false``,
    ``no``, ``off`` or empty leave it off.

    :raises RememberConfigurationError: for any other value (a typo must not
        silently leave the protection off).
    """
    value = environ.get(REQUIRE_SECRET_ENV, "").strip().lower()
    if value in _TRUTHY:
        return True
    if value in _FALSY:
        return False
    raise RememberConfigurationError(
        f"{REQUIRE_SECRET_ENV} must be one of {', '.join(_TRUTHY)} (on) or "
        f"{', '.join(v for v in _FALSY if v)} (off); got {value!r}"
    )


def validate_secret_file(raw: str, now_ms: int) -> str:
    """The secret in a secret file's text; ``ValueError`` saying why it is invalid.

    Valid: a JSON object with a ``secret`` of at least 32 characters, a positive
    integer ``createdAt`` and ``version`` 1.  1.8.0 also refuses a ``createdAt``
    in the future; here that is only a warning: the clock moved back (or the file
    came from a machine whose clock is ahead), the secret is as good as ever, and
    moving the file aside would make every entry written with it unreadable.
    """
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    secret, created, version = data.get("secret"), data.get("createdAt"), data.get("version")
    if not isinstance(secret, str) or len(secret) < MIN_FILE_SECRET_CHARS:
        raise ValueError(f"secret must be a string of at least {MIN_FILE_SECRET_CHARS} chars")
    if isinstance(created, bool) or not isinstance(created, int) or created <= 0:
        raise ValueError("createdAt must be a positive integer")
    if version != 1:
        raise ValueError("version must be 1")
    if created > now_ms + 60_000:
        log.warning(
            "remember: the development secret file was created in the future (createdAt %d, "
            "now %d): the system clock moved back? The secret is used as it is.",
            created, now_ms,
        )
    return secret


def check_private_mode(
    info: os.stat_result,
    path: str | os.PathLike[str],
    what: str,
    *,
    instead: str | None = _SECRET_INSTEAD,
) -> None:
    """Refuse a credentials file that group or others may access, or another user owns.

    The one permission rule for every file holding a secret or a token (the
    development secret file, ``serve``'s token files).

    :param info: the file's ``stat`` result (of the open file, where possible).
    :param what: what the file is, for the message ("secret file", ...).
    :param instead: the alternative the owner message suggests (``None``: none).
    :raises RememberConfigurationError: naming the file, its mode and ``chmod 600``.
    """
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise RememberConfigurationError(
            f"the {what} {path} is accessible by group or others (mode {mode:04o}); "
            f"it holds credentials, so restrict it with `chmod 600 {path}`"
        )
    check_owner(info, path, what, instead=instead)


def check_owner(
    info: os.stat_result, path: str | os.PathLike[str], what: str, *, instead: str | None
) -> None:
    """Refuse a credentials file or directory owned by another user (root excepted).

    Whoever owns it can change it: a secret another account chose is a secret
    that account knows.  As OpenSSH does, root's files are accepted (root can
    change anything anyway).

    :param instead: the alternative the message suggests (``None``: none).
    :raises RememberConfigurationError: naming the path, its owner and ``chown``.
    """
    euid = os.geteuid() if hasattr(os, "geteuid") else None
    if euid is not None and info.st_uid not in (euid, 0):
        raise RememberConfigurationError(
            f"the {what} {path} belongs to another user (uid {info.st_uid}, this process runs "
            f"as uid {euid}), who could choose or read what it holds; make it yours "
            f"(`chown {euid} {path}`)" + (f" or {instead}" if instead else "")
        )


def _make_directory(
    directory: Path, what: str = "development secret file", instead: str = _SECRET_INSTEAD
) -> None:
    """Create a credentials file's directory 0700 (whatever the umask) when missing."""
    try:
        os.mkdir(directory, 0o700)
        os.chmod(directory, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
    except OSError as exc:
        raise RememberConfigurationError(
            f"could not create the directory {directory} for the {what}: "
            f"{exc.strerror}; {instead} instead"
        ) from exc


def _open_directory(
    directory: Path, what: str = "secret file", instead: str = _SECRET_INSTEAD
) -> int:
    """A descriptor of a credentials file's directory.

    Refuses a directory reached through a symlink, or one that group or others
    may write to (they could swap the file) unless it is sticky like ``/tmp``.

    :raises FileNotFoundError: when the directory does not exist.
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(directory, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if directory.is_symlink():
            raise RememberConfigurationError(
                f"the {what} directory {directory} is a symlink; the {what} must be "
                f"reached directly: replace the link with a real directory "
                f"(`mkdir -m 700 {directory}`) or {instead}"
            ) from exc
        raise RememberConfigurationError(
            f"could not open the {what} directory {directory}: {exc.strerror}"
        ) from exc
    info = os.fstat(fd)
    try:
        check_owner(info, directory, f"{what} directory", instead=instead)
    except RememberConfigurationError:
        os.close(fd)
        raise
    if stat.S_IMODE(info.st_mode) & 0o022 and not info.st_mode & stat.S_ISVTX:
        os.close(fd)
        raise RememberConfigurationError(
            f"the {what} directory {directory} is writable by group or others (mode "
            f"{stat.S_IMODE(info.st_mode):04o}), who could replace the {what}; restrict it "
            f"with `chmod 700 {directory}`"
        )
    return fd


def _read_file(
    dir_fd: int, path: Path, what: str = "secret file", instead: str = _SECRET_INSTEAD
) -> str | None:
    """The text of a credentials file opened without following a symlink; ``None`` when missing.

    The mode is checked on the open file (``fstat``), so what is checked is what is read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path.name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(path):
            raise RememberConfigurationError(
                f"the {what} {path} is a symlink; refusing to follow it (another user "
                f"could point it anywhere). Replace it with the file itself (mode 600) or "
                f"{instead}"
            ) from exc
        raise RememberConfigurationError(
            f"could not read the {what} {path}: {exc.strerror}"
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RememberConfigurationError(
                f"could not read the {what} {path}: not a regular file"
            )
        check_private_mode(info, path, what, instead=instead)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError as exc:
        raise RememberConfigurationError(
            f"could not read the {what} {path}: {exc.strerror}"
        ) from exc
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        return ""  # invalid (validate_secret_file says why: not JSON)


def _write_exclusive(dir_fd: int, path: Path, body: bytes) -> bool:
    """Create *path* (mode 0600) holding *body*, complete or absent; ``False`` if it exists.

    The body goes to a fresh temporary name (``O_CREAT | O_EXCL | O_NOFOLLOW``:
    never an existing file, never through a symlink), then ``link()`` gives it
    the final name, which fails when that name exists: an exclusive create
    that no reader sees half-written.

    :raises OSError: anything but "exists".
    """
    tmp = f"{path.name}.tmp.{os.getpid()}.{_random.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileExistsError:
        return False
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
    return True


def _create_exclusive(dir_fd: int, path: Path, now_ms: int) -> str | None:
    """Write a new secret file atomically (complete or absent); return its secret.

    ``None`` when a file appeared meanwhile (a process not taking the lock): read it.
    """
    secret = generate_secret()
    body = json.dumps({"secret": secret, "createdAt": now_ms, "version": 1}, indent=2).encode(
        "utf-8"
    )
    try:
        if not _write_exclusive(dir_fd, path, body):
            return None
    except OSError as exc:
        raise RememberConfigurationError(
            f"could not create the development secret file {path}: {exc.strerror}; "
            "set REMEMBER_SECRET instead"
        ) from exc
    log.warning(
        "remember: created the development secret file %s (no REMEMBER_SECRET is set). "
        "Entries written now can only be read with this file; set REMEMBER_SECRET in "
        "production, or encryption={'require_secret': True} to refuse to start without one.",
        path,
    )
    return secret


def _move_aside(dir_fd: int, path: Path, now_ms: int, why: str) -> None:
    """Rename the invalid file to ``<name>.invalid-<ms>`` (never replacing an earlier one)."""
    for n in range(100):
        aside = path.with_name(f"{path.name}.invalid-{now_ms}" + (f".{n}" if n else ""))
        try:
            # link + unlink rather than rename: rename would replace an existing aside file.
            os.link(
                path.name, aside.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False
            )
        except FileExistsError:
            continue
        except OSError as exc:
            raise RememberConfigurationError(
                f"could not move the invalid secret file {path} aside: {exc.strerror}"
            ) from exc
        os.unlink(path.name, dir_fd=dir_fd)
        log.warning(
            "remember: the secret file %s is invalid (%s); moved it aside to %s and "
            "creating a new one. Entries encrypted under the old secret are unreadable.",
            path,
            why,
            aside,
        )
        return
    raise RememberConfigurationError(f"could not move the invalid secret file {path} aside")


class _DirectoryLock:
    """``flock`` on the directory's descriptor: one process at a time creates or repairs."""

    def __init__(self, dir_fd: int) -> None:
        self._fd = dir_fd

    def __enter__(self) -> None:
        try:
            import fcntl  # noqa: PLC0415 - POSIX only; elsewhere creation stays exclusive
        except ImportError:  # pragma: no cover - Windows
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        try:
            import fcntl  # noqa: PLC0415
        except ImportError:  # pragma: no cover - Windows
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)


def load_or_create_secret_file(path: Path, *, clock: Clock = system_clock) -> str:
    """Read the development secret file, creating it (race-free) when missing.

    The file is opened without following symlinks and refused when group or
    others may access it.  Creating it, and moving an invalid one aside, happen
    under an exclusive lock on its directory, after reading the file again: a
    process never moves aside a valid file that another has just created, so
    processes starting together end on one secret.

    :param clock: the time a created file records, and validation judges by.
    :raises RememberConfigurationError: when the file cannot be read or written,
        is reached through a symlink, or is readable by others.
    """
    path = Path(os.path.abspath(path))
    _make_directory(path.parent)
    dir_fd = _open_directory(path.parent)
    try:
        raw = _read_file(dir_fd, path)
        if raw is not None:
            try:
                return validate_secret_file(raw, clock())
            except ValueError:
                pass  # repaired below, under the lock
        with _DirectoryLock(dir_fd):
            for _ in range(5):
                # Read again under the lock: another process may have created or repaired it.
                raw = _read_file(dir_fd, path)
                now = clock()
                if raw is not None:
                    try:
                        return validate_secret_file(raw, now)
                    except ValueError as exc:
                        _move_aside(dir_fd, path, now, str(exc))
                created = _create_exclusive(dir_fd, path, now)
                if created is not None:
                    return created
        raise RememberConfigurationError(f"could not establish a valid secret file at {path}")
    finally:
        os.close(dir_fd)


def keyring_or_resolved(keyring: object) -> Keyring:
    """The keyring a plugin holds (``plugin.keyring``), else :func:`resolve_keyring`'s:
    with encryption disabled, session ids and rate-limit keys still need a secret,
    resolved as for encryption (``REMEMBER_SECRET``, the development file...)."""
    return keyring if isinstance(keyring, Keyring) else resolve_keyring()


def read_secret_file(path: str | os.PathLike[str]) -> str | None:
    """The text of an existing secret file, read with the same checks; never creates one.

    For callers that must not create or repair a file (the CLI).  ``None``
    when the file or its directory does not exist.

    :raises RememberConfigurationError: the file or its directory is reached
        through a symlink, may be accessed by group or others, or cannot be read.
    """
    file = Path(os.path.abspath(path))
    try:
        dir_fd = _open_directory(file.parent)
    except FileNotFoundError:
        return None
    try:
        return _read_file(dir_fd, file)
    finally:
        os.close(dir_fd)


def read_or_create_private_file(
    path: str | os.PathLike[str],
    create: Callable[[], bytes],
    *,
    what: str,
    instead: str,
) -> tuple[str, bool]:
    """The text of a credentials file, created from ``create()`` when missing.

    The rules of the development secret file, for any file holding a
    credential (``serve``'s access token): the directory is created 0700 when
    missing and refused when it is a symlink, another user's, or writable by
    group or others; the file is opened without following a symlink and
    refused when it is not a regular file, group or others may access it, or
    another user owns it; a new file is mode 0600 and complete or absent, so
    processes starting together end with one file.  An existing file is never
    replaced or repaired: validating its text is the caller's job.

    :param create: the body of a new file (called only when one is written).
    :param what: what the file is, for messages ("serve token file").
    :param instead: what the messages suggest doing instead ("pass --no-token").
    :returns: ``(text, created)``; undecodable text comes back as ``""``.
    :raises RememberConfigurationError: naming the file and what is wrong.
    """
    file = Path(os.path.abspath(path))
    _make_directory(file.parent, what, instead)
    dir_fd = _open_directory(file.parent, what, instead)
    try:
        created = False
        # Read what is on disk, also after creating it: what is returned is what others read.
        for _ in range(5):
            raw = _read_file(dir_fd, file, what, instead)
            if raw is not None:
                return raw, created
            try:
                created = _write_exclusive(dir_fd, file, create())
            except OSError as exc:
                raise RememberConfigurationError(
                    f"could not create the {what} {file}: {exc.strerror}; {instead} instead"
                ) from exc
        raise RememberConfigurationError(f"could not read or create the {what} {file}")
    finally:
        os.close(dir_fd)


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


def development_file(
    environ: Mapping[str, str], secret_file: str | os.PathLike[str] | None = None
) -> Path | None:
    """The development secret file of a process with no configured secret: *secret_file*,
    else ``.frontmcp/remember-secret.json`` in the working directory; ``None`` in
    production (:func:`is_production`), where no file is used."""
    if is_production(environ):
        return None
    return Path(secret_file) if secret_file is not None else Path.cwd() / DEFAULT_SECRET_FILE


def resolve_keyring(
    *,
    secrets: Sequence[str] | None = None,
    custom_key: str | None = None,
    environ: Mapping[str, str] | None = None,
    secret_file: str | os.PathLike[str] | None = None,
    require_secret: bool = False,
) -> Keyring:
    """Build the :class:`Keyring` from options, environment, file or fallback, in that order.

    :param require_secret: refuse to fall back to the development file or the
        production in-memory secret; ``REMEMBER_REQUIRE_SECRET`` (see
        :func:`require_secret_from_env`) turns it on too.
    :raises RememberConfigurationError: bad secret options, or no configured
        secret while one is required.
    """
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
            return Keyring([value, *previous_secrets(env)], source=f"env:{name}")
    if require_secret or require_secret_from_env(env):
        raise RememberConfigurationError(
            "no secret configured, and one is required (encryption.require_secret or "
            f"{REQUIRE_SECRET_ENV}): set REMEMBER_SECRET (or MCP_MEMORY_SECRET / "
            "MCP_SESSION_SECRET) to the application's secret, or pass "
            "encryption={'secrets': [...]}; `remember-sync secret generate` makes a new one. "
            "The development secret file is neither created nor read"
        )
    path = development_file(env, secret_file)
    if path is None:
        return Keyring([_production_fallback()], source="ephemeral")
    return Keyring([load_or_create_secret_file(path)], source=f"file:{path}")
