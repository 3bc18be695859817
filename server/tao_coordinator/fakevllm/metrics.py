"""vLLM's Prometheus metrics for one fake node (§1 of the vLLM reference; 0.33 names, labels, types and buckets).

Each node has its own registry (several nodes share a process), holding the process/platform/GC collectors that
vLLM's global registry has, and `_created` series as a single-API-server vLLM shows them. Labels are
`model_name` (the served name) and `engine` ("0"), except `cache_config_info`, which has no `model_name`.

Values move only when the engine does: gauges and counters are set from the node's counters snapshot after every
engine advance (counters by the delta since the previous snapshot, so they never go down), and the per-request
histograms are observed when a request finishes, except two that follow the node's running sums: inter-token
latency (each new interval observed at the mean of the advance's new intervals) and prefill time (each request
that produced its first token in the advance observed at their mean, at its first token rather than at its finish).
Times are engine seconds: at `--time-scale 10` a TTFT of 2 s is 0.2 s of wall time. Not exposed: `http_*` (FastAPI
instrumentator), queue/inference-time and iteration-token histograms (the node model reports no per-step or
scheduling milestones), LoRA and spec-decode series. With a CPU tier, the offloading connector's series are added
(`offload_metrics.py`).
"""

from __future__ import annotations

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from ..sim.node import Finished, NodeCounters, NodeProfile
from .offload_metrics import OffloadMetrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TTFT = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5,
    7.5,
    10,
    20,
    40,
    80,
    160,
    640,
    2560,
)
_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5, 7.5, 10, 20, 40, 80)
_LATENCY = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680)
_N = (1, 2, 5, 10, 20)
_PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)
_LABELS = ("model_name", "engine")
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_HIT_SOURCES = ("device", "host", "disk", "p2p", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def token_buckets(max_model_len: int) -> list[float]:
    """vLLM's 1-2-5 series up to max_model_len."""
    buckets: list[float] = []
    mantissa, exponent = 0, 1
    while True:
        value = (1, 2, 5)[mantissa] * exponent
        if value > max_model_len:
            return buckets
        buckets.append(value)
        mantissa = (mantissa + 1) % 3
        exponent *= 10 if mantissa == 0 else 1


def cache_config_labels(profile: NodeProfile, kv_offloading_size: float | None = None) -> dict[str, str]:
    """CacheConfig as `str()` renderings; kv_cache_size_tokens is num_gpu_blocks × block_size, as vLLM reports it,
    with the blocks the profile advertises (`NodeProfile.reported_gpu_blocks`).

    `num_cpu_blocks` stays "None" with native offloading: vLLM 0.33 never sets it on that path."""
    size_tokens = profile.reported_gpu_blocks * profile.block_size
    return {
        "block_size": str(profile.block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "kv_cache_max_concurrency": str(round(size_tokens / profile.model_len_limit, 2)),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(size_tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": str(kv_offloading_size),
        "mamba_cache_dtype": "auto",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(profile.reported_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
    }


class MetricsExporter:
    def __init__(
        self, model_name: str, profile: NodeProfile, kv_offloading_size: float | None = None, engine: str = "0"
    ) -> None:
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        registry.register(GC_COLLECTOR)
        self._values = (model_name, engine)
        self._last: NodeCounters | None = None
        self._build_gauges(registry, engine, profile, kv_offloading_size)
        self._build_counters(registry)
        self._build_latency_histograms(registry)
        self._build_token_histograms(registry, profile.model_len_limit)
        tier = profile.cpu_tier
        self.offload = None if tier is None else OffloadMetrics(registry, self._values, tier, profile)

    # Series exist from the start (zeros), as vLLM creates its labelled children at startup.
    def _gauge(self, name: str, doc: str, registry: CollectorRegistry, *extra: str) -> Gauge:
        gauge = Gauge(name, doc, (*_LABELS, *extra), registry=registry)
        if not extra:
            gauge.labels(*self._values)
        return gauge

    def _counter(self, name: str, doc: str, registry: CollectorRegistry, *extra: str) -> Counter:
        counter = Counter(name, doc, (*_LABELS, *extra), registry=registry)
        if not extra:
            counter.labels(*self._values)
        return counter

    def _histogram(self, name: str, doc: str, registry: CollectorRegistry, buckets: tuple[float, ...]) -> Histogram:
        histogram = Histogram(name, doc, _LABELS, registry=registry, buckets=buckets)
        histogram.labels(*self._values)
        return histogram

    def _build_gauges(
        self, registry: CollectorRegistry, engine: str, profile: NodeProfile, kv_offloading_size: float | None
    ) -> None:
        self.running = self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", registry
        )
        self.waiting = self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", registry)
        self.waiting_by_reason = self._gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.",
            registry,
            "reason",
        )
        self.kv_usage = self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", registry)
        sleep = self._gauge("vllm:engine_sleep_state", "Engine sleep state.", registry, "sleep_state")
        for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            sleep.labels(*self._values, state).set(value)
        if kv_offloading_size is None and profile.cpu_tier is not None:  # a tier from a profile file, sized in blocks
            block_bytes = -(-profile.block_size * profile.step.kv_bytes_per_token // 4096) * 4096
            kv_offloading_size = profile.cpu_tier.num_blocks * block_bytes / (1 << 30)
        labels = cache_config_labels(profile, kv_offloading_size)
        info = Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", (*labels, "engine"), registry=registry
        )
        info.labels(*labels.values(), engine).set(1)

    def _build_counters(self, registry: CollectorRegistry) -> None:
        c = self._counter
        self.queries = c(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", registry
        )
        self.hits = c("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", registry)
        self.external_queries = c(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of "
            "queried tokens.",
            registry,
        )
        self.external_hits = c(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached "
            "tokens.",
            registry,
        )
        self.preemptions = c("vllm:num_preemptions", "Cumulative number of preemption from the engine.", registry)
        self.prompt = c("vllm:prompt_tokens", "Number of prefill tokens processed.", registry)
        self.by_source = c("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", registry, "source")
        for source in PROMPT_SOURCES:
            self.by_source.labels(*self._values, source)
        self.cached = c("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", registry)
        self.cached_by_source = c(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to "
            "DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at "
            "admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            registry,
            "source",
        )
        for source in CACHE_HIT_SOURCES:
            self.cached_by_source.labels(*self._values, source)
        # vLLM labels this one without `engine`: admission is the API server's
        self.rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
            registry=registry,
        )
        for reason in ADMISSION_REASONS:
            self.rejections.labels(self._values[0], reason)
        self.generation = c("vllm:generation_tokens", "Number of generation tokens processed.", registry)
        self.success = c(
            "vllm:request_success", "Count of successfully processed requests.", registry, "finished_reason"
        )
        for reason in FINISHED_REASONS:
            self.success.labels(*self._values, reason)

    def _build_latency_histograms(self, registry: CollectorRegistry) -> None:
        h = self._histogram
        self.ttft = h(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", registry, _TTFT
        )
        self.itl = h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", registry, _ITL)
        self.tpot = h(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            registry,
            _ITL,
        )
        self.e2e = h(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", registry, _LATENCY
        )
        self.prefill = h(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            registry,
            _LATENCY,
        )
        self.decode = h(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            registry,
            _LATENCY,
        )

    def _build_token_histograms(self, registry: CollectorRegistry, max_model_len: int) -> None:
        h = self._histogram
        tokens = tuple(token_buckets(max_model_len))
        self.prompt_hist = h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", registry, tokens)
        self.gen_hist = h("vllm:request_generation_tokens", "Number of generation tokens processed.", registry, tokens)
        self.max_tokens = h(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", registry, tokens
        )
        self.max_gen = h(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            registry,
            tokens,
        )
        self.params_n = h("vllm:request_params_n", "Histogram of the n request parameter.", registry, _N)
        self.computed = h(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            registry,
            tokens,
        )
        self.num_preempt = h(
            "vllm:request_num_preemptions", "Histogram of number of preemptions per request.", registry, _PREEMPTIONS
        )

    def reject(self, reason: str) -> None:
        self.rejections.labels(self._values[0], reason).inc()

    def update(self, counters: NodeCounters, first_tokens: int = 0) -> None:
        """Refresh gauges, counters and the running-sum histograms from a snapshot taken after an engine advance in
        which `first_tokens` requests produced their first token."""
        values = self._values
        self.running.labels(*values).set(counters.num_requests_running)
        self.waiting.labels(*values).set(counters.num_requests_waiting)
        self.waiting_by_reason.labels(*values, "capacity").set(counters.num_requests_waiting)
        self.waiting_by_reason.labels(*values, "deferred").set(0)
        self.kv_usage.labels(*values).set(counters.kv_cache_usage_perc)
        last = self._last
        for counter, now, before in (
            (self.queries, counters.prefix_cache_queries, last.prefix_cache_queries if last else 0),
            (self.hits, counters.prefix_cache_hits, last.prefix_cache_hits if last else 0),
            (self.preemptions, counters.num_preemptions, last.num_preemptions if last else 0),
            (self.prompt, counters.prompt_tokens, last.prompt_tokens if last else 0),
            (self.generation, counters.generation_tokens, last.generation_tokens if last else 0),
            (
                self.external_queries,
                counters.external_prefix_cache_queries,
                last.external_prefix_cache_queries if last else 0,
            ),
            (self.external_hits, counters.external_prefix_cache_hits, last.external_prefix_cache_hits if last else 0),
        ):
            counter.labels(*values).inc(max(0, now - before))
        for counter, now_map, before_map in (
            (self.success, counters.request_success, last.request_success if last else {}),
            (self.by_source, counters.prompt_tokens_by_source, last.prompt_tokens_by_source if last else {}),
            (
                self.cached_by_source,
                counters.prompt_tokens_cached_by_source,
                last.prompt_tokens_cached_by_source if last else {},
            ),
        ):
            for label, now_count in now_map.items():
                counter.labels(*values, label).inc(max(0, now_count - before_map.get(label, 0)))
        cached = sum(counters.prompt_tokens_by_source.get(s, 0) for s in PROMPT_SOURCES[1:])
        cached_before = sum(last.prompt_tokens_by_source.get(s, 0) for s in PROMPT_SOURCES[1:]) if last else 0
        self.cached.labels(*values).inc(max(0, cached - cached_before))
        self._observe_means(
            self.itl,
            counters.inter_tokens - (last.inter_tokens if last else 0),
            counters.inter_token_seconds - (last.inter_token_seconds if last else 0.0),
        )
        self._observe_means(
            self.prefill,
            first_tokens,
            counters.request_prefill_seconds - (last.request_prefill_seconds if last else 0.0),
        )
        if self.offload is not None:
            self.offload.update(counters, last)
        self._last = counters

    def _observe_means(self, histogram: Histogram, count: int, total: float) -> None:
        if count <= 0:
            return
        child = histogram.labels(*self._values)
        mean = max(0.0, total) / count
        for _ in range(count):
            child.observe(mean)

    def observe_finished(self, event: Finished, max_tokens: int) -> None:
        values = self._values
        self.e2e.labels(*values).observe(event.e2e_latency)
        for histogram, value in (
            (self.prompt_hist, event.prompt_tokens),
            (self.gen_hist, event.completion_tokens),
            (self.max_tokens, max_tokens),
            (self.max_gen, max_tokens),
            (self.params_n, 1),
            (self.computed, event.prompt_tokens - event.cached_tokens),
            (self.num_preempt, event.num_preemptions),
        ):
            histogram.labels(*values).observe(value)
        if event.ttft is None or event.first_token_time is None:
            return
        self.ttft.labels(*values).observe(event.ttft)
        decode = event.time - event.first_token_time
        self.decode.labels(*values).observe(decode)
        if event.completion_tokens > 1:
            self.tpot.labels(*values).observe(decode / (event.completion_tokens - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)
