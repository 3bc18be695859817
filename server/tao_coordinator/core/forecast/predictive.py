"""The forecast of one tool call's duration: a distribution, conditioned on the call's hints and on time elapsed.

The predictive distribution of a call with levels L0 (most specific) … Lk (`ToolKey.levels`, the session's own level
first when there is one; a level that has seen no more samples than the one below it holds the same data and is
skipped) is a hierarchical smoothing of their empirical distributions towards a prior:

    P_k+1 = prior,   P_j = (m_j · E_j + κ · P_j+1) / (m_j + κ)

E_j weighs level j's samples by recency (a sample's weight halves every `recency_half_life` newer samples) and m_j is
the sum of those weights. A level with one sample moves the forecast by 1/(1 + κ) of the way only, so what one or two
samples predict stays close to the level above (cold start is no worse than the prior). The prior is log-normal
(median `prior_median_s`, log-sd `kernel.PRIOR_LOG_SD`): it keeps every tail probability positive, so a call that
has run longer than anything seen still has a finite, decreasing hazard.

Hints shape the distribution: a call that sleeps s seconds takes s plus what the rest of its command takes, T = s + X
(the history learns X, the duration beyond the sleep: `Forecaster.learn`); a timeout or deadline is a cap (the call
ends by then); a background call returns at once. Everything here is a pure function of its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .history import Samples
from .kernel import cdf as kernel_cdf
from .kernel import mix as kernel_mix
from .kernel import quantile as kernel_quantile
from .kernel import return_probabilities as kernel_return_probabilities


@dataclass(frozen=True, slots=True)
class Smoothing:
    kappa: float = 2.0
    """Pseudo-count of the level above: a level's own samples outweigh it once their weights sum past κ."""
    recency_half_life: float = 32.0
    """In samples: a duration's weight halves with every this many newer ones of its level."""
    prior_median_s: float = 5.0


class Predictive:
    """A mixture of weighted atoms (the levels' samples) and the log-normal prior, as `kernel.py` takes it: `values`,
    the atoms in increasing order; `below`, their mass at or below each `searchsorted(values, x, "right")` index;
    `prior_weight` and `prior_mu`."""

    def __init__(self, levels: Sequence[Samples], smoothing: Smoothing) -> None:
        self.values: NDArray[np.float64]
        self.below: NDArray[np.float64]
        self.prior_weight: float
        used: list[Samples] = []
        last_added = 0  # samples ever added to the last level used
        for samples in levels:
            if not len(samples) or samples.added == last_added:
                continue  # a level holds every sample of the levels below it: the same count means the same data
            last_added = samples.added
            used.append(samples)
        if used:
            values, arrivals = _concatenated(used)
            starts = np.cumsum([0] + [len(samples) for samples in used], dtype=np.int64)
            added = np.array([samples.added for samples in used], dtype=np.int64)
            self.values, self.below, self.prior_weight = kernel_mix(
                values, arrivals, starts, added, float(smoothing.kappa), float(smoothing.recency_half_life)
            )
        else:
            self.values, self.below, self.prior_weight = np.zeros(0), np.zeros(1), 1.0
        self.prior_mu = math.log(max(smoothing.prior_median_s, 1e-3))

    @property
    def arrays(self) -> tuple[NDArray[np.float64], NDArray[np.float64], float, float]:
        """What `kernel.py` takes of it."""
        return self.values, self.below, self.prior_weight, self.prior_mu

    def cdf_at(self, x: float) -> float:
        """P(T ≤ x)."""
        return float(kernel_cdf(*self.arrays, float(x)))


def _concatenated(levels: list[Samples]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    values = np.concatenate([np.frombuffer(samples.values(), dtype=np.float64) for samples in levels])
    arrivals = np.concatenate([np.frombuffer(samples.arrivals(), dtype=np.int64) for samples in levels])
    return values, arrivals


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

    def return_probability(self, elapsed: float, horizon_s: float) -> float:
        """P(the call returns within `horizon_s` | it has run `elapsed` seconds)."""
        return float(self.return_probabilities(np.array([elapsed]), horizon_s)[0])

    def return_probabilities(self, elapsed: NDArray[np.float64], horizon_s: float) -> NDArray[np.float64]:
        if self.background:
            return np.ones_like(elapsed)
        instants = np.asarray(elapsed, dtype=np.float64)
        probabilities = kernel_return_probabilities(
            *self.predictive.arrays, float(self.sleep_s), float(self.cap_s), instants.ravel(), float(horizon_s)
        )
        return probabilities.reshape(instants.shape)  # type: ignore[no-any-return]

    def quantile(self, p: float, elapsed: float = 0.0) -> float:
        """The duration by which the call has returned with probability p, given it has run `elapsed` seconds."""
        if self.background:
            return 0.0
        return float(
            kernel_quantile(*self.predictive.arrays, float(self.sleep_s), float(self.cap_s), float(p), float(elapsed))
        )

    def median(self, elapsed: float = 0.0) -> float:
        return self.quantile(0.5, elapsed)
