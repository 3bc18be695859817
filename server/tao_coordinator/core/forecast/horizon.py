"""The readiness horizon H, adapted to load.

Readiness decides only when sessions compete for places, that is while some wait in the pool. It asks whether a
session in a tool will want a GPU soon enough that keeping its place is worth as much as giving the place to one
that waits now. "Soon enough" is how long a session that has to wait for a place waits: a call back within that time
would have waited about as long anyway. So H is the median wait of the last `WINDOW` sessions served from the pool,
never below the configured `readiness_horizon_s`, rounded up to a power of √2 times it (schedules are recomputed only
when H moves by a step), and at most `MAX_HORIZON_STEPS` steps above it. Acquires served at once do not count: they say
nothing about the wait of those that compete.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

WINDOW = 64
MAX_HORIZON_STEPS = 12
"""√2^12 = 64: H stays within 64 × the configured value."""


class AdaptiveHorizon:
    def __init__(self, floor_s: float) -> None:
        self.floor_s = floor_s
        self._waits: deque[float] = deque(maxlen=WINDOW)
        self.value_s = floor_s

    def observe_wait(self, wait_s: float) -> bool:
        """Record one acquire's wait; True when H moved to another step."""
        self._waits.append(max(0.0, wait_s))
        median = statistics.median(self._waits)
        if self.floor_s <= 0 or median <= self.floor_s:
            value = self.floor_s
        else:
            steps = min(MAX_HORIZON_STEPS, math.ceil(2 * math.log2(median / self.floor_s) - 1e-9))
            value = self.floor_s * math.sqrt(2.0) ** steps
        changed = value != self.value_s
        self.value_s = value
        return changed
