"""URLs of the django_bridge example."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("notes/", views.notes),
    path("notes/<str:key>", views.notes),
]
