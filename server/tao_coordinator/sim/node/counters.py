"""A node's Prometheus-style figures (§1.2 of the vLLM reference) as one frozen snapshot.

Gauges are read live from the state (vLLM refreshes them after every engine step, so between steps a real node still
shows the previous step's values). Counters mirror vLLM's: prefix-cache queries and hits in tokens, counted once at a
request's first admission (re-admissions after preemption are left out, as vLLM >= 0.11.1 does); prompt tokens when a
request produces its first token, cached ones included; generation tokens as they are sampled; finished requests by
reason. Histograms (TTFT, e2e, ...) are left to the consumer: every `Finished` event carries the raw observations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .state import NodeState


@dataclass(frozen=True, slots=True)
class NodeCounters:
    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage_perc: float
    """Blocks held by live requests over num_gpu_blocks − 1, in 0..1; cached free blocks count as free."""
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    prompt_tokens: int
    generation_tokens: int
    request_success: Mapping[str, int]
    num_gpu_blocks: int
    block_size: int
    cached_blocks: int
    """Not a vLLM metric: blocks currently indexed in the prefix cache (held or free) — what KV events describe."""


def snapshot(state: NodeState) -> NodeCounters:
    tallies = state.tallies
    return NodeCounters(
        num_requests_running=len(state.running),
        num_requests_waiting=len(state.waiting),
        kv_cache_usage_perc=state.pool.usage,
        prefix_cache_queries=tallies.prefix_cache_queries,
        prefix_cache_hits=tallies.prefix_cache_hits,
        num_preemptions=tallies.num_preemptions,
        prompt_tokens=tallies.prompt_tokens,
        generation_tokens=tallies.generation_tokens,
        request_success=dict(tallies.request_success),
        num_gpu_blocks=state.profile.num_gpu_blocks,
        block_size=state.block_size,
        cached_blocks=state.pool.cached_blocks,
    )
