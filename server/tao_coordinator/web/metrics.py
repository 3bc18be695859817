"""The coordinator's own `/metrics` (Prometheus text format, via prometheus-client, in a private registry).

Event-driven figures are counters and histograms updated as things happen; figures about the current state
(sessions by phase, planner outcomes, node capacity and use) are read from the core at scrape time by a collector,
so they can never drift from the state they describe.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..core.model import Phase
from ..core.signals.cache_credit import node_half_life
from ..fleet.poller import NodeObservation

if TYPE_CHECKING:
    from .service import CoordinatorService

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ESTIMATE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)


class _StateCollector(Collector):
    def __init__(self, service: CoordinatorService) -> None:
        self.service = service
        self.node_load: dict[str, NodeObservation] = {}

    def collect(self) -> Iterator[Metric]:
        core = self.service.coordinator
        phases = Counter(session.phase.name.lower() for session in core.state.sessions.values())
        sessions = GaugeMetricFamily("tao_sessions", "Live sessions by phase.", labels=["phase"])
        for phase in Phase:
            if phase is not Phase.CLOSED:
                sessions.add_metric([phase.name.lower()], phases.get(phase.name.lower(), 0))
        yield sessions
        stats = core.planner.stats
        plans = CounterMetricFamily("tao_plans", "Plans finished, by outcome.", labels=["outcome"])
        for outcome, count in (("applied", stats.applied), ("cut", stats.cut), ("dropped", stats.dropped)):
            plans.add_metric([outcome], count)
        yield plans
        yield CounterMetricFamily(
            "tao_plans_uncertified", "Plans the solver did not prove optimal.", value=stats.uncertified
        )
        yield from self._nodes()
        yield from self._half_lives()
        yield from self._forecast()

    def _forecast(self) -> Iterator[Metric]:
        core = self.service.coordinator
        yield GaugeMetricFamily(
            "tao_readiness_horizon_seconds", "The horizon H readiness is forecast for now.", value=core.horizon.value_s
        )
        yield GaugeMetricFamily(
            "tao_forecast_levels",
            "Learned tool-duration levels kept (capped at forecast_max_levels).",
            value=core.history.levels,
        )
        yield CounterMetricFamily(
            "tao_forecast_levels_evicted",
            "Learned levels dropped by the cap, least recently used first.",
            value=core.history.evicted,
        )

    def _nodes(self) -> Iterator[Metric]:
        core = self.service.coordinator
        quantum = core.settings.capacity_quantum_tokens
        used = core.state.used_cells(core.settings)
        capacity = GaugeMetricFamily("tao_node_capacity_tokens", "KV capacity of each node.", labels=["node"])
        use = GaugeMetricFamily("tao_node_used_tokens", "KV tokens held by admitted sessions.", labels=["node"])
        healthy = GaugeMetricFamily("tao_node_healthy", "1 when the node answers and is healthy.", labels=["node"])
        running = GaugeMetricFamily("tao_node_running_requests", "vLLM's running batch, as scraped.", labels=["node"])
        waiting = GaugeMetricFamily("tao_node_waiting_requests", "vLLM's waiting queue, as scraped.", labels=["node"])
        kv_usage = GaugeMetricFamily(
            "tao_node_kv_usage", "vLLM's KV-cache usage in [0, 1], as scraped.", labels=["node"]
        )
        preemptions = CounterMetricFamily("tao_node_preemptions", "vLLM's preemptions, as scraped.", labels=["node"])
        for name, node in sorted(core.state.nodes.items()):
            capacity.add_metric([name], node.capacity_tokens)
            use.add_metric([name], used.get(name, 0) * quantum)
            healthy.add_metric([name], 1.0 if node.healthy else 0.0)
            load = self.node_load.get(name)
            running.add_metric([name], load.running if load else 0)
            waiting.add_metric([name], load.waiting if load else 0)
            kv_usage.add_metric([name], load.kv_usage if load else 0.0)
            preemptions.add_metric([name], load.preemptions if load else 0.0)
        yield from (capacity, use, healthy, running, waiting, kv_usage, preemptions)

    def _half_lives(self) -> Iterator[Metric]:
        core = self.service.coordinator
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
        for name, node in sorted(core.state.nodes.items()):
            if (half_life := node_half_life(node, core.settings)) is not None:
                used.add_metric([name], half_life)
            if (estimate := core.half_lives.estimate(name)) is not None:
                fitted.add_metric([name], estimate)
            observations.add_metric([name], core.half_lives.observations(name))
        yield from (used, fitted, observations)


class ServiceMetrics:
    def __init__(self, service: CoordinatorService) -> None:
        self.registry = CollectorRegistry()
        self._state = _StateCollector(service)
        self.registry.register(self._state)
        self.admissions = PromCounter("tao_admissions", "Places granted.", registry=self.registry)
        self.interruptions = PromCounter("tao_interruptions", "Places taken away.", registry=self.registry)
        self.plan_seconds = Histogram(
            "tao_plan_seconds", "Time to solve one plan.", buckets=LATENCY_BUCKETS, registry=self.registry
        )
        self.acquire_wait_seconds = Histogram(
            "tao_acquire_wait_seconds",
            "Time an acquire waited for a place.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.estimator_error_seconds = Histogram(
            "tao_estimator_abs_error_seconds",
            "|predicted − actual| tool duration.",
            buckets=ESTIMATE_BUCKETS,
            registry=self.registry,
        )

    def observe_node(self, observation: NodeObservation) -> None:
        self._state.node_load[observation.name] = observation

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
