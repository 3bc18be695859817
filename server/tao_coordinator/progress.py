"""A progress bar on standard error for long runs: redrawn in place on a terminal, silent otherwise (CI logs and
pipes get the final summary lines instead)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.done = 0
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self.enabled = self.stream.isatty()

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and (now - self._drawn_at >= 0.1 or self.done >= self.total):
            self._drawn_at = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        share = min(1.0, self.done / self.total)
        filled = int(share * self.width)
        elapsed = now - self.started
        bar = "█" * filled + "·" * (self.width - filled)
        self.stream.write(f"\r{self.label} {bar} {share:4.0%} {self.done}/{self.total} {elapsed:5.1f}s")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
