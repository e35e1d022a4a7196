"""Redis-compatible glob matching in O(len(text) x len(glob)), for stores matching keys themselves.

A glob is cut at its ``*`` into *segments*.  Every other token -- a literal,
``?``, a ``[...]`` class, an ``\\x`` escape -- matches exactly one character,
so each segment has a fixed length.  A text then matches when the first
segment matches at its start, the last at its end, and each segment between
is found, in order, at its *leftmost* place after the one before: taking the
leftmost place never loses a match, because every later segment can still go
anywhere a later place would have let it go.

No backtracking, so no input can make a match slow: an all-literal segment is
found with :meth:`str.find`; any other is a regular expression of one
character class per token -- no quantifier, no alternation, hence no
backtracking point -- so one search costs at most ``len(text) x len(segment)``
steps and a whole match at most ``len(text) x len(glob)``.  (The previous
translation to ``.*`` regular expressions backtracked: a legal pattern with a
handful of ``*`` against a 1,024-byte key would run for days holding the GIL.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

#: ``matcher(text)`` -> whether the whole of *text* matches the glob.
GlobMatcher = Callable[[str], bool]

#: One token of a glob: ``None`` for ``*``, else ``(literal, regex)`` where
#: *literal* is the one character it stands for (``None`` for ``?`` and classes)
#: and *regex* a quantifier-free regular expression matching one character.
_Token = tuple[str | None, str] | None


def _tokens(pattern: str) -> list[_Token]:
    """Cut *pattern* into tokens (the grammar of Redis's ``stringmatchlen``)."""
    out: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if not out or out[-1] is not None:  # `**` is `*`
                out.append(None)
        elif c == "?":
            out.append((None, "."))
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append((pattern[i], re.escape(pattern[i])))
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
            if not body:  # `[]` matches nothing, `[^]` any one character
                out.append((None, "[\\s\\S]" if negate else "[^\\s\\S]"))
            else:
                out.append((None, f"[{'^' if negate else ''}{body}]"))
            i = j  # at the closing ']' (or past the end when unterminated)
        else:
            out.append((c, re.escape(c)))
        i += 1
    return out


class _Segment(NamedTuple):
    """A run of one-character tokens between two ``*``: fixed length, found without backtracking."""

    #: Characters it matches.
    size: int
    #: Its text when every token is a literal (found with str.find), else None.
    literal: str | None
    #: One character class per token: no quantifier, so nothing to backtrack.
    regex: re.Pattern[str]


def _segments(tokens: list[_Token]) -> list[_Segment]:
    runs: list[list[tuple[str | None, str]]] = [[]]
    for token in tokens:
        if token is None:
            runs.append([])
        else:
            runs[-1].append(token)
    segments: list[_Segment] = []
    for run in runs:
        letters = [letter for letter, _ in run if letter is not None]
        literal = "".join(letters) if len(letters) == len(run) else None
        regex = re.compile("".join(piece for _, piece in run), re.DOTALL)
        segments.append(_Segment(len(run), literal, regex))
    return segments


@lru_cache(maxsize=256)
def glob_matcher(pattern: str) -> GlobMatcher:
    """A function telling whether a whole text matches the Redis ``MATCH`` glob *pattern*.

    Supports ``*``, ``?``, ``[abc]``, ``[^a]``/``[!a]``, ``[a-z]`` and ``\\x``
    escapes, as Redis's ``stringmatchlen`` does (``?`` and classes match one
    character).  Worst case O(len(text) x len(pattern)), whatever the input.
    """
    segments = _segments(_tokens(pattern))
    if len(segments) == 1:  # no `*`: the one segment is the whole text
        (only,) = segments
        if only.literal is not None:
            return only.literal.__eq__
        return lambda text: only.regex.fullmatch(text) is not None
    first, *middle, last = segments
    head, tail = first.literal, last.literal
    if not middle and head is not None and last.size == 0:
        # `head*`, the shape of every scope's SCAN glob.  (A lambda: methodcaller
        # builds a bound method per call and is slower.)
        return lambda text: text.startswith(head)
    fixed = first.size + sum(segment.size for segment in middle)
    if not middle and head is not None and tail is not None:
        # `head*tail`, what scope_glob sends for a pattern with wildcards.  The head
        # first: in a store's scan most keys belong to another namespace.
        least = fixed + last.size
        return lambda text: text.startswith(head) and text.endswith(tail) and len(text) >= least
    steps = [(segment.literal, segment.regex.search, segment.size) for segment in middle]

    def matches_all(text: str) -> bool:
        end = len(text) - last.size  # where the last segment must start
        if end < fixed:
            return False
        if head is not None:
            if not text.startswith(head):
                return False
        elif first.regex.match(text) is None:
            return False
        if tail is not None:
            if not text.endswith(tail):
                return False
        elif last.regex.match(text, end) is None:
            return False
        pos = first.size
        for literal, search, size in steps:  # each at its leftmost place after the last
            if literal is not None:
                found = text.find(literal, pos, end)
                if found < 0:
                    return False
                pos = found + size
            else:
                match = search(text, pos, end)
                if match is None:
                    return False
                pos = match.end()
        return True

    return matches_all
