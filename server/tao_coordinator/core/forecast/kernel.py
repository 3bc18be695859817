"""The forecast's compiled inner loops: mixing the levels, the CDF, a call's return probability, its readiness
schedule and its quantiles. `predictive.py` and `forecaster.py` state what they compute; this module only computes it.

A predictive distribution is passed as arrays: `values`, its atoms in increasing order; `below[i]`, the atoms' mass
at or below `values[i - 1]` (`below[0]` is 0, so `below[searchsorted(values, x, "right")]` is the atoms' mass at or
below x); `prior_weight` and `prior_mu`, the log-normal prior's share and log-median. Everything is a scalar loop in
IEEE doubles, compiled once by Numba (cached on disk): a tool start used to cost dozens of numpy calls of a microsecond
each on arrays of a few hundred values, which was most of what the coordinator spent on ingesting events.

Invariants: pure functions of their arguments; the same inputs give the same numbers on every call (no parallel
reduction, no randomness).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

PRIOR_LOG_SD = 1.5
"""Natural-log standard deviation of the prior: about a factor of 20 either side of its median covers 95 %."""

TINY = 1e-12
"""Survival below this: past every atom and the prior's numerical tail, nothing is known of the call."""

SMALLEST = 5e-324
"""The least positive double: the prior's CDF at x ≤ 0 is evaluated at it, where it is 0."""

_SQRT1_2 = 0.7071067811865476


@njit(cache=True)
def ndtr(a: float) -> float:
    """The standard normal CDF, as Cephes computes it (erf near 0, erfc in the tails, where it keeps precision)."""
    x = a * _SQRT1_2
    z = abs(x)
    if z < _SQRT1_2:
        return 0.5 + 0.5 * math.erf(x)
    y = 0.5 * math.erfc(z)
    return 1.0 - y if x > 0.0 else y


@njit(cache=True)
def mix(values, arrivals, starts, added, kappa, half_life):
    """The atoms of levels given most specific first (level l is `values[starts[l]:starts[l + 1]]`, with the arrival
    number of each, and `added[l]` samples ever added to it), each weighed by recency and smoothed towards the level
    above (`predictive.py`): (atoms sorted, `below` as the module states it, the prior's share)."""
    weights = np.empty(values.size)
    carry = 1.0
    for level in range(starts.size - 1):
        first, last = starts[level], starts[level + 1]
        mass = 0.0
        for i in range(first, last):
            weights[i] = np.exp2((added[level] - 1 - arrivals[i]) * (-1.0 / half_life))
            mass += weights[i]
        share = carry * mass / (mass + kappa)
        for i in range(first, last):
            weights[i] *= share / mass
        carry -= share
    order = np.argsort(values, kind="mergesort")
    below = np.zeros(values.size + 1)
    below[1:] = np.cumsum(weights[order])
    return values[order], below, carry


@njit(cache=True)
def cdf(values, below, prior_weight, prior_mu, x):
    """P(X ≤ x)."""
    atoms = below[np.searchsorted(values, x, side="right")]
    z = (math.log(max(x, SMALLEST)) - prior_mu) / PRIOR_LOG_SD
    return min(1.0, atoms + prior_weight * ndtr(z))


@njit(cache=True)
def conditional(values, below, prior_weight, prior_mu, sleep, cap, elapsed, x):
    """P(T ≤ x | T > elapsed) for T = sleep + X, ended by `cap`."""
    if x >= cap:
        return 1.0
    if x < elapsed or x < sleep:
        return 0.0
    since = elapsed - sleep  # X > since is what the time run says (nothing while still asleep)
    start = cdf(values, below, prior_weight, prior_mu, since) if since >= 0.0 else 0.0
    left = 1.0 - start
    if not left > TINY:
        return 0.0
    reached = cdf(values, below, prior_weight, prior_mu, max(x - sleep, 0.0))
    return min(max((reached - start) / left, 0.0), 1.0)


@njit(cache=True)
def return_probabilities(values, below, prior_weight, prior_mu, sleep, cap, elapsed, horizon):
    out = np.empty(elapsed.size)
    for i in range(elapsed.size):
        out[i] = conditional(values, below, prior_weight, prior_mu, sleep, cap, elapsed[i], elapsed[i] + horizon)
    return out


@njit(cache=True)
def schedule(values, below, prior_weight, prior_mu, sleep, cap, horizon, top, grid, max_steps):
    """The readiness levels round(top · P(back within `horizon`)) at every instant where the atoms' part changes
    (each atom, and each atom less the horizon), at the sleep's and the cap's edges and on `grid` (shifted by the
    sleep) in between: (the level at 0, the instants of the first `max_steps` changes, the levels from them)."""
    candidates = np.empty(1 + 2 * values.size + 3 + 2 * grid.size)
    candidates[0] = 0.0
    n = 1
    for value in values:
        candidates[n] = value + sleep
        candidates[n + 1] = (value + sleep) - horizon
        n += 2
    candidates[n] = sleep
    candidates[n + 1] = sleep - horizon
    n += 2
    if cap < np.inf:
        candidates[n] = cap - horizon
        n += 1
    for point in grid:
        candidates[n] = sleep + point
        candidates[n + 1] = (sleep + point) - horizon
        n += 2
    limit = min(cap, grid[-1])
    kept = candidates[:n]
    kept = np.sort(kept[(kept >= 0.0) & (kept <= limit)])
    times = np.empty(max_steps)
    levels = np.empty(max_steps, dtype=np.int64)
    steps = 0
    initial = -1
    previous = -1
    last = -1.0
    for instant in kept:
        if initial >= 0 and instant == last:
            continue
        last = instant
        p = conditional(values, below, prior_weight, prior_mu, sleep, cap, instant, instant + horizon)
        level = int(np.rint(top * p))
        if initial < 0:
            initial = previous = level
        elif level != previous:
            if steps == max_steps:
                break
            times[steps] = instant
            levels[steps] = level
            steps += 1
            previous = level
    return initial, times[:steps], levels[:steps]


@njit(cache=True)
def _reaches(values, below, prior_weight, prior_mu, x, cap, since, start, left, target):
    if x >= cap:
        return True
    return left > TINY and x >= since and cdf(values, below, prior_weight, prior_mu, x) - start >= target


@njit(cache=True)
def quantile(values, below, prior_weight, prior_mu, sleep, cap, p, elapsed):
    """The duration by which T = sleep + X, ended by `cap`, has returned with probability p, given it has run
    `elapsed`: a doubling search, then the atoms in the last bracket, then bisection through the prior between two
    atoms, to 0.1 %."""
    if cap <= elapsed:
        return cap
    since = elapsed - sleep
    start = cdf(values, below, prior_weight, prior_mu, since) if since >= 0.0 else 0.0
    left = 1.0 - start
    cap_x = cap - sleep
    target = p * left
    low = max(since, 0.0)
    if _reaches(values, below, prior_weight, prior_mu, low, cap_x, since, start, left, target):
        return min(cap, sleep + low)
    high = max(low, 1e-3) * 2.0
    while not _reaches(values, below, prior_weight, prior_mu, high, cap_x, since, start, left, target) and high < min(
        cap_x, 1e9
    ):
        low, high = high, high * 2.0
    high = min(high, cap_x)
    first = np.searchsorted(values, low, side="right")
    for k in range(first, np.searchsorted(values, high, side="right")):
        if cdf(values, below, prior_weight, prior_mu, values[k]) - start >= target:
            if k > first:
                low = values[k - 1]
            high = values[k]
            break
    while high - low > 1e-3 * high and high > 1e-4:
        middle = math.sqrt(low * high) if low > 0 else high / 2.0
        if _reaches(values, below, prior_weight, prior_mu, middle, cap_x, since, start, left, target):
            high = middle
        else:
            low = middle
    return min(cap, sleep + high)


def _warm_up() -> None:
    """Compile (or load from Numba's on-disk cache) every kernel now, with the argument types the callers pass, so
    no tool start pays for it."""
    values, below = np.array([1.0, 2.0]), np.array([0.0, 0.25, 0.5])
    index = np.array([0, 1], dtype=np.int64)
    mix(values, index, np.array([0, 2], dtype=np.int64), np.array([2], dtype=np.int64), 2.0, 32.0)
    cdf(values, below, 0.5, 1.0, 1.5)
    return_probabilities(values, below, 0.5, 1.0, 0.0, np.inf, values, 1.0)
    schedule(values, below, 0.5, 1.0, 0.0, np.inf, 1.0, 1, np.array([0.5, 1e5]), 32)
    quantile(values, below, 0.5, 1.0, 0.0, np.inf, 0.5, 0.0)


_warm_up()
