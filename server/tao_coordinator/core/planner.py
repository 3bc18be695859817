"""Planning without stopping the world: snapshot → solve → revalidate → apply the longest valid prefix.

Invariants:
- at most one plan is in flight; events that arrive meanwhile only mark the planner dirty, and the coordinator
  starts the next plan when this one finishes (coalescing);
- a plan is applied as a sequence of steps: first every release (an interruption, or the old place of a moved
  session), then every placement, each group in plan order. A step is applied only if its session still has the
  version the snapshot saw (or the one its own release gave it), is not inside an LLM call, and — for a placement —
  the node is still healthy and the session's weight still fits next to what the node's holders hold *now* (a
  placement of weight 0 always fits: baselines that keep their own capacity rule charge 0); the
  first step that fails ends the applied prefix and the rest is dropped (its sessions are re-offered at the next
  plan, which the failure requests);
- a finished job that is not the one in flight is ignored (it cannot happen with one driver, but a restarted
  driver may deliver a late result).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import state_machine
from .actions import Action, Admit, Interrupt, Route
from .model import AgentSession, Phase
from .plan import Placement, Plan
from .settings import CoreSettings
from .snapshot import PlanJob, Snapshot
from .state import FleetState, capacity_cells, token_cells

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
    uncertified: int = 0
    """Plans the solver did not prove optimal (the exact search hit its node limit, or a heuristic solver)."""
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
        if not plan.certified:
            stats.uncertified += 1
        applier = _Applier(fleet, settings, now)
        steps = applier.apply(plan)
        stats.placements_applied += steps
        if applier.complete:
            stats.applied += 1
        else:
            stats.dropped += steps == 0
            stats.cut += steps > 0
            self.dirty = True
        return applier.actions


class _Applier:
    """Applies a plan in two passes — every release (interruptions, and the old place of a moved session), then
    every placement — stopping at the first step that is no longer valid. Releasing first means the placements of a
    consistent plan always find the room the solver counted on, whatever order moves between nodes came in."""

    def __init__(self, fleet: FleetState, settings: CoreSettings, now: float) -> None:
        self.fleet, self.settings, self.now = fleet, settings, now
        self.used = fleet.used_cells(settings)
        self.versions: dict[str, int] = {}
        self.actions: list[Action] = []
        self.complete = False

    def apply(self, plan: Plan) -> int:
        releases = [p for p in plan.placements if self._holds_other_place(p)]
        placements = [p for p in plan.placements if p.node is not None]
        done = 0
        for step in (*((p, self._release) for p in releases), *((p, self._place) for p in placements)):
            placement, action = step
            if not action(placement):
                return done
            done += 1
        self.complete = True
        return done

    def _cells(self, placement: Placement) -> int:
        return token_cells(placement.weight_tokens, self.settings)

    def _live(self, placement: Placement) -> AgentSession | None:
        session = self.fleet.sessions.get(placement.session_id)
        expected = self.versions.get(placement.session_id, placement.version)
        if session is None or session.version != expected or session.phase in (Phase.IN_LLM, Phase.CLOSED):
            return None
        return session

    def _holds_other_place(self, placement: Placement) -> bool:
        session = self.fleet.sessions.get(placement.session_id)
        return session is not None and session.node is not None and session.node != placement.node

    def _release(self, placement: Placement) -> bool:
        session = self._live(placement)
        if session is None or session.node is None:
            return False
        if session.node in self.used:
            self.used[session.node] -= self._cells(placement)
        released = state_machine.interrupt(session, self.now)
        self.fleet.put(released)
        self.versions[session.id] = released.version
        self.actions.append(Interrupt(session.id, session.node))
        return True

    def _place(self, placement: Placement) -> bool:
        session = self._live(placement)
        node = self.fleet.usable_node(placement.node)
        cells = self._cells(placement)
        if session is None or node is None:
            return False
        if cells > 0 and self.used.get(node.id, 0) + cells > capacity_cells(node, self.settings):
            return False
        self.used[node.id] = self.used.get(node.id, 0) + cells
        admitted = state_machine.admit(session, self.now, node.id)
        self.fleet.put(admitted)
        self.actions.append(Admit(session.id, node.id))
        if admitted.phase is Phase.IN_LLM:
            self.actions.append(Route(session.id, node.id))
        return True
