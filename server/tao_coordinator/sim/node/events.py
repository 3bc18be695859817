"""What a node reports while it advances: request milestones and KV-cache events, as frozen values.

Every event carries `time`, the end of the engine step that produced it (vLLM publishes outputs, stats and KV-event
batches after a step). `NodeEngine.advance` returns events in non-decreasing time order.

KV events are logical and cheap: block ids come as runs `(first, count)`. vLLM's wire format lists one hash per block
(and the token ids of stored blocks); expanding runs into those lists is the consumer's job. A `BlockStored` covers
blocks `first_block_index …` of one request's sequence (prompt then generated tokens), so a consumer that knows the
tokens can recover them as tokens [first_block_index·block_size, (first_block_index + n)·block_size).

`medium` is vLLM's string: "GPU" for the prefix cache in HBM, "CPU" for the offloading tier's pool. The two tiers
report independently (a block may be stored on both; a GPU removal says nothing of the CPU copy). A CPU
`BlockStored` carries the same logical fields; vLLM's default CPU payload (`self_describing_kv_events` off) drops
the parent hash, token ids and block size (block_size 0, one event per block) — that is the serialiser's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...core.model import BlockRun

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True, slots=True)
class FirstToken:
    time: float
    request_id: str
    ttft: float


@dataclass(frozen=True, slots=True)
class Preempted:
    """A running request lost its KV blocks (recompute preemption) and went back to the front of the queue."""

    time: float
    request_id: str
    generated_tokens: int


@dataclass(frozen=True, slots=True)
class Finished:
    time: float
    request_id: str
    session_id: str | None
    reason: FinishReason
    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens served from the prefix cache at the request's first admission (vLLM's num_cached_tokens)."""
    completion_tokens: int
    arrival_time: float
    first_token_time: float | None
    num_preemptions: int

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def e2e_latency(self) -> float:
        return self.time - self.arrival_time


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks of one request entered the prefix cache (prompt blocks at prefill, generated ones in decode)."""

    time: float
    block_runs: tuple[BlockRun, ...]
    parent_block_id: int | None
    block_size: int
    request_id: str
    session_id: str | None
    first_block_index: int
    medium: str = "GPU"

    @property
    def block_count(self) -> int:
        return sum(count for _, count in self.block_runs)


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Cached blocks were evicted: their physical blocks (GPU) or chunks (CPU) were handed to a new allocation."""

    time: float
    block_runs: tuple[BlockRun, ...]
    medium: str = "GPU"


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    time: float


BlockEvent = BlockStored | BlockRemoved | AllBlocksCleared
"""A change to the node's cached blocks, as vLLM's KV events report it."""
NodeEvent = FirstToken | Preempted | Finished | BlockEvent
