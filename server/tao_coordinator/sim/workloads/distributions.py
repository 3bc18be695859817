"""Empirical distributions as quantile tables, and the parameters of a synthetic agent workload.

A `QuantileTable` stores a distribution by its values at fixed levels (`QUANTILE_LEVELS`) and samples by inverse
transform with linear interpolation between levels: its samples reproduce the stored quantiles, the minimum and the
maximum exactly in the limit, with no parametric family imposed on heavy tails (AgentX gaps, outputs).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import pairwise

QUANTILE_LEVELS: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0)


@dataclass(frozen=True, slots=True)
class QuantileTable:
    values: tuple[float, ...]
    """Values at `QUANTILE_LEVELS`, non-decreasing."""

    def __post_init__(self) -> None:
        if len(self.values) != len(QUANTILE_LEVELS):
            raise ValueError(f"need {len(QUANTILE_LEVELS)} values, got {len(self.values)}")
        if any(b < a for a, b in pairwise(self.values)):
            raise ValueError("quantile values must be non-decreasing")

    def at(self, level: float) -> float:
        """The value at quantile `level` in [0, 1] (the inverse CDF)."""
        if not 0.0 <= level <= 1.0:
            raise ValueError(f"level {level} outside [0, 1]")
        upper = min(bisect.bisect_right(QUANTILE_LEVELS, level), len(QUANTILE_LEVELS) - 1)
        lower = upper - 1
        span = QUANTILE_LEVELS[upper] - QUANTILE_LEVELS[lower]
        weight = (level - QUANTILE_LEVELS[lower]) / span
        return self.values[lower] + weight * (self.values[upper] - self.values[lower])

    @property
    def median(self) -> float:
        return self.at(0.5)


@dataclass(frozen=True, slots=True)
class SyntheticPreset:
    """Everything the generator draws from. Token counts are totals in the trace's tokenizer, before `scale`."""

    name: str
    model: str
    turns: QuantileTable
    """LLM calls of the main agent per session."""
    initial_prompt_tokens: QuantileTable
    """Prompt of the first call, shared prefix included."""
    appended_tokens: QuantileTable
    """Tokens a turn adds to the history besides the previous output (tool result or user message), ≥ 0."""
    output_tokens: QuantileTable
    tool_gap_s: QuantileTable
    """Raw tool gaps before the gap rule."""
    user_gap_s: QuantileTable
    """Raw user gaps before the gap rule."""
    user_turn_share: float
    """Share of calls after the first that follow a user message rather than a tool result."""
    prefix_break_share: float
    """Share of calls whose prompt keeps only the head of the previous one's blocks (compaction, or an early part of
    the prompt rewritten): the rest of the prompt gets fresh ids."""
    prefix_break_keep: QuantileTable
    """Fraction of the previous prompt's blocks a prompt after a prefix break keeps."""
    restart_share: float
    """Share of prefix breaks that change the prompt size by more than `RESTART_SIZE_CHANGE` (compaction, resume);
    the others rewrite the prompt and grow it as usual."""
    restart_prompt_tokens: QuantileTable
    """Prompt tokens after a restart. Drawn on its own: in the traces big jumps follow small prompts and vice versa."""
    shared_prefix_tokens: int
    """Head of every prompt that all sessions of the preset share (tool catalog, system prompt)."""
    max_prompt_tokens: int
    """Largest prompt in the traces: a session never grows past it (the agent would compact)."""
    tools: tuple[tuple[str, float], ...]
    """Tool names with their shares of tool gaps."""
    command_timeout_s: float | None = None
    subagent_share: float = 0.0
    """Probability that a main-agent call (not the last) launches a sub-agent."""
    subagent_blocking_share: float = 0.0
    subagent_delay_s: float = 0.0
    subagent_turns: QuantileTable | None = None
    subagent_initial_prompt_tokens: QuantileTable | None = None
    small_model: str = ""
    """The small fast model of the traces (informational: the simulated fleet serves roles, `workloads/model.py`)."""
    side_call_share: float = 0.0
    """Probability that a main-agent call (not the last) is followed by a side call to the small model."""
    side_call_prompt_tokens: QuantileTable | None = None
    side_call_output_tokens: QuantileTable | None = None
    small_subagent_share: float = 0.0
    """Share of sub-agents whose every call is to the small model (Claude Code's Explore agents)."""
