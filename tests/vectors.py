"""The 1.8.0 interop vectors from ../shared/interop, with their identities made ours."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from remember_sync.types import Identity

_CANDIDATES = [
    Path(os.environ.get("REMEMBER_INTEROP_DIR", "")) / "frontmcp-1.8.0-vectors.json",
    Path(__file__).resolve().parents[2] / "shared" / "interop" / "frontmcp-1.8.0-vectors.json",
    Path(__file__).resolve().parent / "data" / "frontmcp-1.8.0-vectors.json",
]


def load_vectors() -> dict[str, Any]:
    """The vectors file: ../shared/interop, or the copy kept in tests/data."""
    for path in _CANDIDATES:
        if path.is_file():
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return data
    raise FileNotFoundError("frontmcp-1.8.0-vectors.json not found")


VECTORS: list[dict[str, Any]] = load_vectors()["vectors"]


def vector_identity(vector: dict[str, Any]) -> Identity:
    """The identity a vector describes, as a host would bind it for us.

    1.8.0 used ``ctx.sessionId`` unverified; the vectors' sessions stand for
    sessions the host verified.  ``__stateless__`` is no session.
    """
    ident = vector["identity"]
    session = ident.get("sessionId")
    if session == "__stateless__":
        session = None
    return Identity(
        session_id=session, user_id=vector.get("resolvedUserId"), tool_name=ident.get("toolName")
    )


def vector_tool_name(vector: dict[str, Any]) -> str | None:
    """The tool name 1.8.0 used (``unknown`` when no flow was running)."""
    if vector["scope"] != "tool":
        return None
    name = vector["identity"].get("toolName")
    return name if name is not None else "unknown"
