"""The one entry point both drivers call: `on_event(event, now) -> actions`.

The live aiohttp service and the simulator feed it the same events; only their clocks differ. Each handler
validates first and changes state last, so an event that raises leaves everything as it was.

Planning: events at which the decision can change mark the planner dirty — registration, tool start and end,
close, node changes, ticks, and an acquire that puts a session into the waiting pool. The end of an LLM call, an
acquire by a session already waiting and KV-event evidence only refine values: the session's next tool boundary
plans with them, so they do not cost a plan each. With `inline_planning` the plan is solved inside
`on_event` and its actions come back at once (the simulator with zero planning delay, tests). Otherwise `on_event`
returns `StartPlan(job)`; the driver solves `job` off its event loop and reports `PlanFinished(job.id, plan)`.
Either way at most one plan is in flight. Nothing is planned when the waiting pool is empty and no node changed:
every holder keeps its place, which is what a plan would decide.

`next_wakeup()` tells the driver when time alone will change something (a lease expires, a tool's predicted return
enters the readiness horizon, an expired prediction is due for re-estimation, a session's decayed cache credit
falls to zero); it should send `Tick()` then. A tick
only looks at the sessions whose time has come, so it costs O(log n) per due session, not O(n).

Baseline policies may ask for more (see `policies/base.py`): per-session wake-up times of their own (Continuum's pin
expiry), and a periodic plan even when nobody waits (ThunderAgent's scheduler tick, which pauses holders). Neither
applies to TAO. Events that only feed routers (`KvCacheEvent`, `LlmFirstToken`, and a `NodeUpdate` that changes
nothing but the node's load figures) change no session and plan nothing; the policy's `observe` sees them.
"""

from __future__ import annotations

import math
from dataclasses import replace

from . import state_machine
from .actions import Action, Expired, Route, StartPlan
from .errors import DuplicateSession, IllegalTransition
from .events import (
    Acquire,
    CacheResidency,
    Close,
    Event,
    Heartbeat,
    KvCacheEvent,
    LlmEnd,
    LlmFirstToken,
    NodeRemoved,
    NodeUpdate,
    Register,
    Tick,
    ToolEnd,
    ToolStart,
)
from .model import CacheEvidence, EvidenceSource, Node, NodeId, Phase, RunningTool, Session
from .plan import PlanFinished
from .planner import Planner
from .policies.base import (
    Policy,
    admits_on_room,
    plan_interval,
    policy_admit,
    policy_cache_kept,
    policy_node_target,
    policy_wake_times,
)
from .settings import CoreSettings
from .signals.cache_credit import with_evidence
from .signals.duration import DurationEstimator, DurationHistory
from .signals.footprint import footprint_tokens
from .state import FleetState, capacity_cells


class Coordinator:
    def __init__(
        self,
        policy: Policy,
        settings: CoreSettings | None = None,
        *,
        history: DurationHistory | None = None,
        inline_planning: bool = True,
    ) -> None:
        self.policy = policy
        self.settings = settings or CoreSettings()
        self.history = history or DurationHistory(self.settings.estimator_window)
        self.estimator = DurationEstimator(self.history, self.settings)
        self.state = FleetState(self._wake_times)
        self.planner = Planner()
        self.inline_planning = inline_planning
        self._nodes_changed = False
        self._plan_interval = plan_interval(policy)
        self._next_periodic: float | None = None
        self._periodic_due = False

    def on_event(self, event: Event | PlanFinished, now: float) -> list[Action]:
        if isinstance(event, PlanFinished):
            actions = self.planner.finish(event.job_id, event.plan, self.state, self.settings, now)
        else:
            actions = self._handle(event, now)
            self.policy.observe(event, now)
        self._keep_periodic(now)
        return actions + self._maybe_plan(now)

    def _handle(self, event: Event, now: float) -> list[Action]:
        match event:
            case Register():
                return self._register(event, now)
            case Acquire():
                return self._acquire(event, now)
            case LlmEnd():
                self._llm_end(event, now)
                if self.state.usable_node(self.state.sessions[event.session_id].node) is not None:
                    return []
            case ToolStart():
                self._tool_start(event, now)
            case ToolEnd():
                self._tool_end(event, now)
            case Heartbeat():
                session = self.state.session(event.session_id)
                self.state.put(replace(session, lease_expires_at=max(session.lease_expires_at, self._lease(now))))
                return []
            case Close():
                self.state.put(state_machine.close(self.state.session(event.session_id), now))
            case NodeUpdate():
                if not self._node_update(event, now):
                    return []
            case NodeRemoved():
                self.state.node(event.node_id)
                self.state.drop_node(event.node_id)
                self._nodes_changed = True
            case CacheResidency():
                session = self.state.session(event.session_id)
                evidence = CacheEvidence(event.node_id, event.tokens, now, EvidenceSource.KV_EVENTS)
                self._put_changed(session, evidence=with_evidence(session.evidence, evidence, self.settings))
                return []
            case KvCacheEvent() | LlmFirstToken():
                self._check_feed(event)
                return []
            case Tick():
                return self._tick(now)
        self.planner.mark_dirty()
        return []

    def _check_feed(self, event: KvCacheEvent | LlmFirstToken) -> None:
        """A router feed changes nothing here; it must still name a known node (and session)."""
        self.state.node(event.node_id)
        if isinstance(event, LlmFirstToken):
            self.state.session(event.session_id)

    def _lease(self, now: float) -> float:
        return now + self.settings.lease_ttl_s

    def _put_changed(self, session: Session, **changes: object) -> None:
        self.state.put(replace(session, version=session.version + 1, **changes))  # type: ignore[arg-type]

    def _register(self, event: Register, now: float) -> list[Action]:
        existing = self.state.sessions.get(event.session_id)
        if existing is not None:
            raise DuplicateSession(event.session_id)
        self.state.put(
            Session(
                id=event.session_id,
                context=event.context,
                registered_at=now,
                lease_expires_at=self._lease(now),
                expected_input_tokens=event.expected_input_tokens or 0,
                phase_since=now,
            )
        )
        self.planner.mark_dirty()
        return []

    def _acquire(self, event: Acquire, now: float) -> list[Action]:
        asked = self.state.session(event.session_id)
        healthy = {node_id: node for node_id, node in self.state.nodes.items() if node.healthy}
        # the router decides on the call being asked for, not on the previous one
        expected = asked.expected_input_tokens if event.expected_input_tokens is None else event.expected_input_tokens
        session = replace(asked, expected_input_tokens=expected, prompt_block_runs=event.prompt_block_runs)
        if session.phase is Phase.IN_LLM:
            route_to = session.node
        elif session.phase in (Phase.IN_TOOL, Phase.CLOSED):
            route_to = None
        else:
            route_to = self.policy.route(session, healthy, now)
            if route_to is None and admits_on_room(self.policy):
                route_to = policy_admit(self.policy, session, healthy, self._room(healthy), self.settings, now)
        updated = state_machine.acquire(session, now, route_to, None)  # `session` has the tokens asked for
        was_waiting = session.id in self.state.pool
        self.state.put(replace(updated, lease_expires_at=self._lease(now)))
        if updated.phase is Phase.IN_LLM and updated.node is not None:
            return [Route(session.id, updated.node)]
        if not was_waiting:
            self.planner.mark_dirty()
        return []

    def _room(self, nodes: dict[NodeId, Node]) -> dict[NodeId, int]:
        """Cells each node's planner may still fill next to what its holders hold now (what the applier checks)."""
        used = self.state.used_cells(self.settings)
        return {node_id: capacity_cells(node, self.settings) - used.get(node_id, 0) for node_id, node in nodes.items()}

    def _llm_end(self, event: LlmEnd, now: float) -> None:
        session = self.state.session(event.session_id)
        if session.phase is not Phase.IN_LLM:
            raise IllegalTransition(session.id, session.phase.name, "llm_end", "no call is running")
        changes: dict[str, object] = {"last_node": event.node_id, "lease_expires_at": self._lease(now)}
        if event.error is None:
            completion = event.completion_tokens or 0
            if event.prompt_tokens is not None:
                context = event.prompt_tokens + completion
                source = EvidenceSource.USAGE
            else:
                context = max(session.context_tokens, session.expected_input_tokens) + completion
                source = EvidenceSource.ESTIMATE
            self._report_kept(session, event, now)
            evidence = CacheEvidence(event.node_id, context, now, source)
            changes.update(
                context_tokens=context,
                expected_input_tokens=0,
                completed_calls=session.completed_calls + 1,
                output_tokens_total=session.output_tokens_total + completion,
                evidence=with_evidence(session.evidence, evidence, self.settings),
            )
        self.state.put(state_machine.llm_end(session, now, **changes))

    def _report_kept(self, session: Session, event: LlmEnd, now: float) -> None:
        """Tell the policy how much of a reserved cache the node kept, when the call's session held its place there
        since its previous call on it (see `policies/base.py`)."""
        if event.prompt_tokens is None or event.cached_tokens is None:
            return
        previous = next(
            (e for e in session.evidence if e.node == event.node_id and e.source is EvidenceSource.USAGE), None
        )
        node = self.state.nodes.get(event.node_id)
        if previous is None or node is None or session.placed_at > previous.observed_at:
            return
        # vLLM hits whole blocks only, and always computes a prompt's last token
        asked = (min(previous.tokens, event.prompt_tokens) - 1) // node.block_size * node.block_size
        if asked > 0:
            policy_cache_kept(self.policy, event.node_id, asked, event.cached_tokens, now)

    def _tool_start(self, event: ToolStart, now: float) -> None:
        session = self.state.session(event.session_id)
        prediction = self.estimator.predict(event.tool, event.hints, now)
        tool = RunningTool(
            event.call_id, event.tool, now, event.hints, now + prediction.duration_s, now, prediction.source
        )
        updated = state_machine.tool_start(session, now, tool)
        lease = self._lease(now + (event.hints.timeout_s or 0.0))
        self.state.put(replace(updated, lease_expires_at=max(updated.lease_expires_at, lease)))

    def _tool_end(self, event: ToolEnd, now: float) -> None:
        session = self.state.session(event.session_id)
        updated = state_machine.tool_end(session, now, event.call_id)
        tool = next(t for t in session.tools if t.call_id == event.call_id)
        duration = event.duration_s if event.duration_s is not None else max(0.0, now - tool.started_at)
        self.history.add(tool.tool, duration)
        self.state.put(replace(updated, lease_expires_at=self._lease(now)))

    def _node_update(self, event: NodeUpdate, now: float) -> bool:
        """Record the node; True when more than its load figures changed (then the pool is worth a plan). A new
        utilisation target is a new plannable capacity, so it counts as a node change."""
        previous = self.state.nodes.get(event.node_id)
        node = Node(
            event.node_id,
            event.capacity_tokens,
            event.block_size,
            event.healthy,
            event.prefix_hit_rate,
            version=0 if previous is None else previous.version + 1,
            running=event.running,
            waiting=event.waiting,
            kv_usage=event.kv_usage,
            preemptions=event.preemptions,
        )
        target = policy_node_target(self.policy, previous, node, self.settings, now, self._pool_tokens())
        node = replace(node, utilization_target=target)
        capacity = (node.capacity_tokens, node.healthy, node.utilization_target)
        if previous is None or (previous.capacity_tokens, previous.healthy, previous.utilization_target) != capacity:
            self._nodes_changed = True
        self.state.put_node(node)
        return previous is None or _without_load(previous) != _without_load(node)

    def _pool_tokens(self) -> int:
        """The footprint of every session in the waiting pool: what the planner would place if it could."""
        return sum(footprint_tokens(self.state.sessions[session_id], self.settings) for session_id in self.state.pool)

    def _tick(self, now: float) -> list[Action]:
        if self._next_periodic is not None and now >= self._next_periodic:
            self._periodic_due = True
            self._next_periodic = None
        actions: list[Action] = []
        for session_id in sorted(self.state.pop_due(now)):
            session = self.state.sessions[session_id]
            if session.lease_expires_at <= now:
                self.state.put(state_machine.close(session, now))
                actions.append(Expired(session.id))
            elif session.phase is Phase.IN_TOOL and any(self._due(tool, now) for tool in session.tools):
                tools = tuple(self._reestimated(tool, now) if self._due(tool, now) else tool for tool in session.tools)
                self.state.put(state_machine.replace_tools(session, now, tools))
        self.planner.mark_dirty()
        return actions

    def _due(self, tool: RunningTool, now: float) -> bool:
        return now >= tool.predicted_end and now - tool.predicted_at >= self.settings.reestimate_interval_s

    def _reestimated(self, tool: RunningTool, now: float) -> RunningTool:
        prediction = self.estimator.reestimate(tool.tool, tool.hints, now, now - tool.started_at)
        end = tool.started_at + prediction.duration_s
        return replace(tool, predicted_end=end, predicted_at=now, source="reestimate")

    def _maybe_plan(self, now: float) -> list[Action]:
        if not self.policy.plans or not self.planner.dirty or self.planner.in_flight is not None:
            return []
        nodes_matter = self._nodes_changed and bool(self.state.sessions)
        if not self.state.pool and not nodes_matter and not self._periodic_due and not self._holders_misplaced():
            self.planner.dirty = self._nodes_changed = False
            return []
        self._nodes_changed = self._periodic_due = False
        job = self.planner.begin(self.state.snapshot(now, self.settings), self.policy.plan)
        if job is None:
            return []
        if not self.inline_planning:
            return [StartPlan(job)]
        return self.planner.finish(job.id, job.solve(), self.state, self.settings, now)

    def _holders_misplaced(self) -> bool:
        return any(self.state.usable_node(node) is None for node in self.state.holders)

    def _wake_times(self, session: Session) -> list[float]:
        horizon = self.settings.readiness_horizon_s
        interval = self.settings.reestimate_interval_s
        times = [session.lease_expires_at]
        for tool in session.tools:
            times.append(tool.predicted_end - horizon)
            times.append(max(tool.predicted_end, tool.predicted_at + interval))
        half_life, unit = self.settings.credit_half_life_s, self.settings.credit_unit_tokens
        if half_life is not None:
            # just after decayed credit falls below one unit: stale credit stops outranking readiness then
            times += [
                evidence.observed_at + half_life * (math.log2(evidence.tokens / unit) + 1e-6)
                for evidence in session.evidence
                if evidence.source is not EvidenceSource.KV_EVENTS and evidence.tokens >= unit
            ]
        times.extend(policy_wake_times(self.policy, session))
        return times

    def _keep_periodic(self, now: float) -> None:
        """Keep the policy's periodic plan scheduled while sessions live, and only then, so an idle run ends."""
        if self._plan_interval is None:
            return
        if not self.state.sessions:
            self._next_periodic = None
        elif self._next_periodic is None:
            self._next_periodic = now + self._plan_interval

    def next_wakeup(self) -> float | None:
        """When to send the next `Tick()`: the earliest time at which time alone changes something. It may already
        have passed (the driver then ticks at once)."""
        wake = self.state.next_wakeup()
        if self._next_periodic is not None and (wake is None or self._next_periodic < wake):
            return self._next_periodic
        return wake


def _without_load(node: Node) -> Node:
    return replace(node, version=0, running=0, waiting=0, kv_usage=0.0, preemptions=0)
