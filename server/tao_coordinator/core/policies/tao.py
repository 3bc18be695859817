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
| tao-room-admit      | as tao                                             | exact            | adaptive¹ |
| tao-paper           | as tao, readiness by the published binary rule     | exact            | adaptive  |
| tao-bound           | as tao, readiness by the previous binary rule      | exact            | adaptive  |

¹ fast admission of a session without credit by most room, not least load (`policies/admission.py`).

Readiness (`forecast/forecaster.py`): `tao` counts Q·P(the tool returns within H), rounded, from the learned
forecast, H = `readiness_horizon_s` (`tao[horizon=adaptive]`: H follows load); `tao-paper` is the write-up's rule
(ready when the printed duration bound ends within H = 1 s); `tao-bound` the rule before the forecast (the
corrected empirical-Bernstein bound, H = `readiness_horizon_s`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ..events import Event, NodeRemoved
from ..forecast import ReadinessRule
from ..model import Node, NodeId, Session
from ..plan import Plan
from ..settings import CoreSettings
from ..signals import CacheCredit, Footprint, HeldFootprint, Readiness, Signal, Stability
from ..snapshot import Snapshot
from ..solver import solve, solve_greedy
from ..value import ValueModel
from .admission import AdaptiveTarget, FastAdmit, Placement
from .placement import ValueCache, build_problem, plan_from_solution

Admission = Literal["adaptive", "static"]
Horizon = Literal["adaptive", "fixed"]


class TaoPolicy:
    plans = True

    def __init__(
        self,
        name: str,
        signals: list[Signal],
        exact: bool = True,
        admission: Admission = "adaptive",
        readiness_rule: ReadinessRule | None = "forecast",
        horizon: Horizon = "fixed",
        place: Placement = "load",
    ) -> None:
        if horizon not in ("adaptive", "fixed"):
            raise TypeError(f"horizon: one of adaptive, fixed, got {horizon!r}")
        self.name = name
        self.readiness_rule = readiness_rule
        self.readiness_horizon = horizon
        self.values = ValueModel(signals)
        self.exact = exact
        self.admission = admission
        # the scrapes carry the preemption counter and the waiting queue that the adaptive target reads
        self.inputs = frozenset({"node_load"}) if admission == "adaptive" else frozenset()
        self._fast = FastAdmit(place)
        self.value_cache = ValueCache()
        self._target = AdaptiveTarget()

    def plan(self, snapshot: Snapshot) -> Plan:
        placement = build_problem(snapshot, self.values, self.value_cache)
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


def tao(horizon: Horizon = "fixed", place: Placement = "load") -> TaoPolicy:
    """`tao[horizon=adaptive]` lets H follow the waits of the pool (`forecast/horizon.py`); measured no better.
    `tao[place=room]` fast-admits a session without credit where there is most room, not least load."""
    return TaoPolicy("tao", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], horizon=horizon, place=place)


def tao_no_dp() -> TaoPolicy:
    return TaoPolicy("tao-no-dp", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], exact=False)


def tao_no_readiness() -> TaoPolicy:
    return TaoPolicy("tao-no-readiness", [CacheCredit(), HeldFootprint(), Stability()], readiness_rule=None)


def tao_no_decay() -> TaoPolicy:
    return TaoPolicy("tao-no-decay", [CacheCredit(decay=False), Readiness(), HeldFootprint(), Stability()])


def tao_no_cache() -> TaoPolicy:
    return TaoPolicy("tao-no-cache", [Readiness(), HeldFootprint(), Stability()])


def tao_plain_footprint() -> TaoPolicy:
    return TaoPolicy("tao-plain-footprint", [CacheCredit(), Readiness(), Footprint(), Stability()])


def tao_static_admit() -> TaoPolicy:
    return TaoPolicy("tao-static-admit", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], admission="static")


def tao_room_admit() -> TaoPolicy:
    return TaoPolicy("tao-room-admit", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], place="room")


def tao_paper() -> TaoPolicy:
    return TaoPolicy("tao-paper", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], readiness_rule="paper")


def tao_bound() -> TaoPolicy:
    return TaoPolicy("tao-bound", [CacheCredit(), Readiness(), HeldFootprint(), Stability()], readiness_rule="bound")
