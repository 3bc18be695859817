"""Duration of engine steps under the §8.4 model, one at a time or for a whole stretch of pure-decode steps.

A step schedules `tokens` tokens: decoding sequences contribute one token each and their context length (the tokens
attended, including the new one) to `decode_context`; prefill chunks contribute `n` tokens and n·(offset + n/2) to
`prefill_token_pairs`. An empty step (nothing scheduled) takes no time: vLLM does not run the model then.

Decode stretch: with a fixed set of B sequences that only decode, step j (1-based) has context sum S₁ + B·(j − 1), so
its duration is base + slope·(j − 1), and k steps take k·base + slope·k(k − 1)/2. `DecodeStretchClock` evaluates that
sum and inverts it (how many whole steps end within a time budget) in O(1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .profile import StepCoefficients


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    coefficients: StepCoefficients

    @property
    def kv_read_s_per_context_token(self) -> float:
        c = self.coefficients
        return c.kv_bytes_per_token / c.tp / c.kv_read_bytes_per_s

    def step_seconds(self, tokens: int, decode_context: int = 0, prefill_token_pairs: float = 0.0) -> float:
        if tokens <= 0:
            return 0.0
        c = self.coefficients
        per_token = c.linear_per_token_s * tokens
        linear = max(c.linear_floor_s, per_token) + c.linear_overlap * min(c.linear_floor_s, per_token)
        kv_read = decode_context * self.kv_read_s_per_context_token
        attention = c.attention_flops_per_token_pair * prefill_token_pairs / c.tp / c.attention_flops_per_s
        allreduce = 0.0
        if c.tp > 1:
            per_reduce = c.allreduce_latency_s + tokens * c.allreduce_bytes_per_token / c.allreduce_bytes_per_s
            allreduce = c.allreduces_per_step * per_reduce
        fixed = c.overhead_s + c.lm_head_bytes / c.tp / c.lm_head_bytes_per_s
        return linear + kv_read + attention + allreduce + fixed

    def decode_step_seconds(self, contexts: list[int]) -> float:
        """One pure-decode step over sequences with the given context lengths (the §8.5 decode tables)."""
        return self.step_seconds(len(contexts), decode_context=sum(contexts))

    def prefill_seconds(self, new_tokens: int, offset: int = 0, max_num_batched_tokens: int = 8192) -> float:
        """A lone request's prefill of `new_tokens` after `offset` cached tokens, chunked by the token budget."""
        total = 0.0
        done = 0
        while done < new_tokens:
            chunk = min(max_num_batched_tokens, new_tokens - done)
            start = offset + done
            total += self.step_seconds(chunk, prefill_token_pairs=chunk * (start + chunk / 2))
            done += chunk
        return total

    def decode_stretch(self, batch: int, first_context_sum: int) -> DecodeStretchClock:
        base = self.step_seconds(batch, decode_context=first_context_sum)
        return DecodeStretchClock(base_s=base, slope_s=self.kv_read_s_per_context_token * batch)


@dataclass(frozen=True, slots=True)
class DecodeStretchClock:
    """Durations of consecutive pure-decode steps: step j (1-based) lasts base_s + slope_s·(j − 1)."""

    base_s: float
    slope_s: float

    def elapsed(self, steps: int) -> float:
        return steps * self.base_s + self.slope_s * steps * (steps - 1) / 2

    def steps_within(self, budget_s: float, cap: int) -> int:
        """The largest k ≤ cap whose first k steps all end within budget_s."""
        if budget_s < 0 or cap <= 0:
            return 0
        if self.base_s <= 0:
            return cap
        half = self.slope_s / 2
        if half == 0:
            guess = budget_s / self.base_s
        else:
            linear = self.base_s - half
            guess = (-linear + math.sqrt(linear * linear + 4 * half * budget_s)) / (2 * half)
        steps = min(cap, max(0, math.floor(guess)))
        while steps > 0 and self.elapsed(steps) > budget_s:
            steps -= 1
        while steps < cap and self.elapsed(steps + 1) <= budget_s:
            steps += 1
        return steps
