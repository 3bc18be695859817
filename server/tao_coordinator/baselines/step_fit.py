"""The decode step time of one node as a linear model, fitted online: `step_s = s0 + per_seq · running + per_kv · KV`.

vLLM's step time is a floor, a part per sequence in the batch and a part per KV token read (`vllm.md` §8.4), so a
least-squares fit of observed step times against the running requests and the KV they hold recovers the per-sequence
and per-KV-token costs that `cost_model.py` charges a placement. Old observations are forgotten exponentially; three
pseudo-observations of the prior model (TP=2) pin what the data leave open, since on a fleet running count and KV
move together and the split between them is otherwise ill-determined.

Invariants: the coefficients are never negative; before any observation they are the prior.
"""

from __future__ import annotations

import math

STEP_PRIOR = (0.0142, 1.3e-5, 5.7e-8)
"""s0 = a + overhead; per sequence 0.15·b + all-reduce per token; per KV token 256 KiB / TP / 2.3e12 B/s (TP=2)."""
_PRIOR_POINTS = ((1.0, 2048.0), (64.0, 64 * 2048.0), (64.0, 64 * 32768.0))
PRIOR_WEIGHT = 0.05
"""Weight of each pseudo-observation of the prior: enough to pin what the data leave open, little against data."""


class StepFit:
    """Exponentially forgetting least squares of `step_s = s0 + per_seq · running + per_kv · kv_tokens`."""

    def __init__(self, forget: float = 0.99) -> None:
        self.forget = forget
        self._xtx = [[0.0] * 3 for _ in range(3)]
        self._xty = [0.0] * 3
        self.coefficients = STEP_PRIOR

    def add(self, running: float, kv_tokens: float, step_s: float) -> None:
        x = (1.0, running, kv_tokens)
        for i in range(3):
            self._xty[i] = self.forget * self._xty[i] + x[i] * step_s
            for j in range(3):
                self._xtx[i][j] = self.forget * self._xtx[i][j] + x[i] * x[j]
        xtx = [row[:] for row in self._xtx]
        xty = self._xty[:]
        for running_prior, kv_prior in _PRIOR_POINTS:
            p = (1.0, running_prior, kv_prior)
            y = sum(c * v for c, v in zip(STEP_PRIOR, p, strict=True))
            for i in range(3):
                xty[i] += PRIOR_WEIGHT * p[i] * y
                for j in range(3):
                    xtx[i][j] += PRIOR_WEIGHT * p[i] * p[j]
        s0, per_seq, per_kv = _solve3(xtx, xty)
        self.coefficients = (max(s0, 0.0), max(per_seq, 0.0), max(per_kv, 0.0))

    def step_s(self, running: float, kv_tokens: float) -> float:
        s0, per_seq, per_kv = self.coefficients
        return s0 + per_seq * running + per_kv * kv_tokens


def _solve3(m: list[list[float]], v: list[float]) -> tuple[float, float, float]:
    """Gaussian elimination with column scaling (the columns differ by ten orders of magnitude)."""
    scale = [math.sqrt(m[i][i]) or 1.0 for i in range(3)]
    a = [[m[i][j] / (scale[i] * scale[j]) for j in range(3)] + [v[i] / scale[i]] for i in range(3)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, 3):
            f = a[r][col] / a[col][col]
            a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    out = [0.0] * 3
    for i in (2, 1, 0):
        out[i] = (a[i][3] - sum(a[i][j] * out[j] for j in range(i + 1, 3))) / a[i][i]
    return out[0] / scale[0], out[1] / scale[1], out[2] / scale[2]
