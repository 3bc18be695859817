"""Percentiles of measured values, in the two ways the reports compute them.

* `linear` interpolates between the two order statistics around position share·(n−1) (numpy's default method, and
  how the traces' README computes them): `tao sim` and `tao demo` report it.
* `nearest` takes the order statistic at round(share·(n−1)), Python's `round` (ties to even, as numpy's `nearest`):
  the benches report it, a value that was measured rather than a blend of two.

Both sort their input (it may come in any order) and give NaN for no values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

PercentileMethod = Literal["linear", "nearest"]


def percentile(values: Iterable[float], share: float, *, method: PercentileMethod) -> float:
    """The `share` (0…1) percentile of `values` by `method`; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = share * (len(ordered) - 1)
    if method == "nearest":
        return ordered[min(len(ordered) - 1, max(0, round(position)))]
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
