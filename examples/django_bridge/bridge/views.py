"""The one view of the django_bridge example, using ``request.remember``."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt  # an API authenticated by bearer tokens, not cookies
def notes(request: HttpRequest, key: str | None = None) -> JsonResponse:
    """``GET /notes/``: the caller's notes; ``PUT /notes/<key>`` with ``{"value": ...}``: store one.

    Notes live in ``user`` scope: an anonymous caller gets a JSON 403
    (``REMEMBER_IDENTITY_REQUIRED``) from the middleware, never a traceback.
    """
    user = request.remember_identity.user_id
    if request.method == "PUT" and key is not None:
        value = json.loads(request.body or b"null")["value"]
        request.remember.set(key, value, scope="user", brand="state")
        return JsonResponse({"user": user, "key": key, "stored": True})
    entries = request.remember.entries(scope="user")
    return JsonResponse({"user": user, "notes": {k: e.value for k, e in sorted(entries.items())}})
