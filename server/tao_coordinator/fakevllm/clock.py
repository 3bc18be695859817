"""Engine time for a real-time fake node: wall time sped up by a constant factor.

Engine time starts at 0 when the clock is made and runs `scale` times faster than the monotonic wall clock, so a
node at scale 10 does ten seconds of H100 work per wall second. Epoch timestamps (KV-event batches) map engine
times back to wall time. Invariant: `now()` never decreases.
"""

from __future__ import annotations

import math
import time


class ScaledClock:
    def __init__(self, scale: float = 1.0) -> None:
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"time scale: must be a positive number, got {scale!r}")
        self.scale = scale
        self._mono0 = time.monotonic()
        self._epoch0 = time.time()

    def now(self) -> float:
        """Engine seconds since the clock started."""
        return (time.monotonic() - self._mono0) * self.scale

    def wall_delay(self, engine_seconds: float) -> float:
        """Wall seconds that `engine_seconds` of engine time take."""
        return max(0.0, engine_seconds / self.scale)

    def epoch(self, engine_time: float) -> float:
        """The Unix time at which the engine reaches `engine_time`."""
        return self._epoch0 + engine_time / self.scale
