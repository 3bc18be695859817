"""Dynamo's picker, shared with cost-model: the cheapest node, or a softmax over the costs.

Random draws come from the router's own `random.Random(seed)`, so a seed gives the same choices.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


def pick(costs: Sequence[float], temperature: float, rng: random.Random) -> int:
    """`softmax_sample_index` for T > 0; for T = 0 the cheapest, ties uniformly at random (reservoir sampling)."""
    if temperature > 0:
        low, high = min(costs), max(costs)
        if low == high:
            weights = [1.0] * len(costs)
        else:
            weights = [math.exp(-(c - low) / ((high - low) * temperature)) for c in costs]
        return rng.choices(range(len(costs)), weights)[0]
    best, ties = 0, 0
    for k, cost in enumerate(costs):
        if cost < costs[best]:
            best, ties = k, 1
        elif cost == costs[best]:
            ties += 1
            if ties > 1 and rng.randrange(ties) == 0:
                best = k
    return best
