"""The CPU KV tier of a node (vLLM 0.33 native offloading, `--kv-offloading-size`), as a frozen spec.

vLLM sizes the host pool from GiB summed over all TP ranks: one offloaded chunk is one GPU block (the default
`blocks_per_chunk = 1`) of the whole model's KV, its bytes rounded up to the page size, and every rank holds its
1/TP slice of every chunk. Each rank copies its slice over its own host↔GPU link, so a transfer of n blocks takes
n · block_size · kv_bytes_per_token / tp / link_bytes_per_s, whatever the TP degree's number of links.

Invariants: num_blocks ≥ 1; link_bytes_per_s > 0 and finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
PAGE_BYTES = 4096  # vLLM rounds each chunk's bytes up to mmap.PAGESIZE
PCIE_GEN5_X16_BYTES_PER_S = 50e9  # per direction per GPU, nominal (vLLM reference §8.6)


@dataclass(frozen=True, slots=True)
class CpuTier:
    num_blocks: int
    """CPU pool capacity in blocks (vLLM's num_chunks with blocks_per_chunk = 1)."""
    link_bytes_per_s: float = PCIE_GEN5_X16_BYTES_PER_S
    """Host↔GPU bandwidth of one GPU's link, per direction (loads and stores do not share it)."""

    def __post_init__(self) -> None:
        if self.num_blocks < 1:
            raise ValueError(f"cpu_tier.num_blocks: must be at least 1, got {self.num_blocks}")
        if not math.isfinite(self.link_bytes_per_s) or self.link_bytes_per_s <= 0:
            raise ValueError(f"cpu_tier.link_bytes_per_s: must be positive and finite, got {self.link_bytes_per_s!r}")


def chunk_bytes(*, block_size: int, kv_bytes_per_token: int) -> int:
    """Host bytes of one offloaded chunk: one block of the whole model's KV, rounded up to the page size."""
    return -(-block_size * kv_bytes_per_token // PAGE_BYTES) * PAGE_BYTES


def cpu_blocks_from_gib(cpu_kv_gib: float, *, block_size: int, kv_bytes_per_token: int) -> int:
    """vLLM's num_chunks: GiB (total over TP ranks) over the page-aligned bytes of one block of the whole model."""
    return math.floor(cpu_kv_gib * GIB) // chunk_bytes(block_size=block_size, kv_bytes_per_token=kv_bytes_per_token)


def cpu_tier_from_mapping(table: Mapping[str, Any], *, block_size: int, kv_bytes_per_token: int) -> CpuTier:
    """A `cpu_tier` sub-table: `num_blocks` or `cpu_kv_gib` (not both), and optionally `link_bytes_per_s`."""
    body = dict(table)
    gib = body.pop("cpu_kv_gib", None)
    if gib is not None:
        if "num_blocks" in body:
            raise ValueError("cpu_tier: give either num_blocks or cpu_kv_gib, not both")
        body["num_blocks"] = cpu_blocks_from_gib(
            float(gib), block_size=block_size, kv_bytes_per_token=kv_bytes_per_token
        )
    return CpuTier(**body)
