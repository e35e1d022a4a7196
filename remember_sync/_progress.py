"""A tiny progress bar for long operator commands (``rotate``, ``export``, ``stats``...).

It draws on standard error, and only when standard error is a terminal: a cron
job's mail or a pipeline's log never fills up with carriage returns.  Nothing
here touches standard output, which belongs to the command's result.
"""

from __future__ import annotations

from typing import TextIO

from ._clock import Clock, system_clock

_WIDTH = 24
#: Milliseconds between redraws: a fast loop over a million keys must not spend its time drawing.
_REDRAW_EVERY_MS = 100


class Progress:
    """``label [#####.....] done/total  rate keys/s`` on a terminal; silent otherwise.

    Use it as a context manager and call :meth:`advance` as work completes::

        with Progress(len(keys), "rotate", stream=sys.stderr) as bar:
            for batch in batches:
                ...
                bar.advance(len(batch))

    :param total: how many items the operation will handle (``0`` is fine).
    :param label: a short word shown before the bar.
    :param stream: where to draw (standard error in the CLI); ``None`` turns it off.
    :param enabled: force drawing on or off; by default it is on exactly when
        *stream* is a TTY.
    :param clock: epoch milliseconds (inject a fake one in tests).
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        stream: TextIO | None,
        enabled: bool | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.total = max(0, total)
        self.label = label
        self.done = 0
        self._stream = stream
        if stream is None:
            self.enabled = False
        else:
            self.enabled = is_tty(stream) if enabled is None else enabled
        self._clock = clock
        self._started = clock()
        self._last_draw = float("-inf")

    def advance(self, count: int = 1) -> None:
        """Record *count* more items done; redraw at most every 0.1 s."""
        self.done += count
        if not self.enabled:
            return
        now = self._clock()
        if now - self._last_draw >= _REDRAW_EVERY_MS or self.done >= self.total:
            self._draw(now)

    def render(self, now: int | None = None) -> str:
        """The bar's text (without the carriage return)."""
        now = self._clock() if now is None else now
        rate = self.done * 1000 / max(now - self._started, 1e-6)
        if self.total:
            filled = min(_WIDTH, self.done * _WIDTH // self.total)
        else:
            filled = _WIDTH
        bar = "#" * filled + "." * (_WIDTH - filled)
        return f"{self.label} [{bar}] {self.done}/{self.total} keys  {rate:,.0f} keys/s"

    def _draw(self, now: int) -> None:
        self._last_draw = now
        assert self._stream is not None  # enabled implies a stream
        self._stream.write("\r" + self.render(now) + "\x1b[K")
        self._stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line (nothing at all when disabled)."""
        if not self.enabled or self._stream is None:
            return
        self._draw(self._clock())
        self._stream.write("\n")
        self._stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
