"""The limit fleet: the same nodes and compute as a real fleet, with KV capacity that never runs out.

A node of the limit fleet keeps the real profile's step-time coefficients, scheduler limits (batched tokens, running
sequences) and `max_model_len` — so the same requests are accepted and every step costs what it costs on the real
fleet — but its GPU pool holds every block the workload could ever allocate, and it has no CPU tier (nothing is
evicted, so nothing is loaded back, and the tier's link is never busy).

The bound: with nothing evicted a request never restarts, so every physical block ever handed out is one of the
blocks of one admission of one request, at most ⌈(prompt + output) / block_size⌉ of them (a hit allocates fewer).
The sum over every request of the workload, sub-agents included, is an upper bound of all blocks the whole replay
can allocate — on a single node, since a policy may route everything to one. The pool is counted in blocks and
runs, not materialised, so a large bound costs nothing.

Invariants: on a limit fleet `BlockPool.allocate` never evicts and the scheduler never preempts for memory; the
profile differs from the real one only in `num_gpu_blocks`, `max_model_len` (pinned to the real one's limit),
`cpu_tier` (None) and its name (`<name>+limit`).
"""

from __future__ import annotations

from dataclasses import replace

from .node import NodeProfile
from .workloads import Workload


def workload_block_bound(workload: Workload, block_size: int) -> int:
    """Every block the replay of `workload` could allocate with nothing evicted: the sum over its requests (sub-agents
    included) of ⌈(prompt + output) / block_size⌉, plus one block per request for a private copy's rounding."""
    if block_size < 1:
        raise ValueError(f"block_size: must be at least 1, got {block_size}")
    return sum(
        -(-request.context_tokens // block_size) + 1 for script in workload.scripts for request in script.all_requests()
    )


def limit_profile(profile: NodeProfile, workload: Workload) -> NodeProfile:
    """`profile` with a GPU pool that holds every block of `workload` and no CPU tier (see the module docstring)."""
    blocks = workload_block_bound(workload, profile.block_size)
    return replace(
        profile,
        name=f"{profile.name}+limit",
        num_gpu_blocks=max(profile.num_gpu_blocks, blocks + 1),
        max_model_len=profile.model_len_limit,
        cpu_tier=None,
    )
