"""The credit half-life h of each node, fitted online from the prefix retention vLLM shows
(docs/design.md#cache-credit).

Model: a session's cache left at vLLM's mercy on a node survives Δt seconds with probability p(Δt) = 2^(−Δt/h),
the curve `CacheCredit` decays snapshot credit by. One observation is (Δt, asked, kept): of `asked` tokens vLLM
could have hit, the call found `kept` cached. Its outcome f = min(kept, asked) / asked counts as a Bernoulli trial
with fractional outcome, log-likelihood f·log p + (1 − f)·log(1 − p), p clamped to [ε, 1 − ε] so that one odd
observation (a loss at Δt ≈ 0) costs a bounded amount.

Estimate: for a fixed grid of candidate h, log-spaced from `shortest_s` to `longest_s`, each node keeps the sum of
the log-likelihoods, exponentially forgotten — a new observation first multiplies the node's sums by
λ = 1 − 1/`window`, so about the last `window` observations count — and the estimate is the grid point of greatest
sum (the shortest among equals). A node's own estimate counts once it has had `min_observations` observations;
before that the estimate of all nodes pooled (their sums added) stands in, once they have had that many together;
before that there is none, and the caller keeps its configured h.

Invariants: memory per node is one grid of sums, however many observations come; an observation with asked ≤ 0,
kept < 0 or Δt negative or not finite changes nothing; a forgotten node leaves no trace, in the pooled estimate
neither; the same observations in the same order give the same estimates (no clock, no randomness: time comes in
as Δt).
"""

from __future__ import annotations

import math

from ..model import NodeId


class HalfLifeFit:
    def __init__(
        self,
        *,
        shortest_s: float = 1.0,
        longest_s: float = 3600.0,
        points: int = 49,
        window: int = 200,
        min_observations: int = 20,
        epsilon: float = 1e-3,
    ) -> None:
        if not 0 < shortest_s < longest_s or points < 2 or window < 1 or min_observations < 1 or not 0 < epsilon < 0.5:
            raise ValueError("need 0 < shortest_s < longest_s, points ≥ 2, window ≥ 1, min_observations ≥ 1, 0 < ε < ½")
        ratio = math.log(longest_s / shortest_s) / (points - 1)
        self.grid = tuple(shortest_s * math.exp(k * ratio) for k in range(points))
        """Candidate half-lives, seconds, increasing."""
        self.window = window
        self.min_observations = min_observations
        self.epsilon = epsilon
        self._sums: dict[NodeId, list[float]] = {}
        self._count: dict[NodeId, int] = {}
        self._estimates: dict[NodeId, float | None] = {}

    def observe(self, node: NodeId, elapsed_s: float, asked_tokens: int, kept_tokens: int) -> bool:
        """Add one retention observation on `node`; False (and nothing changed) when it is not one."""
        if asked_tokens <= 0 or kept_tokens < 0 or not math.isfinite(elapsed_s) or elapsed_s < 0:
            return False
        kept = min(kept_tokens, asked_tokens) / asked_tokens
        keep = 1.0 - 1.0 / self.window
        sums = self._sums.setdefault(node, [0.0] * len(self.grid))
        low, high = self.epsilon, 1.0 - self.epsilon
        for k, half_life in enumerate(self.grid):
            exponent = -elapsed_s * math.log(2.0) / half_life
            survive = min(high, max(low, math.exp(exponent)))
            lost = min(high, max(low, -math.expm1(exponent)))
            sums[k] = keep * sums[k] + kept * math.log(survive) + (1.0 - kept) * math.log(lost)
        self._count[node] = self._count.get(node, 0) + 1
        self._refresh()
        return True

    def estimate(self, node: NodeId) -> float | None:
        """The fitted h for `node`: its own, else the pooled one, else None (not enough evidence yet)."""
        return self._estimates.get(node, self._estimates.get(_POOLED))

    def observations(self, node: NodeId) -> int:
        """Observations `node` has received since it was first seen or last forgotten."""
        return self._count.get(node, 0)

    def forget(self, node: NodeId) -> None:
        """Drop everything learned on `node` (it was removed from the fleet)."""
        for table in (self._sums, self._count):
            table.pop(node, None)
        self._refresh()

    def _refresh(self) -> None:
        estimates: dict[NodeId, float | None] = {}
        for node, sums in self._sums.items():
            if self._count[node] >= self.min_observations:
                estimates[node] = self._argmax(sums)
        if sum(self._count.values()) >= self.min_observations:
            pooled = [math.fsum(column) for column in zip(*self._sums.values(), strict=True)]
            estimates[_POOLED] = self._argmax(pooled)
        self._estimates = estimates

    def _argmax(self, sums: list[float]) -> float:
        best = max(range(len(sums)), key=lambda k: (sums[k], -k))
        return self.grid[best]


_POOLED: NodeId = ""
"""Key of the pooled estimate; no node has an empty id (events refuse one)."""
