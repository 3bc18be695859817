"""Block-id namespaces and arithmetic on runs of block ids, without ever expanding a run into a per-block list.

Id layout (every id is a non-negative int below 2**63, so it fits a signed 64-bit integer):

    bit 62 … 56   source tag (7 bits): AGENTX, MINI_SWE, SYNTHETIC, CHAT
    bit 55 … 36   slot (20 bits): 0 = ids shared by every script of the source, k ≥ 1 = one trace or session
    bit 35 …  0   local id (36 bits)

Ids of different sources or slots never collide. Inside a slot a run `(first, count)` stays a run because the local
part never carries into the slot bits (`namespace_runs` checks `local + count ≤ 2**36`).

Invariants of the helpers: inputs and outputs are tuples of `(first, count)` with `count > 0`; results are maximal
runs (adjacent consecutive runs merged), so two prompts with the same ids always have the same `block_runs`.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...core.model import BlockRun, shared_prefix_blocks

NODE_BLOCK_TOKENS = 16
"""Tokens per KV block of the nodes the traces' block ids describe (vLLM's default `block_size`)."""
AGENTX = 1
MINI_SWE = 2
SYNTHETIC = 3
CHAT = 4

LOCAL_BITS = 36
SLOT_BITS = 20
SOURCE_BITS = 7
MAX_LOCAL = 1 << LOCAL_BITS
MAX_SLOT = (1 << SLOT_BITS) - 1


def namespace_base(source: int, slot: int) -> int:
    """The first id of one slot of one source."""
    if not 0 < source < 1 << SOURCE_BITS:
        raise ValueError(f"source tag {source} outside 1..{(1 << SOURCE_BITS) - 1}")
    if not 0 <= slot <= MAX_SLOT:
        raise ValueError(f"slot {slot} outside 0..{MAX_SLOT}")
    return source << (SLOT_BITS + LOCAL_BITS) | slot << LOCAL_BITS


def namespace_runs(local_runs: Iterable[BlockRun], base: int, scale: int = 1) -> tuple[BlockRun, ...]:
    """Map runs of local ids into a namespace; each local id becomes `scale` consecutive ids.

    With `scale = 4` a 64-token trace block h becomes the node blocks `4h … 4h+3` (16 tokens each), so a trace run
    `(h, n)` becomes the node run `(base + 4h, 4n)`: consecutive trace ids stay consecutive node ids.
    """
    runs: list[BlockRun] = []
    for first, count in local_runs:
        if first < 0 or count <= 0 or (first + count) * scale > MAX_LOCAL:
            raise ValueError(f"local run ({first}, {count}) × {scale} does not fit {LOCAL_BITS} bits")
        _append_run(runs, base + first * scale, count * scale)
    return tuple(runs)


def merge_runs(runs: Iterable[BlockRun]) -> tuple[BlockRun, ...]:
    """The same ids as maximal runs."""
    merged: list[BlockRun] = []
    for first, count in runs:
        _append_run(merged, first, count)
    return tuple(merged)


def slice_runs(runs: tuple[BlockRun, ...], start: int, stop: int) -> tuple[BlockRun, ...]:
    """The blocks at positions `start ≤ p < stop`, as runs."""
    sliced: list[BlockRun] = []
    position = 0
    for first, count in runs:
        lo, hi = max(start, position), min(stop, position + count)
        if lo < hi:
            _append_run(sliced, first + lo - position, hi - lo)
        position += count
        if position >= stop:
            break
    return tuple(sliced)


def output_block_runs(
    prompt_runs: tuple[BlockRun, ...],
    context_tokens: int,
    next_prompt_runs: tuple[BlockRun, ...],
    block_size: int = 16,
) -> tuple[BlockRun, ...]:
    """Ids of the blocks a node fills while generating, taken from the next prompt of the same agent.

    After a call the node holds `context_tokens` (prompt + output) of KV. When the next prompt starts with every
    block of this prompt, its following blocks up to the last full block of that context are the ones the node just
    wrote; naming them lets the next call hit them. Empty when the next prompt does not extend this one.
    """
    own = sum(count for _, count in prompt_runs)
    if shared_prefix_blocks(prompt_runs, next_prompt_runs) < own:
        return ()
    return slice_runs(next_prompt_runs, own, context_tokens // block_size)


def _append_run(runs: list[BlockRun], first: int, count: int) -> None:
    if runs and runs[-1][0] + runs[-1][1] == first:
        runs[-1] = (runs[-1][0], runs[-1][1] + count)
    else:
        runs.append((first, count))
