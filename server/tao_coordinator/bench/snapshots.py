"""Realistic planner inputs: drive a real `Coordinator` with a closed-loop synthetic agent workload in virtual time
and record every snapshot its planner is asked to solve.

The workload is shaped on the Claude Code (AgentX) traces in `shared/traces` (dev half): first prompts lognormal
with median 105k tokens and p90 222k (σ = 0.58), capped at 300k; about 2k tokens of tool output per turn; output
lognormal with median 216 tokens; tool time lognormal with median 8 s and p90 68 s (σ = 1.67), capped at 600 s;
70 turns per session on average (geometric); LLM time from a rough H100-TP4 model (0.03 ms per uncached prompt
token + 11 ms per output token). Nodes are H100-TP4 serving a 32B model: 896k KV tokens each. With 8 sessions per
node the fleet is about 1.2× oversubscribed, the regime where admission decisions matter.

Only the snapshots matter here: the timings of this toy loop are not a simulation of anything.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.actions import Route, StartPlan
from ..core.coordinator import Coordinator
from ..core.events import Acquire, Close, Event, LlmEnd, NodeUpdate, Register, Tick, ToolEnd, ToolStart
from ..core.model import Node, NodeId, Session
from ..core.plan import Plan, PlanFinished
from ..core.policies import make_policy
from ..core.settings import CoreSettings
from ..core.snapshot import Snapshot

NODE_CAPACITY_TOKENS = 896_000
WARMUP_S = 120.0
SETTLE_S = 30.0
WARMUP_PLAN_DELAY_S = 0.5
PLAN_DELAY_S = 0.05
"""Virtual time a plan takes: events meanwhile coalesce into the next plan, as in the live coordinator."""
SESSIONS_PER_NODE = 8


@dataclass
class _Agent:
    context: int
    turns_left: int


class _Recorder:
    """Plans with a swappable inner policy; while `recording`, keeps every snapshot it is asked to plan."""

    def __init__(self, policy_name: str) -> None:
        self.inner = make_policy(policy_name)
        self.name = "recorder"
        self.plans = True
        self.recording = False
        self.snapshots: list[Snapshot] = []

    def plan(self, snapshot: Snapshot) -> Plan:
        if self.recording:
            self.snapshots.append(snapshot)
        return self.inner.plan(snapshot)

    def route(self, session: Session, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        return self.inner.route(session, nodes, now)

    def observe(self, event: Event, now: float) -> None:
        self.inner.observe(event, now)


class _SyntheticFleet:
    """The closed loop: a routed call ends after its LLM time, then a tool runs, then the next call is acquired."""

    def __init__(self, coordinator: Coordinator, seed: int) -> None:
        self.coordinator = coordinator
        self.rng = random.Random(seed)
        self.plan_delay_s = WARMUP_PLAN_DELAY_S
        self.queue: list[tuple[float, int, Event | PlanFinished]] = []
        self.order = itertools.count()
        self.agents: dict[str, _Agent] = {}
        self.names = (f"agent-{k:05d}" for k in itertools.count())

    def push(self, at: float, event: Event | PlanFinished) -> None:
        heapq.heappush(self.queue, (at, next(self.order), event))

    def spawn(self, at: float) -> None:
        name = next(self.names)
        context = min(300_000, int(self.rng.lognormvariate(math.log(105_000), 0.58)))
        self.agents[name] = _Agent(context, 1 + int(self.rng.expovariate(1 / 70)))
        self.push(at, Register(name, expected_input_tokens=context))
        self.push(at, Acquire(name, expected_input_tokens=context))

    def step(self) -> None:
        now, _, event = heapq.heappop(self.queue)
        for action in self.coordinator.on_event(event, now):
            if isinstance(action, Route):
                self._call(action, now)
            elif isinstance(action, StartPlan):
                self.push(now + self.plan_delay_s, PlanFinished(action.job.id, action.job.solve()))
        wake = self.coordinator.next_wakeup()
        if wake is not None and (not self.queue or wake < self.queue[0][0]):
            self.push(max(wake, now), Tick())

    def _call(self, route: Route, now: float) -> None:
        agent, rng = self.agents[route.session_id], self.rng
        output = int(rng.lognormvariate(math.log(216), 1.0))
        end = now + 0.03e-3 * 2_000 + 11e-3 * output
        self.push(end, LlmEnd(route.session_id, route.node, agent.context, agent.context - 2_000, output))
        agent.context += output + 2_000
        agent.turns_left -= 1
        if agent.turns_left <= 0:
            self.push(end, Close(route.session_id))
            self.spawn(end)
            return
        tool_time = min(600.0, rng.lognormvariate(math.log(8), 1.67))
        call = f"call-{agent.turns_left}"
        self.push(end, ToolStart(route.session_id, call, "bash"))
        self.push(end + tool_time, ToolEnd(route.session_id, call, tool_time))
        self.push(end + tool_time, Acquire(route.session_id, expected_input_tokens=agent.context))


def record_snapshots(sessions: int, nodes: int, count: int, seed: int, policy: str = "tao") -> list[Snapshot]:
    """`count` planner snapshots of a fleet in steady state.

    The fleet first runs 120 s of virtual time under best-fit decreasing with plans that take 0.5 s (cheap, so
    large fleets warm up fast), then 30 s under `policy` with plans that take 50 ms, which then keeps planning while
    every snapshot it sees is recorded.
    """
    recorder = _Recorder("tao-no-dp")
    coordinator = Coordinator(recorder, CoreSettings(lease_ttl_s=1e9), inline_planning=False)
    for k in range(nodes):
        coordinator.on_event(NodeUpdate(f"node-{k:03d}", NODE_CAPACITY_TOKENS), 0.0)
    fleet = _SyntheticFleet(coordinator, seed)
    for _ in range(sessions):
        fleet.spawn(fleet.rng.uniform(0, 10))
    while fleet.queue and fleet.queue[0][0] < WARMUP_S:
        fleet.step()
    recorder.inner = make_policy(policy)
    fleet.plan_delay_s = PLAN_DELAY_S
    while fleet.queue and fleet.queue[0][0] < WARMUP_S + SETTLE_S:
        fleet.step()
    recorder.recording = True
    while fleet.queue and len(recorder.snapshots) < count:
        fleet.step()
    return recorder.snapshots[:count]
