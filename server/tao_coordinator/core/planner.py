"""Planning without stopping the world (design §6): snapshot → solve → revalidate → apply the longest valid prefix.

Invariants:
- at most one plan is in flight; events that arrive meanwhile only mark the planner dirty, and the coordinator
  starts the next plan when this one finishes (coalescing);
- a placement is applied only if its session still has the version the snapshot saw, is not inside an LLM call,
  and — for a place on a node — the node is still healthy and the session's weight still fits next to what the
  node's holders hold *now*; the first placement that fails ends the applied prefix and the rest is dropped (its
  sessions are re-offered at the next plan, which the failure requests);
- a finished job that is not the one in flight is ignored (it cannot happen with one driver, but a restarted
  driver may deliver a late result).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import state_machine
from .actions import Action, Admit, Interrupt, Route
from .model import Phase, Session
from .plan import Placement, Plan
from .settings import CoreSettings
from .snapshot import PlanJob, Snapshot
from .state import FleetState, capacity_cells

PlanSolver = Callable[[Snapshot], Plan]


@dataclass
class PlannerStats:
    started: int = 0
    applied: int = 0
    """Plans whose every placement was applied (including empty plans)."""
    cut: int = 0
    """Plans applied only up to a placement that had become invalid."""
    dropped: int = 0
    """Plans of which not even the first placement was valid."""
    fallbacks: int = 0
    """Plans the exact DP could not solve within its budget."""
    placements_applied: int = 0
    by_method: dict[str, int] = field(default_factory=dict)


class Planner:
    def __init__(self) -> None:
        self.in_flight: PlanJob | None = None
        self.dirty = False
        self.stats = PlannerStats()
        self._next_id = 1

    def mark_dirty(self) -> None:
        self.dirty = True

    def begin(self, snapshot: Snapshot, solver: PlanSolver) -> PlanJob | None:
        if self.in_flight is not None or not self.dirty:
            return None
        job = PlanJob(self._next_id, snapshot, solver)
        self._next_id += 1
        self.in_flight = job
        self.dirty = False
        self.stats.started += 1
        return job

    def finish(self, job_id: int, plan: Plan, fleet: FleetState, settings: CoreSettings, now: float) -> list[Action]:
        if self.in_flight is None or self.in_flight.id != job_id:
            return []
        self.in_flight = None
        stats = self.stats
        stats.by_method[plan.method] = stats.by_method.get(plan.method, 0) + 1
        if plan.method == "fallback":
            stats.fallbacks += 1
        actions: list[Action] = []
        used = fleet.used_cells(settings)
        applied = 0
        for placement in plan.placements:
            action = _apply(placement, fleet, settings, used, now)
            if action is None:
                break
            actions.extend(action)
            applied += 1
        stats.placements_applied += applied
        if applied == len(plan.placements):
            stats.applied += 1
        else:
            stats.dropped += applied == 0
            stats.cut += applied > 0
            self.dirty = True
        return actions


def _apply(
    placement: Placement, fleet: FleetState, settings: CoreSettings, used: dict[str, int], now: float
) -> list[Action] | None:
    session = fleet.sessions.get(placement.session_id)
    if session is None or session.version != placement.version or session.phase in (Phase.IN_LLM, Phase.CLOSED):
        return None
    cells = -(-placement.weight_tokens // settings.capacity_quantum_tokens)
    if placement.node is None:
        if session.node is None:
            return None
        _release(session, used, cells)
        fleet.put(state_machine.interrupt(session, now))
        return [Interrupt(session.id, session.node)]
    node = fleet.usable_node(placement.node)
    if node is None or used.get(node.id, 0) + cells > capacity_cells(node, settings):
        return None
    previous = session.node
    _release(session, used, cells)
    used[node.id] = used.get(node.id, 0) + cells
    admitted = state_machine.admit(session, now, node.id)
    fleet.put(admitted)
    actions: list[Action] = []
    if previous is not None:
        actions.append(Interrupt(session.id, previous))
    actions.append(Admit(session.id, node.id))
    if admitted.phase is Phase.IN_LLM:
        actions.append(Route(session.id, node.id))
    return actions


def _release(session: Session, used: dict[str, int], cells: int) -> None:
    if session.node is not None and session.node in used:
        used[session.node] -= cells
