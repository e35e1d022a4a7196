"""``python -m remember_sync``: the ``remember-sync`` command."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
