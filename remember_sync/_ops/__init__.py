"""Operator logic behind the ``remember-sync`` command, as plain functions.

The command line (:mod:`remember_sync.cli`) only parses arguments and prints;
everything it does is here, so it can be tested and reused from a notebook
or a script:

* :mod:`~remember_sync._ops.context` -- opening a store, loading secrets;
* :mod:`~remember_sync._ops.walk` -- listing and decoding a whole store;
* :mod:`~remember_sync._ops.inspect` -- ``stats`` and ``doctor``;
* :mod:`~remember_sync._ops.transfer` -- ``export`` and ``import`` (JSON Lines);
* :mod:`~remember_sync._ops.rotate` -- ``rotate``;
* :mod:`~remember_sync._ops.demo` -- ``demo``.
"""

from __future__ import annotations

from .context import Opened, SecretChoice, StoreChoice, build_plugin, open_store
from .demo import DemoFailed, run_demo
from .inspect import Check, StoreStats, collect_stats, run_doctor
from .rotate import RotateResult, rotate
from .transfer import (
    ExportResult,
    ImportResult,
    export_entries,
    import_entries,
    parse_records,
)

__all__ = [
    "Check",
    "DemoFailed",
    "ExportResult",
    "ImportResult",
    "Opened",
    "RotateResult",
    "SecretChoice",
    "StoreChoice",
    "StoreStats",
    "build_plugin",
    "collect_stats",
    "export_entries",
    "import_entries",
    "open_store",
    "parse_records",
    "rotate",
    "run_demo",
    "run_doctor",
]
