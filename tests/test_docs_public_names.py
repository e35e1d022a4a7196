"""The documentation points users at public names only.

A private module (``remember_sync._config``, ``_secrets``, ``_ops.reindex``,
``_core``...) may change or vanish in any release; the docs name the public
function, command or option instead, or describe the behaviour in words.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "remember_sync"


def _private_modules() -> set[str]:
    """The last part of every private module or package of the package (``_config``...)."""
    names = {p.stem for p in PACKAGE.rglob("_*.py") if p.stem != "__init__" and "__" not in p.stem}
    names |= {p.name for p in PACKAGE.rglob("_*") if p.is_dir() and p.name != "__pycache__"}
    return names


def _references(text: str, private: set[str]) -> list[str]:
    """Dotted ``remember_sync`` paths through a private part, and private modules named alone."""
    found = re.findall(r"\bremember_sync(?:\.\w+)*\._[a-z]\w*(?:\.\w+)*", text)
    for literal in re.findall(r"``([^`]+)``", text):
        head = literal.split(".")[0].split("(")[0]
        if head in private:
            found.append(literal)
    return found


def _pages() -> list[Path]:
    return [REPO / "README.rst", *sorted((REPO / "docs").glob("*.rst"))]


def test_no_page_points_at_a_private_module() -> None:
    """No README or docs page names a private module of the package."""
    private = _private_modules()
    assert {"_config", "_secrets", "_core", "_ops"} <= private
    found = {
        page.name: refs
        for page in _pages()
        if (refs := _references(page.read_text(encoding="utf-8"), private))
    }
    assert found == {}


def test_the_check_sees_each_form() -> None:
    """A dotted path, a private module alone and one with an attribute are each reported;
    a test file's name and a public path are not."""
    private = _private_modules()
    text = (
        "see ``remember_sync._ops.reindex.reindex`` and ``_core`` and "
        "``_secrets.check_private_mode``; tests/test_secrets_never_leak.py and "
        "``remember_sync.stores.base.Store`` are fine"
    )
    assert _references(text, private) == [
        "remember_sync._ops.reindex.reindex", "_core", "_secrets.check_private_mode",
    ]
