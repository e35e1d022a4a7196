"""Views of the test project: sign in, the user's own notes, and the MCP endpoint."""

from __future__ import annotations

from django.contrib.auth import authenticate, login
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from remember_sync.integrations.django import get_plugin, mcp_view
from remember_sync.mcp import McpServer


@csrf_exempt
def sign_in(request: HttpRequest) -> JsonResponse:
    user = authenticate(
        request, username=request.POST["username"], password=request.POST["password"]
    )
    if user is None:
        return JsonResponse({"ok": False}, status=403)
    login(request, user)
    return JsonResponse({"ok": True, "pk": user.pk})


def mine(request: HttpRequest) -> JsonResponse:
    entries = request.remember.entries(scope="user")
    return JsonResponse(
        {
            "user": request.remember_identity.user_id,
            "notes": {k: e.value for k, e in sorted(entries.items())},
        }
    )


urlpatterns = [
    path("login", sign_in),
    path("mine", mine),
    path("mcp", mcp_view(McpServer(get_plugin(), path=None))),
]
