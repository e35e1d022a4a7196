"""Settings of the django_bridge example: the smallest project using remember_sync.

``REMEMBER`` takes the ``RememberPlugin.init`` options under their own names,
plus the integration's keys (here ``token_verifier``).  No database is needed:
memory lives in the store (Redis when ``REDIS_URL`` is set, else in memory).
"""

from __future__ import annotations

import os

DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-bridge-example-not-for-production")
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "bridge.urls"
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True

MIDDLEWARE = [
    "django.middleware.common.CommonMiddleware",
    # With django.contrib.auth, put it after AuthenticationMiddleware and drop the
    # token_verifier below: the principal is then request.user's primary key.
    "remember_sync.integrations.django.RememberMiddleware",
]

#: Demo bearer tokens -> principals.  Replace bridge.auth.verify_token with a real check.
DEMO_TOKENS = {
    "demo-token-alice-0123456789": "alice",
    "demo-token-bob-0123456789ab": "bob",
}

_redis_url = os.environ.get("REDIS_URL")
REMEMBER = {
    "type": "redis" if _redis_url else "memory",
    **({"config": {"url": _redis_url}} if _redis_url else {}),
    "default_ttl": 30 * 86_400,
    # Redis outlives the process: require REMEMBER_SECRET rather than a development file.
    "encryption": {"require_secret": bool(_redis_url)},
    "token_verifier": "bridge.auth.verify_token",
    "tools": {"enabled": True},  # the MCP endpoint at /mcp (bridge/urls.py)
}
