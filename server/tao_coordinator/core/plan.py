"""Plans: what a policy's solver decided for one snapshot.

A `Plan` is what a policy's solver produced for one snapshot: an ordered list of changes. Order matters because
the planner applies the longest prefix that is still valid against live state (`core/planner.py`): interruptions
come first (they only free capacity), then placements from the most to the least valuable.

A plan made from a value model (`core/policies/problem.py`) carries the value the solver ranked each change by, so
that what was decided can be told without evaluating anything again (`core/decision.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .model import NodeId, SessionId


@dataclass(frozen=True, slots=True)
class Placement:
    """Give `session_id` a place on `node` (None: take its place away), valid only at `version`."""

    session_id: SessionId
    version: int
    node: NodeId | None
    weight_tokens: int
    """The footprint the solver charged for this session, used to check that the placement still fits."""


@dataclass(frozen=True, slots=True)
class Plan:
    placements: tuple[Placement, ...]
    method: str = "none"
    """How the solver decided: all-fit (upper bound reached), exact, bounded, fallback, greedy, or none."""
    objective: tuple[int, ...] = ()
    candidates: int = 0
    certified: bool = False
    """The solver proved `objective` optimal for the snapshot."""
    gap_bound: float | None = None
    """When not certified and a bound is known: the relative shortfall of `objective` against it in the first
    component where they differ — the optimum is at most this much better."""
    values: Mapping[SessionId, tuple[int, ...]] = field(default_factory=dict)
    """The value of each session the plan changes, as the solver saw it: on the node it gives the session, or, for
    an interruption, on the node it takes away. Empty for a policy without a value model."""
    value_names: tuple[str, ...] = ()
    """The names of the value components, in order (`core/value.py`); empty without `values`."""


@dataclass(frozen=True, slots=True)
class PlanFinished:
    """Event: the driver solved job `job_id` and hands back its plan."""

    job_id: int
    plan: Plan
