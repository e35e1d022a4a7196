"""URLs of the django_bridge example."""

from __future__ import annotations

from django.urls import path

from remember_sync.integrations.django import get_plugin, mcp_view
from remember_sync.mcp import McpServer

from . import views

urlpatterns = [
    path("notes/", views.notes),
    path("notes/<str:key>", views.notes),
    # The memory tools over MCP, through the middleware: the caller is the same
    # principal as in the views (here the bearer token's), so a model's user-scope
    # memories are the user's notes.
    path("mcp", mcp_view(McpServer(get_plugin(), name="django-bridge", path=None))),
]
