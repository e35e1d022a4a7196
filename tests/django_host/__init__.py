"""A Django project with real session users, served by tests/test_host_principal_django.py."""
