"""Principals and their quotas: who owns a write, and how much one owner may hold.

A *principal* is a signed-in user (a token's principal, an OAuth ``sub``, a
host's user: any identity whose ``user_id`` is not anonymous) or, for an
anonymous caller, its session: the verified session id its session and tool
namespaces hang from.  Everything a principal writes -- session, user and
tool scopes, ``stateless-user:`` sessions -- is charged to it; global scope
belongs to no principal (the memory store's ``max_entries``/``max_bytes``
bound it, see ``docs/many-users.rst``).

The store never sees a principal: the core passes an *owner tag*, an HMAC of
the principal under a key derived from the master secret (the session-id
signing key of :meth:`~remember_sync._crypto.Keyring.hmac`, with a message
prefix of its own), truncated to 128 bits.  It names the owner's usage ledger
on a shared store, so every worker computes the same tag; without the secret
it names no one.  With encryption disabled there is no secret, and the tag is
a plain BLAKE2b hash of the principal (documented: the store's readers could
confirm a guessed user id).  Rotating the secret changes every tag: usage is
counted afresh from then on, while the older ledgers run out with their
entries.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ._bounded import BoundedCache
from ._crypto import Keyring, b64url_encode
from .errors import RememberConfigurationError, RememberInputError
from .identity import current_identity, is_anonymous, principal_of, sharing_group
from .stores._quota_lua import sizes_key
from .stores.base import OwnedWrites, Quota, Store
from .types import Identity, Namespace

#: The keys of ``RememberPlugin.init(quota={...})``.
QUOTA_OPTIONS = ("entries", "bytes")
#: Principals whose tag is kept (oldest dropped first).
_TAGS_CACHED = 4096
_MESSAGE = b"remember_sync quota owner\x00"
_ERASE_BATCH = 500


def check_quota(quota: object) -> Quota | None:
    """``quota={"entries": N, "bytes": B}`` as ``(N, B)``; ``None`` for no quota.

    Each count is a positive int or ``None`` (no bound on it); a dict with
    neither is no quota.

    :raises RememberConfigurationError: naming the bad part.
    """
    if quota is None:
        return None
    if not isinstance(quota, Mapping):
        raise RememberConfigurationError(
            f"quota must be a dict like {{'entries': 1000, 'bytes': 10_000_000}}; "
            f"got {type(quota).__name__}"
        )
    unknown = sorted(map(repr, set(quota) - set(QUOTA_OPTIONS)))
    if unknown:
        raise RememberConfigurationError(
            f"quota got unknown key(s) {', '.join(unknown)}; it takes 'entries' and 'bytes'"
        )
    counts: list[int | None] = []
    for name in QUOTA_OPTIONS:
        value: Any = quota.get(name)
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and not (whole and value >= 1):
            raise RememberConfigurationError(
                f"quota.{name} must be a positive int or None; got {value!r}"
            )
        counts.append(value)
    entries, nbytes = counts
    return None if entries is None and nbytes is None else (entries, nbytes)


class Owners:
    """The owner tag of each write, and the quota every owner has.

    :param keyring: the master secrets (``None``: encryption disabled, plain hashes).
    :param prefix: the key prefix: tags are ``P + "__quota__:{...}"``, one hash slot
        with their ledger on a cluster.
    :param quota: (entries, bytes) per owner, or ``None`` to charge owners without
        a bound (the memory store's fair eviction still groups by them).
    """

    def __init__(self, keyring: Keyring | None, prefix: str, quota: Quota | None) -> None:
        self._keyring = keyring
        self._head = prefix + "__quota__:"
        self.quota = quota
        #: The eviction group every anonymous caller shares (see :meth:`of`).
        self.anonymous = self._head + "anonymous"
        self._tags: BoundedCache[tuple[str | None, str | None], tuple[str, str]]
        self._tags = BoundedCache(_TAGS_CACHED)

    def __repr__(self) -> str:
        return f"Owners(quota={self.quota})"

    def of(self, ident: Identity | None, ns: Namespace) -> tuple[str, str] | None:
        """(owner tag, eviction group) of a write by *ident* in *ns*; ``None`` for global.

        Signed-in principals are their own eviction group; anonymous callers
        (one principal per session, each with its own quota) share one, so
        opening sessions never makes a caller look small next to a signed-in
        user when a bounded memory store must evict.
        """
        if ns.scope == "global":
            return None
        if ident is None:
            ident = current_identity()
        user = ident.user_id
        cache_key = (user, ns.session)
        found = self._tags.get(cache_key)
        if found is None:
            # A session or tool namespace always has a session (resolve_namespace).
            principal = principal_of(user, ns.session) or "session\x00"
            tag = self.tag(principal)
            found = (tag, tag if sharing_group(principal) == principal else self.anonymous)
            self._tags.put(cache_key, found)
        return found

    def tag(self, principal: str) -> str:
        """The owner tag of *principal* (as :func:`~remember_sync.identity.principal_of`
        names it): the key of its ledger, naming no one without the secret."""
        data = _MESSAGE + principal.encode("utf-8", "surrogatepass")
        if self._keyring is not None:
            digest = b64url_encode(self._keyring.hmac(data)[:16])
        else:
            digest = b64url_encode(hashlib.blake2b(data, digest_size=16).digest())
        return self._head + "{" + digest + "}"

    def tags(self, principal: str) -> tuple[str, ...]:
        """*principal*'s owner tag under every configured secret, the current one first
        (the older ones name the ledgers charged before a rotation)."""
        if self._keyring is None:
            return (self.tag(principal),)
        data = _MESSAGE + principal.encode("utf-8", "surrogatepass")
        keys = self._keyring.purpose_keys(Keyring.SESSION_SIGNING_INFO)
        found = [
            self._head + "{" + b64url_encode(hmac.new(k, data, hashlib.sha256).digest()[:16]) + "}"
            for k in keys
        ]
        return tuple(dict.fromkeys(found))

    def usage(self, store: OwnedWrites, user_id: object, session_id: object) -> dict[str, int]:
        """``RememberPlugin.quota_usage``: the live entries and bytes charged to a principal.

        :raises RememberInputError: neither or both of a signed-in *user_id* and a
            *session_id*, or an anonymous *user_id*.
        """
        if isinstance(user_id, int) and not isinstance(user_id, bool):
            user_id = str(user_id)
        if (user_id is None) == (session_id is None):
            raise RememberInputError("quota_usage takes exactly one of user_id and session_id")
        if user_id is not None and (not isinstance(user_id, str) or is_anonymous(user_id)):
            raise RememberInputError(f"user_id must name a signed-in user; got {user_id!r}")
        if session_id is not None and not (isinstance(session_id, str) and session_id):
            raise RememberInputError(f"session_id must be a non-empty str; got {session_id!r}")
        if isinstance(user_id, str):
            principal = "user\x00" + user_id
        else:
            principal = "session\x00" + cast(str, session_id)
        entries, nbytes = store.owner_usage(self.tag(principal))
        return {"entries": entries, "bytes": nbytes}

    def erase(self, store: OwnedWrites, user_id: str, keys: Sequence[str]) -> None:
        """Erasure's part: refund the person's erased *keys*, then drop what is left of
        their usage ledgers (under every configured secret), so that nothing in the
        store lists their keys."""
        tags = self.tags("user\x00" + user_id)
        for start in range(0, len(keys), _ERASE_BATCH):
            store.delete_owned(tags[0], *keys[start : start + _ERASE_BATCH])
        # A ledger in the store (Redis, Vercel KV): its two keys; other stores have none.
        for tag in tags:
            cast(Store, store).delete(tag, sizes_key(tag))
