"""A progress bar on stderr for long measurements (one rank draws it)."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """A progress bar on stderr (enabled on one rank): redrawn in place every 0.2 s on a terminal, else
    one line every 10 s (so captured logs stay short)."""

    def __init__(self, total: float, enabled: bool) -> None:
        self.total = max(total, 1e-9)
        self.done = 0.0
        self.enabled = enabled
        self.started = time.perf_counter()
        self._drawn = self.started
        self._tty = sys.stderr.isatty()
        self._every = 0.2 if self._tty else 10.0

    def advance(self, amount: float, label: str = "") -> None:
        """Count `amount` more units done; redraw if it is time."""
        self.done += amount
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._drawn < self._every:
            return
        self._drawn = now
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 30)
        elapsed = now - self.started
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        line = f"[{bar:<30}] {frac * 100:5.1f}% {elapsed:6.1f}s eta {eta:6.1f}s {label:<28}"
        sys.stderr.write("\r" + line if self._tty else line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        """End the bar's line (terminal only)."""
        if self.enabled and self._tty:
            sys.stderr.write("\n")
            sys.stderr.flush()
