"""Redis-compatible glob matching for stores that match keys themselves."""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["compile_glob"]


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a Redis ``MATCH`` glob to a regular expression.

    Supports ``*``, ``?``, ``[abc]``, ``[^a]``/``[!a]``, ``[a-z]`` and ``\\x``
    escapes, as Redis's ``stringmatchlen`` does.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] in "^!"
            if negate:
                j += 1
            parts: list[str] = []
            while j < n and pattern[j] != "]":
                if pattern[j] == "\\" and j + 1 < n:
                    j += 1
                    parts.append(re.escape(pattern[j]))
                elif j + 2 < n and pattern[j + 1] == "-" and pattern[j + 2] != "]":
                    lo, hi = sorted((pattern[j], pattern[j + 2]))
                    parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
                    j += 2
                else:
                    parts.append(re.escape(pattern[j]))
                j += 1
            body = "".join(parts)
            if not body:
                out.append("[^\\s\\S]" if not negate else "[\\s\\S]")
            else:
                out.append(f"[{'^' if negate else ''}{body}]")
            i = j  # at the closing ']' (or past the end when unterminated)
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)
