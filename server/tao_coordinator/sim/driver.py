"""The virtual-time driver: workload sessions, the scheduling core and a fleet of node engines on one event heap.

It is the simulator's counterpart of the live aiohttp service: it feeds the same `Coordinator.on_event(event, now)`
and carries out the same actions — a `Route` submits the call to a node engine, a `StartPlan` is solved at once
(timed on the wall clock) and its result delivered later in virtual time, so events that arrive meanwhile coalesce
as they do live (at most one plan in flight; see `core/planner.py`). How much later is `plan_timing`:
- "measured": the wall-clock time the solve took in this process, plus `plan_delay_s` — the planner's cost reaches
  the agents (a plan can go stale, be cut or dropped), but the run is no longer reproducible;
- "fixed": `plan_delay_s` alone (0 by default) — deterministic.
Sessions replay the closed-loop contract of `workloads/model.py`.

Two models: `small_nodes` nodes named `small-NN` with `small_profile` serve `SMALL_MODEL`, the `node-NN` nodes
`MAIN_MODEL`. Each node's `NodeUpdate` names the models it serves, every one of them as the live fleet watch feeds
its scrapes (`web/fleet_watch.py`), and every acquire names its call's model, so the core places each call on a node
serving it for every policy (`core/eligibility.py`). A side call (`model.py`) is acquired inside the tool phase of
the next main-model call: the phase's `ToolStart` is sent after the last main-model answer and its `ToolEnd` when the
next main-model call is wanted. A workload with a model the fleet does not serve is refused before the run.

KV evidence (`kv_evidence=True`, `tao sim --kv-events`): the nodes publish KV events with session ids, and the
coordinator receives the residency they imply as `CacheResidency` events every `kv_flush_interval_s`, checked
whenever a node steps (`kv_evidence.py`) — the cache credit the live coordinator has when the fleet configuration
names the nodes' KV-event endpoints. Without it the credit comes from usage at the end of each call.

Chats (`ScriptMeta.chat`): registered, one call acquired, closed with its answer like any session whose last
answer arrived — no tool phase is opened after it. Their TTFT and latency are recorded apart, and they are left out
of the task latency (`metrics.py`); a workload with chats reports the chat figures.

Calls submitted to a node during one heap entry (the sessions a plan admits together, the first sessions at time 0)
join the node's next step together, as they would join vLLM's next scheduler step: a node is asked for its next
event time only after the entry is done, because asking commits the step.

Determinism: the heap orders by (time, insertion number); engines, coordinator and workload are deterministic, so
with "fixed" plan timing a seed gives the same simulated run and only the wall-clock planner timings differ between
runs. `run(timing=False)` promises a reproducible result and so refuses "measured" plan timing.

A run ends when nothing is left to happen; a session that has not finished then (left waiting for a place that no
event will give it) makes the run fail rather than report figures without it.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ..core.actions import Interrupt, Route, StartPlan
from ..core.coordinator import Coordinator
from ..core.events import Acquire, Close, Event, LlmEnd, LlmFirstToken, NodeUpdate, Register, Tick, ToolEnd, ToolStart
from ..core.model import AgentProfile, BlockRun, DurationHints
from ..core.plan import PlanFinished
from ..core.policies import make_policy
from ..core.policies.base import Feed
from ..core.settings import CoreSettings
from ..core.signals.cache_credit import node_half_life
from ..core.snapshot import PlanJob, Snapshot
from .feeds import DEFAULT_SCRAPE_INTERVAL_S, RouterFeeds
from .kv_evidence import KvEvidenceFeed
from .metrics import Recorder, RunMetrics, kv_blocks_after, recomputed_tokens, summarize, with_chats, with_side_calls
from .node import Finished, FirstToken, NodeEngine, NodeProfile, NodeRequest, Preempted, RequestRejected
from .plan_timing import PLAN_TIMINGS, PlanTiming
from .workloads import MAIN_MODEL, SMALL_MODEL, SessionScript, Workload


@dataclass
class _Session:
    """One live session of the replay: where it is in its script, and what it waits for."""

    id: str
    script: SessionScript
    parent: _Session | None
    started_at: float
    index: int = 0
    """The request sent next, or in flight."""
    wanted_at: float = 0.0
    after_tool: bool = False
    node: str = ""
    blocking_children: int = 0
    waiting_for_children: bool = False
    finishing: bool = False
    tool_call: str = ""
    """The call id of the tool phase under way (a side call runs inside it); empty between phases."""
    side_in_phase: bool = False
    """A side call ran in the tool phase under way: its duration is then measured by the core, not the gap."""
    context_runs: tuple[BlockRun, ...] = ()
    """The KV blocks of its context after its last answered call (that call's prompt and output blocks): what some
    node computed for it before."""
    interrupted: bool = False
    """A plan took its place away since its last answered call."""


@dataclass(order=True)
class _Entry:
    at: float
    order: int
    action: Callable[[], None] = field(compare=False)


class FleetSimulation:
    def __init__(
        self,
        workload: Workload,
        policy: str,
        concurrency: int,
        profile: NodeProfile,
        nodes: int,
        *,
        settings: CoreSettings | None = None,
        plan_timing: PlanTiming = "fixed",
        plan_delay_s: float = 0.0,
        progress: Callable[[int], None] | None = None,
        seed: int = 0,
        scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        small_profile: NodeProfile | None = None,
        small_nodes: int = 0,
        kv_evidence: bool = False,
    ) -> None:
        if concurrency < 1 or nodes < 1:
            raise ValueError("concurrency and nodes must be at least 1")
        if small_nodes < 0 or (small_nodes and small_profile is None):
            raise ValueError("small_nodes must be at least 0, and small nodes need a small_profile")
        if plan_timing not in PLAN_TIMINGS or plan_delay_s < 0:
            raise ValueError(f"plan_timing must be one of {PLAN_TIMINGS} and plan_delay_s at least 0")
        self.workload = workload
        self.policy = policy
        self.settings = settings or CoreSettings(lease_ttl_s=1e12)
        chosen = make_policy(policy, seed)
        self.coordinator = Coordinator(chosen, self.settings, inline_planning=False)
        kv_events = kv_evidence or Feed.KV_EVENTS in chosen.inputs
        self.engines = {f"node-{k:02d}": NodeEngine(profile, kv_events=kv_events) for k in range(nodes)}
        self.node_models = dict.fromkeys(self.engines, MAIN_MODEL)
        """The model each node serves (its role, `workloads/model.py`)."""
        if small_nodes and small_profile is not None:
            for k in range(small_nodes):
                self.engines[f"small-{k:02d}"] = NodeEngine(small_profile, kv_events=kv_events)
                self.node_models[f"small-{k:02d}"] = SMALL_MODEL
        _check_models_served(workload, set(self.node_models.values()))
        served = {node_id: frozenset({model}) for node_id, model in self.node_models.items()}
        self.feeds = RouterFeeds(chosen.inputs, self.engines, scrape_interval_s, served)
        self.kv_evidence = KvEvidenceFeed(self.engines) if kv_evidence else None
        self.concurrency = concurrency
        self.plan_timing = plan_timing
        self.plan_delay_s = plan_delay_s
        self.progress = progress
        self.on_snapshot = on_snapshot
        self.recorder = Recorder()
        self._heap: list[_Entry] = []
        self._order = itertools.count()
        self._sessions: dict[str, _Session] = {}
        self._requests: dict[str, _Session] = {}
        self._side_requests: set[str] = set()
        self._node_wake: dict[str, float | None] = dict.fromkeys(self.engines)
        self._nodes_to_wake: set[str] = set()
        self._tick_at: float | None = None
        self._next_script = 0
        self._now = 0.0
        self.events = 0
        """Heap entries processed: node steps, session gaps, plan deliveries, ticks."""
        for node_id, engine in self.engines.items():
            node = engine.profile
            cpu_tokens = node.cpu_tier.num_blocks * node.block_size if node.cpu_tier else 0
            capacity = node.reported_capacity_tokens
            update = NodeUpdate(
                node_id, capacity, node.block_size, cpu_capacity_tokens=cpu_tokens, models=served[node_id]
            )
            self.coordinator.on_event(update, 0.0)

    # -- the loop --------------------------------------------------------------------------------------------------

    def run(self, timing: bool = True) -> RunMetrics:
        """Replay the whole workload. With `timing=False` wall-clock figures are left out so that two runs of one
        seed give the same metrics; measured plan timing would break that promise, so it is refused."""
        if not timing and self.plan_timing == "measured":
            raise ValueError("timing=False needs a deterministic plan delay; measured plan timing varies between runs")
        for _ in range(min(self.concurrency, len(self.workload.scripts))):
            self._start_next(0.0)
        self._wake_nodes()
        while self._heap:
            entry = heapq.heappop(self._heap)
            self._now = entry.at
            entry.action()
            self._wake_nodes()
            self._schedule_tick()
            self.events += 1
        if self._sessions:
            stuck = sorted(self._sessions)
            raise RuntimeError(
                f"{self.policy}: {len(stuck)} sessions never finished ({', '.join(stuck[:3])}…): nothing was left to "
                "happen while they waited; their figures would be missing from the run"
            )
        counters = [engine.counters() for engine in self.engines.values()]
        preemptions = sum(c.num_preemptions for c in counters)
        coordinator = self.coordinator
        metrics = summarize(self.recorder, preemptions, timing, coordinator.plan_stats, coordinator.mean_horizon_s())
        tps = [engine.profile.step.tp for engine in self.engines.values()]
        metrics = replace(
            metrics,
            cpu_hit_tokens=sum(c.prompt_tokens_by_source.get("external_kv_transfer", 0) for c in counters),
            pcie_load_s=sum(c.kv_offload_load_seconds / tp for c, tp in zip(counters, tps, strict=True)),
        )
        if SMALL_MODEL in self.node_models.values():
            metrics = with_side_calls(metrics, self.recorder)
        if any(script.meta.chat for script in self.workload.scripts):
            metrics = with_chats(metrics, self.recorder)
        return self._with_half_lives(metrics)

    def _with_half_lives(self, metrics: RunMetrics) -> RunMetrics:
        core = self.coordinator
        nodes = sorted(core.nodes.items())
        return replace(
            metrics,
            credit_half_life_s={name: node_half_life(node, core.settings) for name, node in nodes},
            credit_half_life_fit_s={name: core.half_life_fit(name) for name, _ in nodes},
            retention_observations={name: core.retention_observations(name) for name, _ in nodes},
        )

    def _at(self, at: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._heap, _Entry(at, next(self._order), action))

    def _event(self, event: Event | PlanFinished) -> None:
        now = self._now
        for action in self.coordinator.on_event(event, now):
            if isinstance(action, Route):
                self._submit(action.session_id, action.node)
            elif isinstance(action, StartPlan):
                self._start_plan(action.job, now)
            elif isinstance(action, Interrupt):
                self.recorder.interruptions += 1
                if (session := self._sessions.get(action.session_id)) is not None:
                    session.interrupted = True

    def _start_plan(self, job: PlanJob, now: float) -> None:
        """Solve `job` now and deliver its plan after the virtual time that planning is charged."""
        if self.on_snapshot is not None:
            self.on_snapshot(job.snapshot)
        started = time.perf_counter()
        plan = job.solve()
        solve_s = time.perf_counter() - started
        self.recorder.plan_ms.append(solve_s * 1e3)
        delay = self.plan_delay_s + (solve_s if self.plan_timing == "measured" else 0.0)
        finished = PlanFinished(job.id, plan)
        self._at(now + delay, lambda: self._event(finished))

    def _schedule_tick(self) -> None:
        wake = self.coordinator.next_wakeup()
        if wake is None or (self._tick_at is not None and self._tick_at <= wake):
            return
        self._tick_at = at = max(wake, self._now)
        self._at(at, lambda: self._tick(at))

    def _tick(self, at: float) -> None:
        if self._tick_at != at:
            return
        self._tick_at = None
        self._event(Tick())

    # -- sessions --------------------------------------------------------------------------------------------------

    def _start_next(self, now: float) -> None:
        if self._next_script >= len(self.workload.scripts):
            return
        script = self.workload.scripts[self._next_script]
        self._next_script += 1
        self._start(script, None, now)

    def _start(self, script: SessionScript, parent: _Session | None, now: float) -> None:
        session_id = script.id if parent is None else f"{parent.id}/{script.id}"
        session = _Session(session_id, script, parent, started_at=now, wanted_at=now)
        self._sessions[session_id] = session
        first = script.requests[0].prompt.tokens
        root = session
        while root.parent is not None:
            root = root.parent
        context = AgentProfile(
            model=script.model,
            harness=script.meta.source,
            shared_prefix_tokens=script.meta.shared_prefix_tokens,
            workflow_id=root.id,
            parent_session_id="" if parent is None else parent.id,
        )
        self._event(Register(session_id, context, expected_input_tokens=first))
        self._acquire(session)

    def _submit(self, session_id: str, node_id: str) -> None:
        session = self._sessions[session_id]
        spec = session.script.requests[session.index]
        request_id = f"{session_id}#{session.index}"
        session.node = node_id
        request = NodeRequest(
            request_id,
            spec.prompt,
            max(1, spec.output_tokens),
            session_id=session_id,
            output_block_runs=spec.output_block_runs,
        )
        self.recorder.calls_by_node_model[(node_id, spec.model)] += 1
        if session.script.is_side_call(session.index):
            self._side_requests.add(request_id)
        engine = self.engines[node_id]
        try:
            engine.submit(request, self._now)
        except RequestRejected as rejected:
            self.recorder.rejected += 1
            self._event(LlmEnd(session_id, node_id, error=str(rejected)))
            self._answered(session, self._now)
            return
        self._requests[request_id] = session
        self._nodes_to_wake.add(node_id)

    def _wake_nodes(self) -> None:
        for node_id in sorted(self._nodes_to_wake):
            wake = self.engines[node_id].next_event_time()
            if wake is not None and wake != self._node_wake[node_id]:
                self._node_wake[node_id] = wake
                self._at(wake, partial(self._advance_node, node_id, wake))
        self._nodes_to_wake.clear()

    def _advance_node(self, node_id: str, at: float) -> None:
        if self._node_wake[node_id] != at:
            return
        self._node_wake[node_id] = None
        for event in self.engines[node_id].advance(at):
            if isinstance(event, FirstToken):
                self._first_token(node_id, event)
            elif isinstance(event, Finished):
                self._finished(node_id, event)
            elif not isinstance(event, Preempted):  # a KV event
                if self.kv_evidence is not None:
                    self.kv_evidence.observe(node_id, event)
                if self.feeds.kv_events and (kv_event := self.feeds.kv_event(node_id, event)) is not None:
                    self._event(kv_event)
        if self.kv_evidence is not None:
            for residency in self.kv_evidence.flush(self._now, self.coordinator.sessions):
                self._event(residency)
        self._nodes_to_wake.add(node_id)

    def _first_token(self, node_id: str, event: FirstToken) -> None:
        session = self._requests[event.request_id]
        if self.feeds.first_token:
            self._event(LlmFirstToken(session.id, node_id))
        waited = event.time - session.wanted_at
        self.recorder.ttfts.append(waited)
        if event.request_id in self._side_requests:
            self.recorder.side_ttfts.append(waited)
        if session.script.meta.chat:
            self.recorder.chat_ttfts.append(waited)
        self.recorder.engine_ttfts.append(event.ttft)
        if session.after_tool:
            self.recorder.tool_end_to_first_token.append(waited)

    def _finished(self, node_id: str, event: Finished) -> None:
        session = self._requests.pop(event.request_id)
        recorder = self.recorder
        side = event.request_id in self._side_requests
        recorder.requests += 1
        recorder.side_calls += side
        recorder.chats += session.script.meta.chat
        self._side_requests.discard(event.request_id)
        recorder.small_model_calls += self.node_models[node_id] == SMALL_MODEL
        recorder.prompt_tokens += event.prompt_tokens
        recorder.cached_tokens += event.cached_tokens
        recorder.completion_tokens += event.completion_tokens
        if not side:  # a side call's prompt is not the session's context
            spec = session.script.requests[session.index]
            block_size = self.engines[node_id].profile.block_size
            recomputed = recomputed_tokens(event, spec.prompt, session.context_runs, block_size)
            recorder.recomputed_tokens += recomputed
            recorder.recomputed_after_interruption_tokens += recomputed if session.interrupted else 0
            session.interrupted = False
            session.context_runs = kv_blocks_after(
                event, (*spec.prompt.block_runs, *spec.output_block_runs), block_size
            )
        self._event(
            LlmEnd(
                session.id,
                node_id,
                event.prompt_tokens,
                event.cached_tokens,
                event.completion_tokens,
                event.ttft,
                event.time - event.arrival_time,
            )
        )
        if self.progress is not None:
            self.progress(1)
        self._answered(session, event.time)

    def _answered(self, session: _Session, now: float) -> None:
        """The answer to `session.index` arrived: launch its children, then start the gap or finish."""
        answered = session.index
        for launch in session.script.subagents:
            if launch.after_request == answered:
                if launch.blocks_parent:
                    session.blocking_children += 1
                self._at(now + launch.delay_s, lambda s=launch.script: self._start(s, session, self._now))  # type: ignore[misc]
        session.index += 1
        if session.index >= len(session.script.requests):
            session.finishing = True
            if session.blocking_children == 0:
                self._finish(session)
            return
        spec = session.script.requests[session.index]
        if not session.tool_call:  # a side call's answer leaves the phase it ran in going
            session.tool_call = f"call-{session.index}"
            self._event(
                ToolStart(session.id, session.tool_call, spec.tool, spec.hints or DurationHints(), spec.program)
            )
        if session.blocking_children:
            session.waiting_for_children = True
        else:
            self._at(now + spec.gap_before_s, lambda: self._depart(session))

    def _depart(self, session: _Session) -> None:
        spec = session.script.requests[session.index]
        if session.script.is_side_call(session.index):
            session.side_in_phase = True
        else:
            duration = None if session.side_in_phase else spec.gap_before_s
            self._event(ToolEnd(session.id, session.tool_call, duration))
            session.tool_call, session.side_in_phase = "", False
        session.wanted_at = self._now
        session.after_tool = spec.gap_kind == "tool"
        self._acquire(session)

    def _acquire(self, session: _Session) -> None:
        """Ask for the session's next request (a scrape first, for the routers that read one)."""
        for update in self.feeds.scrape(self._now):
            self._event(update)
        spec = session.script.requests[session.index]
        prompt = spec.prompt
        self._event(
            Acquire(
                session.id, expected_input_tokens=prompt.tokens, prompt_block_runs=prompt.block_runs, model=spec.model
            )
        )

    def _finish(self, session: _Session) -> None:
        now = self._now
        self._event(Close(session.id))
        del self._sessions[session.id]
        self.recorder.makespan = max(self.recorder.makespan, now)
        parent = session.parent
        if parent is None:
            latencies = self.recorder.chat_latencies if session.script.meta.chat else self.recorder.task_latencies
            latencies.append(now - session.started_at)
            self._start_next(now)
            return
        launch = next(launch for launch in parent.script.subagents if launch.script is session.script)
        if not launch.blocks_parent:
            return
        parent.blocking_children -= 1
        if parent.blocking_children:
            return
        if parent.finishing:
            self._finish(parent)
        elif parent.waiting_for_children:
            parent.waiting_for_children = False
            gap = parent.script.requests[parent.index].gap_before_s
            self._at(now + gap, lambda: self._depart(parent))


def _check_models_served(workload: Workload, served: set[str]) -> None:
    """Refuse a workload with a call for a model no node of the fleet serves (it would be answered 404 live)."""
    wanted = {request.model for script in workload.scripts for request in script.all_requests()}
    missing = sorted(wanted - served)
    if missing:
        raise ValueError(
            f"the workload has calls for the {', '.join(missing)} model, which no node serves: "
            "give the fleet nodes of that model (small nodes)"
        )


def run_simulation(workload: Workload, policy: str, concurrency: int, **kwargs: Any) -> RunMetrics:
    return FleetSimulation(workload, policy, concurrency, **kwargs).run()
