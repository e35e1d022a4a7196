"""The test project's identity callables (a module of their own: ``urls`` builds the plugin)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def verify_token(token: str) -> str | None:
    """The test tokens (a real project checks a JWT or asks its identity provider)."""
    found: str | None = settings.TOKENS.get(token)
    return found


def no_user(request: HttpRequest) -> None:
    """A principal resolver that never knows a signed-in user (the token-only set-up)."""
    return None
