"""Reading a vLLM node's Prometheus exposition (vLLM reference §1) into the few figures the coordinator uses.

Parsed with `prometheus_client.parser`, so label order, `_created` series and unknown families don't matter. Values
are summed over the `engine` label (data-parallel ranks); `kv_cache_usage_perc` is the mean. Capacity is what a
node can hold, `(num_gpu_blocks − 1) × block_size` (block 0 is the null block, §1.3–1.4), the same figure the
simulator's node model uses. vLLM ≥ 0.24 also reports `kv_cache_size_tokens`: for a plain attention model it is
`num_gpu_blocks × block_size`, the null block included, so that value is read as one block less; any other value
(a hybrid model, whose groups share blocks) is taken as given. A size of 0 or less counts as unknown. Figures a scrape
cannot make sense of raise `MetricsFormatError` (the node then counts as failing).

Data-parallel ranks (checked against vLLM 0.33, `vllm/v1/engine/core_client.py` `_apply_ready_response` and
`vllm/v1/metrics/loggers.py`): the API server keeps one `CacheConfig` for all its engines, with `num_gpu_blocks`
summed over the ranks but `kv_cache_size_tokens` one rank's ("do not sum across DP"), and renders it as one
`cache_config_info` series per engine. The node's capacity is the sum over its R ranks (the ranks are alike: same
model, same parallelism), each with its own null block: `(Σ num_gpu_blocks − R) × block_size` for a plain model,
R × `kv_cache_size_tokens` otherwise. R is the number of distinct `engine` labels of `cache_config_info`, or, where a
version renders it once with `engine=""`, of `num_requests_running`.

Rate counters (vLLM 0.33, summed over ranks like the rest): prompt tokens by source (`local_compute`,
`external_kv_transfer`), the sums and counts of `request_prefill_time_seconds` and `inter_token_latency_seconds`,
generation tokens, `kv_offload_load_time_total` (every TP worker's copy time summed: the poller divides by the TP
size) and the requests in `num_requests_kv_fetch_by_stage` `waiting_to_start` or `in_progress`. The CPU tier's
capacity is read from `kv_offload_config_info` (one series per rank, each its own pool) as
cpu_num_chunks × cpu_blocks_per_chunk × block_size: its `cpu_kv_cache_size_tokens` label is not the pool's size but
what it holds in requests of max_model_len tokens (chunks × max_model_len // chunks per such request, less than the
pool when max_model_len is not a multiple of the chunk), and may be "None".
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


class MetricsFormatError(ValueError):
    """The exposition is not parseable, or lacks the capacity information."""


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    capacity_tokens: int | None
    block_size: int
    running: int
    waiting: int
    kv_usage: float
    prefix_queries: float
    prefix_hits: float
    preemptions: float
    prompt_computed: float = 0.0
    prompt_loaded: float = 0.0
    """`prompt_tokens_by_source_total` `local_compute` and `external_kv_transfer`."""
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_tokens: float = 0.0
    """`request_prefill_time_seconds_sum`, `inter_token_latency_seconds_sum` and `_count`."""
    generation_tokens: float = 0.0
    offload_load_seconds: float = 0.0
    """`kv_offload_load_time_total`, summed over the TP workers as vLLM reports it."""
    kv_fetch_waiting: int = 0
    cpu_capacity_tokens: int = 0
    """0: no CPU tier (no `kv_offload_config_info`)."""


_KV_FETCH_WAITING = ("waiting_to_start", "in_progress")


def parse_metrics(text: str) -> NodeMetrics:
    samples: dict[str, float] = {}
    counts: dict[str, int] = {}
    cache_config: dict[str, str] | None = None
    config_engines: set[str] = set()
    running_engines: set[str] = set()
    offload_configs: dict[str, dict[str, str]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info":
                    cache_config = sample.labels
                    config_engines.add(sample.labels.get("engine", ""))
                    continue
                if sample.name == "vllm:kv_offload_config_info":
                    offload_configs[sample.labels.get("engine", "")] = sample.labels
                    continue
                label = sample.labels.get("source") or sample.labels.get("stage")
                if label is not None:
                    key = f"{sample.name}:{label}"
                    samples[key] = samples.get(key, 0.0) + sample.value
                    continue
                if sample.name == "vllm:num_requests_running":
                    running_engines.add(sample.labels.get("engine", ""))
                samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
                counts[sample.name] = counts.get(sample.name, 0) + 1
    except ValueError as error:
        raise MetricsFormatError(f"unparseable /metrics: {error}") from error
    capacity: int | None = None
    block_size = 16
    if cache_config is not None:
        ranks = len(config_engines - {""}) or len(running_engines) or 1
        capacity, block_size = _capacity(cache_config, ranks)

    def value(name: str) -> float:
        return samples.get(name, 0.0)

    usage_samples = counts.get("vllm:kv_cache_usage_perc", 0)
    return NodeMetrics(
        capacity_tokens=capacity,
        block_size=block_size,
        running=max(0, int(value("vllm:num_requests_running"))),
        waiting=max(0, int(value("vllm:num_requests_waiting"))),
        kv_usage=value("vllm:kv_cache_usage_perc") / usage_samples if usage_samples else 0.0,
        prefix_queries=value("vllm:prefix_cache_queries_total"),
        prefix_hits=value("vllm:prefix_cache_hits_total"),
        preemptions=value("vllm:num_preemptions_total"),
        prompt_computed=value("vllm:prompt_tokens_by_source_total:local_compute"),
        prompt_loaded=value("vllm:prompt_tokens_by_source_total:external_kv_transfer"),
        prefill_seconds=value("vllm:request_prefill_time_seconds_sum"),
        decode_seconds=value("vllm:inter_token_latency_seconds_sum"),
        decode_tokens=value("vllm:inter_token_latency_seconds_count"),
        generation_tokens=value("vllm:generation_tokens_total"),
        offload_load_seconds=value("vllm:kv_offload_load_time_total"),
        kv_fetch_waiting=max(0, int(sum(value(f"vllm:num_requests_kv_fetch_by_stage:{s}") for s in _KV_FETCH_WAITING))),
        cpu_capacity_tokens=sum(_cpu_capacity(labels, block_size) for labels in offload_configs.values()),
    )


def _cpu_capacity(labels: dict[str, str], block_size: int) -> int:
    try:
        return max(0, int(labels["cpu_num_chunks"]) * int(labels.get("cpu_blocks_per_chunk", "1")) * block_size)
    except (KeyError, ValueError) as error:
        raise MetricsFormatError(f"vllm:kv_offload_config_info: bad chunk labels: {error}") from error


def _capacity(labels: dict[str, str], ranks: int) -> tuple[int | None, int]:
    """`num_gpu_blocks` is the sum over `ranks` ranks, `kv_cache_size_tokens` one rank's."""
    try:
        block_size = int(labels.get("block_size", "16"))
        blocks = int(labels["num_gpu_blocks"]) if labels.get("num_gpu_blocks", "None") != "None" else None
        reported = int(labels["kv_cache_size_tokens"]) if labels.get("kv_cache_size_tokens", "None") != "None" else None
        capacity = None
        # a version that summed the size too is read the same way
        plain = blocks is not None and reported in (blocks * block_size, blocks * block_size // ranks)
        if reported is not None and not plain:
            capacity = reported * ranks
        elif blocks is not None:
            capacity = (blocks - ranks) * block_size
    except ValueError as error:
        raise MetricsFormatError(f"vllm:cache_config_info has a non-numeric size label: {error}") from error
    if block_size < 1:
        raise MetricsFormatError(f"vllm:cache_config_info: block_size must be positive, got {block_size}")
    return (capacity if capacity is not None and capacity > 0 else None), block_size
