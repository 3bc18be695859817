"""TAO and its ablations: joint admission and placement by the lexicographic value (design §4–§5).

| name                | value order                                        | solver           | admission |
|---------------------|----------------------------------------------------|------------------|-----------|
| tao                 | cache credit, readiness, held footprint, stability | exact search     | adaptive  |
| tao-no-dp           | same                                               | best-fit decr.   | adaptive  |
| tao-no-readiness    | cache credit, held footprint, stability            | exact            | adaptive  |
| tao-no-decay        | undecayed cache credit, readiness, held footprint… | exact            | adaptive  |
| tao-no-cache        | readiness, held footprint, stability               | exact            | adaptive  |
| tao-plain-footprint | cache credit, readiness, footprint, stability      | exact            | adaptive  |
| tao-static-admit    | as tao                                             | exact            | static    |

Stability (1 on the session's current node) only breaks ties; see `signals/stability.py`. A session is routed to the
node it holds a place on. Admission (`admission.py`): *adaptive* — a session without a place is admitted at once
on a node with room for its whole footprint (else it waits for the next plan), and each node's utilisation target
rises from the configured one towards 1.0 while vLLM keeps the caches TAO reserved, and falls when it evicts one or
preempts; *static* — today's rule before it: wait for a plan, fill every node to the configured target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ..events import Event, NodeRemoved
from ..model import Node, NodeId, Session
from ..plan import Plan
from ..settings import CoreSettings
from ..signals import CacheCredit, Footprint, HeldFootprint, Readiness, Signal, Stability
from ..snapshot import Snapshot
from ..solver import solve, solve_greedy
from ..value import ValueModel
from .admission import AdaptiveTarget, FastAdmit
from .placement import build_problem, plan_from_solution

Admission = Literal["adaptive", "static"]


class TaoPolicy:
    plans = True

    def __init__(self, name: str, signals: list[Signal], exact: bool = True, admission: Admission = "adaptive") -> None:
        self.name = name
        self.values = ValueModel(signals)
        self.exact = exact
        self.admission = admission
        # the scrapes carry the preemption counter and the waiting queue that the adaptive target reads
        self.inputs = frozenset({"node_load"}) if admission == "adaptive" else frozenset()
        self._fast = FastAdmit()
        self._target = AdaptiveTarget()

    def plan(self, snapshot: Snapshot) -> Plan:
        placement = build_problem(snapshot, self.values)
        settings = snapshot.settings
        if self.exact:
            solution = solve(placement.problem, settings.exact_node_limit)
        else:
            solution = solve_greedy(placement.problem)
        return plan_from_solution(placement, solution)

    def route(self, session: Session, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        return session.node if session.node in nodes else None

    def admit(
        self,
        session: Session,
        nodes: Mapping[NodeId, Node],
        room: Mapping[NodeId, int],
        settings: CoreSettings,
        now: float,
    ) -> NodeId | None:
        if self.admission == "static":
            return None
        return self._fast.admit(session, nodes, room, settings, now)

    def node_target(
        self, previous: Node | None, node: Node, settings: CoreSettings, now: float, pool_tokens: int
    ) -> float | None:
        if self.admission == "static":
            return None
        return self._target.target(previous, node, settings, now, pool_tokens)

    def cache_kept(self, node_id: NodeId, asked_tokens: int, kept_tokens: int, now: float) -> None:
        if self.admission == "adaptive":
            self._target.cache_kept(node_id, asked_tokens, kept_tokens, now)

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, NodeRemoved):
            self._target.forget(event.node_id)


def tao() -> TaoPolicy:
    return TaoPolicy("tao", [CacheCredit(), Readiness(), HeldFootprint(), Stability()])


def tao_no_dp() -> TaoPolicy:
    return TaoPolicy("tao-no-dp", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], exact=False)


def tao_no_readiness() -> TaoPolicy:
    return TaoPolicy("tao-no-readiness", [CacheCredit(), HeldFootprint(), Stability()])


def tao_no_decay() -> TaoPolicy:
    return TaoPolicy("tao-no-decay", [CacheCredit(decay=False), Readiness(), HeldFootprint(), Stability()])


def tao_no_cache() -> TaoPolicy:
    return TaoPolicy("tao-no-cache", [Readiness(), HeldFootprint(), Stability()])


def tao_plain_footprint() -> TaoPolicy:
    return TaoPolicy("tao-plain-footprint", [CacheCredit(), Readiness(), Footprint(), Stability()])


def tao_static_admit() -> TaoPolicy:
    return TaoPolicy("tao-static-admit", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], admission="static")
