#!/usr/bin/env python
"""A minimal Django project using remember_sync: ``settings.REMEMBER``, the middleware, one view.

Run it (``pip install 'remember-sync[django]'`` first)::

    cd examples/django_bridge
    export REMEMBER_SECRET=$(remember-sync secret generate)
    python manage.py runserver 127.0.0.1:8000          # in-memory store
    REDIS_URL=redis://127.0.0.1:6379/0 python manage.py runserver 127.0.0.1:8000

With ``REDIS_URL`` the plugin refuses to start without ``REMEMBER_SECRET``
(``encryption={"require_secret": True}`` in ``bridge/settings.py``).

Then, as alice and bob (the demo bearer tokens in ``bridge/settings.py``)::

    curl -s -X PUT http://127.0.0.1:8000/notes/todo \\
         -H 'Authorization: Bearer demo-token-alice-0123456789' -d '{"value": "buy milk"}'
    # {"user": "alice", "key": "todo", "stored": true}
    curl -s http://127.0.0.1:8000/notes/ -H 'Authorization: Bearer demo-token-alice-0123456789'
    # {"user": "alice", "notes": {"todo": "buy milk"}}
    curl -s http://127.0.0.1:8000/notes/ -H 'Authorization: Bearer demo-token-bob-0123456789ab'
    # {"user": "bob", "notes": {}}
    curl -s http://127.0.0.1:8000/notes/
    # 403 {"error": {"code": "REMEMBER_IDENTITY_REQUIRED", ...}}

``/mcp`` serves the memory tools to MCP clients with the same tokens: what a
model stores there with ``remember_this`` and ``scope: "user"`` is one of that
user's notes.
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bridge.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
