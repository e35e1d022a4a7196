"""A Flask app exposing the memory tools over MCP, with verified sessions.

Run it (``pip install 'remember-sync[flask]'`` first)::

    export REMEMBER_SECRET=$(remember-sync secret generate)
    python examples/flask_mcp_bridge.py                  # in-memory store, port 5000
    python examples/flask_mcp_bridge.py --port 8000 --redis-url redis://127.0.0.1:6379/0

With ``--redis-url`` it refuses to start without ``REMEMBER_SECRET``
(``encryption={"require_secret": True}``); on the in-memory store a
development secret file is created when none is set.

It prints ``MCP endpoint: http://127.0.0.1:5000/mcp`` and serves (Flask's
development server, loopback only; under gunicorn use
``gunicorn 'flask_mcp_bridge:create_app()'``):

``/mcp``
    the MCP endpoint (:class:`remember_sync.mcp.McpServer`, Streamable HTTP
    with JSON responses) with the tools ``remember_this``, ``recall``,
    ``forget`` and ``list_memories``.  ``initialize`` answers with an
    ``Mcp-Session-Id`` signed with the master secret; a client presents it on
    every later request, and an id the server did not issue gets ``404``.
``/memories?scope=session``
    a plain Flask view listing the caller's memory keys through
    ``remember_sync.integrations.flask.remember``.  It accepts the same
    ``Mcp-Session-Id`` (verified with the same signer), so it shows what the
    model stored in that MCP session; without a verified session or a user
    it answers ``403`` ``REMEMBER_IDENTITY_REQUIRED``.
``/healthz``
    ``{"ok": true}``.

With ``--auth-tokens FILE`` (``<token> <principal>`` per line, ``chmod 600``)
both parts require ``Authorization: Bearer <token>`` and the token's principal
is the user (``user`` scope); sessions are then bound to that principal.

Try it with curl::

    curl -si http://127.0.0.1:5000/mcp -H 'Content-Type: application/json' \\
      -H 'Accept: application/json, text/event-stream' \\
      -d '{"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                      "clientInfo": {"name": "curl", "version": "1"}}}'
    # copy the Mcp-Session-Id response header into SID, then:
    curl -s http://127.0.0.1:5000/mcp -H 'Content-Type: application/json' \\
      -H "Mcp-Session-Id: $SID" \\
      -d '{"jsonrpc": "2.0", "id": 2, "method": "tools/call",
           "params": {"name": "remember_this", "arguments": {"key": "color", "value": "blue"}}}'
    curl -s 'http://127.0.0.1:5000/memories?scope=session' -H "Mcp-Session-Id: $SID"
    # {"keys":["color"],"scope":"session"}
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from flask import Flask, request
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from remember_sync.integrations.flask import RememberSync, get_plugin, remember, request_identity
from remember_sync.mcp import McpServer, StaticTokenVerifier


def create_app(redis_url: str | None = None, auth_tokens: str | None = None) -> Flask:
    """The Flask app with the MCP server mounted at ``/mcp``."""
    redis_url = redis_url or os.environ.get("REMEMBER_REDIS_URL")
    auth_tokens = auth_tokens or os.environ.get("REMEMBER_AUTH_TOKENS")
    verifier = StaticTokenVerifier.from_file(auth_tokens) if auth_tokens else None

    app = Flask(__name__)
    app.config.update(
        REMEMBER_STORE="redis" if redis_url else "memory",
        REMEMBER_REDIS_URL=redis_url,
        REMEMBER_DEFAULT_TTL=7 * 86_400,
        REMEMBER_TOOLS={"enabled": True},
        # Redis outlives this process: never fall back to a development secret file for it.
        REMEMBER_ENCRYPTION={"require_secret": bool(redis_url)},
        REMEMBER_TOKEN_VERIFIER=verifier,
    )
    RememberSync(app)

    @app.get("/memories")
    def memories() -> dict[str, Any]:
        scope = request.args.get("scope", "session")
        return {"scope": scope, "keys": remember.list(scope=scope)}  # type: ignore[arg-type]

    @app.get("/whoami")
    def whoami() -> dict[str, Any]:
        who = request_identity()
        return {"user_id": who.user_id, "session": who.session_id is not None}

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True}

    # The MCP server shares the extension's plugin, so its sessions and memory are the app's,
    # and takes the app's callers by default: REMOTE_USER, else REMEMBER_TOKEN_VERIFIER.
    mcp = McpServer(get_plugin(app), name="flask-mcp-bridge", path=None)
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/mcp": mcp})  # type: ignore[method-assign]
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Flask + MCP memory bridge")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--redis-url", default=None, help="default: in-memory store")
    parser.add_argument("--auth-tokens", default=None, help="token file: '<token> <principal>'")
    args = parser.parse_args(argv)
    app = create_app(args.redis_url, args.auth_tokens)
    print(f"MCP endpoint: http://{args.host}:{args.port}/mcp", flush=True)
    app.run(host=args.host, port=args.port, threaded=True)


if __name__ == "__main__":
    main()
