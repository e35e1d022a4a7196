"""Identity binding and the scope rules of SPEC section 2."""

from __future__ import annotations

import contextvars
import threading

import pytest

from remember_sync import (
    Identity,
    RememberError,
    RememberIdentityError,
    current_identity,
    identity,
)
from remember_sync.identity import is_anonymous, resolve_namespace, session_identity
from remember_sync.types import Namespace


def test_identity_binds_and_always_resets() -> None:
    """identity() binds for the block and resets with its token, even on error."""
    assert current_identity() == Identity()
    with identity(session_id="s", user_id="u", tool_name="t") as bound:
        assert current_identity() == bound == Identity("s", "u", "t")
        with identity(user_id="other"):
            assert current_identity() == Identity(None, "other", None)
        assert current_identity() == bound
    with pytest.raises(ZeroDivisionError), identity(user_id="x"):
        1 / 0  # noqa: B018
    assert current_identity() == Identity()


def test_threads_do_not_inherit_unless_context_copied() -> None:
    """A plain thread sees nothing bound; one run through copy_context sees the binding."""
    seen: dict[str, Identity] = {}
    with identity(user_id="alice"):
        plain = threading.Thread(target=lambda: seen.__setitem__("plain", current_identity()))
        ctx = contextvars.copy_context()
        copied = threading.Thread(
            target=ctx.run, args=(lambda: seen.__setitem__("copied", current_identity()),)
        )
        plain.start()
        copied.start()
        plain.join()
        copied.join()
    assert seen["plain"] == Identity()
    assert seen["copied"] == Identity(user_id="alice")


@pytest.mark.parametrize(
    ("user", "anonymous"),
    [(None, True), ("", True), ("anon:7f3c", True), ("alice", False), ("anonymous", False)],
)
def test_anonymous_principal(user: str | None, anonymous: bool) -> None:
    """None, empty and anon: ids are anonymous; anything else is a user."""
    assert is_anonymous(user) is anonymous


@pytest.mark.parametrize(
    ("ident", "expected"),
    [
        (Identity("s-1", "alice"), "s-1"),
        (Identity(None, "alice"), "stateless-user:alice"),
        (Identity("__stateless__", "alice"), "stateless-user:alice"),
        (Identity("__stateless__", None), None),
        (Identity(None, "anon:1"), None),
        (Identity(None, None), None),
    ],
)
def test_session_identity(ident: Identity, expected: str | None) -> None:
    """Verified session, else stateless-user:<user> for a real user, else none."""
    assert session_identity(ident) == expected


@pytest.mark.parametrize(
    ("ident", "scope", "expected"),
    [
        (Identity("s", "u", "t"), "session", Namespace("session", session="s")),
        (Identity(None, "u"), "session", Namespace("session", session="stateless-user:u")),
        (Identity("s", "u", "t"), "user", Namespace("user", user="u")),
        (Identity("s", None, "t"), "tool", Namespace("tool", session="s", tool="t")),
        (Identity(None, "u", "t"), "tool", Namespace("tool", session="stateless-user:u", tool="t")),
        (Identity(), "global", Namespace("global")),
        (Identity(None, "anon:x"), "global", Namespace("global")),
    ],
)
def test_scope_namespaces(ident: Identity, scope: str, expected: Namespace) -> None:
    """Each scope's namespace identity as SPEC section 2's table says."""
    assert resolve_namespace(ident, scope) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ident", "scope", "fragment"),
    [
        (Identity(), "session", "without a verified session"),
        (Identity("__stateless__", None), "session", "without a verified session"),
        (Identity(None, "anon:1"), "session", "without a verified session"),
        (Identity(None, None, "t"), "tool", "without a verified session"),
        (Identity("s", None, None), "tool", "without a running tool"),
        (Identity("s", None), "user", "without an authenticated user"),
        (Identity("s", "anon:abc"), "user", "without an authenticated user"),
        (Identity("s", ""), "user", "without an authenticated user"),
    ],
)
def test_refusals_carry_code_status_and_advice(ident: Identity, scope: str, fragment: str) -> None:
    """Refusals are RememberIdentityError, code REMEMBER_IDENTITY_REQUIRED, 403, with advice."""
    with pytest.raises(RememberIdentityError) as info:
        resolve_namespace(ident, scope)  # type: ignore[arg-type]
    err = info.value
    assert isinstance(err, RememberError)
    assert err.code == "REMEMBER_IDENTITY_REQUIRED"
    assert err.http_status == 403
    assert fragment in str(err)
    if fragment != "without a running tool":
        assert "global" in str(err)
        assert "Authenticate" in str(err)


def test_refusal_mentions_unbound_context() -> None:
    """With nothing bound, the refusal says how to bind an identity."""
    with pytest.raises(RememberIdentityError, match="No identity is bound"):
        resolve_namespace(current_identity(), "session")
    with identity(), pytest.raises(RememberIdentityError) as info:
        resolve_namespace(current_identity(), "session")
    assert "No identity is bound" not in str(info.value)
