"""Opening a store and loading the secrets for an operator command.

The command line is a thin shell over this: it parses arguments, then asks
for a store (``_config.StoreSettings``) to be opened and a plugin to be built
over it.
Two decisions differ from the library's own start-up, on purpose:

* The CLI **never creates** a secret file and never falls back to a random
  production secret (every plugin it builds has ``require_secret``).  An
  operator pointing ``rotate`` or ``set`` at a real store with the wrong
  secret would otherwise write entries nobody can read; instead the command
  stops with a message saying what to set.
* The CLI never arms the background legacy purge (``skip_legacy_purge``), so
  no command but ``purge-legacy`` deletes, and none writes the layout marker;
  nor the background reindex (``background_reindex=False``): only ``reindex``
  writes its record.  Writes still keep the listing index.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from .._audit import trail_exists
from .._clock import system_clock
from .._config import KV_TOKEN_ENV, KV_URL_ENV, StoreSettings, previous_secrets
from .._core import AccessorCore
from .._options import EncryptionOptions, QuotaOptions
from .._secrets import ENV_SECRET_NAMES, development_file
from ..errors import RememberConfigurationError
from ..plugin import RememberPlugin
from ..stores.base import Store

#: Seconds the CLI waits for a Redis reply / connection (the library defaults are
#: 1 s / 0.5 s, sized for request paths; see docs/redis.rst).
CLI_SOCKET_TIMEOUT = 5.0
CLI_CONNECT_TIMEOUT = 2.0


@dataclass(frozen=True)
class SecretChoice:
    """Where the master secrets come from.

    :attr encryption: ``False`` for a store written with ``encryption={"enabled": False}``.
    :attr secret_file: a development secret file to read instead of the environment.
    :attr frontmcp_compatible: write the reference's plain envelope (no key binding).
    """

    encryption: bool = True
    secret_file: str | None = None
    frontmcp_compatible: bool = False


def describe_store(store: StoreSettings, memory: str = "memory (in-process, empty)") -> str:
    """A printable name of *store*, without any password (*memory*: how to name the
    memory store)."""
    if store.kind == "redis" and store.redis_url is not None:
        from ..stores.redis import redacted_url  # lazy: --help never imports redis

        return f"redis {redacted_url(store.redis_url)}"
    if store.kind == "vercel-kv":
        return f"vercel-kv ({KV_URL_ENV})"
    return memory


def secret_values(environ: Mapping[str, str], store: StoreSettings | None = None) -> list[str]:
    """Every secret-bearing string the command knows of (to scrub from messages)."""
    found: list[str] = []
    for name in (*ENV_SECRET_NAMES, KV_TOKEN_ENV):
        if environ.get(name):
            found.append(environ[name])
    found.extend(previous_secrets(environ))
    if store is not None and store.redis_url:
        try:
            password = urlsplit(store.redis_url).password
        except ValueError:
            password = None
        if password:
            found.append(password)
    # Longest first, so a secret that contains another is scrubbed whole.
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    """*text* with every occurrence of *secrets* replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def open_store(choice: StoreSettings) -> Store:
    """Build the store; nothing is sent to it yet (connections are made on first use).

    :raises RememberConfigurationError: a bad URL or missing Vercel KV settings.
    """
    if choice.kind == "redis":
        # Imported here so that ``remember-sync --help`` and ``demo`` stay fast.
        from ..stores.redis import RedisStore

        assert choice.redis_url is not None
        # A command-line run is not a request: it may wait longer for a slow server
        # (a long purge or export) than the library's request-path defaults.
        return RedisStore.from_url(
            choice.redis_url,
            socket_timeout=CLI_SOCKET_TIMEOUT,
            socket_connect_timeout=CLI_CONNECT_TIMEOUT,
        )
    if choice.kind == "vercel-kv":
        from ..stores.vercel_kv import VercelKVStore

        return VercelKVStore()
    from ..stores.memory import MemoryStore

    return MemoryStore()


def _read_secret_file(path: Path) -> str:
    """The secret in *path*; refuse a missing or invalid file rather than replace it."""
    # The library renames an invalid file aside and creates a new one; an operator's
    # command must never do that to a file an application depends on, so the file is
    # read (no symlink, owner-only) and checked here with the library's own rules.
    from .._secrets import read_secret_file, validate_secret_file

    raw = read_secret_file(path)
    if raw is None:
        raise RememberConfigurationError(
            f"no secret: {path} does not exist, and no REMEMBER_SECRET (or MCP_MEMORY_SECRET "
            "/ MCP_SESSION_SECRET) is set. Set REMEMBER_SECRET to the application's secret "
            "(the CLI never creates one)"
        )
    try:
        return validate_secret_file(raw, system_clock())
    except (ValueError, TypeError) as exc:
        raise RememberConfigurationError(
            f"the secret file {path} is invalid ({exc}); the CLI will not replace it"
        ) from None


@dataclass
class Opened:
    """A plugin built for an operator command, and where its secrets came from."""

    plugin: RememberPlugin
    #: ``env:REMEMBER_SECRET``, ``file:<path>`` or ``disabled`` -- never a secret.
    secret_source: str

    @property
    def core(self) -> AccessorCore:
        """The plugin's core: operator commands read and rewrite entries below the accessor
        (raw envelopes, every namespace), so this is the one place they reach it."""
        return self.plugin._operator_core()

    def secret_summary(self) -> dict[str, Any]:
        """Where the secrets came from and their public ids -- never a secret."""
        keyring = self.plugin.keyring
        if keyring is None:
            return {"encryption": False, "source": self.secret_source}
        return {
            "encryption": True,
            "source": self.secret_source,
            "secrets": len(keyring.kids),
            "primary_kid": keyring.primary_kid,
            "previous_kids": list(keyring.kids[1:]),
        }


def build_plugin(
    store: Store,
    *,
    prefix: str,
    secrets: SecretChoice,
    environ: Mapping[str, str] | None = None,
    on_decrypt_error: Literal["warn", "raise"] = "warn",
    read_doubled_prefix: bool = False,
    audit: bool | None = None,
    quota: Mapping[str, int | None] | None = None,
) -> Opened:
    """A plugin over *store* with the operator's secrets, never arming the purge.

    *audit*: record the command's writes in the audit trail; by default when
    the store holds a trail (or ``REMEMBER_AUDIT`` is set), so operators'
    writes are recorded as the application's are.

    Secrets come from ``--secret-file`` when given, else the environment
    (``REMEMBER_SECRET`` ... plus ``REMEMBER_PREVIOUS_SECRETS``), else the
    development file ``.frontmcp/remember-secret.json`` if it exists.  Older
    secrets in ``REMEMBER_PREVIOUS_SECRETS`` are added after a file's secret too.

    The plugin does not own *store*: the caller closes it.  *read_doubled_prefix*
    is the application's option of that name (``--read-doubled-prefix``);
    *quota* the application's too (``import`` charges its writes to their
    principals and keeps to it).

    :raises RememberConfigurationError: no usable secret.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    encryption: EncryptionOptions = {
        "enabled": secrets.encryption,
        "frontmcp_compatible": secrets.frontmcp_compatible,
        # Never the library's fallbacks (development file, production in-memory secret).
        "require_secret": True,
    }
    source = "disabled"
    if secrets.encryption:
        path: Path | None = None
        if secrets.secret_file is not None:
            path = Path(secrets.secret_file)
        elif not any(env.get(name) for name in ENV_SECRET_NAMES):
            path = development_file(env)
            if path is None:
                raise RememberConfigurationError(
                    "no secret: REMEMBER_ENV/NODE_ENV is production and no REMEMBER_SECRET is "
                    "set; a random secret would read nothing. Set REMEMBER_SECRET"
                )
        if path is not None:
            encryption["secrets"] = [_read_secret_file(path), *previous_secrets(env)]
            source = f"file:{path}"
    plugin = RememberPlugin.init(
        store=store,
        key_prefix=prefix,
        encryption=encryption,
        environ=env,
        skip_legacy_purge=True,
        background_reindex=False,
        on_decrypt_error=on_decrypt_error,
        read_doubled_prefix=read_doubled_prefix,
        audit=audit if audit is not None else _trail_found(store, prefix, secrets),
        quota=None if quota is None else QuotaOptions(
            entries=quota.get("entries"), bytes=quota.get("bytes")
        ),
    )
    if plugin.keyring is not None and source == "disabled":
        source = plugin.keyring.source  # env:<NAME>, resolved by the library
    return Opened(plugin, source)


def _trail_found(store: Store, prefix: str, secrets: SecretChoice) -> bool | None:
    """``True`` when the store holds an audit trail this command can extend, else ``None``
    (the environment decides)."""
    return (secrets.encryption and trail_exists(store, prefix)) or None


def json_line(obj: object) -> str:
    """Compact JSON with non-ASCII kept (one JSON Lines record)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
