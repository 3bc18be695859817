"""Scraping one vLLM node: `/metrics` for capacity and load, `/health` for liveness, every few seconds.

A node is reported unhealthy after `unhealthy_after` consecutive failed scrapes (no answer in time, an answer other
than 200, or metrics that do not parse or hold a figure that cannot be true: NaN, ±Inf, out of range, no vLLM series)
and healthy again at the first good one. A scrape whose capacity breaks a rule of `capacity_guard.py` quarantines the
node at once: reported unhealthy with the reason and its last believed capacity. Every failure is named (`kind`, a
bounded label, and a reason for people) and counted; a line is logged when the node's state or its kind of trouble
changes, never once per scrape.

What the node serves (`served_models.py`) is read from its `/v1/models` at the first good scrape, after the node
restarts (a new `process_start`) and every `models_every_scrapes` good scrapes, and travels with every observation;
a failed read keeps the last list, configured models replace the read.

The prefix hit rate is the ratio of the hit and query counter increments since the previous scrape (unchanged when no
request arrived in between). The scrape's cumulative counters travel as the core's `EngineCounters`; the CPU→GPU load
time is divided by the node's `tensor_parallel_size`, since vLLM sums the copy times of its TP workers, which copy
their slices in parallel. The CPU tier's capacity is its last known figure while a scrape does not show it (vLLM
0.33 shows it only from the engine's first step), 0 before it was ever known.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from ..config import FleetConfig, NodeConfig
from ..core.events import EngineCounters
from ..core.model import NodeLoad
from .capacity_guard import CapacityGuard, Quarantine
from .served_models import ModelsUnknown, fetch_served_models
from .vllm_metrics import MetricsFormatError, NodeMetrics, parse_metrics

log = logging.getLogger("tao.fleet")

CONNECTION_LOST = frozenset({"unreachable", "timeout", "health"})
"""Kinds of failure after which the node may come back as a new process (`CapacityGuard.node_lost`)."""


@dataclass(frozen=True, slots=True)
class NodeObservation:
    name: str
    healthy: bool
    capacity_tokens: int | None
    block_size: int = 16
    prefix_hit_rate: float = 0.0
    load: NodeLoad = field(default_factory=NodeLoad)
    cpu_capacity_tokens: int = 0
    """KV tokens the node's CPU offloading pool holds (0: no tier, or not known yet: see `cpu_tier_known`)."""
    counters: EngineCounters | None = None
    reason: str | None = None
    """Why the node is not used: its failed scrapes' reason, or its quarantine's; None while healthy."""
    quarantined: bool = False
    cpu_tier_known: bool = False
    """The node has shown `kv_offload_config_info` at least once: before, its CPU tier is unknown (not "none")."""
    admission_rejections: float = 0.0
    """`vllm:admission_rejections_total`, as last scraped."""
    host_cached_tokens: float = 0.0
    """`vllm:prompt_tokens_cached_by_source_total{source="host"}`, as last scraped."""
    scrape_failures: Mapping[str, int] = field(default_factory=dict)
    """Failed scrapes so far, by kind."""
    quarantines: Mapping[str, int] = field(default_factory=dict)
    """Times the node was quarantined so far, by kind."""
    models: frozenset[str] | None = None
    """The model names the node serves: configured, else its last `/v1/models` read; None while not known."""
    models_failures: Mapping[str, int] = field(default_factory=dict)
    """Failed `/v1/models` reads so far, by kind (`served_models.py`)."""


class ScrapeFailed(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def scrape_failure(error: BaseException, timeout_s: float) -> ScrapeFailed:
    """The kind and reason of a failed scrape; never an empty reason (some errors print as "")."""
    if isinstance(error, ScrapeFailed):
        return error
    if isinstance(error, MetricsFormatError):
        return ScrapeFailed(error.kind, str(error))
    if isinstance(error, TimeoutError):  # aiohttp's timeouts are TimeoutErrors too
        return ScrapeFailed("timeout", f"no answer within the scrape timeout ({timeout_s:g} s)")
    if isinstance(error, aiohttp.ClientConnectorError):
        return ScrapeFailed("unreachable", f"cannot connect: {error.os_error.strerror or error}")
    if isinstance(error, UnicodeDecodeError):
        return ScrapeFailed("malformed", f"/metrics is not UTF-8 ({error.reason} at byte {error.start})")
    if isinstance(error, aiohttp.ClientError):
        return ScrapeFailed("connection", str(error) or type(error).__name__)
    return ScrapeFailed("malformed", str(error) or type(error).__name__)


class NodePoller:
    def __init__(
        self,
        node: NodeConfig,
        fleet: FleetConfig,
        http: aiohttp.ClientSession,
        report: Callable[[NodeObservation], None],
    ) -> None:
        self.node, self.fleet, self.http, self.report = node, fleet, http, report
        self.failures = 0
        self.hit_rate = 0.0
        self.guard = CapacityGuard(fleet.max_capacity_tokens)
        self.failure_counts: Counter[str] = Counter()
        self.quarantine_counts: Counter[str] = Counter()
        self.state: str | None = None
        """What was last logged of the node: None (healthy), "unhealthy:<kind>" or "quarantined:<kind>"."""
        self._previous: NodeMetrics | None = None
        self._cpu_capacity: int | None = None
        self.models: frozenset[str] | None = None if node.models is None else frozenset(node.models)
        self.models_failure_counts: Counter[str] = Counter()
        self._models_epoch: object = None
        """The node process (`process_start`, ranks) whose models were last asked for; None: never asked."""
        self._scrapes_to_models = 0

    async def run(self) -> None:
        while True:
            try:
                await self.scrape_once()
            except Exception:  # a fault in handling one scrape must not end the node's scrapes for good
                log.exception("node %s: a scrape could not be handled", self.node.name)
            await asyncio.sleep(self.fleet.scrape_interval_s)

    async def scrape_once(self) -> None:
        try:
            metrics = await self._scrape()
        except (aiohttp.ClientError, TimeoutError, ValueError, ScrapeFailed) as error:  # ValueError: bad text
            self._failed(scrape_failure(error, self.fleet.scrape_timeout_s))
            return
        epoch = (metrics.process_start, metrics.ranks)
        quarantine = self.guard.check(metrics.capacity_tokens, metrics.cpu_capacity_tokens, epoch)
        if quarantine is not None:
            self._quarantined(quarantine, metrics)
            return
        if self.state is not None:
            log.info("node %s is healthy again", self.node.name)
        self.state, self.failures = None, 0
        self._update_hit_rate(metrics)
        if metrics.cpu_capacity_tokens is not None:
            self._cpu_capacity = metrics.cpu_capacity_tokens
        await self._learn_models(epoch)
        self.report(
            NodeObservation(
                self.node.name,
                healthy=True,
                capacity_tokens=self.node.capacity_tokens or metrics.capacity_tokens,
                block_size=metrics.block_size,
                prefix_hit_rate=self.hit_rate,
                load=NodeLoad(metrics.running, metrics.waiting, min(1.0, metrics.kv_usage), int(metrics.preemptions)),
                cpu_capacity_tokens=self._cpu_capacity or 0,
                counters=self._counters(metrics),
                cpu_tier_known=self._cpu_capacity is not None,
                admission_rejections=metrics.admission_rejections,
                host_cached_tokens=metrics.host_cached_tokens,
                scrape_failures=dict(self.failure_counts),
                quarantines=dict(self.quarantine_counts),
                models=self.models,
                models_failures=dict(self.models_failure_counts),
            )
        )

    async def _learn_models(self, epoch: object) -> None:
        """Ask the node what it serves when due: at its first good scrape, when it runs as a new process, and every
        `models_every_scrapes` good scrapes. A failed read keeps the last list (a node that restarts keeps serving
        what it served, until it says otherwise); configured models are never asked for."""
        if self.node.models is not None:
            return
        self._scrapes_to_models -= 1
        if epoch == self._models_epoch and self._scrapes_to_models > 0:
            return
        self._models_epoch, self._scrapes_to_models = epoch, self.fleet.models_every_scrapes
        try:
            served = await fetch_served_models(self.http, self.node.url, self.fleet.scrape_timeout_s)
        except ModelsUnknown as error:
            self.models_failure_counts[error.kind] += 1
            log.log(
                logging.WARNING if self.models is None else logging.DEBUG,
                "node %s: its served models are not known (%s)",
                self.node.name,
                error.reason,
            )
            return
        if served.names != self.models:
            log.info("node %s serves %s", self.node.name, ", ".join(sorted(served.names)))
            self.models = served.names

    def _failed(self, failure: ScrapeFailed) -> None:
        self.failures += 1
        self.failure_counts[failure.kind] += 1
        if failure.kind in CONNECTION_LOST:
            self.guard.node_lost()
        if self.failures < self.fleet.unhealthy_after:
            log.debug("node %s: scrape failed (%s)", self.node.name, failure.reason)
            return
        self._log_state(f"unhealthy:{failure.kind}", "node %s unreachable or unhealthy: %s", failure.reason)
        self.report(self._unhealthy(self.node.capacity_tokens, failure.reason, quarantined=False))

    def _quarantined(self, quarantine: Quarantine, metrics: NodeMetrics) -> None:
        self.failures = 0
        state = f"quarantined:{quarantine.kind}"
        if state != self.state:
            self.quarantine_counts[quarantine.kind] += 1
        self._log_state(state, "node %s quarantined: %s", quarantine.reason)
        capacity = self.node.capacity_tokens or self.guard.trusted
        self.report(self._unhealthy(capacity, quarantine.reason, quarantined=True, block_size=metrics.block_size))

    def _log_state(self, state: str, message: str, reason: str) -> None:
        if state != self.state:
            log.warning(message, self.node.name, reason)
            self.state = state

    def _unhealthy(
        self, capacity: int | None, reason: str, *, quarantined: bool, block_size: int = 16
    ) -> NodeObservation:
        previous = self._previous
        return NodeObservation(
            self.node.name,
            healthy=False,
            capacity_tokens=capacity,
            block_size=block_size,
            cpu_capacity_tokens=self._cpu_capacity or 0,
            reason=reason,
            quarantined=quarantined,
            cpu_tier_known=self._cpu_capacity is not None,
            admission_rejections=previous.admission_rejections if previous else 0.0,
            host_cached_tokens=previous.host_cached_tokens if previous else 0.0,
            scrape_failures=dict(self.failure_counts),
            quarantines=dict(self.quarantine_counts),
            models=self.models,
            models_failures=dict(self.models_failure_counts),
        )

    def _counters(self, metrics: NodeMetrics) -> EngineCounters:
        return EngineCounters(
            prefill_tokens_computed=int(metrics.prompt_computed),
            prefill_seconds=metrics.prefill_seconds,
            decode_tokens=int(metrics.decode_tokens),
            decode_seconds=metrics.decode_seconds,
            generation_tokens=int(metrics.generation_tokens),
            offload_load_tokens=int(metrics.prompt_loaded),
            offload_load_seconds=metrics.offload_load_seconds / self.node.tensor_parallel_size,
            kv_fetch_waiting=metrics.kv_fetch_waiting,
        )

    async def _scrape(self) -> NodeMetrics:
        timeout = aiohttp.ClientTimeout(total=self.fleet.scrape_timeout_s)
        async with self.http.get(f"{self.node.url}/health", timeout=timeout) as health:
            if health.status != 200:
                raise ScrapeFailed("health", f"/health answered {health.status}")
        async with self.http.get(f"{self.node.url}/metrics", timeout=timeout) as response:
            if response.status != 200:
                raise ScrapeFailed("http", f"/metrics answered {response.status}")
            return parse_metrics(await response.text())

    def _update_hit_rate(self, metrics: NodeMetrics) -> None:
        previous, self._previous = self._previous, metrics
        if previous is None:
            queries, hits = metrics.prefix_queries, metrics.prefix_hits
        else:
            queries = metrics.prefix_queries - previous.prefix_queries
            hits = metrics.prefix_hits - previous.prefix_hits
        if queries > 0:
            self.hit_rate = min(1.0, max(0.0, hits / queries))
