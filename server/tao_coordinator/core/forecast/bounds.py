"""Duration upper bounds from a sample, for the binary readiness rules `tao-bound` and `tao-paper`.

The corrected empirical-Bernstein bound of Audibert, Munos & Szepesvári (2009), which `tao-bound` uses:

    mean + sqrt(2·V·log(3/δ)/n) + 3·R·log(3/δ)/n

with V the empirical variance (1/n), R the range (the largest duration seen, capped by the call's timeout). It is
unit-free: scaling every duration by c scales the bound by c. The TAO write-up prints it without the square root
(`printed_bound`, which `tao-paper` uses, computed in seconds), which makes it depend on the unit of time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SampleStats:
    """What the bounds need of a sample: its size, mean, (population) variance and largest value."""

    n: int
    mean: float
    variance: float
    largest: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> SampleStats:
        n = len(samples)
        if n == 0:
            raise ValueError("samples: need at least one duration")
        mean = math.fsum(samples) / n
        variance = max(0.0, math.fsum((x - mean) ** 2 for x in samples) / n)
        return cls(n, mean, variance, max(samples))

    def bound(self, delta: float, range_cap: float | None = None) -> float:
        spread = self.largest if range_cap is None else min(self.largest, range_cap)
        log_term = math.log(3.0 / delta)
        return self.mean + math.sqrt(2.0 * self.variance * log_term / self.n) + 3.0 * spread * log_term / self.n

    def printed_bound(self, delta: float, range_cap: float | None = None) -> float:
        spread = self.largest if range_cap is None else min(self.largest, range_cap)
        log_term = math.log(3.0 / delta)
        return self.mean + 2.0 * self.variance * log_term / self.n + 3.0 * spread * log_term / self.n


def empirical_bernstein_bound(samples: Sequence[float], delta: float, range_cap: float | None = None) -> float:
    """Upper confidence bound on the mean duration; samples must be non-empty and non-negative."""
    return SampleStats.of(samples).bound(delta, range_cap)
