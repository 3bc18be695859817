"""Plans: what a policy's solver decided for one snapshot.

A `Plan` is what a policy's solver produced for one snapshot: an ordered list of changes. Order matters because
the planner applies the longest prefix that is still valid against live state (design §6): interruptions come
first (they only free capacity), then placements from the most to the least valuable.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class PlanFinished:
    """Event: the driver solved job `job_id` and hands back its plan."""

    job_id: int
    plan: Plan
