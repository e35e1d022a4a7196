"""Settings of the test project: ``django.contrib.auth`` users, sessions, tokens, remember_sync.

``HOST_TEST_MODE`` picks the identity set-up: ``session`` (signed-in users
only), ``token`` (bearer tokens only, ``principal_resolver`` returning no one)
or ``both`` (users and tokens: the combined resolver).
"""

from __future__ import annotations

import os

MODE = os.environ["HOST_TEST_MODE"]
SECRET_KEY = "remember-sync-django-host-test"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
ROOT_URLCONF = "tests.django_host.urls"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["HOST_TEST_DB"]}
}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; tests only
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "remember_sync.integrations.django.RememberMiddleware",
]
TOKENS = {"token-carol-0123456789": "carol", "token-dave-0123456789ab": "dave"}
REMEMBER = {
    "type": "redis",
    "config": {"url": os.environ["HOST_TEST_REDIS_URL"]},
    "encryption": {"secrets": [os.environ["HOST_TEST_SECRET"]]},
    "tools": {"enabled": True},
    "skip_legacy_purge": True,
}
if MODE in ("token", "both"):
    REMEMBER["token_verifier"] = "tests.django_host.auth.verify_token"
if MODE == "token":
    REMEMBER["principal_resolver"] = "tests.django_host.auth.no_user"
