"""Scraping one vLLM node: `/metrics` for capacity and load, `/health` for liveness, every few seconds.

A node is reported unhealthy after `unhealthy_after` consecutive failures (no answer, an answer other than 200 from
`/health`, or unparseable metrics) and healthy again at the first success. The prefix hit rate is the ratio of the
hit and query counter increments since the previous scrape (unchanged when no request arrived in between).
The scrape's cumulative counters travel as the core's `EngineCounters`; the CPU→GPU load time is divided by the
node's `tensor_parallel_size`, since vLLM sums the copy times of its TP workers, which copy their slices in parallel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from ..config import FleetConfig, NodeConfig
from ..core.events import EngineCounters
from .vllm_metrics import NodeMetrics, parse_metrics

log = logging.getLogger("tao.fleet")


@dataclass(frozen=True, slots=True)
class NodeObservation:
    name: str
    healthy: bool
    capacity_tokens: int | None
    block_size: int = 16
    prefix_hit_rate: float = 0.0
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    preemptions: float = 0.0
    """`vllm:num_preemptions_total` as scraped (a counter: it only grows while the node runs)."""
    cpu_capacity_tokens: int = 0
    """KV tokens the node's CPU offloading pool holds (0: no tier)."""
    counters: EngineCounters | None = None


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
        self._previous: NodeMetrics | None = None

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
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:  # ValueError: MetricsFormatError, bad UTF-8
            self.failures += 1
            if self.failures == self.fleet.unhealthy_after:
                log.warning("node %s unreachable or unhealthy: %s", self.node.name, error or type(error).__name__)
            if self.failures >= self.fleet.unhealthy_after:
                self.report(NodeObservation(self.node.name, healthy=False, capacity_tokens=self.node.capacity_tokens))
            return
        if self.failures >= self.fleet.unhealthy_after:
            log.info("node %s is healthy again", self.node.name)
        self.failures = 0
        self._update_hit_rate(metrics)
        self.report(
            NodeObservation(
                self.node.name,
                healthy=True,
                capacity_tokens=self.node.capacity_tokens or metrics.capacity_tokens,
                block_size=metrics.block_size,
                prefix_hit_rate=self.hit_rate,
                running=metrics.running,
                waiting=metrics.waiting,
                kv_usage=min(1.0, max(0.0, metrics.kv_usage)),
                preemptions=metrics.preemptions,
                cpu_capacity_tokens=metrics.cpu_capacity_tokens,
                counters=self._counters(metrics),
            )
        )

    def _counters(self, metrics: NodeMetrics) -> EngineCounters:
        return EngineCounters(
            prefill_tokens_computed=max(0, int(metrics.prompt_computed)),
            prefill_seconds=max(0.0, metrics.prefill_seconds),
            decode_tokens=max(0, int(metrics.decode_tokens)),
            decode_seconds=max(0.0, metrics.decode_seconds),
            generation_tokens=max(0, int(metrics.generation_tokens)),
            offload_load_tokens=max(0, int(metrics.prompt_loaded)),
            offload_load_seconds=max(0.0, metrics.offload_load_seconds) / self.node.tensor_parallel_size,
            kv_fetch_waiting=metrics.kv_fetch_waiting,
        )

    async def _scrape(self) -> NodeMetrics:
        timeout = aiohttp.ClientTimeout(total=self.fleet.scrape_timeout_s)
        async with self.http.get(f"{self.node.url}/health", timeout=timeout) as health:
            if health.status != 200:
                raise aiohttp.ClientResponseError(health.request_info, (), status=health.status, message="/health")
        async with self.http.get(f"{self.node.url}/metrics", timeout=timeout) as response:
            response.raise_for_status()
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
