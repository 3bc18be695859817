"""TAO and its ablations: joint admission and placement by the lexicographic value (docs/algorithm.md).

| name                | value order                                        | solver           | admission |
|---------------------|----------------------------------------------------|------------------|-----------|
| tao                 | credit, readiness, tier, token time, held footprint, stability | exact search | adaptive |
| tao-no-dp           | same                                               | best-fit decr.   | adaptive  |
| tao-no-readiness    | as tao without readiness                           | exact            | adaptive  |
| tao-no-decay        | undecayed cache credit, readiness, tier credit, …  | exact            | adaptive  |
| tao-no-tier         | as tao without tier credit (blind to CPU tiers)    | exact            | adaptive  |
| tao-no-token-time   | as tao without the token time                      | exact            | adaptive  |
| tao-no-workflow     | cache credit without workflow affinity, readiness… | exact            | adaptive  |
| tao-no-expected-tools | as tao, tool forecast ignores expected_next_tools | exact            | adaptive  |
| tao-no-cache        | readiness, held footprint, stability               | exact            | adaptive  |
| tao-plain-footprint | as tao with the plain footprint                    | exact            | adaptive  |
| tao-static-admit    | as tao                                             | exact            | static    |
| tao-room-admit      | as tao                                             | exact            | adaptive¹ |
| tao-paper           | as tao, readiness by the published binary rule     | exact            | adaptive  |
| tao-bound           | as tao, readiness by the previous binary rule      | exact            | adaptive  |

¹ fast admission of a session without credit by most room, not least load (`policies/admission.py`).

Readiness (`forecast/forecaster.py`): `tao` counts Q·P(the tool returns within H), rounded, from the learned
forecast, H = `readiness_horizon_s` (`tao[horizon=adaptive]`: H follows load); `tao-paper` is the write-up's rule
(ready when the printed duration bound ends within H = 1 s); `tao-bound` the rule before the forecast (the
corrected empirical-Bernstein bound, H = `readiness_horizon_s`).

Tier credit (`signals/tier.py`): what a node's CPU offloading tier holds of the session's prefix, times what a CPU
hit is worth there at its link's load; below readiness, as it prices where a session is served, not who is.

Token time (`signals/token_time.py`): the KV token-time p·d + d²/2 of a waiting session's next call times the node's
decode step, the less the better; it prices the placement (faster nodes) and orders equally valued sessions
(shortest memory-time first).

Workflow affinity (`signals/workflow.py`): a session's credit on a node is raised to the prefix it shares with its
workflow's other sessions (parent, siblings) that the node holds; fast admission sees it through the index of the
latest plan. Expected tools (`forecast/forecaster.py`, `Forecaster.start`): a tool whose own key has too little
history is forecast from the history of the tools the session's last acquire named in `expected_next_tools`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ..events import Event, NodeRemoved
from ..forecast import ReadinessRule
from ..model import AgentSession, Node, NodeId
from ..plan import Plan
from ..settings import CoreSettings
from ..signals import CacheCredit, Footprint, HeldFootprint, Readiness, Signal, Stability, TierCredit, TokenTime
from ..signals.workflow import EMPTY, WorkflowIndex
from ..snapshot import Snapshot
from ..solver import solve, solve_greedy
from ..value import ValueModel
from .admission import AdaptiveTarget, FastAdmit
from .base import Demand, Feed, Holdings, PlanningPolicy, Room
from .options import Horizon, PlaceRule, TaoOptions
from .problem import ValueCache, build_problem, plan_from_solution

Admission = Literal["adaptive", "static"]


class TaoPolicy(PlanningPolicy):
    charges_footprints = True

    def __init__(
        self,
        name: str,
        signals: list[Signal],
        exact: bool = True,
        admission: Admission = "adaptive",
        readiness_rule: ReadinessRule | None = "forecast",
        horizon: Horizon = "fixed",
        place: PlaceRule = "load",
        expected_tools: bool = True,
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
        self.inputs = frozenset({Feed.NODE_LOAD}) if admission == "adaptive" else frozenset()
        self._fast = FastAdmit(place, tier=any(isinstance(signal, TierCredit) for signal in signals))
        self.expected_tools = expected_tools
        """Whether tool starts are forecast with the acquire's `expected_next_tools` (the coordinator reads it)."""
        self._workflow = any(isinstance(signal, CacheCredit) and signal.workflow for signal in signals)
        self._workflows: WorkflowIndex | None = None
        """The sessions by workflow as the latest plan saw them, for fast admission between plans (a plan may run
        in a worker thread: the index is immutable and replaced whole)."""
        self.value_cache = ValueCache()
        self._target = AdaptiveTarget()
        self._calling_share = CallingShare()

    def plan(self, snapshot: Snapshot) -> Plan:
        workflows = WorkflowIndex.of(snapshot.sessions) if self._workflow else EMPTY
        self._workflows = workflows if self._workflow else None
        placement = build_problem(snapshot, self.values, self.value_cache, workflows)
        settings = snapshot.settings
        if self.exact:
            solution = solve(placement.problem, settings.exact_node_limit)
        else:
            solution = solve_greedy(placement.problem)
        return plan_from_solution(placement, solution)

    def admit(
        self, session: AgentSession, nodes: Mapping[NodeId, Node], room: Room, settings: CoreSettings, now: float
    ) -> NodeId | None:
        if self.admission == "static":
            return None
        return self._fast.admit(session, nodes, room(), settings, now, self._workflows)

    def node_target(
        self, previous: Node | None, node: Node, settings: CoreSettings, now: float, demand: Demand
    ) -> float | None:
        if self.admission == "static":
            return None
        target = self._target.target(previous, node, settings, now, demand.pool_tokens)
        if not self._fast.tier or node.cpu_capacity_tokens <= 0:
            return target
        share = self._calling_share.observe(demand.holdings())
        return target * tier_reach(node, share)

    def cache_kept(self, node_id: NodeId, asked_tokens: int, kept_tokens: int, now: float) -> None:
        if self.admission == "adaptive":
            self._target.cache_kept(node_id, asked_tokens, kept_tokens, now)

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, NodeRemoved):
            self._target.forget(event.node_id)


def tier_reach(node: Node, calling_share: float | None) -> float:
    """How far a node's CPU tier lets the planner fill it, relative to HBM alone: 1 + worth × (tier − HBM) / HBM,
    and never more than 1 / the share of the holders' footprint that is outside a tool (`CallingShare`).

    The planner bounds a node's holders by its HBM so that the caches of sessions waiting on tools survive there
    until they call again: without a tier an evicted cache is recomputed. With one, it is loaded back at a cost the
    tier's worth prices (`signals/tier.py`), so a holder's cache may wait in the tier through its tool, and places
    are worth granting beyond HBM as far as the tier holds what HBM does not, at that worth. A congested link
    (worth 0) gives nothing.

    Two bounds make the stretch safe by construction, each a fact of the hardware, not a tuned figure:
    - vLLM's tier is written through (every prompt block computed is stored there, and re-offered at every hit), so
      its LRU holds first what HBM holds: it adds room for caches HBM lost only beyond HBM's size. A tier smaller
      than HBM adds none.
    - The tier cannot hold a call: the holders in a call, or about to make one, need their context in HBM at once.
      Granting at most 1 / calling share keeps their expected footprint within the HBM target the planner had
      without a tier, so the stretch only makes room out of caches that wait through tools.
    Stretching by the whole tier admitted more than HBM could run and more than the tier could keep: on
    claude-code-shaped sessions a 512 GiB tier made TAO slower than none, a 128 GiB one slower still
    (docs/benchmarks.md, the CPU tier)."""
    if node.cpu_capacity_tokens <= node.capacity_tokens or node.capacity_tokens <= 0 or calling_share is None:
        return 1.0
    beyond_hbm = (node.cpu_capacity_tokens - node.capacity_tokens) / node.capacity_tokens
    stretch = 1.0 + node.cpu_hit_worth * beyond_hbm
    return max(1.0, min(stretch, 1.0 / calling_share)) if calling_share > 0 else stretch


class CallingShare:
    """The share of held footprint that is outside a tool, over every observation so far of a node with a tier.

    Node updates come at each node's scrape interval, so the sums weight every moment alike. None until a holder has
    been seen. The sums only grow: a policy's history, not replicated (a new leader starts from None: no stretch)."""

    def __init__(self) -> None:
        self._held = 0
        self._calling = 0

    def observe(self, holdings: Holdings) -> float | None:
        self._held += holdings.held_tokens
        self._calling += holdings.calling_tokens
        return self._calling / self._held if self._held else None


def value(
    credit: Signal | None = None,
    *,
    readiness: bool = True,
    tier: bool = True,
    token_time: bool = True,
    footprint: Signal | None = None,
) -> list[Signal]:
    """TAO's value order with the parts an ablation changes: its credit (None: `CacheCredit()`), whether it reads
    readiness, the CPU tier and the token time, its footprint (None: `HeldFootprint()`)."""
    signals: list[Signal] = [credit or CacheCredit()]
    if readiness:
        signals.append(Readiness())
    if tier:
        signals.append(TierCredit())
    if token_time:
        signals.append(TokenTime())
    return [*signals, footprint or HeldFootprint(), Stability()]


def tao(options: TaoOptions | None = None) -> TaoPolicy:
    """`tao[horizon=adaptive]`, `tao[place=room]`: see `TaoOptions` (`options.py`)."""
    options = options or TaoOptions()
    return TaoPolicy("tao", value(), horizon=options.horizon, place=options.place)


def tao_no_dp() -> TaoPolicy:
    return TaoPolicy("tao-no-dp", value(), exact=False)


def tao_no_readiness() -> TaoPolicy:
    return TaoPolicy("tao-no-readiness", value(readiness=False), readiness_rule=None)


def tao_no_decay() -> TaoPolicy:
    return TaoPolicy("tao-no-decay", value(CacheCredit(decay=False)))


def tao_no_tier() -> TaoPolicy:
    return TaoPolicy("tao-no-tier", value(tier=False))


def tao_no_token_time() -> TaoPolicy:
    return TaoPolicy("tao-no-token-time", value(token_time=False))


def tao_no_workflow() -> TaoPolicy:
    return TaoPolicy("tao-no-workflow", value(CacheCredit(workflow=False)))


def tao_no_expected_tools() -> TaoPolicy:
    return TaoPolicy("tao-no-expected-tools", value(), expected_tools=False)


def tao_no_cache() -> TaoPolicy:
    return TaoPolicy("tao-no-cache", [Readiness(), HeldFootprint(), Stability()])


def tao_plain_footprint() -> TaoPolicy:
    return TaoPolicy("tao-plain-footprint", value(footprint=Footprint()))


def tao_static_admit() -> TaoPolicy:
    return TaoPolicy("tao-static-admit", value(), admission="static")


def tao_room_admit() -> TaoPolicy:
    return TaoPolicy("tao-room-admit", value(), place="room")


def tao_paper() -> TaoPolicy:
    return TaoPolicy("tao-paper", value(), readiness_rule="paper")


def tao_bound() -> TaoPolicy:
    return TaoPolicy("tao-bound", value(), readiness_rule="bound")
