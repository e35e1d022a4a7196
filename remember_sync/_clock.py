"""The one clock type: every reading of the time in the package goes through one of these.

A :data:`Clock` returns epoch milliseconds.  Components that read the time take a
``clock`` argument (default :func:`system_clock`), so tests drive expiry, leases and
token lifetimes with a fake clock instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Returns the current time as whole epoch milliseconds.
Clock = Callable[[], int]


def system_clock() -> int:
    """The wall clock, in whole epoch milliseconds."""
    return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to; for tests and the demo.

    :param start_ms: the first reading, in epoch milliseconds (default: the wall clock now).
    """

    def __init__(self, start_ms: int | None = None) -> None:
        self.now = system_clock() if start_ms is None else start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int = 0, *, s: float = 0) -> None:
        """Move the clock forward by ``ms`` milliseconds plus ``s`` seconds."""
        self.now += ms + int(s * 1000)
