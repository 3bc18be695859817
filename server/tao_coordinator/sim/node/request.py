"""Requests as a node sees them: the caller's frozen `NodeRequest`, and the engine's mutable per-request state.

Token accounting follows vLLM v1: `num_tokens` = prompt + tokens generated so far; a step computes the KV of
`num_computed … num_computed + n − 1`; when `num_computed` reaches `num_tokens` the step samples one new token.
So prefill, decode and the re-prefill after a preemption are the same rule, and the last output token's KV is
never computed: a request's sequence has at most (prompt + output − 1) // block_size full blocks to cache.

Block ids of the sequence, position by position: the prompt's ids, then `output_block_runs`, then fresh ids the node
makes up for whatever is left of the (prompt + output − 1) // block_size blocks it may cache. A prompt normally names
all its tokens // block_size full blocks; it may name fewer (a trace with coarser blocks), and the output ids then
start right after the prompt's ids — which is how the workload loaders slice them out of the next prompt. Fresh ids
are negative, so they never collide with given ids (which must be ≥ 0) and no later prompt can hit them: without
`output_block_runs` the generated blocks are cached and evicted like any others, but nobody will reuse them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from ...core.model import BlockRun
from ..prompt import Prompt
from .block_pool import HeldRun


@dataclass(frozen=True, slots=True)
class NodeRequest:
    request_id: str
    prompt: Prompt
    output_tokens: int
    """Tokens to generate (known from the trace, or the fake server's max_tokens policy)."""
    session_id: str | None = None
    priority: int = 0
    """Lower is sooner; only used by a node with the priority policy."""
    output_block_runs: tuple[BlockRun, ...] = ()
    """Ids of the sequence blocks after the prompt's ids, filled by generated tokens (extra ids are ignored)."""
    arrival_time: float | None = None
    """When the request reached the server (TTFT and e2e are measured from it); None: the submit time."""
    finish_reason: Literal["stop", "length"] = "stop"

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id: must be a non-empty string")
        if self.prompt.tokens < 1:
            raise ValueError(f"prompt.tokens: must be at least 1, got {self.prompt.tokens}")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens: must be at least 1, got {self.output_tokens}")
        for name, runs in (
            ("prompt.block_runs", self.prompt.block_runs),
            ("output_block_runs", self.output_block_runs),
        ):
            if any(first < 0 or count <= 0 for first, count in runs):
                raise ValueError(f"{name}: ids must be non-negative and counts positive")


def cacheable_blocks(prompt_tokens: int, output_tokens: int, block_size: int = 16) -> int:
    """Full blocks of a request's sequence a node caches: the last output token's KV is never computed."""
    return (prompt_tokens + output_tokens - 1) // block_size


class BlockSequence:
    """The block ids of a request's whole sequence as runs, with O(log runs) slicing by block index."""

    __slots__ = ("_offsets", "_runs", "length")

    def __init__(self, runs: list[BlockRun]) -> None:
        self._runs = runs
        self._offsets: list[int] = []
        total = 0
        for _, count in runs:
            self._offsets.append(total)
            total += count
        self.length = total

    def slice(self, lo: int, hi: int) -> Iterator[BlockRun]:
        """Runs of the ids of blocks lo … hi−1."""
        hi = min(hi, self.length)
        i = max(0, bisect_right(self._offsets, lo) - 1)
        while lo < hi:
            first, count = self._runs[i]
            skip = lo - self._offsets[i]
            take = min(count - skip, hi - lo)
            yield (first + skip, take)
            lo += take
            i += 1

    def id_at(self, index: int) -> int:
        i = bisect_right(self._offsets, index) - 1
        return self._runs[i][0] + index - self._offsets[i]


def build_sequence(request: NodeRequest, block_size: int, fresh_run: Callable[[int], int]) -> BlockSequence:
    """The request's block ids; `fresh_run(n)` returns the first id of n unused consecutive ids."""
    runs = list(request.prompt.block_runs)
    needed = cacheable_blocks(request.prompt.tokens, request.output_tokens, block_size) - request.prompt.block_count
    for first, count in request.output_block_runs:
        if needed <= 0:
            break
        runs.append((first, min(count, needed)))
        needed -= min(count, needed)
    if needed > 0:
        runs.append((fresh_run(needed), needed))
    return BlockSequence(runs)


class LiveRequest:
    """A submitted request that has not finished: waiting (maybe preempted) or running."""

    __slots__ = (
        "arrival",
        "cached_tokens",
        "committed_blocks",
        "cpu_offered",
        "external_tokens",
        "first_scheduled",
        "first_token_time",
        "generated",
        "held",
        "held_blocks",
        "last_token_time",
        "num_computed",
        "num_tokens",
        "preemptions",
        "sequence",
        "spec",
        "submit_order",
    )

    def __init__(self, spec: NodeRequest, sequence: BlockSequence, arrival: float, submit_order: int) -> None:
        self.spec = spec
        self.sequence = sequence
        self.arrival = arrival
        self.submit_order = submit_order
        self.num_tokens = spec.prompt.tokens
        self.num_computed = 0
        self.generated = 0
        self.held: list[HeldRun] = []
        self.held_blocks = 0
        self.committed_blocks = 0
        self.cached_tokens: int | None = None
        self.external_tokens = 0
        """Of `cached_tokens`, those loaded from the CPU tier."""
        self.cpu_offered = 0
        """Blocks of the sequence already offered to the CPU tier since the last admission."""
        self.first_scheduled: float | None = None
        self.first_token_time: float | None = None
        self.last_token_time = 0.0
        self.preemptions = 0

    @property
    def request_id(self) -> str:
        return self.spec.request_id

    @property
    def is_decoding(self) -> bool:
        """The next step computes the KV of the last generated token (one token, over the full context)."""
        return self.generated > 0 and self.num_computed == self.num_tokens - 1

    @property
    def remaining_outputs(self) -> int:
        return self.spec.output_tokens - self.generated

    @property
    def priority_key(self) -> tuple[int, float]:
        return (self.spec.priority, self.arrival)

    def add_held(self, pieces: list[HeldRun]) -> None:
        """Append to the block table, merging adjacent runs. The table keeps copies: merging must never change the
        caller's pieces, which the KV-event log still reads (a commit can span two adjacent runs)."""
        for piece in pieces:
            last = self.held[-1] if self.held else None
            if last is not None and last.private == piece.private and last.end == piece.first:
                last.count += piece.count
            else:
                self.held.append(HeldRun(piece.first, piece.count, piece.private))

    def last_indexed_id(self) -> int | None:
        """The id of the last committed block if this request holds it indexed (not as a private copy)."""
        if not self.held or self.held[-1].private:
            return None
        return self.held[-1].end - 1

    def drop_blocks(self) -> tuple[list[HeldRun], int]:
        """Forget the block table; return it and the count of uncommitted (partial) blocks for the pool."""
        held, uncommitted = self.held, self.held_blocks - self.committed_blocks
        self.held, self.held_blocks, self.committed_blocks = [], 0, 0
        return held, uncommitted
