"""The forecast of one tool call's duration: a distribution, conditioned on the call's hints and on time elapsed.

The predictive distribution of a call with levels L0 (most specific) … Lk (`ToolKey.levels`, the session's own level
first when there is one; a level that has seen no more samples than the one below it holds the same data and is
skipped) is a hierarchical smoothing of their empirical distributions towards a prior:

    P_k+1 = prior,   P_j = (m_j · E_j + κ · P_j+1) / (m_j + κ)

E_j weighs level j's samples by recency (a sample's weight halves every `recency_half_life` newer samples) and m_j is
the sum of those weights. A level with one sample moves the forecast by 1/(1 + κ) of the way only, so what one or two
samples predict stays close to the level above (cold start is no worse than the prior). The prior is log-normal
(median `prior_median_s`, log-sd `PRIOR_LOG_SD`): it keeps every tail probability positive, so a call that has run
longer than anything seen still has a finite, decreasing hazard.

Hints shape the distribution: a call that sleeps s seconds takes s plus what the rest of its command takes, T = s + X
(the history learns X, the duration beyond the sleep: `Forecaster.learn`); a timeout or deadline is a cap (the call
ends by then); a background call returns at once. Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr

from .history import Samples

PRIOR_LOG_SD = 1.5
"""Natural-log standard deviation of the prior: about a factor of 20 either side of its median covers 95 %."""

_TINY = 1e-12


@dataclass(frozen=True, slots=True)
class Smoothing:
    kappa: float = 2.0
    """Pseudo-count of the level above: a level's own samples outweigh it once their weights sum past κ."""
    recency_half_life: float = 32.0
    """In samples: a duration's weight halves with every this many newer ones of its level."""
    prior_median_s: float = 5.0


class Predictive:
    """A mixture of weighted atoms (the levels' samples) and the log-normal prior."""

    def __init__(self, levels: Sequence[Samples], smoothing: Smoothing) -> None:
        chunks: list[NDArray[np.float64]] = []
        weights: list[NDArray[np.float64]] = []
        carry = 1.0  # the share of probability left for this level and everything above it
        below = 0  # samples ever added to the last level used
        for samples in levels:
            if not len(samples) or samples.added == below:
                continue  # a level holds every sample of the levels below it: the same count means the same data
            below = samples.added
            ages = (samples.added - 1) - np.frombuffer(samples.arrivals(), dtype=np.int64)
            recency = np.exp2(ages * (-1.0 / smoothing.recency_half_life))
            mass = float(recency.sum())
            share = carry * mass / (mass + smoothing.kappa)
            chunks.append(np.frombuffer(samples.values(), dtype=np.float64).copy())
            weights.append(recency * (share / mass))
            carry -= share
        if chunks:
            values = np.concatenate(chunks)
            order = np.argsort(values, kind="stable")
            self.values = values[order]
            self.cumulative = np.cumsum(np.concatenate(weights)[order])
        else:
            self.values = np.zeros(0)
            self.cumulative = np.zeros(0)
        self.prior_weight = carry
        self.prior_mu = math.log(max(smoothing.prior_median_s, 1e-3))
        self._value_list: list[float] = self.values.tolist()
        self._cumulative_list: list[float] = self.cumulative.tolist()

    def cdf(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """P(T ≤ x), elementwise."""
        index = np.searchsorted(self.values, x, side="right")
        atoms = np.where(index > 0, self.cumulative[np.maximum(index - 1, 0)] if len(self.values) else 0.0, 0.0)
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(x, 0.0)) - self.prior_mu) / PRIOR_LOG_SD
        return np.minimum(1.0, atoms + self.prior_weight * ndtr(z))

    def cdf_at(self, x: float) -> float:
        """`cdf` of one number, without numpy's per-call overhead."""
        index = bisect_right(self._value_list, x)
        atoms = self._cumulative_list[index - 1] if index else 0.0
        if x <= 0.0:
            return min(1.0, atoms)
        z = (math.log(x) - self.prior_mu) / PRIOR_LOG_SD
        return min(1.0, atoms + self.prior_weight * 0.5 * math.erfc(-z / math.sqrt(2.0)))


@dataclass(frozen=True, slots=True)
class ToolForecast:
    """A call's duration distribution under its hints. Times are seconds since the call started."""

    predictive: Predictive
    """Of X, the time the call takes beyond its sleep."""
    sleep_s: float = 0.0
    """T = sleep_s + X."""
    cap_s: float = math.inf
    """The call has ended by then (timeout, deadline)."""
    background: bool = False

    def _conditional(self, elapsed: NDArray[np.float64], x: NDArray[np.float64]) -> NDArray[np.float64]:
        """P(T ≤ x | T > elapsed), elementwise, with the sleep's shift and the cap applied."""
        since = elapsed - self.sleep_s  # X > since is what the time run says (nothing while still asleep)
        start = np.where(since >= 0.0, self.predictive.cdf(np.maximum(since, 0.0)), 0.0)
        left = 1.0 - start
        # past every atom and the prior's numerical tail nothing is known: not expected back soon
        safe = np.where(left > _TINY, left, 1.0)
        reached = self.predictive.cdf(np.maximum(x - self.sleep_s, 0.0))
        within = np.where(left > _TINY, np.clip((reached - start) / safe, 0.0, 1.0), 0.0)
        within = np.where((x < elapsed) | (x < self.sleep_s), 0.0, within)
        return np.where(x >= self.cap_s, 1.0, within)

    def return_probability(self, elapsed: float, horizon_s: float) -> float:
        """P(the call returns within `horizon_s` | it has run `elapsed` seconds)."""
        return float(self.return_probabilities(np.array([elapsed]), horizon_s)[0])

    def return_probabilities(self, elapsed: NDArray[np.float64], horizon_s: float) -> NDArray[np.float64]:
        if self.background:
            return np.ones_like(elapsed)
        return self._conditional(elapsed, elapsed + horizon_s)

    def quantile(self, p: float, elapsed: float = 0.0) -> float:
        """The duration by which the call has returned with probability p, given it has run `elapsed` seconds."""
        if self.background:
            return 0.0
        if self.cap_s <= elapsed:
            return self.cap_s
        # in X, the time beyond the sleep: the answer is sleep_s + the quantile of X given X > elapsed - sleep_s
        since = elapsed - self.sleep_s
        start = self.predictive.cdf_at(since) if since >= 0.0 else 0.0
        left = 1.0 - start
        cap = self.cap_s - self.sleep_s
        low = max(since, 0.0)

        def reaches(x: float) -> bool:
            return x >= cap or (left > _TINY and x >= since and self.predictive.cdf_at(x) - start >= p * left)

        if reaches(low):
            return min(self.cap_s, self.sleep_s + low)
        high = max(low, 1e-3) * 2.0
        while not reaches(high) and high < min(cap, 1e9):
            low, high = high, high * 2.0
        high = min(high, cap)
        atoms = self.predictive.values
        inside = atoms[(atoms > low) & (atoms <= high)]
        if len(inside):
            at = self.predictive.cdf(inside) - start >= p * left
            if at.any():
                first = int(np.argmax(at))
                high = float(inside[first])
                low = float(inside[first - 1]) if first > 0 else low
        while high - low > 1e-3 * high and high > 1e-4:  # the prior's continuous part between two atoms: bisect
            middle = math.sqrt(low * high) if low > 0 else high / 2.0
            if reaches(middle):
                high = middle
            else:
                low = middle
        return min(self.cap_s, self.sleep_s + high)

    def median(self, elapsed: float = 0.0) -> float:
        return self.quantile(0.5, elapsed)
