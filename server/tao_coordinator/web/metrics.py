"""The coordinator's own `/metrics` (Prometheus text format, via prometheus-client, in a private registry).

Event-driven figures are counters and histograms updated as things happen (`ServiceMetrics.on_event` sees every
event the core accepted with the actions it returned; `tool_ended` sees a tool's prediction next to its duration);
figures about the current state (sessions by phase, planner outcomes and methods, node capacity and use) are read
from the core at scrape time by a collector, so they can never drift from the state they describe. The core itself
knows nothing of Prometheus.

Names follow prometheus-client and vLLM: a `tao_` prefix, base units in the name (`_seconds`, `_tokens`), counters
exposed with `_total`. The policy is not a label of every series: `tao_info{policy}` carries it, to be joined on
`instance` (see integrations/grafana/). Label values are bounded: nodes come from the configuration, tool names are
normalised as the forecast learns them (`normalise_tool`) and capped at `TOOL_LABELS` distinct ones (then `other`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Histogram, Info, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .. import __version__
from ..core.actions import Action, Admit, Expired, Interrupt, Route
from ..core.events import Acquire, Close, Event, LlmEnd, Register, ToolStart
from ..core.forecast.keys import normalise_tool
from ..core.model import AgentSession, NodeLoad, Phase, RunningTool
from ..core.plan import PlanFinished
from ..fleet.kv_index import NodeKvIndex
from ..fleet.poller import NodeObservation
from ..store import HistoryStore
from .core_slot import CoreSlot
from .fleet_metrics import fleet_families

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ESTIMATE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.8, 1.25, 2, 4, 10)
TOOL_LABELS = 50
"""Distinct `tool` label values; later tools are counted as `other`."""


class StateCollector(Collector):
    """The figures about the current state, read at scrape time from the current core (`core_slot.py`) and the
    service's parts named here."""

    def __init__(
        self,
        core: CoreSlot,
        nodes: Iterable[str],
        kv_index: Callable[[str], NodeKvIndex | None],
        store: HistoryStore | None,
        live_tokens: Callable[[], Mapping[str, int]],
    ) -> None:
        self.core = core
        self.nodes = nodes
        self.kv_index = kv_index
        self.store = store
        self.live_tokens = live_tokens
        self.node_load: dict[str, NodeObservation] = {}

    def observe_node(self, observation: NodeObservation) -> None:
        self.node_load[observation.name] = observation

    def collect(self) -> Iterator[Metric]:
        core = self.core.coordinator
        phases = Counter(session.phase.name.lower() for session in core.sessions.values())
        sessions = GaugeMetricFamily("tao_sessions", "Live sessions by phase.", labels=["phase"])
        for phase in Phase:
            if phase is not Phase.CLOSED:
                sessions.add_metric([phase.name.lower()], phases.get(phase.name.lower(), 0))
        yield sessions
        stats = core.plan_stats
        plans = CounterMetricFamily("tao_plans", "Plans finished, by outcome.", labels=["outcome"])
        for outcome, count in (("applied", stats.applied), ("cut", stats.cut), ("dropped", stats.dropped)):
            plans.add_metric([outcome], count)
        yield plans
        yield CounterMetricFamily(
            "tao_plans_uncertified", "Plans the solver did not prove optimal.", value=stats.uncertified
        )
        methods = CounterMetricFamily(
            "tao_plans_solved", "Plans finished, by how the solver decided (see core/plan.py).", labels=["method"]
        )
        for method, count in sorted(stats.by_method.items()):
            methods.add_metric([method], count)
        yield methods
        yield from self._nodes()
        yield from fleet_families(self.nodes, self.node_load, self.kv_index, core.sessions.values())
        yield from self._half_lives()
        yield from self._forecast()
        if (store := self.store) is not None:
            writable = float(store.failing is None)
            yield GaugeMetricFamily(
                "tao_store_writable", "1 while the tool history store takes writes.", value=writable
            )
        tokens = GaugeMetricFamily(
            "tao_token_live_sessions", "Live sessions by the API token that registered them.", labels=["token"]
        )
        for token, live in self.live_tokens().items():
            tokens.add_metric([token], live)
        yield tokens

    def _forecast(self) -> Iterator[Metric]:
        core, history = self.core.coordinator, self.core.history
        yield GaugeMetricFamily(
            "tao_readiness_horizon_seconds", "The horizon H readiness is forecast for now.", value=core.horizon_s
        )
        yield GaugeMetricFamily(
            "tao_forecast_levels",
            "Learned tool-duration levels kept (capped at forecast_max_levels).",
            value=history.levels,
        )
        yield CounterMetricFamily(
            "tao_forecast_levels_evicted",
            "Learned levels dropped by the cap, least recently used first.",
            value=history.evicted,
        )

    def _nodes(self) -> Iterator[Metric]:
        core = self.core.coordinator
        used = core.used_tokens()
        capacity = GaugeMetricFamily("tao_node_capacity_tokens", "KV capacity of each node.", labels=["node"])
        use = GaugeMetricFamily("tao_node_used_tokens", "KV tokens held by admitted sessions.", labels=["node"])
        healthy = GaugeMetricFamily("tao_node_healthy", "1 when the node answers and is healthy.", labels=["node"])
        running = GaugeMetricFamily("tao_node_running_requests", "vLLM's running batch, as scraped.", labels=["node"])
        waiting = GaugeMetricFamily("tao_node_waiting_requests", "vLLM's waiting queue, as scraped.", labels=["node"])
        kv_usage = GaugeMetricFamily(
            "tao_node_kv_usage", "vLLM's KV-cache usage in [0, 1], as scraped.", labels=["node"]
        )
        preemptions = CounterMetricFamily("tao_node_preemptions", "vLLM's preemptions, as scraped.", labels=["node"])
        for name, node in sorted(core.nodes.items()):
            capacity.add_metric([name], node.capacity_tokens)
            use.add_metric([name], used.get(name, 0))
            healthy.add_metric([name], 1.0 if node.healthy else 0.0)
            load = self.node_load[name].load if name in self.node_load else NodeLoad()
            running.add_metric([name], load.running)
            waiting.add_metric([name], load.waiting)
            kv_usage.add_metric([name], load.kv_usage)
            preemptions.add_metric([name], load.preemptions)
        yield from (capacity, use, healthy, running, waiting, kv_usage, preemptions)

    def _half_lives(self) -> Iterator[Metric]:
        core = self.core.coordinator
        used = GaugeMetricFamily(
            "tao_node_credit_half_life_seconds",
            "Half-life cache credit decays with on each node: fitted, or the configured one; absent without decay.",
            labels=["node"],
        )
        fitted = GaugeMetricFamily(
            "tao_node_credit_half_life_fitted_seconds",
            "Half-life fitted from the retention observed on each node, used or not; absent before enough evidence.",
            labels=["node"],
        )
        observations = CounterMetricFamily(
            "tao_node_retention_observations", "Observations that fed the node's half-life fit.", labels=["node"]
        )
        for name in sorted(core.nodes):
            if (half_life := core.credit_half_life(name)) is not None:
                used.add_metric([name], half_life)
            if (estimate := core.half_life_fit(name)) is not None:
                fitted.add_metric([name], estimate)
            observations.add_metric([name], core.retention_observations(name))
        yield from (used, fitted, observations)


class _ToolNames:
    """Tool names as label values: normalised, at most `limit` distinct ones, `other` after that."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, tool: str) -> str:
        name = normalise_tool(tool)[:64]
        if name not in self.seen:
            if len(self.seen) >= self.limit:
                return "other"
            self.seen.add(name)
        return name


class ServiceMetrics:
    """The event-driven series, in the coordinator's own registry, after `state`: the figures read at scrape time."""

    def __init__(self, policy: str, state: StateCollector) -> None:
        self.registry = CollectorRegistry()
        self.state = state
        self.registry.register(state)
        self._tool = _ToolNames(TOOL_LABELS)
        self._wanting: dict[str, float] = {}
        """Sessions whose acquire is waiting for a place, and since when."""
        registry = self.registry
        Info("tao", "The coordinator's policy and version.", registry=registry).info(
            {"policy": policy, "version": __version__}
        )
        self.sessions_registered = PromCounter("tao_sessions_registered", "Sessions registered.", registry=registry)
        self.registrations_refused = PromCounter(
            "tao_registrations_refused",
            "Registrations refused (429) by a cap of their API token: max_live_sessions or registrations_per_s.",
            ["token", "cap"],
            registry=registry,
        )
        self.sessions_closed = PromCounter(
            "tao_sessions_closed", "Sessions ended: closed by the client, or expired.", ["reason"], registry=registry
        )
        self.admissions = PromCounter(
            "tao_admissions",
            "Places granted, by node and kind: planned (by a plan) or fast (at the acquire, without a plan).",
            ["node", "kind"],
            registry=registry,
        )
        self.interruptions = PromCounter("tao_interruptions", "Places taken away.", ["node"], registry=registry)
        self.llm_calls = PromCounter(
            "tao_llm_calls",
            "LLM calls ended, by node and outcome (ok or error).",
            ["node", "outcome"],
            registry=registry,
        )
        self.tool_starts = PromCounter("tao_tool_starts", "Tool calls started.", ["tool"], registry=registry)
        self.tool_ends = PromCounter(
            "tao_tool_ends", "Tool calls ended, by status (ok, error, timeout).", ["tool", "status"], registry=registry
        )
        self.store_refused = PromCounter(
            "tao_store_refused_writes",
            "Tool ends refused (503): the tool history store could not take them.",
            registry=registry,
        )
        self.plan_seconds = Histogram(
            "tao_plan_seconds", "Time to solve one plan.", buckets=LATENCY_BUCKETS, registry=registry
        )
        self.acquire_wait_seconds = Histogram(
            "tao_acquire_wait_seconds",
            "Time one acquire request waited for its answer (a client asks again after a `waiting` answer).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.llm_wait_seconds = Histogram(
            "tao_llm_wait_seconds",
            "Time from a session's acquire to its place on a node, over every re-asked acquire: 0 when it held one.",
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.estimator_error_seconds = Histogram(
            "tao_estimator_abs_error_seconds",
            "|predicted − actual| tool duration.",
            ["tool"],
            buckets=ESTIMATE_BUCKETS,
            registry=registry,
        )
        self.estimator_ratio = Histogram(
            "tao_estimator_ratio",
            "Predicted / actual tool duration (actual at least 1 ms); 1 is exact.",
            ["tool"],
            buckets=RATIO_BUCKETS,
            registry=registry,
        )
        self.tool_seconds = Histogram(
            "tao_tool_duration_seconds", "Tool durations.", ["tool"], buckets=ESTIMATE_BUCKETS, registry=registry
        )

    def on_event(
        self, event: Event | PlanFinished, actions: list[Action], now: float, sessions: Mapping[str, AgentSession]
    ) -> None:
        """Count an event the core accepted at `now`, and the actions it returned; `sessions`: the core's after it."""
        match event:
            case Register():
                self.sessions_registered.inc()
            case Close():
                self.sessions_closed.labels("closed").inc()
                self._wanting.pop(event.session_id, None)
            case ToolStart():
                self.tool_starts.labels(self._tool(event.tool)).inc()
            case LlmEnd():
                self.llm_calls.labels(event.node_id, "ok" if event.error is None else "error").inc()
            case Acquire():
                session = sessions.get(event.session_id)
                routed = any(isinstance(action, Route) and not action.side for action in actions)
                if routed and session is not None and session.node is not None and session.placed_at == now:
                    self.admissions.labels(session.node, "fast").inc()  # it held no place there before
                if not routed:
                    self._wanting.setdefault(event.session_id, now)
        for action in actions:
            match action:
                case Admit():
                    self.admissions.labels(action.node, "planned").inc()
                case Interrupt():
                    self.interruptions.labels(action.node).inc()
                case Route(side=False):  # a side call waits for no place
                    self.llm_wait_seconds.observe(now - self._wanting.pop(action.session_id, now))
                case Expired():
                    self.sessions_closed.labels("expired").inc()
                    self._wanting.pop(action.session_id, None)

    def tool_ended(self, running: RunningTool, duration: float, status: str) -> None:
        tool = self._tool(running.tool)
        predicted = running.predicted_end - running.started_at
        self.tool_ends.labels(tool, status).inc()
        self.tool_seconds.labels(tool).observe(duration)
        self.estimator_error_seconds.labels(tool).observe(abs(predicted - duration))
        self.estimator_ratio.labels(tool).observe(predicted / max(duration, 0.001))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
