"""The interface every scheduling policy implements: TAO, its ablations and the baselines alike.

A policy answers two questions. `plan(snapshot)`: which sessions hold a place on which node (admission control).
`route(session, nodes, now)`: where an LLM call goes right now — an admission policy answers with the session's
place (None: wait for a plan), a per-request router picks a node for every call and never plans (`plans = False`).
`route` sees the session as of the acquire being answered (its announced prompt size and prompt blocks). `observe`
sees every accepted event, for routers that keep load or cache estimates; it runs on the event loop, never
concurrently with `route`.

`plan` runs on a frozen snapshot, in a worker thread in the live service, and at most one plan is in flight. TAO's
plan is pure. A session-level baseline may keep bookkeeping that only its own plans read and write (ThunderAgent's
scheduler clock and marks); what `observe` writes and `plan` reads must be point lookups that tolerate a concurrent
update (Continuum's tool means).

Every hook the coordinator (`core/coordinator.py`) and the simulator (`sim/driver.py`, `sim/feeds.py`) call is
declared on `Policy`, with a default that means "this policy does not use it": a policy overrides what it needs, and
mypy checks each override against the signature here.

- `inputs: frozenset[Feed]` — which router feeds the driver must send (`Feed`). Signals a policy's real system does
  not see are not sent. Default: none.
- `plan_interval_s: float | None` — plan at least this often while sessions live, even when nobody waits (a
  periodic scheduler that may interrupt holders). Default None: plan only when something changed.
- `charges_footprints: bool` — the policy's plans charge every session its footprint, so they keep each node's
  holders within its plannable capacity (`FleetState.used_cells`); holders whose contexts grew past it then ask for
  a plan even when nobody waits. Default False: a baseline with a capacity rule of its own charges 0 and plans on
  its own schedule.
- `wake_times(session) -> Iterable[float]` — times at which time alone changes the policy's view of `session`.
- `admit(session, nodes, room, settings, now) -> NodeId | None` — asked when `route` said "wait": a node to admit
  the session on at once, without a plan. `room()` gives each healthy node's plannable capacity minus what its
  holders hold now, in capacity cells (computed on demand: it walks every session); the session then holds a place
  there with its whole footprint, as if a plan had admitted it, so the planner's accounting
  (`FleetState.used_cells`) stays what it always is. Default None: wait for the plan.
- `node_target(previous, node, settings, now, demand) -> float | None` — the utilisation target of `node` as
  just observed (`previous`: the node as known before, or None); None (the default) means the settings' target.
  Runs on every `NodeUpdate`; `demand` (`Demand`) is what the sessions ask of the fleet and of this node then.
- `cache_kept(node_id, asked_tokens, kept_tokens, now)` — at the end of a call by a session that held its place on
  the node since its previous call there: how much of that call's context the node was asked to keep (whole blocks,
  as vLLM can hit them) and how much the call found cached. Less kept than asked: vLLM evicted a cache TAO reserved.
- `readiness_rule: ReadinessRule | None` — how running tools' readiness is forecast (`forecast/forecaster.py`):
  `forecast`, or the binary `bound` and `paper` rules. None (the default): the policy reads no readiness, so no
  schedule is built and time alone wakes nothing for it.
- `expected_tools: bool` — a tool with too little history of its own is forecast from that of the tools the
  session's last acquire announced (`expected_next_tools`); False (the default) ignores the announcement.
- `readiness_horizon: Horizon` — whether the `forecast` rule's horizon follows load (`forecast/horizon.py`,
  `"adaptive"`) or stays at `readiness_horizon_s` (`"fixed"`, the default).

`Router` and `PlanningPolicy` give the two kinds their shared halves: a router never plans, an admission policy
routes a call to the session's place.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from ..events import Event
from ..forecast import ReadinessRule
from ..model import AgentSession, Node, NodeId
from ..plan import Plan
from ..settings import CoreSettings
from ..snapshot import Snapshot
from .options import Horizon


class Feed(Enum):
    """A router feed the simulator sends only to the policies that name it in `inputs` (`sim/feeds.py`)."""

    NODE_LOAD = "node_load"
    """`NodeUpdate`s carrying the running/waiting/KV-usage figures of a `/metrics` scrape before a call is routed."""
    KV_EVENTS = "kv_events"
    """Every `KvCacheEvent` of every node."""
    FIRST_TOKEN = "first_token"
    """`LlmFirstToken` when a call's first token leaves its node."""


Room = Callable[[], Mapping[NodeId, int]]
"""Each healthy node's plannable capacity left next to its holders, in capacity cells, computed when called."""


@dataclass(frozen=True, slots=True)
class Holdings:
    """What the sessions holding a place on a node hold, in footprint tokens (`signals/footprint.py`)."""

    held_tokens: int = 0
    calling_tokens: int = 0
    """Of those, the sessions outside a tool (in a call or about to make one): what the node's HBM must hold at once."""


def _no_holdings() -> Holdings:
    return Holdings()


@dataclass(frozen=True, slots=True)
class Demand:
    """What the sessions ask when a node is observed, in footprint tokens."""

    pool_tokens: int = 0
    """Every session in the waiting pool (without a place): what the planner would place if it could."""
    holdings: Callable[[], Holdings] = _no_holdings
    """The node's holdings, computed when called (it walks every session)."""


class Policy(ABC):
    name: str
    plans: bool
    """True: sessions wait for the planner's admission. False: every call is routed at once by `route`."""
    inputs: frozenset[Feed] = frozenset()
    plan_interval_s: float | None = None
    charges_footprints: bool = False
    readiness_rule: ReadinessRule | None = None
    expected_tools: bool = False
    readiness_horizon: Horizon = "fixed"

    @abstractmethod
    def plan(self, snapshot: Snapshot) -> Plan: ...

    @abstractmethod
    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        """`nodes` holds the healthy nodes only."""

    def observe(self, event: Event, now: float) -> None:
        return None

    def wake_times(self, session: AgentSession) -> Iterable[float]:
        return ()

    def admit(
        self, session: AgentSession, nodes: Mapping[NodeId, Node], room: Room, settings: CoreSettings, now: float
    ) -> NodeId | None:
        return None

    def node_target(
        self, previous: Node | None, node: Node, settings: CoreSettings, now: float, demand: Demand
    ) -> float | None:
        return None

    def cache_kept(self, node_id: NodeId, asked_tokens: int, kept_tokens: int, now: float) -> None:
        return None


class Router(Policy):
    """A per-request router: admits everything at once, routes every call, never plans."""

    plans = False

    def plan(self, snapshot: Snapshot) -> Plan:
        return Plan(())


class PlanningPolicy(Policy):
    """An admission policy: a session's calls go to the place a plan (or `admit`) gave it; without one it waits."""

    plans = True

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        return session.node if session.node in nodes else None
