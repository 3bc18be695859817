"""The coordinator's learned tool durations: bounded, recency-ordered, one store for every rule that reads them.

Shared levels (`ToolKey.levels`: tool and program, tool, every tool) keep the newest `forecast_window` durations
each, in a ring. At most `forecast_max_levels` shared levels are kept: adding to a level makes it the most recently
used, and the least recently used one goes when a new level would pass the cap (`ALL_TOOLS` is never evicted). A
session's own levels keep the newest `forecast_session_window` durations of at most `session_levels` levels,
and go when the session closes (`forget_session`).

Memory: a full shared level is two arrays of `forecast_window` 8-byte numbers plus about 0.4 KiB of objects and its
name (tool names are at most 200 characters), so under 2.7 KiB at the default window of 128; the cap of 4,096
levels bounds the shared history at about 11 MiB whatever the clients send (`MEMORY_PER_LEVEL_BYTES`; `tao bench
memory` sends 100,000 distinct tool names to a live coordinator and checks its RSS).

Every level counts its adds (`Samples.added`), so what is built from a level can be cached by that count.
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from ..settings import CoreSettings
from .keys import ALL_TOOLS, ToolKey

MEMORY_PER_LEVEL_BYTES = 2 * 8 * 128 + 400
"""What one full shared level costs at the default window (see the module docstring)."""


class Samples:
    """The newest `window` durations of one level, with the order they arrived in."""

    __slots__ = ("_order", "_values", "added", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self._values = array("d")
        self._order = array("q")
        """Arrival number of each value (`added` at the time), so a reader can weigh recent ones more."""
        self.added = 0

    def add(self, duration_s: float) -> None:
        if len(self._values) < self.window:
            self._values.append(duration_s)
            self._order.append(self.added)
        else:
            slot = self.added % self.window
            self._values[slot] = duration_s
            self._order[slot] = self.added
        self.added += 1

    def __len__(self) -> int:
        return len(self._values)

    def values(self) -> array[float]:
        """The kept durations, in ring order (see `arrivals`)."""
        return self._values

    def arrivals(self) -> array[int]:
        """For each kept value, its arrival number (`added` when it came): `added - 1 - arrival` newer ones exist."""
        return self._order

    def oldest_first(self) -> list[float]:
        return [value for _, value in sorted(zip(self._order, self._values, strict=True))]


class ToolHistory:
    def __init__(
        self, window: int = 128, max_levels: int = 4096, session_window: int = 32, session_levels: int = 64
    ) -> None:
        if min(window, max_levels, session_window, session_levels) < 1:
            raise ValueError("ToolHistory: windows and caps must be at least 1")
        self.window = window
        self.max_levels = max_levels
        self.session_window = session_window
        self.session_levels = session_levels
        self._shared: OrderedDict[str, Samples] = OrderedDict()
        self._sessions: dict[str, OrderedDict[str, Samples]] = {}
        self.evicted = 0
        """Shared levels dropped by the cap since start."""

    @classmethod
    def from_settings(cls, settings: CoreSettings) -> ToolHistory:
        return cls(settings.forecast_window, settings.forecast_max_levels, settings.forecast_session_window)

    def add(self, key: ToolKey, duration_s: float, session_id: str | None = None) -> None:
        if not math.isfinite(duration_s) or duration_s < 0:
            raise ValueError(f"duration_s: must be a finite non-negative number, got {duration_s!r}")
        for level in key.levels:
            self._add_shared(level, duration_s)
        if session_id is not None:
            own = self._sessions.setdefault(session_id, OrderedDict())
            samples = own.pop(key.session_level, None) or Samples(self.session_window)
            own[key.session_level] = samples
            samples.add(duration_s)
            if len(own) > self.session_levels:
                own.popitem(last=False)

    def _add_shared(self, level: str, duration_s: float) -> None:
        samples = self._shared.pop(level, None)
        if samples is None:
            samples = Samples(self.window)
            while len(self._shared) >= self.max_levels:
                self._evict_oldest()
        self._shared[level] = samples
        samples.add(duration_s)

    def _evict_oldest(self) -> None:
        for level in self._shared:
            if level != ALL_TOOLS:
                del self._shared[level]
                self.evicted += 1
                return
        raise AssertionError("only the all-tools level is left, and it is never evicted")

    def shared(self, level: str) -> Samples | None:
        return self._shared.get(level)

    def own(self, session_id: str | None, level: str) -> Samples | None:
        if session_id is None:
            return None
        own = self._sessions.get(session_id)
        return None if own is None else own.get(level)

    def forget_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    @property
    def levels(self) -> int:
        return len(self._shared)

    def export(self) -> dict[str, list[float]]:
        """Every kept shared level's durations, oldest first, least recently used level first."""
        return {level: samples.oldest_first() for level, samples in self._shared.items()}

    def load(self, durations_by_level: Mapping[str, Iterable[float]]) -> None:
        """Restore an `export` (levels in that order): the newest `window` of each, the newest `max_levels` levels."""
        for level, durations in durations_by_level.items():
            for duration in durations:
                self._add_shared(level, float(duration))
