"""Test-only WSGI app: ``create_app()`` with an ``X-Worker-Pid`` header on every response.

``gunicorn 'tests.gunicorn_app:app'`` serves exactly what
``gunicorn 'remember_sync.mcp:create_app()'`` serves (the app is built the same
way, once per worker, from the same environment); the one added response header
names the worker process that answered, so a test can see requests spread over
the workers.  Nothing else is changed: status, other headers and body pass through.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from remember_sync.mcp import create_app

__all__ = ["WORKER_HEADER", "app", "metrics_app"]

#: The response header that carries the answering worker's pid.
WORKER_HEADER = "X-Worker-Pid"

_server = create_app()


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    """Serve with :func:`~remember_sync.mcp.create_app`'s server; add :data:`WORKER_HEADER`."""

    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        return start_response(status, [*headers, (WORKER_HEADER, str(os.getpid()))], exc_info)

    return _server(environ, start)


def metrics_app() -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
    """``create_app(metrics_path="/metrics")`` with :data:`WORKER_HEADER`, built in each worker:
    ``gunicorn 'tests.gunicorn_app:metrics_app()'``."""
    server = create_app(metrics_path="/metrics")

    def served(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            pid = (WORKER_HEADER, str(os.getpid()))
            return start_response(status, [*headers, pid], exc_info)

        return server(environ, start)

    return served
