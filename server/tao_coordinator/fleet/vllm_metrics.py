"""Reading a vLLM node's Prometheus exposition (vLLM reference §1) into the few figures the coordinator uses.

Parsed with `prometheus_client.parser`, so label order, `_created` series and unknown families don't matter. Values
are summed over the `engine` label (data-parallel ranks); `kv_cache_usage_perc` is the mean. Capacity follows §1.4:
`kv_cache_size_tokens` when present (≥ 0.24), else `(num_gpu_blocks − 1) × block_size`; a size of 0 or less counts
as unknown. Figures a scrape cannot make sense of raise `MetricsFormatError` (the node then counts as failing).
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


def parse_metrics(text: str) -> NodeMetrics:
    samples: dict[str, float] = {}
    counts: dict[str, int] = {}
    capacity: int | None = None
    block_size = 16
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info":
                    capacity, block_size = _capacity(sample.labels)
                    continue
                samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
                counts[sample.name] = counts.get(sample.name, 0) + 1
    except ValueError as error:
        raise MetricsFormatError(f"unparseable /metrics: {error}") from error

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
    )


def _capacity(labels: dict[str, str]) -> tuple[int | None, int]:
    try:
        block_size = int(labels.get("block_size", "16"))
        capacity = None
        if labels.get("kv_cache_size_tokens", "None") != "None":
            capacity = int(labels["kv_cache_size_tokens"])
        elif labels.get("num_gpu_blocks", "None") != "None":
            capacity = (int(labels["num_gpu_blocks"]) - 1) * block_size
    except ValueError as error:
        raise MetricsFormatError(f"vllm:cache_config_info has a non-numeric size label: {error}") from error
    if block_size < 1:
        raise MetricsFormatError(f"vllm:cache_config_info: block_size must be positive, got {block_size}")
    return (capacity if capacity is not None and capacity > 0 else None), block_size
