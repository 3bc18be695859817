"""TAO and its ablations: joint admission and placement by the lexicographic value (design §4–§5).

| name              | value order                                      | solver                         |
|-------------------|--------------------------------------------------|--------------------------------|
| tao               | cache credit, readiness, footprint, stability    | all-fit → exact DP → home-first|
| tao-no-dp         | same                                             | best-fit decreasing only       |
| tao-no-readiness  | cache credit, footprint, stability               | exact                          |
| tao-no-decay      | undecayed cache credit, readiness, footprint, …  | exact                          |
| tao-no-cache      | readiness, footprint, stability                  | exact                          |

Stability (1 on the session's current node) only breaks ties; see `signals/stability.py`. A session is routed to the
node it holds a place on; without one (or on an unhealthy node) it waits for the next plan.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..events import Event
from ..model import Node, NodeId, Session
from ..plan import Plan
from ..signals import CacheCredit, Footprint, Readiness, Signal, Stability
from ..snapshot import Snapshot
from ..solver import solve, solve_greedy
from ..value import ValueModel
from .placement import build_problem, plan_from_solution


class TaoPolicy:
    plans = True

    def __init__(self, name: str, signals: list[Signal], exact: bool = True) -> None:
        self.name = name
        self.values = ValueModel(signals)
        self.exact = exact

    def plan(self, snapshot: Snapshot) -> Plan:
        placement = build_problem(snapshot, self.values)
        settings = snapshot.settings
        if self.exact:
            solution = solve(placement.problem, settings.dp_state_budget)
        else:
            solution = solve_greedy(placement.problem)
        return plan_from_solution(placement, solution)

    def route(self, session: Session, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        return session.node if session.node in nodes else None

    def observe(self, event: Event, now: float) -> None:
        return None


def tao() -> TaoPolicy:
    return TaoPolicy("tao", [CacheCredit(), Readiness(), Footprint(), Stability()])


def tao_no_dp() -> TaoPolicy:
    return TaoPolicy("tao-no-dp", [CacheCredit(), Readiness(), Footprint(), Stability()], exact=False)


def tao_no_readiness() -> TaoPolicy:
    return TaoPolicy("tao-no-readiness", [CacheCredit(), Footprint(), Stability()])


def tao_no_decay() -> TaoPolicy:
    return TaoPolicy("tao-no-decay", [CacheCredit(decay=False), Readiness(), Footprint(), Stability()])


def tao_no_cache() -> TaoPolicy:
    return TaoPolicy("tao-no-cache", [Readiness(), Footprint(), Stability()])
