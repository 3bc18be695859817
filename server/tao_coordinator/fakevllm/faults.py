"""Faults a fake node shows when told to, at run time, so that a test turns a live node into a failing one.

`GET /fake/faults` returns the faults in force, `PUT /fake/faults` replaces them (400 naming the problem when
invalid; fields left out are off); `tao fake-vllm --fault-metrics MODE` starts a node with them. What `/metrics`
answers (`metrics`):

- "ok": the node's exposition as rendered;
- "nan", "inf", "-inf": every sample of `metrics_series` (default `vllm:num_requests_waiting`) holds NaN, +Inf or
  -Inf — a broken exporter;
- "huge_capacity": `cache_config_info` claims 10^30 blocks (1.6e31 tokens at 16 a block) and as many tokens;
- "zero_capacity": `cache_config_info` claims no block;
- "empty": a 200 with an empty body.

`metrics_delay_s` holds every `/metrics` answer back that long (a scrape that times out).

`POST /fake/restart` restarts the engine as vLLM's process would restart after a crash (`NodeService.restart`): the
requests in flight fail, HBM and the CPU tier are emptied without a KV event, the KV-event numbers start again at 0
with an empty replay buffer, the counters start from 0, and `kv_offload_config_info` is gone again until the new
engine's first step. The HTTP and ZMQ sockets stay bound (a subscriber sees the restart only in the numbers).
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

MetricsMode = Literal["ok", "nan", "inf", "-inf", "huge_capacity", "zero_capacity", "empty"]
METRICS_MODES: tuple[str, ...] = get_args(MetricsMode)
HUGE_BLOCKS = 10**30

_VALUES = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}
_SIZE_LABEL = re.compile(r'\b(num_gpu_blocks|kv_cache_size_tokens)="[^"]*"')


class Faults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    metrics: MetricsMode = "ok"
    """What `/metrics` answers: the node's exposition ("ok") or a broken one (`fakevllm/faults.py`)."""
    metrics_series: str = Field(default="vllm:num_requests_waiting", pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    """The series whose samples hold the non-finite value in modes "nan", "inf" and "-inf"."""
    metrics_delay_s: float = Field(default=0.0, ge=0.0, le=600.0)
    """Seconds every `/metrics` answer is held back (a scrape that times out)."""


def faulty_metrics(faults: Faults, body: bytes) -> bytes:
    """The `/metrics` body the node answers with `faults` in force."""
    mode = faults.metrics
    if mode == "ok":
        return body
    if mode == "empty":
        return b""
    lines = body.decode("utf-8").split("\n")
    if mode in _VALUES:
        value, series = _VALUES[mode], faults.metrics_series
        lines = [f"{line.rsplit(' ', 1)[0]} {value}" if _is_sample_of(line, series) else line for line in lines]
    else:
        blocks = HUGE_BLOCKS if mode == "huge_capacity" else 0
        lines = [
            _with_blocks(line, blocks) if _is_sample_of(line, "vllm:cache_config_info") else line for line in lines
        ]
    return "\n".join(lines).encode("utf-8")


def _is_sample_of(line: str, series: str) -> bool:
    return line.startswith(series) and line[len(series) : len(series) + 1] in ("{", " ")


def _with_blocks(line: str, blocks: int) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        figure = blocks if name == "num_gpu_blocks" else blocks * _block_size(line)
        return f'{name}="{figure}"'

    return _SIZE_LABEL.sub(replace, line)


def _block_size(line: str) -> int:
    found = re.search(r'\bblock_size="(\d+)"', line)
    return int(found.group(1)) if found else 16
