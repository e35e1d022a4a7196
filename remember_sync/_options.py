"""The typed option groups of :meth:`RememberPlugin.init <remember_sync.RememberPlugin.init>`.

Each group is a :class:`typing.TypedDict`, so a plain ``dict`` literal keeps
working and ``mypy --strict`` (or an IDE) flags a misspelled or mistyped key in
the caller's code.  At run time :meth:`~remember_sync.RememberPlugin.init`
still checks every key and value and raises
:class:`~remember_sync.errors.RememberConfigurationError` naming a bad one, for
callers that build their options dynamically.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal, TypedDict

from .types import Scope

#: The ``type`` option: which store :meth:`~remember_sync.RememberPlugin.init` builds.
StoreType = Literal["memory", "redis", "redis-client", "vercel-kv", "global-store"]


class EncryptionOptions(TypedDict, total=False):
    """``encryption=``: how entries are sealed (``docs/configuration.rst``).

    :key enabled: encrypt entries (default ``True``).
    :key custom_key: a text key used instead of the master secret.
    :key secrets: master secrets, newest first: the first seals, all open.
    :key frontmcp_compatible: write the reference's envelope (no key binding).
    :key secret_file: the development secret file's path.
    :key accept_unbound: open envelopes without the key binding (default ``True``).
    :key require_secret: refuse to start without a configured secret.
    :key subject_keys: seal each person's entries under a key of their own, kept in
        the ``keystore`` (crypto-shredding, ``docs/audit.rst``); default: whether a
        keystore is configured.
    """

    enabled: bool
    custom_key: str | None
    secrets: Sequence[str] | None
    frontmcp_compatible: bool
    secret_file: str | os.PathLike[str] | None
    accept_unbound: bool
    require_secret: bool
    subject_keys: bool


class AuditOptions(TypedDict, total=False):
    """``audit=``: the tamper-evident trail of writes (``docs/audit.rst``).

    :key retention_days: drop events older than this (default 365).
    :key max_events: keep at most this many events (default 1,000,000).
    :key batch: append after this many buffered events (default 256; ``1``: before
        each write returns).
    :key flush_ms: append what is buffered at least this often (default 200).
    :key signing_key: path of a PEM Ed25519 private key that signs the trail (default:
        a key derived from the master secret under a label of its own).
    """

    retention_days: int
    max_events: int
    batch: int
    flush_ms: int
    signing_key: str


class ToolsOptions(TypedDict, total=False):
    """``tools=``: the memory tools a model calls (``docs/mcp.rst``).

    :key enabled: expose the tools (default ``False``).
    :key allowed_scopes: the scopes a model may use (default session, user, tool).
    :key prefix: prepended to every tool name.
    :key search: offer ``search_memories`` (default ``True``).
    """

    enabled: bool
    allowed_scopes: Sequence[Scope] | None
    prefix: str
    search: bool


class SearchOptions(TypedDict, total=False):
    """``search=``: ranking by meaning and the search cache (``docs/search.rst``).

    :key embedder: a callable text -> vector (``None``: lexical ranking only).
    :key model: the embedder's name, stored beside each vector.
    :key cache_entries: entries of decrypted search data kept per process.
    :key cache_bytes: bytes of decrypted search data kept per process.
    """

    embedder: Callable[[str], Sequence[float]] | None
    model: str | None
    cache_entries: int
    cache_bytes: int


class RedisConfig(TypedDict, total=False):
    """``config=`` of ``type="redis"``: redis-py's names, passed to
    :class:`~remember_sync.stores.redis.RedisStore` (see its parameters)."""

    host: str
    port: int
    password: str | None
    db: int
    url: str
    ssl: bool
    username: str | None
    socket_timeout: float | None
    socket_connect_timeout: float | None
    retries: int
    ssl_ca_certs: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_check_hostname: bool | None
    sentinels: Sequence[tuple[str, int]] | None
    service_name: str | None
    sentinel_kwargs: Mapping[str, Any] | None
    wait_replicas: int
    wait_timeout_ms: int | None


class QuotaOptions(TypedDict, total=False):
    """``quota=``: every principal's bound, across all of its namespaces (``docs/many-users.rst``).

    :key entries: live entries a principal may hold (``None``: no bound).
    :key bytes: bytes (keys and stored values) a principal may hold (``None``: no bound).
    """

    entries: int | None
    bytes: int | None


def unknown_names(unknown: Iterable[str], known: Collection[str]) -> str:
    """*unknown* names, each with the nearest of *known* when one is close.

    ``'defualt_ttl' (did you mean 'default_ttl'?), 'x'``: for the message of a
    misspelled option or key.
    """
    parts = []
    for name in sorted(unknown):
        near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
        parts.append(f"{name!r} (did you mean {near[0]!r}?)" if near else repr(name))
    return ", ".join(parts)
