"""The storage-key grammar (SPEC section 3), wire-compatible with the reference.

``P`` is the key prefix (default ``remember:``); identity parts are encoded
with JavaScript's ``encodeURIComponent``; the user's key is appended raw.

======== ================================================
scope    storage key
======== ================================================
session  ``P + "v2:session:" + enc(S) + ":" + key``
user     ``P + "v2:user:" + enc(U) + ":" + key``
tool     ``P + "v2:tool:" + enc(T) + ":" + enc(S) + ":" + key``
global   ``P + "global:" + key``
======== ================================================

Patterns are Redis globs in which only ``*`` and ``?`` of the *user's*
pattern are wildcards; every other character -- and every character of the
prefix and identity -- is escaped, so no identity can list another's keys.
A server is sent at most one ``*`` of a pattern; the exact match is done here,
in linear time (:func:`match_user_pattern`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, unquote

from ._glob import GlobMatcher, glob_matcher
from .errors import RememberInputError
from .types import Namespace, Scope

MAX_KEY_BYTES = 1024
MAX_PATTERN_LENGTH = 500
MAX_PATTERN_WILDCARDS = 20

_ENC_SAFE = "!~*'()"
_GLOB_SPECIALS = re.compile(r"([*?\[\]\\])")


def encode_component(text: str) -> str:
    """JavaScript ``encodeURIComponent``: UTF-8, upper-case hex, ``A-Za-z0-9-_.!~*'()`` kept.

    :raises ValueError: for a lone surrogate (JavaScript throws ``URIError``).
    """
    try:
        return quote(text, safe=_ENC_SAFE, encoding="utf-8", errors="strict")
    except UnicodeEncodeError as exc:
        raise RememberInputError(f"identity part {text!r} is not valid Unicode text") from exc


def check_key(key: object) -> str:
    """Validate a memory key: non-empty ``str``, at most 1,024 UTF-8 bytes, no NUL."""
    if type(key) is str and key.isascii() and 0 < len(key) <= MAX_KEY_BYTES and "\x00" not in key:
        return key  # the usual key: ASCII has one byte per character and no lone surrogate
    if not isinstance(key, str):
        raise RememberInputError(f"key must be a str; got {type(key).__name__}")
    if not key:
        raise RememberInputError("key must not be empty")
    if "\x00" in key:
        raise RememberInputError("key must not contain NUL characters")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise RememberInputError("key is not valid Unicode text (lone surrogate)") from exc
    if size > MAX_KEY_BYTES:
        raise RememberInputError(f"key is {size} UTF-8 bytes; at most {MAX_KEY_BYTES} allowed")
    return key


def check_pattern(pattern: object) -> str:
    """Validate a user ``list`` pattern: ``str``, at most 500 characters and 20 wildcards."""
    if not isinstance(pattern, str):
        raise RememberInputError(f"pattern must be a str; got {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise RememberInputError(
            f"Pattern too long: {len(pattern)} chars (max {MAX_PATTERN_LENGTH})"
        )
    wildcards = pattern.count("*") + pattern.count("?")
    if wildcards > MAX_PATTERN_WILDCARDS:
        raise RememberInputError(
            f"Too many wildcards in pattern: {wildcards} (max {MAX_PATTERN_WILDCARDS})"
        )
    if "\x00" in pattern:
        raise RememberInputError("pattern must not contain NUL characters")
    return pattern


def scope_prefix(prefix: str, ns: Namespace) -> str:
    """The storage-key prefix of one scope and identity (ends with ``:``)."""
    if ns.scope == "global":
        return f"{prefix}global:"
    if ns.scope == "user":
        assert ns.user is not None
        return f"{prefix}v2:user:{encode_component(ns.user)}:"
    assert ns.session is not None
    if ns.scope == "session":
        return f"{prefix}v2:session:{encode_component(ns.session)}:"
    assert ns.tool is not None
    return f"{prefix}v2:tool:{encode_component(ns.tool)}:{encode_component(ns.session)}:"


def storage_key(prefix: str, ns: Namespace, key: str) -> str:
    """The full storage key of *key* (appended unencoded) in namespace *ns*."""
    return scope_prefix(prefix, ns) + key


#: The scope heads of the identity-carrying keys and how many encoded parts follow each.
_NAMESPACE_HEADS = (("v2:session:", 1), ("v2:user:", 1), ("v2:tool:", 2))


def storage_namespace(prefix: str, full_key: str) -> str:
    """The scope prefix (:func:`scope_prefix`) a storage key lies in, read off the key.

    Fast and without decoding: encoded identity parts never contain ``:``
    (``encodeURIComponent`` escapes it), so each part ends at the next ``:``;
    the user's key, which may contain ``:``, is what follows.  Keys outside
    the grammar (the layout marker, legacy or foreign keys) all map to
    *prefix*.  The memory store's fair eviction groups keys by it.
    """
    if not full_key.startswith(prefix):
        return prefix
    start = len(prefix)
    if full_key.startswith("global:", start):
        return prefix + "global:"
    for head, parts in _NAMESPACE_HEADS:
        if full_key.startswith(head, start):
            end = start + len(head)
            for _ in range(parts):
                end = full_key.find(":", end) + 1
                if end == 0:
                    return prefix
            return full_key[:end]
    return prefix


def layout_marker_key(prefix: str) -> str:
    """``P + "__layout__"``: the fleet clock of the legacy purge."""
    return f"{prefix}__layout__"


def ended_session_key(prefix: str, digest: str) -> str:
    """``P + "__revoked__:" + digest``: the record of one ended MCP session.

    *digest* is :func:`remember_sync._sessions.session_digest` of the id, never
    the id.  Like the layout marker, the key is no entry: it does not start
    with ``v2:`` or ``global:`` (so no scope lists or forgets it) nor with a
    legacy ``session:``/``tool:``/``user:`` head (so the purge leaves it).
    """
    return f"{prefix}__revoked__:{digest}"


#: What follows ``P`` in every per-namespace listing index key.
INDEX_HEAD = "__index__:"


def namespace_index_key(prefix: str, head: str) -> str:
    """``P + "__index__:" + <head after P>``: the listing index of the namespace *head*.

    *head* is a :func:`scope_prefix`.  Like the layout marker the key is no
    entry: it starts with neither ``v2:`` nor ``global:`` (no scope lists or
    forgets it), nor with a legacy ``session:``/``tool:``/``user:`` head (the
    purge leaves it), and :func:`parse_storage_key` returns ``None`` for it
    (rotate, export, stats and doctor skip it).
    """
    return prefix + INDEX_HEAD + head[len(prefix) :]


#: What follows ``P`` in the key of an entry's compare-and-set marker.
CAS_HEAD = "__cas__:"


def cas_marker_key(prefix: str, full_key: str, tag: str = "") -> str | None:
    """``P + "__cas__:" + [{tag}] + <full_key after P>``: *full_key*'s compare-and-set marker.

    The marker remembers the writes that recently landed (see ``docs/redis.rst``,
    "A lost reply"); *tag* is a hash tag that puts it in the entry's Redis
    Cluster slot.  Like the index keys it is no entry: no scope lists or forgets
    it, the purge leaves it, :func:`parse_storage_key` returns ``None`` for it.
    ``None`` for a key that is no entry (bookkeeping keys, 1.8.0's doubled-prefix
    keys, foreign keys: see :func:`index_key_of`).
    """
    if index_key_of(prefix, full_key) is None:
        return None
    return prefix + CAS_HEAD + (f"{{{tag}}}" if tag else "") + full_key[len(prefix) :]
MANIFEST_HEAD = "__manifest__:"


def manifest_key(prefix: str, head: str) -> str:
    """``P + "__manifest__:" + <head after P>``: verified mode's manifest of namespace *head*.

    No entry, for the reasons :func:`namespace_index_key` gives.
    """
    return prefix + MANIFEST_HEAD + head[len(prefix) :]


def index_key_of(prefix: str, full_key: str) -> str | None:
    """The listing index key of the entry *full_key*, or ``None`` when it is no entry.

    Only keys of the storage-key grammar are indexed (:func:`storage_namespace`);
    the layout marker, bookkeeping keys, 1.8.0's doubled-prefix keys and
    foreign keys are not.
    """
    head = storage_namespace(prefix, full_key)
    if len(head) == len(prefix) or len(head) == len(full_key):
        return None
    return prefix + INDEX_HEAD + head[len(prefix) :]


def is_index_key(prefix: str, full_key: str) -> bool:
    """Whether *full_key* is one of the listing index keys under *prefix*."""
    return full_key.startswith(prefix + INDEX_HEAD)


def index_record_key(prefix: str) -> str:
    """``P + "__indexed__"``: the fleet's record that every older entry is indexed."""
    return f"{prefix}__indexed__"


def legacy_patterns(prefix: str) -> tuple[str, str, str]:
    """Globs of the pre-``v2`` session/tool/user keys (never ``v2:``, ``global:``, the marker)."""
    p = glob_escape(prefix)
    return (f"{p}session:*", f"{p}tool:*", f"{p}user:*")


def glob_escape(text: str) -> str:
    """Escape Redis glob specials (``* ? [ ] \\``) so *text* matches only itself."""
    return _GLOB_SPECIALS.sub(r"\\\1", text)


def _user_glob(pattern: str) -> str:
    """The Redis glob of a user pattern: ``*`` and ``?`` stay wildcards, all else is escaped."""
    return "".join(c if c in "*?" else glob_escape(c) for c in pattern)


def _server_glob(pattern: str) -> str:
    # What the *server* sees of a user pattern: its literal head, one `*`, its literal
    # tail.  One `*` keeps every Redis linear -- before CVE-2022-36021's fix (6.0.18,
    # 6.2.11, 7.0.9) Redis's own matcher was exponential in the number of `*`, and
    # a managed service's version is not ours to choose -- and it is also a superset
    # of a `?`, which Redis matches against one *byte*, not one character.  The
    # accessor filters the keys exactly with match_user_pattern afterwards.
    if "*" not in pattern and "?" not in pattern:
        return glob_escape(pattern)
    first = min(i for i in (pattern.find("*"), pattern.find("?")) if i >= 0)
    last = max(pattern.rfind("*"), pattern.rfind("?"))
    return glob_escape(pattern[:first]) + "*" + glob_escape(pattern[last + 1 :])


def scope_glob(prefix: str, ns: Namespace, pattern: str) -> str:
    """A Redis glob over full keys: the escaped scope prefix + a superset of the user's pattern.

    The glob has at most one ``*`` (the pattern's literal head and tail around
    it), so no server's matcher can be made slow by a pattern: filter its
    results with :func:`match_user_pattern`.
    """
    return glob_escape(scope_prefix(prefix, ns)) + _server_glob(pattern)


@lru_cache(maxsize=512)
def _user_matcher(pattern: str) -> GlobMatcher:
    return glob_matcher(_user_glob(pattern))


def match_user_pattern(pattern: str, bare_key: str) -> bool:
    """Whether *bare_key* matches *pattern* where only ``*`` and ``?`` are wildcards.

    Linear-time (see :mod:`remember_sync._glob`): no pattern within the
    :func:`check_pattern` limits can make one call slow.
    """
    return _user_matcher(pattern)(bare_key)


@dataclass(frozen=True)
class ParsedKey:
    """A storage key taken apart: its namespace and the bare memory key."""

    namespace: Namespace
    key: str


def parse_storage_key(prefix: str, full_key: str) -> ParsedKey | None:
    """Recover namespace and key from a storage key; ``None`` if it is not one of ours.

    Used by operators' tools (rotate, export, stats) that walk a whole store.
    Legacy pre-``v2`` keys and the layout marker return ``None``.
    """
    if not full_key.startswith(prefix):
        return None
    rest = full_key[len(prefix) :]
    if rest.startswith("global:"):
        key = rest[len("global:") :]
        return ParsedKey(Namespace("global"), key) if key else None
    scope: Scope
    for scope in ("session", "user", "tool"):
        head = f"v2:{scope}:"
        if not rest.startswith(head):
            continue
        parts = rest[len(head) :].split(":", 2 if scope == "tool" else 1)
        if len(parts) != (3 if scope == "tool" else 2) or not parts[-1]:
            return None
        try:
            ids = [unquote(p, errors="strict") for p in parts[:-1]]
        except UnicodeDecodeError:
            return None
        # Only keys we could have written: each part must re-encode to itself.
        if any(not i or encode_component(i) != p for i, p in zip(ids, parts[:-1], strict=True)):
            return None
        if scope == "session":
            ns = Namespace("session", session=ids[0])
        elif scope == "user":
            ns = Namespace("user", user=ids[0])
        else:
            ns = Namespace("tool", tool=ids[0], session=ids[1])
        return ParsedKey(ns, parts[-1])
    return None


def parse_doubled_key(prefix: str, full_key: str) -> ParsedKey | None:
    """*full_key* as a key of 1.8.0's doubled-prefix layout (``P + P + "v2:..."``), or ``None``.

    1.8.0's Redis and Vercel KV stores prefixed keys the accessor had already
    prefixed; the plugin reads them only with ``read_doubled_prefix=True``.
    """
    if not prefix or not full_key.startswith(prefix + prefix):
        return None
    try:
        return parse_storage_key(prefix, full_key[len(prefix) :])
    except UnicodeDecodeError:
        return None  # percent-encoding that is not UTF-8: not written by 1.8.0


def describe_key(prefix: str, full_key: str) -> str:
    """How logs and error messages name a storage key: never with its identity in clear.

    A storage key holds the session id, which grants that session's memory
    (and the user id).  The name given is the scope, a short SHA-256 of the
    namespace part (enough to tell two namespaces apart in a log, not to
    recover an id) and the bare key, which the caller chose.  A key that is
    not one of ours is named by its hash alone.
    """
    parsed = parse_storage_key(prefix, full_key) or parse_doubled_key(prefix, full_key)
    if parsed is None:
        return f"key #{hashlib.sha256(full_key.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
    head = full_key[: len(full_key) - len(parsed.key)]
    digest = hashlib.sha256(head.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{parsed.namespace.scope} entry {parsed.key!r} (namespace #{digest})"
