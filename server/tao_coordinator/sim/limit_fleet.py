"""The limit fleet: the same nodes and compute as a real fleet, with KV capacity that never runs out; and the
never-evict fleet, which tells schedulers the real capacity but never evicts either.

A node of the limit fleet keeps the real profile's step-time coefficients, scheduler limits (batched tokens, running
sequences) and `max_model_len` — so the same requests are accepted and every step costs what it costs on the real
fleet — but its GPU pool holds every block the workload could ever allocate, and it has no CPU tier (nothing is
evicted, so nothing is loaded back, and the tier's link is never busy).

The bound: with nothing evicted a request never restarts, so every physical block ever handed out is one of the
blocks of one admission of one request, at most ⌈(prompt + output) / block_size⌉ of them (a hit allocates fewer).
The sum over every request of the workload, sub-agents included, is an upper bound of all blocks the whole replay
can allocate — on a single node, since a policy may route everything to one. The pool is counted in blocks and
runs, not materialised, so a large bound costs nothing.

The never-evict fleet (`tao sim --never-evict`) has the limit fleet's pool but advertises the real node's
`num_gpu_blocks`: a scheduler plans for the real memory (who holds a place, who waits) while the engine keeps every
block it ever computed. Against the real fleet it prices what vLLM's eviction costs a policy's plans — the caches of
sessions that wait, and caches a policy reserved that vLLM's least-recently-used order, which knows nothing of
reservations, evicted — with the policy's own memory discipline unchanged. It is not a bound in general (a policy
that overfills is never punished for it there); for one that respects capacity it is the fleet whose engine
evicts only what nobody will ask for again.

Invariants: on a limit or never-evict fleet `BlockPool.allocate` never evicts and the scheduler never preempts for
memory; a limit profile differs from the real one only in `num_gpu_blocks`, `max_model_len` (pinned to the real
one's limit), `cpu_tier` (None), `advertised_gpu_blocks` (None) and its name (`<name>+limit`); a never-evict
profile is the limit profile advertising the real `num_gpu_blocks`, named `<name>+never-evict`.
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
        advertised_gpu_blocks=None,
    )


def never_evict_profile(profile: NodeProfile, workload: Workload) -> NodeProfile:
    """`profile`'s limit profile advertising `profile`'s own blocks (see the module docstring)."""
    unbounded = limit_profile(profile, workload)
    return replace(unbounded, name=f"{profile.name}+never-evict", advertised_gpu_blocks=profile.reported_gpu_blocks)
