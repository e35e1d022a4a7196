"""The API reference names the whole public surface (the Sphinx build itself is a gate of
``.ci/run``; the examples are doctests collected from README.rst and docs/)."""

from __future__ import annotations

import re
from pathlib import Path

import remember_sync

API = Path(remember_sync.__file__).resolve().parent.parent / "docs" / "api.rst"


def test_api_reference_documents_every_exported_name() -> None:
    """Every name in remember_sync.__all__ has its own entry in docs/api.rst."""
    text = API.read_text(encoding="utf-8")
    entry = r"^\.\. (?:auto\w+|py:data):: remember_sync\.(\w+)\b"
    documented = set(re.findall(entry, text, re.MULTILINE))
    missing = sorted(set(remember_sync.__all__) - documented)
    assert not missing, f"add to docs/api.rst: {missing}"
