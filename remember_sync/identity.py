"""The identity of the current request and the scope rules (SPEC section 2).

The host binds an :class:`~remember_sync.types.Identity` for the duration of
a request with :func:`identity`; :func:`current_identity` reads it.  The
binding lives in a module-level :class:`contextvars.ContextVar` and is always
reset with its token.

Threads do not inherit the binding: a thread started inside ``with
identity(...)`` sees nothing bound unless it runs its target through
:func:`contextvars.copy_context` (``ctx = copy_context(); Thread(target=ctx.run,
args=(fn,))``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import RememberIdentityError
from .types import Identity, Namespace, Scope

__all__ = [
    "STATELESS_SESSION_ID",
    "STATELESS_USER_PREFIX",
    "current_identity",
    "identity",
    "is_anonymous",
    "principal_of",
    "resolve_namespace",
    "session_identity",
    "sharing_group",
]

#: The session id stateless transports inject into every request; never an identity.
STATELESS_SESSION_ID = "__stateless__"
#: The session identity of a signed-in caller without a verified session, before its user id.
STATELESS_USER_PREFIX = "stateless-user:"

_EMPTY = Identity()
_current: ContextVar[Identity | None] = ContextVar("remember_sync.identity", default=None)


@contextmanager
def identity(
    session_id: str | int | None = None,
    user_id: str | int | None = None,
    tool_name: str | int | None = None,
    *,
    bound: Identity | None = None,
) -> Iterator[Identity]:
    """Bind an identity for the ``with`` block (hosts call this per request).

    ``session_id`` must be a session the host verified.  An ``int`` part is its
    decimal string (see :class:`Identity`).  Pass ``bound`` to bind a
    ready-made :class:`Identity` instead of its parts.
    """
    value = bound if bound is not None else Identity(session_id, user_id, tool_name)
    token = _current.set(value)
    try:
        yield value
    finally:
        _current.reset(token)


def current_identity() -> Identity:
    """The identity bound in this context (an empty one when nothing is bound)."""
    value = _current.get()
    return _EMPTY if value is None else value


def _is_bound() -> bool:
    return _current.get() is not None


def is_anonymous(user_id: str | None) -> bool:
    """Whether *user_id* names no one: ``None``, empty, or an ``anon:`` id."""
    return not user_id or user_id.startswith("anon:")


def principal_of(user_id: str | None, session_id: str | None) -> str | None:
    """Who a caller is for its quota and its rate limit (``docs/many-users.rst``).

    A signed-in caller (a *user_id* that is not anonymous: a token's principal,
    an OAuth ``sub``, a host's user) is ``"user\x00" + user_id``, whatever its
    session; an anonymous caller is its session, ``"session\x00" + session_id``;
    an anonymous caller without one is ``None`` (it can write global scope only,
    and the rate limiter counts it by its address).

    :param session_id: a session the host *verified* (never one a client merely
        sent); the stateless placeholder is no session.
    """
    if not is_anonymous(user_id):
        return "user\x00" + str(user_id)
    if session_id and session_id != STATELESS_SESSION_ID:
        return "session\x00" + session_id
    return None


def sharing_group(principal: str | None) -> str:
    """The unit *principal* (as :func:`principal_of` names it) shares room in fairly:
    the memory store's fair eviction and the MCP server's table of ended sessions.

    A signed-in user is a group of its own; every anonymous caller (each session a
    principal of its own, and one client may open any number of them) shares the
    one group ``"anonymous"``, so opening sessions never makes a caller look small.
    """
    if principal is not None and principal.startswith("user\x00"):
        return principal
    return "anonymous"


def session_identity(ident: Identity) -> str | None:
    """The session identity: the verified session, else ``stateless-user:<user>``, else None."""
    sid = ident.session_id
    if sid and sid != STATELESS_SESSION_ID:
        return sid
    if not is_anonymous(ident.user_id):
        return STATELESS_USER_PREFIX + str(ident.user_id)
    return None


def _user_part(user_id: str | None) -> str:
    if user_id is None:
        return "no user_id"
    if not user_id:
        return "an empty user_id"
    return "an anonymous user_id (one that starts with 'anon:')"


def _hint(ident: Identity, scope: Scope, given: bool) -> str:
    """What to do: bind one, when nothing is; else what the identity in use lacks."""
    if not given and not _is_bound():
        return (
            " (No identity is bound in this context: wrap the call in "
            "`with remember_sync.identity(...)` or use plugin.accessor(Identity(...)).)"
        )
    if scope == "user":
        lacks = _user_part(ident.user_id)
    else:
        lacks = f"no verified session_id and {_user_part(ident.user_id)}"
    return f" (The identity in use has {lacks}.)"


def resolve_namespace(ident: Identity, scope: Scope, *, given: bool = False) -> Namespace:
    """Apply the scope rules; raise :class:`RememberIdentityError` before any I/O.

    :param given: *ident* was passed explicitly (``plugin.accessor(...)``), not
        read from the context: the message then says what it lacks.
    """
    if scope == "global":
        return Namespace("global")
    if scope == "user":
        if is_anonymous(ident.user_id):
            raise RememberIdentityError(
                "Remember cannot use user scope without an authenticated user: all "
                "unauthenticated callers would share one namespace. Authenticate the request "
                "or use scope='global' if the data really is shared." + _hint(ident, scope, given)
            )
        return Namespace("user", user=ident.user_id)
    session = session_identity(ident)
    if session is None:
        raise RememberIdentityError(
            f"Remember cannot use {scope} scope without a verified session or an "
            "authenticated user: every such request would share one namespace with all other "
            "clients. Authenticate the request, use a stateful transport, or use "
            "scope='global' if the data really is shared." + _hint(ident, scope, given)
        )
    if scope == "session":
        return Namespace("session", session=session)
    if not ident.tool_name:
        raise RememberIdentityError(
            "Remember cannot use tool scope without a running tool: tool memory is keyed by "
            "the tool executing the call. Call it from inside a tool, bind tool_name, or use "
            "session scope."
        )
    return Namespace("tool", session=session, tool=ident.tool_name)
