"""How the simulator and the fake vLLM server describe a prompt to a node: its length and its KV block identities.

Block identities are integers, one per *full* block of `block_size` tokens (vLLM: 16), in prompt order. They are
prefix-chained by construction: two prompts share their first k blocks exactly when their first k ids are equal,
and an id never appears at two different prefixes. (Workload loaders guarantee this by namespacing trace-local ids
per trace; the fake server by hashing each block together with its parent's hash, as vLLM does.) A trailing partial
block has no id. Ids come as runs `(first, count)` = first, first+1, …, first+count−1, because agent prompts are a
few long runs and a per-block list would cost too much at trace scale.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..core.model import BlockRun


@dataclass(frozen=True, slots=True)
class Prompt:
    tokens: int
    block_runs: tuple[BlockRun, ...] = ()

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError("tokens: must be non-negative")
        if any(count <= 0 for _, count in self.block_runs):
            raise ValueError("block_runs: every run needs a positive count")

    @property
    def block_count(self) -> int:
        return sum(count for _, count in self.block_runs)

    def block_ids(self) -> Iterator[int]:
        return ids_of_runs(self.block_runs)


def ids_of_runs(runs: Iterable[BlockRun]) -> Iterator[int]:
    """Every id of `runs`, in order: the inverse of `runs_from_ids`."""
    for first, count in runs:
        yield from range(first, first + count)


def runs_from_ids(ids: Iterable[int]) -> tuple[BlockRun, ...]:
    """Compress a list of block ids into maximal runs of consecutive ids."""
    runs: list[list[int]] = []
    for block_id in ids:
        if runs and runs[-1][0] + runs[-1][1] == block_id:
            runs[-1][1] += 1
        else:
            runs.append([block_id, 1])
    return tuple((first, count) for first, count in runs)
