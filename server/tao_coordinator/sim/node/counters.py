"""A node's Prometheus-style figures (§1.2 of the vLLM reference) as one frozen snapshot.

Gauges are read live from the state (vLLM refreshes them after every engine step, so between steps a real node still
shows the previous step's values). Counters mirror vLLM's: prefix-cache queries and hits in tokens, counted once at a
request's first admission (re-admissions after preemption are left out, as vLLM >= 0.11.1 does); prompt tokens when a
request produces its first token, cached ones included; generation tokens as they are sampled; finished requests by
reason. Histograms (TTFT, e2e, ...) are left to the consumer: every `Finished` event carries the raw observations,
except the two the coordinator needs as rates: the sums and counts of request_prefill_time (first scheduled → first
token) and inter_token_latency.

CPU tier (vLLM's OffloadingConnector, all 0 without a tier): CPU-loaded tokens count as external hits and as cached
(`host`, `external_kv_transfer`), never as `prefix_cache_hits`; transfer bytes are summed over TP ranks and
transfer seconds are the ranks' copy times summed, as vLLM aggregates its workers' `kv_offload_*` counters (one
link's busy time is seconds / tp). `prompt_tokens_by_source` and `prompt_tokens_cached_by_source["device"]` are
filled with or without a tier, as vLLM does. Sums of seconds are left out of `==`: their last bits depend on how a
driver sliced time (a closed-form decode stretch sums differently from single steps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .state import NodeState


@dataclass(frozen=True, slots=True)
class NodeCounters:
    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage_perc: float
    """Blocks held by live requests over num_gpu_blocks − 1 (the advertised figure), in 0..1 on a real node; cached
    free blocks count as free."""
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
    external_prefix_cache_queries: int = 0
    """Tokens after the GPU hit, per first admission (vllm:external_prefix_cache_queries)."""
    external_prefix_cache_hits: int = 0
    """Of those, tokens loaded from the CPU tier."""
    prompt_tokens_by_source: Mapping[str, int] = field(default_factory=dict)
    """`local_compute`, `local_cache_hit`, `external_kv_transfer`, counted at a request's first token."""
    prompt_tokens_cached_by_source: Mapping[str, int] = field(default_factory=dict)
    """`device` (GPU hits) and `host` (CPU hits), counted at first admission."""
    kv_offload_load_bytes: int = 0
    kv_offload_store_bytes: int = 0
    kv_offload_load_seconds: float = field(default=0.0, compare=False)
    kv_offload_store_seconds: float = field(default=0.0, compare=False)
    num_requests_kv_fetch: int = 0
    """Requests whose CPU→GPU load is in flight now."""
    cpu_kv_blocks: int = 0
    """CPU pool capacity in blocks (vLLM's kv_offload_config_info cpu_num_chunks)."""
    cpu_cached_blocks: int = 0
    """Not a vLLM metric: blocks in the CPU pool now (stored, being stored or being loaded)."""
    request_prefill_seconds: float = field(default=0.0, compare=False)
    """Sum of vllm:request_prefill_time_seconds over requests that produced their first token."""
    inter_token_seconds: float = field(default=0.0, compare=False)
    inter_tokens: int = 0
    """Sum and count of vllm:inter_token_latency_seconds observations."""


def snapshot(state: NodeState) -> NodeCounters:
    tallies = state.tallies
    offload = state.offload
    holding = 0 if offload is None else len(offload.loading) + len(offload.loaded)
    return NodeCounters(
        num_requests_running=len(state.running),
        num_requests_waiting=len(state.waiting) + holding,
        kv_cache_usage_perc=state.pool.used_blocks / (state.profile.reported_gpu_blocks - 1),
        prefix_cache_queries=tallies.prefix_cache_queries,
        prefix_cache_hits=tallies.prefix_cache_hits,
        num_preemptions=tallies.num_preemptions,
        prompt_tokens=tallies.prompt_tokens,
        generation_tokens=tallies.generation_tokens,
        request_success=dict(tallies.request_success),
        num_gpu_blocks=state.profile.reported_gpu_blocks,
        block_size=state.block_size,
        cached_blocks=state.pool.cached_blocks,
        external_prefix_cache_queries=tallies.external_prefix_cache_queries,
        external_prefix_cache_hits=tallies.external_prefix_cache_hits,
        prompt_tokens_by_source={
            "local_compute": tallies.prompt_tokens - tallies.prompt_tokens_local_hit - tallies.prompt_tokens_external,
            "local_cache_hit": tallies.prompt_tokens_local_hit,
            "external_kv_transfer": tallies.prompt_tokens_external,
        },
        prompt_tokens_cached_by_source={
            "device": tallies.prefix_cache_hits,
            "host": tallies.external_prefix_cache_hits,
        },
        kv_offload_load_bytes=0 if offload is None else offload.load_bytes,
        kv_offload_store_bytes=0 if offload is None else offload.store_bytes,
        kv_offload_load_seconds=0.0 if offload is None else offload.load_seconds,
        kv_offload_store_seconds=0.0 if offload is None else offload.store_seconds,
        num_requests_kv_fetch=0 if offload is None else len(offload.loading),
        cpu_kv_blocks=0 if offload is None else offload.tier.num_blocks,
        cpu_cached_blocks=0 if offload is None else offload.pool.cached_blocks,
        request_prefill_seconds=tallies.request_prefill_seconds,
        inter_token_seconds=tallies.inter_token_seconds,
        inter_tokens=tallies.inter_tokens,
    )
