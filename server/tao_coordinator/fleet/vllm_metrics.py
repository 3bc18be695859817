"""Reading a vLLM node's Prometheus exposition (vLLM reference §1) into the few figures the coordinator uses.

Parsed with `prometheus_client.parser`, so label order, `_created` series and unknown families don't matter. Values
are summed over the `engine` label (data-parallel ranks); `kv_cache_usage_perc` is the mean. Capacity is what a
node can hold, `(num_gpu_blocks − 1) × block_size` (block 0 is the null block, §1.3–1.4), the same figure the
simulator's node model uses. vLLM ≥ 0.24 also reports `kv_cache_size_tokens`: for a plain attention model it is
`num_gpu_blocks × block_size`, the null block included, so that value is read as one block less; any other value
(a hybrid model, whose groups share blocks) is taken as given. Figures a scrape cannot make sense of raise
`MetricsFormatError` (the node then counts as failing), with a `kind` naming the class of fault for counting.

Every figure read is checked before it is believed: finite, never negative, a count below 2^53 (past it a float no
longer holds every whole number, so no real count gets there), `kv_cache_usage_perc` within [0, 1]. A figure that
fails names its series and value (`kind` "bad_figure"). A text with no `vllm:` series at all — empty, or some other
exporter's — is not a vLLM node's (`kind` "empty"). Only the figures read are checked: a NaN in a histogram the
coordinator ignores does not fail the node. Capacity is reported as read, zero or negative included: what to believe
is the poller's decision (`capacity_guard.py`).

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
pool when max_model_len is not a multiple of the chunk), and may be "None". vLLM 0.33 registers that series only after
the engine's first scheduler step, so its absence means "not known yet", never "no tier": the CPU capacity is then
None. A DP node whose ranks have not all stepped yet reports some ranks' series: the ranks being alike, the mean of
those is taken for every rank.

Also read from 0.33 (0.32+): `admission_rejections_total` (the API server's 503s for its queue limits, labelled by
`reason` and not by engine: summed) and `prompt_tokens_cached_by_source_total{source="host"}` (prompt tokens served
from the CPU tier). `process_start_time_seconds` (present with one API server) tells one process from the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

COUNT_LIMIT = 2.0**53
"""Above this a float stops holding every whole number: no count a node reports comes near it."""


class MetricsFormatError(ValueError):
    """The exposition is not parseable, lacks what a vLLM node shows, or holds a figure that cannot be true.

    `kind`: "malformed" (unparseable text or labels), "bad_figure" (NaN, ±Inf, negative or out of range) or "empty"
    (no vLLM series)."""

    def __init__(self, message: str, kind: str = "malformed") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    capacity_tokens: int | None
    """As reported (0 or less when the node says so); None: no `cache_config_info`, or a size of "None"."""
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
    cpu_capacity_tokens: int | None = 0
    """None: not known (no `kv_offload_config_info` yet: vLLM shows it from the first engine step); 0: no tier."""
    admission_rejections: float = 0.0
    """`admission_rejections_total`, every reason."""
    host_cached_tokens: float = 0.0
    """`prompt_tokens_cached_by_source_total{source="host"}`: prompt tokens the CPU tier served."""
    ranks: int = 1
    process_start: float | None = None
    """`process_start_time_seconds`: changes when the node's process is a new one; None when not exposed."""


_KV_FETCH_WAITING = ("waiting_to_start", "in_progress")
_SECONDS = (
    "vllm:request_prefill_time_seconds_sum",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:kv_offload_load_time_total",
    "process_start_time_seconds",
)
_COUNTS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_by_source_total",
    "vllm:prompt_tokens_cached_by_source_total",
    "vllm:inter_token_latency_seconds_count",
    "vllm:generation_tokens_total",
    "vllm:num_requests_kv_fetch_by_stage",
    "vllm:admission_rejections_total",
)
_LIMITS = {"vllm:kv_cache_usage_perc": 1.0} | dict.fromkeys(_SECONDS, math.inf) | dict.fromkeys(_COUNTS, COUNT_LIMIT)
"""Every series read, with the largest value one of its samples may hold: each sample is checked, not only sums."""


def parse_metrics(text: str) -> NodeMetrics:
    samples: dict[str, float] = {}
    cache_config: dict[str, str] | None = None
    config_engines: set[str] = set()
    running_engines: set[str] = set()
    offload_configs: dict[str, dict[str, str]] = {}
    usages: list[float] = []
    vllm_series = False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                vllm_series = vllm_series or sample.name.startswith("vllm:")
                if sample.name == "vllm:cache_config_info":
                    cache_config = sample.labels
                    config_engines.add(sample.labels.get("engine", ""))
                    continue
                if sample.name == "vllm:kv_offload_config_info":
                    offload_configs[sample.labels.get("engine", "")] = sample.labels
                    continue
                if (limit := _LIMITS.get(sample.name)) is not None:
                    _checked(sample.name, sample.value, limit)
                if sample.name == "vllm:kv_cache_usage_perc":
                    usages.append(sample.value)
                label = sample.labels.get("source") or sample.labels.get("stage")
                if label is not None:
                    key = f"{sample.name}:{label}"
                    samples[key] = samples.get(key, 0.0) + sample.value
                    continue
                if sample.name == "vllm:num_requests_running":
                    running_engines.add(sample.labels.get("engine", ""))
                samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    except MetricsFormatError:
        raise
    except (ValueError, IndexError) as error:
        raise MetricsFormatError(f"unparseable /metrics: {error}") from error
    if not vllm_series:
        raise MetricsFormatError("empty /metrics" if not text.strip() else "no vllm: series in /metrics", "empty")
    ranks = len(config_engines - {""}) or len(running_engines) or 1
    capacity: int | None = None
    block_size = 16
    if cache_config is not None:
        capacity, block_size = _capacity(cache_config, ranks)

    def value(name: str) -> float:  # a sum of samples each checked as they were read
        return samples.get(name, 0.0)

    start = samples.get("process_start_time_seconds")
    return NodeMetrics(
        capacity_tokens=capacity,
        block_size=block_size,
        running=int(value("vllm:num_requests_running")),
        waiting=int(value("vllm:num_requests_waiting")),
        kv_usage=sum(usages) / len(usages) if usages else 0.0,
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
        kv_fetch_waiting=int(sum(value(f"vllm:num_requests_kv_fetch_by_stage:{s}") for s in _KV_FETCH_WAITING)),
        cpu_capacity_tokens=_cpu_capacity(offload_configs, block_size, ranks),
        admission_rejections=value("vllm:admission_rejections_total"),
        host_cached_tokens=value("vllm:prompt_tokens_cached_by_source_total:host"),
        ranks=ranks,
        process_start=start,
    )


def _checked(name: str, value: float, limit: float) -> None:
    """Raise the error naming `name` unless `value` is a figure a node can report (finite, within [0, limit])."""
    if math.isnan(value) or math.isinf(value):
        raise MetricsFormatError(f"{name} is {_render(value)}", "bad_figure")
    if not 0.0 <= value <= limit:
        raise MetricsFormatError(f"{name} = {value:g} is outside [0, {limit:g}]", "bad_figure")


def _render(value: float) -> str:
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"


def _cpu_capacity(configs: dict[str, dict[str, str]], block_size: int, ranks: int) -> int | None:
    if not configs:
        return None
    try:
        per_rank = [
            int(labels["cpu_num_chunks"]) * int(labels.get("cpu_blocks_per_chunk", "1")) * block_size
            for labels in configs.values()
        ]
    except (KeyError, ValueError) as error:
        raise MetricsFormatError(f"vllm:kv_offload_config_info: bad chunk labels: {error}") from error
    if min(per_rank) < 0:
        raise MetricsFormatError(f"vllm:kv_offload_config_info: negative chunk labels: {min(per_rank)}", "bad_figure")
    reported = max(len(configs), ranks)  # a version without engine labels shows one series for the whole node
    return sum(per_rank) * reported // len(configs)


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
            capacity = max(0, blocks - ranks) * block_size
    except ValueError as error:
        raise MetricsFormatError(f"vllm:cache_config_info has a non-numeric size label: {error}") from error
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise MetricsFormatError(
            f"vllm:cache_config_info: block_size must be within [1, {MAX_BLOCK_SIZE}], got {block_size}", "bad_figure"
        )
    return capacity, block_size


MAX_BLOCK_SIZE = 1 << 16
"""vLLM's block sizes are tens of tokens (hybrid models' a few thousand): far past that is a broken label."""
