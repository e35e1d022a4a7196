"""Redis-compatible glob matching for stores that match keys themselves.

The matcher lives in :mod:`remember_sync._glob`, a leaf module that both the
storage-key grammar (user patterns) and the stores import, so there is one
copy of it; this module keeps its public name for stores.
"""

from __future__ import annotations

from .._glob import GlobMatcher, glob_matcher

__all__ = ["GlobMatcher", "glob_matcher"]
