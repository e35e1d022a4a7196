"""``import remember_sync`` works without Flask, Django or LangGraph (STYLE.md item 8).

A subprocess hides the frameworks (and Werkzeug, LangChain's core) behind a
meta-path finder that answers "not installed", then imports every module of the
package except the three framework integrations, which must fail with an install hint.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import remember_sync

ROOT = Path(remember_sync.__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.abc, pkgutil, sys

    HIDDEN = {"flask", "django", "werkzeug", "langgraph", "langchain_core"}

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    for name in list(sys.modules):
        if name.split(".")[0] in HIDDEN:
            del sys.modules[name]

    import remember_sync
    from remember_sync import RememberPlugin, Identity
    framework = {"remember_sync.integrations.flask", "remember_sync.integrations.django",
                 "remember_sync.integrations.langgraph"}
    imported = []
    for info in pkgutil.walk_packages(remember_sync.__path__, "remember_sync."):
        if info.name not in framework and not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
            imported.append(info.name)
    with RememberPlugin.init(encryption={"secrets": ["s" * 32]}, skip_legacy_purge=True) as p:
        p.accessor(Identity(user_id="u")).set("k", 1, scope="user")
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in HIDDEN)
    print("imported", len(imported), "leaked", leaked)
    for name in sorted(framework):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            print(name, "->", exc)
        else:
            print(name, "-> imported?!")
    """
)


def test_import_without_flask_or_django() -> None:
    """Every module but the two framework ones imports with Flask/Django hidden; those hint."""
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    count = int(lines[0].split()[1])
    assert count >= 10 and lines[0].endswith("leaked []"), lines[0]
    assert "remember_sync.integrations.wsgi" not in result.stderr
    assert lines[1] == (
        "remember_sync.integrations.django -> remember_sync.integrations.django needs Django: "
        "pip install 'remember-sync[django]'"
    )
    assert lines[2] == (
        "remember_sync.integrations.flask -> remember_sync.integrations.flask needs Flask: "
        "pip install 'remember-sync[flask]'"
    )
    assert lines[3] == (
        "remember_sync.integrations.langgraph -> remember_sync.integrations.langgraph needs "
        "LangGraph: pip install 'remember-sync[langgraph]'"
    )
