"""The Prometheus series vLLM 0.33 adds with its native CPU offloading (OffloadingConnector), for a node with a tier.

Checked against vLLM 0.33.0 (`distributed/kv_transfer/kv_connector/v1/offloading/metrics.py`, `v1/kv_offload/cpu/`,
`v1/metrics/loggers.py`):
* flat transfer counters `vllm:kv_offload_{load,store}_{bytes,time}` appear at their first observation (vLLM binds
  their labels lazily); bytes are summed over the TP workers and time is the workers' copy times summed;
* the deprecated `vllm:kv_offload_total_{bytes,time}{transfer_type}` mirror them, children pre-created for
  `CPU_to_GPU` and `GPU_to_CPU`, as is the deprecated `vllm:kv_offload_size{transfer_type}` histogram;
* `vllm:num_requests_kv_fetch_by_stage{stage}` (the connector is a KV consumer): `in_progress` is the node's loads
  in flight; `waiting_to_start` and `completed_waiting` stay 0 (the node starts a load at the end of the step that
  admitted its request and schedules a finished load's request at the next step, so neither is visible between
  steps);
* `vllm:kv_offload_config_info` (gauge 1): `cpu_num_chunks`, `cpu_blocks_per_chunk` (1), `cpu_kv_cache_size_bytes`
  (chunks × page-aligned chunk bytes, all TP ranks) and `cpu_kv_cache_size_tokens`, which vLLM computes as the
  tokens the tier holds for requests of max_model_len tokens: chunks × max_model_len // chunks per such request.
  vLLM's offloading scheduler registers it at the engine's first scheduler step (`offloading/scheduler.py`), so a
  fresh node has no such family at all: it is registered at the first update that finds a request on the node.

Not exposed: the per-job size histograms, lookup delays, allocation failures and pinned-fraction gauges (the node
model reports no per-job or per-lookup figures).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..sim.node import CpuTier, NodeCounters, NodeProfile
from ..sim.node.cpu_tier import chunk_bytes

TRANSFER_SIZE_BUCKETS = (1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6)
TRANSFER_TYPES = ("CPU_to_GPU", "GPU_to_CPU")
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")
_LABELS = ("model_name", "engine")
_INFO_HELP = (
    "Static configuration of the KV offload managers of this engine instance. The configured offloading spec "
    "declares the label names, and each manager fills the values, so a series appears from the first scheduler step "
    "of its engine. A manager reports one series for each configuration it holds, and a label of its own tells the "
    "series apart. Each engine reports its own configuration, not the instance total."
)
_FLAT_HELP = {
    ("load", "bytes"): "Total bytes loaded from offload storage to GPU.",
    ("load", "time"): "Total load time from offload storage to GPU, in seconds.",
    ("store", "bytes"): "Total bytes stored from GPU to offload storage.",
    ("store", "time"): "Total store time from GPU to offload storage, in seconds.",
}
_FETCH_HELP = (
    "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an async KV load "
    "that has not started; 'in_progress' = load started and not yet reported finished; 'completed_waiting' = load "
    "finished, request not running yet."
)


def offload_config_labels(tier: CpuTier, profile: NodeProfile) -> dict[str, str]:
    """`kv_offload_config_info`'s labels as vLLM 0.33's CPUOffloadingInfo fills them (blocks_per_chunk 1)."""
    chunk = chunk_bytes(block_size=profile.block_size, kv_bytes_per_token=profile.step.kv_bytes_per_token)
    max_model_len = profile.model_len_limit
    chunks_per_request = -(-max_model_len // profile.block_size)
    return {
        "cpu_num_chunks": str(tier.num_blocks),
        "cpu_blocks_per_chunk": "1",
        "cpu_kv_cache_size_bytes": str(tier.num_blocks * chunk),
        "cpu_kv_cache_size_tokens": str(tier.num_blocks * max_model_len // chunks_per_request),
    }


class OffloadMetrics:
    def __init__(self, registry: CollectorRegistry, values: tuple[str, str], tier: CpuTier, profile: NodeProfile):
        self._values = values
        self._flat = {
            key: Counter(f"vllm:kv_offload_{key[0]}_{key[1]}", doc, _LABELS, registry=registry)
            for key, doc in _FLAT_HELP.items()
        }
        self._total_bytes = Counter(
            "vllm:kv_offload_total_bytes",
            "Number of bytes offloaded by KV connector",
            (*_LABELS, "transfer_type"),
            registry=registry,
        )
        self._total_time = Counter(
            "vllm:kv_offload_total_time",
            "Total time measured by all KV offloading operations",
            (*_LABELS, "transfer_type"),
            registry=registry,
        )
        size = Histogram(
            "vllm:kv_offload_size",
            "Histogram of KV offload transfer size, in bytes.",
            (*_LABELS, "transfer_type"),
            registry=registry,
            buckets=TRANSFER_SIZE_BUCKETS,
        )
        for transfer_type in TRANSFER_TYPES:
            for family in (self._total_bytes, self._total_time, size):
                family.labels(*values, transfer_type)
        self._fetch = Gauge("vllm:num_requests_kv_fetch_by_stage", _FETCH_HELP, (*_LABELS, "stage"), registry=registry)
        for stage in KV_FETCH_STAGES:
            self._fetch.labels(*values, stage)
        self._registry = registry
        self._config_labels = offload_config_labels(tier, profile)
        self.config_info_shown = False

    def _show_config_info(self) -> None:
        labels = self._config_labels
        info = Gauge("vllm:kv_offload_config_info", _INFO_HELP, (*_LABELS, *labels), registry=self._registry)
        info.labels(*self._values, *labels.values()).set(1)
        self.config_info_shown = True

    def update(self, counters: NodeCounters, last: NodeCounters | None) -> None:
        values = self._values
        stepped = counters.num_requests_running or counters.num_requests_waiting or counters.prefix_cache_queries
        if stepped and not self.config_info_shown:
            self._show_config_info()
        self._fetch.labels(*values, "in_progress").set(counters.num_requests_kv_fetch)
        for direction, transfer_type, now_bytes, before_bytes, now_s, before_s in (
            (
                "load",
                "CPU_to_GPU",
                counters.kv_offload_load_bytes,
                last.kv_offload_load_bytes if last else 0,
                counters.kv_offload_load_seconds,
                last.kv_offload_load_seconds if last else 0.0,
            ),
            (
                "store",
                "GPU_to_CPU",
                counters.kv_offload_store_bytes,
                last.kv_offload_store_bytes if last else 0,
                counters.kv_offload_store_seconds,
                last.kv_offload_store_seconds if last else 0.0,
            ),
        ):
            moved, seconds = now_bytes - before_bytes, now_s - before_s
            if moved <= 0:  # vLLM reports a transfer when it completes, bytes and time together
                continue
            self._flat[direction, "bytes"].labels(*values).inc(moved)
            self._flat[direction, "time"].labels(*values).inc(max(0.0, seconds))
            self._total_bytes.labels(*values, transfer_type).inc(moved)
            self._total_time.labels(*values, transfer_type).inc(max(0.0, seconds))
