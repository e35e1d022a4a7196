"""The example's bearer-token check: ``token -> principal | None``.

A real project checks a JWT or asks its identity provider here.
"""

from __future__ import annotations

import hmac

from django.conf import settings


def verify_token(token: str) -> str | None:
    """The principal owning *token* in ``settings.DEMO_TOKENS``, compared in constant time."""
    found = None
    for known, principal in settings.DEMO_TOKENS.items():
        if hmac.compare_digest(known.encode(), token.encode()):
            found = principal
    return found
