"""The ``bridge`` project of the django_bridge example (see ``../manage.py`` to run it)."""
