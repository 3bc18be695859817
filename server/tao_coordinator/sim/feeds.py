"""What the simulated fleet tells a router beyond session events: the feeds its real system would read.

A policy names the feeds it consumes in `inputs` (`Feed`, `core/policies/base.py`); nothing else is sent, so TAO's runs
are unchanged by routers' needs and each baseline sees only what its real system sees:

Every scrape names the models each node serves (`models`), as the live fleet watch's do.

- `Feed.NODE_LOAD`: a `/metrics` scrape of every node — running and waiting requests, KV usage, preemptions, the size of
  its CPU tier and the cumulative counters the coordinator measures rates from (`EngineCounters`) — sent as
  `NodeUpdate`s before a call is routed when the last scrape is at least `scrape_interval_s` old. A real poller
  scrapes on a fixed period, so its figures are up to one period old when a call arrives; this scrapes on demand, at
  most one period apart, which is never staler. The figures are the engine's at the moment of the scrape: a request
  counts as waiting from its submission, where vLLM's gauge would show it after the next step (at most one step
  fresher).
- `Feed.KV_EVENTS`: every `BlockStored` / `BlockRemoved` / `AllBlocksCleared` of every node, as `KvCacheEvent`s in the
  order the node emitted them (vLLM's `--kv-events-config` stream), each with the node event's `medium` (`"GPU"`, or
  `"CPU"` for the CPU tier's blocks, as vLLM's offloading connector publishes them).
- `Feed.FIRST_TOKEN`: `LlmFirstToken` when a call's first token leaves the node (a router on the token stream sees it).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.events import EngineCounters, KvCacheEvent, NodeUpdate
from ..core.model import NodeLoad
from ..core.policies.base import Feed
from .node import AllBlocksCleared, BlockRemoved, BlockStored, NodeCounters, NodeEngine, NodeEvent

DEFAULT_SCRAPE_INTERVAL_S = 0.05
"""The llm-d/GIE endpoint picker's metrics refresh interval (50 ms), used for every load-reading router."""


def engine_counters(counters: NodeCounters, tp: int) -> EngineCounters:
    """What a `/metrics` scrape of the node shows of its cumulative counters (`EngineCounters`). vLLM sums its TP
    workers' transfer times; one link's busy time is that over `tp`, as the workers copy their slices in parallel."""
    by_source = counters.prompt_tokens_by_source
    return EngineCounters(
        prefill_tokens_computed=by_source.get("local_compute", 0),
        prefill_seconds=counters.request_prefill_seconds,
        decode_tokens=counters.inter_tokens,
        decode_seconds=counters.inter_token_seconds,
        generation_tokens=counters.generation_tokens,
        offload_load_tokens=by_source.get("external_kv_transfer", 0),
        offload_load_seconds=counters.kv_offload_load_seconds / tp,
        kv_fetch_waiting=counters.num_requests_kv_fetch,
    )


class RouterFeeds:
    def __init__(
        self,
        inputs: frozenset[Feed],
        engines: Mapping[str, NodeEngine],
        scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
        models: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.node_load = Feed.NODE_LOAD in inputs
        self.kv_events = Feed.KV_EVENTS in inputs
        self.first_token = Feed.FIRST_TOKEN in inputs
        self.engines = engines
        self.scrape_interval_s = scrape_interval_s
        self._scraped_at: float | None = None
        self.models = models or {}

    def scrape(self, now: float) -> list[NodeUpdate]:
        """The scrape due before routing at `now` (empty when load is not fed or the last one is recent)."""
        if not self.node_load or (self._scraped_at is not None and now - self._scraped_at < self.scrape_interval_s):
            return []
        self._scraped_at = now
        updates = []
        for node_id, engine in self.engines.items():
            counters = engine.counters()
            profile = engine.profile
            updates.append(
                NodeUpdate(
                    node_id,
                    profile.reported_capacity_tokens,
                    profile.block_size,
                    load=NodeLoad(
                        counters.num_requests_running,
                        counters.num_requests_waiting,
                        min(1.0, max(0.0, counters.kv_cache_usage_perc)),
                        counters.num_preemptions,
                    ),
                    cpu_capacity_tokens=counters.cpu_kv_blocks * profile.block_size,
                    counters=engine_counters(counters, profile.step.tp),
                    models=self.models.get(node_id),
                )
            )
        return updates

    @staticmethod
    def kv_event(node_id: str, event: NodeEvent) -> KvCacheEvent | None:
        if isinstance(event, BlockStored):
            return KvCacheEvent(node_id, stored=event.block_runs, medium=event.medium)
        if isinstance(event, BlockRemoved):
            return KvCacheEvent(node_id, removed=event.block_runs, medium=event.medium)
        if isinstance(event, AllBlocksCleared):
            return KvCacheEvent(node_id, cleared=True)
        return None
