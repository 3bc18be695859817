"""Progress of long runs on standard error: a rich progress bar (done/total, elapsed, time left) on a terminal, and
on a pipe or CI log a plain line at most every `every_s` seconds (and one at the end), so a multi-minute run is
never silent and a log is not flooded.

`advance` is cheap enough to call once per simulated request: the bar is touched at most ten times a second.
`log` prints a line above the bar (or as a plain line) without breaking it."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None, every_s: float = 10.0) -> None:
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self.done = 0
        self.started = time.monotonic()
        self._shown_at = self.started
        self._shown = 0
        self.enabled = self.stream.isatty()
        self._bar: RichProgress | None = None
        if self.enabled:
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task(label, total=self.total)
            self._bar.start()

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self._bar is not None:
            if now - self._shown_at >= 0.1 or self.done >= self.total:
                self._bar.update(self._task, completed=self.done)
                self._shown_at = now
        elif now - self._shown_at >= self.every_s:
            self._line(now)

    def log(self, line: str) -> None:
        """A message above the bar, or a plain line when there is no bar."""
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def _line(self, now: float) -> None:
        self._shown_at, self._shown = now, self.done
        share = min(1.0, self.done / self.total)
        elapsed = now - self.started
        left = f", about {elapsed * (1 - share) / share:.0f} s left" if 0 < share < 1 else ""
        print(f"{self.label}: {self.done}/{self.total} ({share:.0%}) after {elapsed:.0f} s{left}", file=self.stream)
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            self._bar.stop()
            self._bar = None
        elif self.done != self._shown and time.monotonic() - self.started >= self.every_s:
            self._line(time.monotonic())
