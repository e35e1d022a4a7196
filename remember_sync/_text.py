"""The one rule for text a store holds as bytes: UTF-8, lossless both ways.

Keys and values that are not valid UTF-8 (written by someone else) read back
with U+DC80..U+DCFF standing for their bytes (``surrogateescape``), and those
characters turn back into the same bytes, so a key read by a scan can be
addressed, bound as associated data and deleted exactly.
"""

from __future__ import annotations

#: The codec error handler of every store's UTF-8 (bulk paths use it with ``str.decode``).
TEXT_ERRORS = "surrogateescape"


def to_bytes(text: str) -> bytes:
    """The UTF-8 a store sends for *text*; U+DC80..U+DCFF become the bytes they stand for."""
    return text.encode("utf-8", TEXT_ERRORS)


def to_text(raw: bytes) -> str:
    """Received bytes as text, losslessly (``to_bytes(to_text(b)) == b``): not UTF-8, surrogates."""
    return raw.decode("utf-8", TEXT_ERRORS)
