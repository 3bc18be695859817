"""The one entry point both drivers call: `on_event(event, now) -> actions`.

The live aiohttp service and the simulator feed it the same events; only their clocks differ. Each handler
validates first and changes state last, so an event that raises leaves everything as it was.

Planning: events at which the decision can change mark the planner dirty — registration, tool start and end,
close, node changes, ticks, and an acquire that puts a session into the waiting pool. The end of an LLM call, an
acquire by a session already waiting and KV-event evidence only refine values: the session's next tool boundary
plans with them, so they do not cost a plan each. With `inline_planning` the plan is solved inside
`on_event` and its actions come back at once (the simulator with zero planning delay, tests). Otherwise `on_event`
returns `StartPlan(job)`; the driver solves `job` off its event loop and reports `PlanFinished(job.id, plan)`.
Either way at most one plan is in flight. Nothing is planned when the waiting pool is empty, no node changed and
every node's holders fit in what the planner may fill there: every holder keeps its place, which is what a plan
would decide. Holders outgrow a node as their contexts grow, call after call; only a plan interrupts one of them, so
a node over its plannable capacity with a holder outside a call asks for one even when nobody waits, for a policy
whose plans charge footprints (`Policy.charges_footprints`; without this, a TAO fleet that admitted everyone at once
never planned again, and vLLM evicted what TAO believed reserved).

`next_wakeup()` tells the driver when time alone will change something (a lease expires, a running tool's
readiness steps to another level, a binary rule's expired prediction is due for re-estimation, a session's decayed
cache credit falls to zero); it should send `Tick()` then. A tick
only looks at the sessions whose time has come, so it costs O(log n) per due session, not O(n).

Tool starts are forecast by the policy's readiness rule (`forecast/forecaster.py`); every tool end is learned, for
every policy, into the one `ToolHistory`. The horizon of the `forecast` rule follows the waits of acquires
(`forecast/horizon.py`): the wait of each session served from the waiting pool, when a plan routes it.

Membership (`core/membership.py`): a `NodeUpdate` of a node the core does not know adds it; `NodeDrain` makes a node
unhealthy for every decision until it leaves, and `NodeRemoved` drops it: either way the sessions holding a place
there outside a call wait again at once (the plan the event starts places them elsewhere), and a call running there
finishes: its `llm_end` is accepted and returns its session to the pool. A node drained with `remove` is removed
(`NodeRetired`) as soon as, after an event and the plan it started, no session holds a place there.

Refused calls (`core/demotion.py`): an `LlmEnd` with `refused` ends the call, drops the session's credit on the
node that refused it, and counts towards the node's demotion; at `node_demote_after` in a row the node is demoted
(`NodeDemoted`: unhealthy for every decision, its holders re-planned) and a `ProbeNode` is asked of the driver every
`node_probe_interval_s` until a `NodeProbed` finds it serving (`NodeRestored`). The client then retries the call once
with `Acquire.avoid_nodes`: the session's place there moves with the call, which is placed at once on another usable
node — the policy's choice, else the one with the most room, over its capacity if need be (the session was admitted
already; the next plan settles its place) — and never waits for a plan.

Eligibility (`core/eligibility.py`): a node serves the models it lists (`Node.models`; None, not known, serves
every model). A call is routed, admitted or planned only onto nodes serving its session's main model: the policy's
`route` and `admit` see only those, the plan's problem excludes the others. An acquire naming another model is a
side call, routed at once to the least busy node serving that model beside the session's calls, its place
untouched; its `LlmEnd` (by its node) only closes it. A model an acquire names that no healthy node serves is
refused (`ModelNotServed`).

Baseline policies may ask for more (see `policies/base.py`): per-session wake-up times of their own (Continuum's pin
expiry), and a periodic plan even when nobody waits (ThunderAgent's scheduler tick, which pauses holders). Neither
applies to TAO. Events that only feed routers (`KvCacheEvent`, `LlmFirstToken`, and a `NodeUpdate` that changes
nothing but the node's load figures) change no session and plan nothing; the policy's `observe` sees them.

What drivers and observers may know of the core is its read API, and nothing else: `sessions`/`session`, `nodes`,
`holders`, `waiting`, a waiting session's `queue_position()`, `used_cells()` and `used_tokens()`, the plan counters
(`plan_stats`, `plan_in_flight`, `plan_pending`), the horizon, each node's demotion standing, membership
(`core/membership.py`), credit half-life and half-life fit, and `settings` (the domain limits request checks share
with the core; observers read the figures above instead). Besides `on_event`
and `next_wakeup`, a driver may only `take_touched` (what a replica writes, `web/replica.py`) and `restore` stored
sessions. Everything else is private; `tests/core/test_read_api.py` pins this surface and fails when a module outside
`core/` reads a private name of another object. The `ToolHistory` given to the constructor stays the caller's to read
(to persist or count it): the core adds every tool end to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from . import state_machine
from .actions import (
    Action,
    Admit,
    Expired,
    Interrupt,
    NodeDemoted,
    NodeRestored,
    NodeRetired,
    ProbeNode,
    Route,
    StartPlan,
)
from .demotion import Demotions, NodeDemotion
from .eligibility import eligible, is_side_call, serves, session_model, side_node
from .errors import DuplicateSession, IllegalTransition, ModelNotServed, NoOtherNode
from .events import (
    Acquire,
    CacheResidency,
    Close,
    Event,
    Heartbeat,
    KvCacheEvent,
    LlmEnd,
    LlmFirstToken,
    NodeDrain,
    NodeProbed,
    NodeRemoved,
    NodeUpdate,
    Register,
    Tick,
    ToolEnd,
    ToolStart,
)
from .forecast import AdaptiveHorizon, Forecaster, ReadinessRule, ToolHistory
from .membership import Membership, MembershipState
from .model import (
    AgentSession,
    CacheEvidence,
    EvidenceSource,
    Node,
    NodeId,
    NodeLoad,
    NodeRates,
    Phase,
    RunningTool,
    SessionId,
)
from .node_rates import NodeRateFit
from .plan import PlanFinished
from .planner import Planner, PlannerStats
from .policies.base import Demand, Holdings, Policy
from .queue import CallQueue, QueuePosition
from .settings import CoreSettings
from .signals.cache_credit import node_half_life, with_evidence
from .signals.footprint import footprint_tokens
from .signals.retention import HalfLifeFit
from .signals.tier import cpu_hit_worth, cpu_retention_s
from .signals.token_time import coarse_step_s
from .snapshot import PlanJob
from .state import ChargeCap, FleetState, capacity_cells


class Coordinator:
    def __init__(
        self,
        policy: Policy,
        settings: CoreSettings | None = None,
        *,
        history: ToolHistory | None = None,
        inline_planning: bool = True,
    ) -> None:
        self._policy = policy
        self._settings = settings or CoreSettings()
        self._history = history or ToolHistory.from_settings(self._settings)
        self._forecaster = Forecaster(self._history, self._settings)
        self._readiness_rule = policy.readiness_rule
        self._binary_rule = self._readiness_rule if self._readiness_rule in ("bound", "paper") else None
        """The readiness rule when it is a binary one, whose predictions expire and are re-estimated (the forecast's
        schedules never expire)."""
        self._horizon = AdaptiveHorizon(self._settings.readiness_horizon_s)
        self._horizon_used_s = 0.0
        """The sum of the horizons tool starts were forecast with (over `tool_starts`: the mean H)."""
        self._tool_starts = 0
        self._adaptive_horizon = policy.readiness_horizon == "adaptive" and self._readiness_rule == "forecast"
        """Only the `forecast` rule's horizon adapts; otherwise no wait is tracked."""
        self._pooled_at: dict[SessionId, float] = {}
        """When each session in the waiting pool asked for its call: its wait feeds the adaptive horizon."""
        self._now = -math.inf
        self._state = FleetState(self._wake_times, self._settings)
        self._planner = Planner()
        self._half_lives = HalfLifeFit()
        self._rates = NodeRateFit()
        self._demotions = Demotions(self._settings)
        self._membership = Membership()
        self._inline_planning = inline_planning
        self._nodes_changed = False
        self._plan_interval = policy.plan_interval_s
        self._next_periodic: float | None = None
        self._periodic_due = False
        self._over_capacity: set[NodeId] = set()
        """Nodes whose holders outgrew them at the last look (`_holders_over_capacity`)."""
        self._queue = CallQueue()

    # -- the read API: what drivers and observers may know of the core (tests/core/test_read_api.py pins it) -----

    @property
    def settings(self) -> CoreSettings:
        """The core's settings (frozen): limits and figures the drivers share with the core."""
        return self._settings

    @property
    def readiness_rule(self) -> ReadinessRule | None:
        """How the policy forecasts tool starts (`forecast/forecaster.py`); None: it reads no readiness."""
        return self._readiness_rule

    @property
    def sessions(self) -> Mapping[SessionId, AgentSession]:
        """Every live session by id, read-only; a closed one is gone. Each value is immutable (a transition puts a
        new object), so a reader may keep one as the state it saw."""
        return MappingProxyType(self._state.sessions)

    def session(self, session_id: SessionId) -> AgentSession:
        """The live session `session_id`; raises `UnknownSession` when there is none."""
        return self._state.session(session_id)

    @property
    def nodes(self) -> Mapping[NodeId, Node]:
        """Every known node by id, read-only; `Node.healthy` is false for a demoted one."""
        return MappingProxyType(self._state.nodes)

    @property
    def holders(self) -> Mapping[NodeId, int]:
        """Sessions holding a place, per node, read-only."""
        return MappingProxyType(self._state.holders)

    @property
    def waiting(self) -> frozenset[SessionId]:
        """The waiting pool (a copy): sessions that asked for a call and hold no place."""
        return frozenset(self._state.pool)

    def queue_position(self, session_id: SessionId, now: float) -> QueuePosition | None:
        """Where a session that waits for a call stands at `now` among those that do (first come first) and how long
        it may wait (`core/queue.py` says how both are reckoned); None when it does not wait."""
        return self._queue.position(session_id, now)

    def used_cells(self) -> dict[NodeId, int]:
        """Cells of `settings.capacity_quantum_tokens` each node's holders hold now (what the planner checks)."""
        return self._state.used_cells(self._settings)

    def used_tokens(self) -> dict[NodeId, int]:
        """KV tokens each node's holders hold now: their cells, in tokens."""
        quantum = self._settings.capacity_quantum_tokens
        return {node_id: cells * quantum for node_id, cells in self.used_cells().items()}

    @property
    def plan_stats(self) -> PlannerStats:
        """How plans ended so far (`core/planner.py`). The counts only grow; read them, never change them."""
        return self._planner.stats

    @property
    def plan_in_flight(self) -> PlanJob | None:
        """The plan being solved, whose `PlanFinished` the core waits for; None when none is."""
        return self._planner.in_flight

    @property
    def plan_pending(self) -> bool:
        """Something changed since the last plan began: the next chance to plan will."""
        return self._planner.dirty

    @property
    def horizon_s(self) -> float:
        """The horizon H tool starts are forecast with now (`forecast/horizon.py`)."""
        return self._horizon.value_s

    def mean_horizon_s(self) -> float | None:
        """The mean H tool starts were forecast with; None without a readiness rule or before any tool start."""
        if self._readiness_rule is None or not self._tool_starts:
            return None
        return self._horizon_used_s / self._tool_starts

    def demotion(self, node_id: NodeId) -> NodeDemotion:
        """Where node `node_id` stands with the demotion rule (`core/demotion.py`); a node never seen stands clean."""
        demotions = self._demotions
        return NodeDemotion(
            demotions.is_demoted(node_id),
            demotions.reason(node_id),
            demotions.demoted_since(node_id),
            demotions.refused_total[node_id],
            demotions.demoted_total[node_id],
            demotions.restored_total[node_id],
        )

    def membership(self, node_id: NodeId) -> MembershipState:
        """`draining` for a node drained (`NodeDrain`, `core/membership.py`), else `active`."""
        return self._membership.state(node_id)

    def half_life_fit(self, node_id: NodeId) -> float | None:
        """The credit half-life fitted from the node's observed retention, used or not; None before enough of it."""
        return self._half_lives.estimate(node_id)

    def credit_half_life(self, node_id: NodeId) -> float | None:
        """The half-life cache credit decays with on node `node_id`: its fitted one, else the configured one; None
        without decay. Raises `KeyError` for a node never seen."""
        return node_half_life(self._state.nodes[node_id], self._settings)

    def retention_observations(self, node_id: NodeId) -> int:
        """Observations that fed the node's half-life fit (`signals/retention.py`)."""
        return self._half_lives.observations(node_id)

    # -- driving --------------------------------------------------------------------------------------------------

    def take_touched(self) -> set[SessionId]:
        """The sessions put or forgotten since the last call (those not in `sessions` are gone): what a replicated
        driver must write. The first call starts keeping them and returns none."""
        return self._state.take_touched()

    def restore(self, sessions: Iterable[AgentSession]) -> None:
        """Take `sessions` as they were stored (a replica that takes over, `web/replica.py`) into a core that holds
        none, and plan them at the next chance. They count as touched by no one: `take_touched` starts after them."""
        for session in sessions:
            self._state.put(session)
        self._queue.restore(self._state.sessions.values())
        self._state.take_touched()
        self._planner.mark_dirty()

    def on_event(self, event: Event | PlanFinished, now: float) -> list[Action]:
        self._now = now
        if isinstance(event, PlanFinished):
            actions = self._planner.finish(event.job_id, event.plan, self._state, self._settings, now)
        else:
            actions = self._handle(event, now)
            self._policy.observe(event, now)
        self._keep_periodic(now)
        actions += [ProbeNode(node) for node in self._demotions.due(now) if node in self._state.nodes]
        actions += self._maybe_plan(now)
        actions += self._retire_drained(now)
        if self._adaptive_horizon:
            self._served(actions, now)
        self._observe_queue(event, actions, now)
        return actions

    def _observe_queue(self, event: Event | PlanFinished, actions: list[Action], now: float) -> None:
        touched = {action.session_id for action in actions if isinstance(action, Admit | Interrupt | Route | Expired)}
        served = {action.session_id for action in actions if isinstance(action, Route) and not action.side}
        if (asked := getattr(event, "session_id", None)) is not None:
            touched.add(asked)
        self._queue.observe(touched, served, self._state.sessions, now)

    def _served(self, actions: list[Action], now: float) -> None:
        """Feed the adaptive horizon the wait of every pooled session these actions serve."""
        for action in actions:
            if isinstance(action, Route) and (asked := self._pooled_at.pop(action.session_id, None)) is not None:
                self._observe_wait(now - asked, now)

    def _observe_wait(self, wait_s: float, now: float) -> None:
        if self._adaptive_horizon and self._horizon.observe_wait(wait_s):
            # every running tool's schedule was forecast for the old horizon
            for session in list(self._state.sessions.values()):
                if session.phase is Phase.IN_TOOL:
                    tools = tuple(
                        self._forecaster.rescheduled(tool, session.id, self._horizon.value_s) for tool in session.tools
                    )
                    self._state.put(state_machine.replace_tools(session, now, tools))

    def _handle(self, event: Event, now: float) -> list[Action]:
        match event:
            case Register():
                return self._register(event, now)
            case Acquire():
                return self._acquire(event, now)
            case LlmEnd():
                actions = self._llm_end(event, now)
                if actions or self._state.usable_node(self._state.sessions[event.session_id].node) is None:
                    self._planner.mark_dirty()
                return actions
            case ToolStart():
                self._tool_start(event, now)
            case ToolEnd():
                self._tool_end(event, now)
            case Heartbeat():
                session = self._state.session(event.session_id)
                self._state.put(replace(session, lease_expires_at=max(session.lease_expires_at, self._lease(now))))
                return []
            case Close():
                self._state.put(state_machine.close(self._state.session(event.session_id), now))
                self._forget(event.session_id)
            case NodeUpdate():
                if not self._node_update(event, now):
                    return []
            case NodeRemoved():
                self._state.node(event.node_id)
                self._remove_node(event.node_id, now)
            case NodeDrain():
                self._state.node(event.node_id)
                self._membership.drain(event.node_id, event.remove)
                self._set_health(event.node_id, healthy=False)
                self._release_holders(event.node_id, now)
            case CacheResidency():
                session = self._state.session(event.session_id)
                evidence = CacheEvidence(event.node_id, event.tokens, now, EvidenceSource.KV_EVENTS, event.tier)
                self._put_changed(session, evidence=with_evidence(session.evidence, evidence, self._settings))
                return []
            case KvCacheEvent() | LlmFirstToken():
                self._check_feed(event)
                return []
            case NodeProbed():
                return self._node_probed(event, now)
            case Tick():
                return self._tick(now)
        self._planner.mark_dirty()
        return []

    def _remove_node(self, node_id: NodeId, now: float) -> None:
        """Drop the node; the sessions holding a place there wait again (a call running there keeps it until its
        `llm_end`, `_llm_end`)."""
        self._state.drop_node(node_id)
        self._demotions.forget(node_id)
        self._half_lives.forget(node_id)
        self._rates.forget(node_id)
        self._membership.forget(node_id)
        self._nodes_changed = True
        self._release_holders(node_id, now)

    def _release_holders(self, node_id: NodeId, now: float) -> None:
        """Every session holding a place on the node outside a call waits again (the next plan places it)."""
        for session in list(self._state.sessions.values()):
            if session.node == node_id and session.phase is not Phase.IN_LLM:
                self._state.put(state_machine.interrupt(session, now))

    def _retire_drained(self, now: float) -> list[Action]:
        """Remove each node drained with `remove` that no session holds a place on any more."""
        retired = list(self._membership.retiring(self._state.holders))
        for node_id in retired:
            self._remove_node(node_id, now)  # it held no session and was unhealthy: no plan changes with it
        return [NodeRetired(node_id) for node_id in retired]

    def _check_feed(self, event: KvCacheEvent | LlmFirstToken) -> None:
        """A router feed changes nothing here; it must still name a known node (and session)."""
        self._state.node(event.node_id)
        if isinstance(event, LlmFirstToken):
            self._state.session(event.session_id)

    def _lease(self, now: float) -> float:
        return now + self._settings.lease_ttl_s

    def _put_changed(self, session: AgentSession, **changes: object) -> None:
        self._state.put(replace(session, version=session.version + 1, **changes))  # type: ignore[arg-type]

    def _register(self, event: Register, now: float) -> list[Action]:
        existing = self._state.sessions.get(event.session_id)
        if existing is not None:
            raise DuplicateSession(event.session_id)
        self._state.put(
            AgentSession(
                id=event.session_id,
                context=event.context,
                registered_at=now,
                lease_expires_at=self._lease(now),
                expected_input_tokens=event.expected_input_tokens or 0,
                phase_since=now,
            )
        )
        self._planner.mark_dirty()
        return []

    def _acquire(self, event: Acquire, now: float) -> list[Action]:
        asked = self._state.session(event.session_id)
        avoid = set(event.avoid_nodes)
        healthy = {
            node_id: node for node_id, node in self._state.nodes.items() if node.healthy and node_id not in avoid
        }
        fleet = self._state.nodes.values()
        if event.model:
            usable = [node for node in fleet if node.healthy]
            if usable and not any(serves(node, event.model) for node in usable):
                raise ModelNotServed(asked.id, event.model)
        if is_side_call(asked, event.model, fleet):
            return self._side_call(asked, event, healthy, now)
        if event.model and asked.model != event.model:  # the first call that names its model names the main one
            asked = replace(asked, model=event.model)
        model = session_model(asked, fleet)
        if model:
            healthy = eligible(healthy, model)
        # the router decides on the call being asked for, not on the previous one
        expected = asked.expected_input_tokens if event.expected_input_tokens is None else event.expected_input_tokens
        session = replace(
            asked,
            expected_input_tokens=expected,
            prompt_block_runs=event.prompt_block_runs,
            **_agent_step(asked, event),
        )
        if avoid and (why := self.cannot_avoid(session, avoid)) is not None:
            raise NoOtherNode(session.id, session.phase.name, "acquire", why)
        if avoid and not healthy and session.phase is not Phase.IN_LLM:
            why = f"no usable node other than {', '.join(sorted(avoid))} serves {model}"
            raise NoOtherNode(session.id, session.phase.name, "acquire", why)
        if session.phase is Phase.IN_LLM:
            route_to = session.node
        elif session.phase in (Phase.IN_TOOL, Phase.CLOSED):
            route_to = None
        else:
            held = self._state.nodes.get(session.node) if session.node is not None else None
            if session.node in avoid or (held is not None and not serves(held, model)):
                session = state_machine.interrupt(session, now)  # its place moves with the call
            route_to = self._policy.route(session, healthy, now)
            if route_to is None:
                route_to = self._policy.admit(session, healthy, lambda: self._room(healthy), self._settings, now)
            if route_to is None and avoid:
                room = self._room(healthy)
                route_to = min(healthy, key=lambda node_id: (-room[node_id], node_id))
        updated = state_machine.acquire(session, now, route_to, None)  # `session` has the tokens asked for
        was_waiting = session.id in self._state.pool
        self._state.put(replace(updated, lease_expires_at=self._lease(now)))
        if updated.phase is Phase.IN_LLM and updated.node is not None:
            return [Route(session.id, updated.node)]
        if self._adaptive_horizon and session.id in self._state.pool:
            self._pooled_at.setdefault(session.id, now)
        if not was_waiting:
            self._planner.mark_dirty()
        return []

    def _side_call(
        self, session: AgentSession, event: Acquire, healthy: dict[NodeId, Node], now: float
    ) -> list[Action]:
        """A call for another model than the session's main one: routed at once to a node serving it, beside the
        session's own calls; the session keeps its phase and place (`eligibility.py`)."""
        assert event.model is not None
        in_flight: dict[NodeId, int] = {}
        for other in self._state.sessions.values():
            for node_id in other.side_calls:
                in_flight[node_id] = in_flight.get(node_id, 0) + 1
        node = side_node(session, eligible(healthy, event.model), self._room(healthy), in_flight)
        if node is None:  # every healthy node serving it is to be avoided (`_acquire` refused the others)
            why = f"no usable node other than {', '.join(sorted(event.avoid_nodes))} serves {event.model}"
            raise NoOtherNode(session.id, session.phase.name, "acquire", why)
        lease = max(session.lease_expires_at, self._lease(now))
        self._state.put(replace(session, side_calls=(*session.side_calls, node), lease_expires_at=lease))
        return [Route(session.id, node, side=True)]

    def _side_call_end(self, session: AgentSession, event: LlmEnd) -> AgentSession | None:
        """`session` without the side call `event` ends, or None when it ends none (one runs on its node, and the
        session's own call does not): then nothing else changes."""
        if event.node_id not in session.side_calls:
            return None
        if session.phase is Phase.IN_LLM and session.node == event.node_id:
            return None
        nodes = list(session.side_calls)
        nodes.remove(event.node_id)
        return replace(session, side_calls=tuple(nodes))

    def cannot_avoid(self, session: AgentSession, avoid: set[NodeId]) -> str | None:
        """Why a call of `session` cannot be placed at once away from `avoid` (None: it can). Names of nodes the
        fleet no longer has are avoided by construction."""
        if session.phase is Phase.IN_LLM and session.node in avoid:
            return f"another call of the session runs on {session.node}; overlapping calls share one node"
        if not any(node.healthy and node_id not in avoid for node_id, node in self._state.nodes.items()):
            return f"no usable node other than {', '.join(sorted(avoid))}"
        return None

    def _room(self, nodes: dict[NodeId, Node]) -> dict[NodeId, int]:
        """Cells each node's planner may still fill next to what its holders hold now (what the applier checks)."""
        used = self._state.used_cells(self._settings)
        return {node_id: capacity_cells(node, self._settings) - used.get(node_id, 0) for node_id, node in nodes.items()}

    def _llm_end(self, event: LlmEnd, now: float) -> list[Action]:
        """A call's end. A refused call never ran: the session's credit on the node that refused it goes (a node that
        refuses calls is no place to count on a cache; its place there moves with the retry, `_acquire`), and the
        refusal counts towards the node's demotion."""
        session = self._state.session(event.session_id)
        if (ended := self._side_call_end(session, event)) is not None:
            self._state.put(replace(ended, lease_expires_at=max(session.lease_expires_at, self._lease(now))))
            return []
        if session.phase is not Phase.IN_LLM:
            raise IllegalTransition(session.id, session.phase.name, "llm_end", "no call is running")
        if event.refused:
            return self._refused(session, event, now)
        changes: dict[str, object] = {"last_node": event.node_id, "lease_expires_at": self._lease(now)}
        if event.error is None:
            self._demotions.served(event.node_id)
            completion = event.completion_tokens or 0
            if event.prompt_tokens is not None:
                context = event.prompt_tokens + completion
                source = EvidenceSource.USAGE
            else:
                context = max(session.context_tokens, session.expected_input_tokens) + completion
                source = EvidenceSource.ESTIMATE
            self._cache_outcome(session, event, now)
            evidence = CacheEvidence(event.node_id, context, now, source)
            changes.update(
                context_tokens=context,
                expected_input_tokens=0,
                completed_calls=session.completed_calls + 1,
                output_tokens_total=session.output_tokens_total + completion,
                evidence=with_evidence(session.evidence, evidence, self._settings),
            )
        self._state.put(self._off_removed(state_machine.llm_end(session, now, **changes), now))
        return []

    def _off_removed(self, session: AgentSession, now: float) -> AgentSession:
        """A session whose call ended on a node removed or drained meanwhile waits again, as the node's other
        holders did."""
        if session.node is not None and (
            session.node not in self._state.nodes or self._membership.is_draining(session.node)
        ):
            return state_machine.interrupt(session, now)
        return session

    def _refused(self, session: AgentSession, event: LlmEnd, now: float) -> list[Action]:
        if event.node_id != session.node:
            detail = f"the call runs on {session.node}, not on {event.node_id}, the node said to refuse it"
            raise IllegalTransition(session.id, session.phase.name, "llm_end", detail)
        evidence = tuple(e for e in session.evidence if e.node != event.node_id)
        self._state.put(
            self._off_removed(
                state_machine.llm_end(session, now, evidence=evidence, lease_expires_at=self._lease(now)), now
            )
        )
        if event.node_id not in self._state.nodes:
            return []  # removed while the call ran: nothing left to demote
        reason = self._demotions.refused(event.node_id, event.error or "refused", now)
        if reason is None:
            return []
        self._set_health(event.node_id, healthy=False)
        return [NodeDemoted(event.node_id, reason)]

    def _node_probed(self, event: NodeProbed, now: float) -> list[Action]:
        self._state.node(event.node_id)
        demoted_s = self._demotions.probed(event.node_id, event.serves, now)
        if demoted_s is None:
            return []
        healthy = self._demotions.healthy_after_restore(event.node_id) and not self._membership.is_draining(
            event.node_id
        )
        self._set_health(event.node_id, healthy=healthy)
        self._planner.mark_dirty()
        return [NodeRestored(event.node_id, demoted_s)]

    def _set_health(self, node_id: NodeId, healthy: bool) -> None:
        node = self._state.nodes[node_id]
        if node.healthy != healthy:
            self._state.put_node(replace(node, healthy=healthy, version=node.version + 1))
            self._nodes_changed = True

    def _cache_outcome(self, session: AgentSession, event: LlmEnd, now: float) -> None:
        """What the node kept of the session's previous context on it. A session that held its place there since
        that call tells the policy (`cache_kept`, see `policies/base.py`): TAO reserved that cache. One that did not
        feeds the node's half-life fit: its cache was at vLLM's mercy (a held place is protected by admission, so
        its retention says nothing about eviction)."""
        hittable = self._hittable(session, event)
        if hittable is None or event.cached_tokens is None:
            return
        previous, asked = hittable
        if session.placed_at <= previous.observed_at:
            if asked > 0:
                self._policy.cache_kept(event.node_id, asked, event.cached_tokens, now)
        else:
            self._observe_retention(session, event.node_id, previous, asked, event.cached_tokens)

    def _observe_retention(
        self, session: AgentSession, node_id: NodeId, previous: CacheEvidence, asked: int, kept: int
    ) -> None:
        """Δt runs from the previous call's end to this call's start (the session's `phase_since`), the age credit
        had when the call was placed. The shared prefix (system prompt, tool catalog) is left out of asked and kept:
        other sessions keep it cached. The fit observes whether or not its estimate is used (`credit_half_life_fit`),
        so that the estimate can be reported either way."""
        block = self._state.nodes[node_id].block_size
        shared = min(asked, session.context.shared_prefix_tokens // block * block)
        elapsed = session.phase_since - previous.observed_at
        if not self._half_lives.observe(node_id, elapsed, asked - shared, max(0, kept - shared)):
            return
        if not self._settings.credit_half_life_fit:
            return  # no node carries a fitted half-life: nothing to update
        for fitted_id, node in list(self._state.nodes.items()):
            fitted = self._fitted_half_life(fitted_id)
            if node.credit_half_life_s != fitted:
                self._state.put_node(replace(node, credit_half_life_s=fitted))

    def _hittable(self, session: AgentSession, event: LlmEnd) -> tuple[CacheEvidence, int] | None:
        """The session's previous usage on the call's node, and how many of its tokens this call could hit there:
        vLLM hits whole blocks only, and always computes a prompt's last token. None without usage figures."""
        if event.prompt_tokens is None:
            return None
        previous = next(
            (e for e in session.evidence if e.node == event.node_id and e.source is EvidenceSource.USAGE), None
        )
        node = self._state.nodes.get(event.node_id)
        if previous is None or node is None:
            return None
        return previous, (min(previous.tokens, event.prompt_tokens) - 1) // node.block_size * node.block_size

    def _fitted_half_life(self, node_id: NodeId) -> float | None:
        """What `Node.credit_half_life_s` carries: the fitted h when fitting is on and decay is, else None."""
        if not self._settings.credit_half_life_fit or self._settings.credit_half_life_s is None:
            return None
        return self._half_lives.estimate(node_id)

    def _tool_start(self, event: ToolStart, now: float) -> None:
        session = self._state.session(event.session_id)
        rule = self._readiness_rule
        horizon = self._forecaster.horizon(rule, self._horizon.value_s)
        self._horizon_used_s += horizon
        self._tool_starts += 1
        # the tools the acquire before this call said come next: history for a tool that has too little of its own
        expected = session.context.expected_next_tools if self._policy.expected_tools else ()
        at = state_machine.tool_start_time(session, now, event.age_s)
        tool = self._forecaster.start(
            rule, event.call_id, event.tool, event.program, event.hints, session.id, at, horizon, expected
        )
        updated = state_machine.tool_start(session, at, tool)
        lease = self._lease(now + (event.hints.timeout_s or 0.0))
        self._state.put(replace(updated, lease_expires_at=max(updated.lease_expires_at, lease)))

    def _tool_end(self, event: ToolEnd, now: float) -> None:
        session = self._state.session(event.session_id)
        at = state_machine.tool_end_time(session, now, event.call_id, event.age_s)
        updated = state_machine.tool_end(session, at, event.call_id)
        tool = next(t for t in session.tools if t.call_id == event.call_id)
        duration = event.duration_s if event.duration_s is not None else max(0.0, at - tool.started_at)
        self._forecaster.learn(tool, duration, session.id)
        self._state.put(replace(updated, lease_expires_at=self._lease(now)))

    def _node_update(self, event: NodeUpdate, now: float) -> bool:
        """Record the node; True when more than its load figures changed (then the pool is worth a plan). A new
        utilisation target is a new plannable capacity, so it counts as a node change."""
        previous = self._state.nodes.get(event.node_id)
        node = Node(
            event.node_id,
            event.capacity_tokens,
            event.block_size,
            self._demotions.scraped(event.node_id, event.healthy) and not self._membership.is_draining(event.node_id),
            event.prefix_hit_rate,
            version=0 if previous is None else previous.version + 1,
            load=event.load,
            models=event.models if event.models is not None or previous is None else previous.models,
        )
        node = self._with_rates(node, event, previous, now)
        target = self._policy.node_target(previous, node, self._settings, now, self._demand(node.id))
        node = replace(node, utilization_target=target, credit_half_life_s=self._fitted_half_life(node.id))
        if previous is None or _placement_inputs(previous) != _placement_inputs(node):
            self._nodes_changed = True
        self._state.put_node(node)
        return previous is None or _without_load(previous) != _without_load(node)

    def _with_rates(self, node: Node, event: NodeUpdate, previous: Node | None, now: float) -> Node:
        rates = NodeRates() if previous is None else previous.rates
        if event.counters is not None:
            rates = self._rates.observe(node.id, event.counters, now, rates)
        return replace(
            node,
            cpu_capacity_tokens=event.cpu_capacity_tokens,
            rates=rates,
            cpu_hit_worth=cpu_hit_worth(rates, self._settings.cpu_hit_worth_prior)
            if event.cpu_capacity_tokens
            else 0.0,
            cpu_retention_s=cpu_retention_s(event.cpu_capacity_tokens, rates),
            decode_step_s=coarse_step_s(rates.decode_step_s),
        )

    def _demand(self, node_id: NodeId) -> Demand:
        """The footprint of every session in the waiting pool, and the node's holdings when asked (a walk over every
        session, which only a policy stretching by a CPU tier needs)."""
        pool = sum(
            footprint_tokens(self._state.sessions[session_id], self._settings) for session_id in self._state.pool
        )
        return Demand(pool, lambda: self._holdings(node_id))

    def _holdings(self, node_id: NodeId) -> Holdings:
        held = calling = 0
        for session in self._state.sessions.values():
            if session.node == node_id and session.id not in self._state.pool:
                tokens = footprint_tokens(session, self._settings)
                held += tokens
                if session.phase is not Phase.IN_TOOL:
                    calling += tokens
        return Holdings(held, calling)

    def _tick(self, now: float) -> list[Action]:
        if self._next_periodic is not None and now >= self._next_periodic:
            self._periodic_due = True
            self._next_periodic = None
        actions: list[Action] = []
        for session_id in sorted(self._state.pop_due(now)):
            session = self._state.sessions[session_id]
            if session.lease_expires_at <= now:
                self._state.put(state_machine.close(session, now))
                self._forget(session.id)
                actions.append(Expired(session.id))
            elif session.phase is Phase.IN_TOOL and any(self._due(tool, now) for tool in session.tools):
                tools = tuple(self._reestimated(tool, now) for tool in session.tools)
                self._state.put(state_machine.replace_tools(session, now, tools))
        self._planner.mark_dirty()
        return actions

    def _forget(self, session_id: SessionId) -> None:
        self._history.forget_session(session_id)
        self._pooled_at.pop(session_id, None)

    def _due(self, tool: RunningTool, now: float) -> bool:
        """A binary rule's expired prediction is due for re-estimation (the forecast's schedule never expires)."""
        if self._binary_rule is None:
            return False
        return now >= tool.predicted_end and now - tool.predicted_at >= self._settings.reestimate_interval_s

    def _reestimated(self, tool: RunningTool, now: float) -> RunningTool:
        """A binary rule's expired prediction re-estimated, once due; any other call unchanged."""
        rule = self._binary_rule
        if rule is None or not self._due(tool, now):
            return tool
        return self._forecaster.reestimated(rule, tool, now)

    def _maybe_plan(self, now: float) -> list[Action]:
        if not self._policy.plans or not self._planner.dirty or self._planner.in_flight is not None:
            return []
        nodes_matter = self._nodes_changed and bool(self._state.sessions)
        if (
            not self._state.pool
            and not nodes_matter
            and not self._periodic_due
            and not self._holders_misplaced()
            and not (self._policy.charges_footprints and self._holders_over_capacity())
        ):
            self._planner.dirty = self._nodes_changed = False
            return []
        self._nodes_changed = self._periodic_due = False
        job = self._planner.begin(self._state.snapshot(now, self._settings), self._policy.plan)
        if job is None:
            return []
        if not self._inline_planning:
            return [StartPlan(job)]
        return self._planner.finish(job.id, job.solve(), self._state, self._settings, now)

    def _holders_misplaced(self) -> bool:
        return any(self._state.usable_node(node) is None for node in self._state.holders)

    def _holders_over_capacity(self) -> bool:
        """Whether a node's holders hold more than the planner may fill there while one of them is outside a call
        (so a plan can interrupt it). Only nodes whose holders changed since the last look, or that were over then,
        are looked at again (a node's holdings grow only when one of its holders is put), and their holdings are
        summed only when the bound kept as sessions are put passes the capacity."""
        state = self._state
        cap = ChargeCap(state.nodes.values(), self._settings)
        self._over_capacity = {
            node_id
            for node_id in self._over_capacity | state.take_holdings_changed()
            if (node := state.usable_node(node_id)) is not None
            and state.footprint_bound(node_id) > (capacity := capacity_cells(node, self._settings))
            and state.cells_held(node_id, self._settings, cap) > capacity
            and any(state.sessions[s].phase is not Phase.IN_LLM for s in state.holders_at(node_id))
        }
        return bool(self._over_capacity)

    def _wake_times(self, session: AgentSession) -> list[float]:
        interval = self._settings.reestimate_interval_s
        times = [session.lease_expires_at]
        for tool in session.tools:
            # readiness changes at its schedule's steps; steps already passed change nothing any more
            times += [at for at in tool.readiness.times if at >= self._now]
            if self._binary_rule is not None:
                times.append(max(tool.predicted_end, tool.predicted_at + interval))
        times += self._credit_wake_times(session)
        times.extend(self._policy.wake_times(session))
        return times

    def _credit_wake_times(self, session: AgentSession) -> list[float]:
        """Just after each snapshot credit falls below one unit at its node's half-life: stale credit stops
        outranking readiness then. A half-life fitted anew later moves no time set before: the tick comes early
        (harmless) or late (plans in between already see the credit as it decays)."""
        unit = self._settings.credit_unit_tokens
        times = []
        for evidence in session.evidence:
            node = self._state.nodes.get(evidence.node)
            if node is None or evidence.source is EvidenceSource.KV_EVENTS or evidence.tokens < unit:
                continue
            half_life = node_half_life(node, self._settings)
            if half_life is not None:
                times.append(evidence.observed_at + half_life * (math.log2(evidence.tokens / unit) + 1e-6))
        return times

    def _keep_periodic(self, now: float) -> None:
        """Keep the policy's periodic plan scheduled while sessions live, and only then, so an idle run ends."""
        if self._plan_interval is None:
            return
        if not self._state.sessions:
            self._next_periodic = None
        elif self._next_periodic is None:
            self._next_periodic = now + self._plan_interval

    def next_wakeup(self) -> float | None:
        """When to send the next `Tick()`: the earliest time at which time alone changes something. It may already
        have passed (the driver then ticks at once)."""
        wakes = [self._state.next_wakeup(), self._next_periodic, self._demotions.next_probe()]
        return min((wake for wake in wakes if wake is not None), default=None)


def _placement_inputs(node: Node) -> tuple[object, ...]:
    """What of a node decides where sessions may go: a change of it is worth a plan."""
    return (node.capacity_tokens, node.healthy, node.utilization_target, node.models)


def _without_load(node: Node) -> Node:
    return replace(node, version=0, load=NodeLoad(), rates=NodeRates())


def _agent_step(session: AgentSession, event: Acquire) -> dict[str, Any]:
    """The session fields an acquire changes with what it says of the agent's step: `step_id` (stored and listed,
    read by no decision) and the context's `expected_next_tools` (the forecast of the session's next tool starts
    reads it, `forecast/forecaster.py`); a field the acquire leaves out keeps its value, and its context its object."""
    changes: dict[str, Any] = {}
    if event.step_id is not None:
        changes["step_id"] = event.step_id
    if event.expected_next_tools is not None:
        changes["context"] = replace(session.context, expected_next_tools=event.expected_next_tools)
    return changes
