"""Run the test project: migrate, create alice and bob, serve on 127.0.0.1, print the port.

``python -m tests.django_host.serve`` with ``HOST_TEST_*`` in the environment;
prints ``READY <port>`` once listening, serves until killed.
"""

from __future__ import annotations

import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_host.settings")


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass


class _Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def main() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    from django.contrib.auth.models import User

    for name in ("alice", "bob"):
        User.objects.create_user(name, password=f"{name}-password")
    from django.core.wsgi import get_wsgi_application

    server = make_server(
        "127.0.0.1", 0, get_wsgi_application(), server_class=_Threaded, handler_class=_Quiet
    )
    print(f"READY {server.server_port}", flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
