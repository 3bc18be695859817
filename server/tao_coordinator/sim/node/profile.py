"""Node profiles: the step-time coefficients and KV capacity of one vLLM deployment, as frozen values.

A profile is everything the node model needs to know about hardware, model shape and vLLM server flags. The built-in
profiles are the H100 estimates of the vLLM reference (§8.2 capacity, §8.4 step model) for a 32B dense model of the
Qwen3-32B shape (64 layers, 8 KV heads, head dim 128, bf16: 256 KiB of KV per token), and `h100-tp1-8b`, a small
model of the Qwen3-8B shape on one H100 (the small fast model of a two-model fleet). Users define their own with
`profile_from_mapping` (for example from a TOML table) or by constructing the dataclasses directly.

Invariants: every profile has at least one usable KV block besides the null block, positive limits and non-negative
coefficients; `capacity_tokens == (num_gpu_blocks − 1) × block_size`; `max_model_len ≤ capacity_tokens`; a node
advertises at most the blocks it has (`advertised_gpu_blocks ≤ num_gpu_blocks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .cpu_tier import GIB, PCIE_GEN5_X16_BYTES_PER_S, CpuTier, cpu_blocks_from_gib, cpu_tier_from_mapping

QWEN3_32B_KV_BYTES_PER_TOKEN = 2 * 64 * 8 * 128 * 2  # (K, V) × layers × KV heads × head dim × bf16 bytes
QWEN3_8B_KV_BYTES_PER_TOKEN = 2 * 36 * 8 * 128 * 2  # Qwen3-8B config.json: 36 layers, 8 KV heads, head dim 128


@dataclass(frozen=True, slots=True)
class StepCoefficients:
    """The §8.4 step-time model: one forward pass of the engine, in seconds.

    step = max(a, b·T) + overlap·min(a, b·T)            linear layers over T scheduled tokens
         + Σ decode_ctx · kv_bytes / tp / kv_read_bw     paged-attention KV reads of decoding sequences
         + Σ n·(offset + n/2) · attn_flops / tp / rate  attention of prefill chunks (n new tokens after offset)
         + [tp > 1] allreduces · (latency + T·bytes / bw)
         + overhead + lm_head_bytes / tp / lm_head_bw
    """

    tp: int
    linear_floor_s: float
    linear_per_token_s: float
    linear_overlap: float = 0.15
    kv_bytes_per_token: int = QWEN3_32B_KV_BYTES_PER_TOKEN
    kv_read_bytes_per_s: float = 2.3e12
    attention_flops_per_token_pair: float = 2.097e6
    attention_flops_per_s: float = 4e14
    allreduces_per_step: int = 128
    allreduce_latency_s: float = 15e-6
    allreduce_bytes_per_token: int = 10_240
    allreduce_bytes_per_s: float = 250e9
    overhead_s: float = 1.5e-3
    lm_head_bytes: float = 1.556e9
    lm_head_bytes_per_s: float = 2.8e12

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError(f"tp: must be at least 1, got {self.tp}")
        for item in fields(self):
            value = getattr(self, item.name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{item.name}: must be a finite non-negative number, got {value!r}")
        for name in ("kv_read_bytes_per_s", "attention_flops_per_s", "allreduce_bytes_per_s", "lm_head_bytes_per_s"):
            if getattr(self, name) == 0:
                raise ValueError(f"{name}: must be positive")


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """One node: step coefficients, KV capacity in blocks, and the vLLM scheduler limits (H100 defaults)."""

    name: str
    step: StepCoefficients
    num_gpu_blocks: int
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    max_model_len: int | None = None
    """Longest prompt + output accepted; None means the whole KV capacity (vLLM refuses to start with more)."""
    notes: str = field(default="", compare=False)
    cpu_tier: CpuTier | None = None
    """The CPU KV tier (vLLM's --kv-offloading-size); None: no offloading."""
    advertised_gpu_blocks: int | None = None
    """The `num_gpu_blocks` the node reports to routers (its capacity and its KV usage are counted against it); None:
    its own. Only the never-evict fleet (`sim/limit_fleet.py`) sets it, to a real node's pool inside one that holds
    every block, so schedulers plan for the real memory while the engine never evicts."""

    def __post_init__(self) -> None:
        if self.num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks: need at least 2 (block 0 is the null block), got {self.num_gpu_blocks}")
        if self.advertised_gpu_blocks is not None and not 2 <= self.advertised_gpu_blocks <= self.num_gpu_blocks:
            raise ValueError(
                f"advertised_gpu_blocks: must be between 2 and num_gpu_blocks {self.num_gpu_blocks}, "
                f"got {self.advertised_gpu_blocks}"
            )
        for name in ("block_size", "max_num_batched_tokens", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        if self.max_model_len is not None and not 1 <= self.max_model_len <= self.capacity_tokens:
            raise ValueError(
                f"max_model_len: must be between 1 and the KV capacity {self.capacity_tokens}, got {self.max_model_len}"
            )

    @property
    def capacity_tokens(self) -> int:
        return (self.num_gpu_blocks - 1) * self.block_size

    @property
    def reported_gpu_blocks(self) -> int:
        """The `num_gpu_blocks` routers are told: the advertised figure, else the pool's own."""
        return self.num_gpu_blocks if self.advertised_gpu_blocks is None else self.advertised_gpu_blocks

    @property
    def reported_capacity_tokens(self) -> int:
        """The KV capacity routers are told, in tokens."""
        return (self.reported_gpu_blocks - 1) * self.block_size

    @property
    def model_len_limit(self) -> int:
        return self.capacity_tokens if self.max_model_len is None else self.max_model_len


def gpu_blocks_from_memory(
    *,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    weights_gib_per_gpu: float,
    overhead_gib: float,
    kv_bytes_per_token: int,
    tp: int,
    block_size: int,
) -> int:
    """num_gpu_blocks as vLLM sizes it (§8.2): the memory left per GPU after weights and overhead, in whole blocks.

    KV is sharded over TP ranks, so a GPU holds kv_bytes_per_token / tp per token; every rank holds the same blocks.
    """
    kv_bytes_per_gpu = (gpu_memory_utilization * gpu_memory_gib - weights_gib_per_gpu - overhead_gib) * GIB
    bytes_per_block_per_gpu = block_size * kv_bytes_per_token / tp
    return max(0, math.floor(kv_bytes_per_gpu / bytes_per_block_per_gpu))


def _h100_qwen3_32b(
    tp: int, floor_ms: float, per_token_ms: float, allreduce_bw: float, weights_gib: float
) -> NodeProfile:
    blocks = gpu_blocks_from_memory(
        gpu_memory_gib=79.6,
        gpu_memory_utilization=0.90,
        weights_gib_per_gpu=weights_gib,
        overhead_gib=1.7,
        kv_bytes_per_token=QWEN3_32B_KV_BYTES_PER_TOKEN,
        tp=tp,
        block_size=16,
    )
    step = StepCoefficients(
        tp=tp,
        linear_floor_s=floor_ms / 1e3,
        linear_per_token_s=per_token_ms / 1e3,
        allreduce_bytes_per_s=allreduce_bw,
    )
    notes = f"H100 80GB, Qwen3-32B bf16, TP={tp}, util 0.90, {weights_gib} GiB weights/GPU; estimates ±30%"
    return NodeProfile(name=f"h100-tp{tp}", step=step, num_gpu_blocks=blocks, notes=notes)


def _h100_qwen3_8b() -> NodeProfile:
    """Qwen3-8B (config.json: hidden 4096, 36 layers, 32 query and 8 KV heads of dim 128, vocab 151,936, untied
    head; 8.19 B parameters, 6.95 B outside the embeddings) on one H100, scaled from the 32B TP=1 profile: the step
    floor reads the weights (23.4 ms × 15.3 / 61.0 GiB), the per-token cost is the linear layers' FLOPs (0.099 ms ×
    6.95 / 31.2 B non-embedding parameters), attention and the LM head follow the shapes."""
    weights_gib = 15.3
    blocks = gpu_blocks_from_memory(
        gpu_memory_gib=79.6,
        gpu_memory_utilization=0.90,
        weights_gib_per_gpu=weights_gib,
        overhead_gib=1.7,
        kv_bytes_per_token=QWEN3_8B_KV_BYTES_PER_TOKEN,
        tp=1,
        block_size=16,
    )
    step = StepCoefficients(
        tp=1,
        linear_floor_s=23.4e-3 * weights_gib / 61.0,
        linear_per_token_s=0.099e-3 * 6.95 / 31.2,
        kv_bytes_per_token=QWEN3_8B_KV_BYTES_PER_TOKEN,
        attention_flops_per_token_pair=4 * 36 * 32 * 128,
        allreduces_per_step=2 * 36,
        allreduce_bytes_per_token=4096 * 2,
        lm_head_bytes=151_936 * 4096 * 2,
    )
    notes = f"H100 80GB, Qwen3-8B bf16, TP=1, util 0.90, {weights_gib} GiB weights; scaled from h100-tp1, ±30%"
    return NodeProfile(name="h100-tp1-8b", step=step, num_gpu_blocks=blocks, notes=notes)


BUILTIN_PROFILES: Mapping[str, NodeProfile] = {
    profile.name: profile
    for profile in (
        _h100_qwen3_32b(1, 23.4, 0.099, 250e9, 61.0),
        _h100_qwen3_32b(2, 12.4, 0.051, 250e9, 30.6),
        _h100_qwen3_32b(4, 7.0, 0.026, 200e9, 15.3),
        _h100_qwen3_8b(),
    )
}


class UnknownProfile(KeyError):
    """A profile name that is neither built in nor registered by the caller."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known

    def __str__(self) -> str:
        return f"unknown node profile {self.name!r}; known profiles: {', '.join(self.known)}"


def profile_by_name(name: str, extra: Mapping[str, NodeProfile] | None = None) -> NodeProfile:
    """Look a profile up among the built-in ones and `extra` (which wins on a name clash)."""
    catalogue = {**BUILTIN_PROFILES, **(extra or {})}
    try:
        return catalogue[name]
    except KeyError:
        raise UnknownProfile(name, sorted(catalogue)) from None


def profile_from_mapping(name: str, table: Mapping[str, Any]) -> NodeProfile:
    """Build a profile from a plain mapping such as a parsed TOML table.

    The mapping holds the `NodeProfile` fields (`num_gpu_blocks`, `block_size`, …) and a `step` sub-table with the
    `StepCoefficients` fields. Instead of `num_gpu_blocks` it may give a `memory` sub-table with the keyword arguments
    of `gpu_blocks_from_memory` except `tp`, `block_size` and `kv_bytes_per_token`, which come from the profile.
    A `cpu_tier` sub-table adds a CPU tier (`cpu_tier_from_mapping`: `num_blocks` or `cpu_kv_gib`, `link_bytes_per_s`).
    Unknown keys raise, so a typo never silently falls back to a default.
    """
    body = dict(table)
    step = StepCoefficients(**dict(body.pop("step")))
    memory = body.pop("memory", None)
    if memory is not None:
        if "num_gpu_blocks" in body:
            raise ValueError("give either num_gpu_blocks or a memory table, not both")
        body["num_gpu_blocks"] = gpu_blocks_from_memory(
            **dict(memory),
            kv_bytes_per_token=step.kv_bytes_per_token,
            tp=step.tp,
            block_size=int(body.get("block_size", 16)),
        )
    tier = body.pop("cpu_tier", None)
    if tier is not None:
        block_size = int(body.get("block_size", 16))
        kv_bytes = step.kv_bytes_per_token
        body["cpu_tier"] = cpu_tier_from_mapping(tier, block_size=block_size, kv_bytes_per_token=kv_bytes)
    return NodeProfile(name=name, step=step, **body)


def with_cpu_tier(
    profile: NodeProfile, cpu_kv_gib: float, *, link_bytes_per_s: float = PCIE_GEN5_X16_BYTES_PER_S
) -> NodeProfile:
    """`profile` with a CPU tier of `cpu_kv_gib` GiB of host memory for KV, as `--kv-offloading-size` sizes it."""
    blocks = cpu_blocks_from_gib(
        cpu_kv_gib, block_size=profile.block_size, kv_bytes_per_token=profile.step.kv_bytes_per_token
    )
    return replace(profile, cpu_tier=CpuTier(blocks, link_bytes_per_s))
