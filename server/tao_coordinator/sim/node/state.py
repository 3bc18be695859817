"""The mutable state of one node and the request-lifecycle operations the scheduler and the decode stretch share.

Owns the block pool, the waiting queue, the running list (admission order), the live requests and the counters.
Invariants between operations:
* a live request is in exactly one of `waiting` and `running`; finished requests are forgotten;
* a running request holds ceil(slots / block_size) blocks for the slots scheduled so far, and has committed (indexed
  or private) exactly its full blocks among them; a waiting request holds no block;
* counters only grow (they mirror vLLM's Prometheus counters, §1.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..prompt import BlockRun
from .block_pool import BlockPool, HeldRun, PrefixMatch
from .events import AllBlocksCleared, BlockRemoved, BlockStored, Finished, FinishReason, FirstToken, KvEvent, NodeEvent
from .profile import NodeProfile
from .queues import SchedulingPolicy, make_waiting_queue
from .request import LiveRequest


@dataclass(slots=True)
class Tallies:
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    request_success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})


_Stored = tuple[str, str | None, int, tuple[BlockRun, ...], int | None]


class KvLog:
    """KV-cache facts of the step being planned, in order; stamped with the step's end time when drained."""

    def __init__(self, enabled: bool, block_size: int) -> None:
        self.enabled = enabled
        self._block_size = block_size
        self._facts: list[_Stored | list[BlockRun]] = []

    def stored(self, request: LiveRequest, first_index: int, pieces: list[HeldRun]) -> None:
        if not self.enabled:
            return
        group: list[BlockRun] = []
        index = group_index = first_index
        for piece in [*pieces, HeldRun(0, 0, private=True)]:
            if piece.private:
                if group:
                    parent = request.sequence.id_at(group_index - 1) if group_index else None
                    self._facts.append((request.request_id, request.spec.session_id, group_index, tuple(group), parent))
                group, group_index = [], index + piece.count
            else:
                group.append((piece.first, piece.count))
            index += piece.count

    def removed(self, runs: list[BlockRun]) -> None:
        if not self.enabled or not runs:
            return
        if self._facts and isinstance(self._facts[-1], list):
            self._facts[-1].extend(runs)
        else:
            self._facts.append(list(runs))

    def drain(self, time: float) -> list[KvEvent]:
        events: list[KvEvent] = []
        for fact in self._facts:
            if isinstance(fact, list):
                events.append(BlockRemoved(time, tuple(fact)))
            else:
                request_id, session_id, first_index, runs, parent = fact
                events.append(BlockStored(time, runs, parent, self._block_size, request_id, session_id, first_index))
        self._facts.clear()
        return events

    def cleared(self, time: float) -> list[KvEvent]:
        return [AllBlocksCleared(time)] if self.enabled else []


class NodeState:
    def __init__(self, profile: NodeProfile, policy: SchedulingPolicy, kv_events: bool) -> None:
        self.profile = profile
        self.block_size = profile.block_size
        self.pool = BlockPool(profile.num_gpu_blocks)
        self.waiting = make_waiting_queue(policy)
        self.policy = policy
        self.running: list[LiveRequest] = []
        self.requests: dict[str, LiveRequest] = {}
        self.tallies = Tallies()
        self.kv = KvLog(kv_events, profile.block_size)

    def has_work(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def blocks_needed(self, request: LiveRequest, new_tokens: int) -> int:
        return -(-(request.num_computed + new_tokens) // self.block_size) - request.held_blocks

    def admission_match(self, request: LiveRequest) -> PrefixMatch | None:
        """The prefix hit if the request's whole sequence can be allocated now (scheduler_reserve_full_isl)."""
        limit = (request.num_tokens - 1) // self.block_size  # never hit the last token
        match = self.pool.match(request.sequence.slice(0, limit), limit)
        full_blocks = -(-request.num_tokens // self.block_size)
        if full_blocks - match.blocks + match.evictable > self.pool.free_blocks:
            return None
        return match

    def admit(self, request: LiveRequest, match: PrefixMatch) -> None:
        hit_runs = list(request.sequence.slice(0, match.blocks))
        self.pool.acquire(hit_runs)
        request.add_held([HeldRun(first, count, private=False) for first, count in hit_runs])
        request.held_blocks = request.committed_blocks = match.blocks
        request.num_computed = match.blocks * self.block_size
        if request.preemptions == 0:  # vLLM >= 0.11.1 leaves re-admissions out of the hit-rate counters
            self.tallies.prefix_cache_queries += request.num_tokens
            self.tallies.prefix_cache_hits += request.num_computed
        if request.cached_tokens is None:
            request.cached_tokens = request.num_computed
        self.running.append(request)

    def grow(self, request: LiveRequest, new_tokens: int) -> None:
        """Allocate and commit blocks for `new_tokens` scheduled tokens; the caller checked the free count."""
        slots = request.num_computed + new_tokens
        full_blocks = min(slots, request.num_tokens) // self.block_size
        if full_blocks > request.committed_blocks or slots > request.held_blocks * self.block_size:
            self.extend_table(request, slots, full_blocks)

    def extend_table(self, request: LiveRequest, slots: int, full_blocks: int) -> None:
        missing = -(-slots // self.block_size) - request.held_blocks
        if missing > 0:
            self.kv.removed(self.pool.allocate(missing))
            request.held_blocks += missing
        first = request.committed_blocks
        if full_blocks > first:
            previous = request.last_indexed_id() if first else None
            pieces = self.pool.commit(request.sequence.slice(first, full_blocks), previous)
            request.add_held(pieces)
            self.kv.stored(request, first, pieces)
            request.committed_blocks = full_blocks

    def preempt(self, request: LiveRequest) -> None:
        """Free a running request's blocks (already removed from `running`) and requeue it for recompute."""
        self.pool.release(*request.drop_blocks())
        request.num_computed = 0
        request.preemptions += 1
        self.tallies.num_preemptions += 1
        self.waiting.requeue_preempted(request)

    def complete_tokens(self, request: LiveRequest, computed: int, end: float) -> list[NodeEvent]:
        """Account `computed` tokens of a finished step; sample a token if the sequence is fully computed."""
        request.num_computed += computed
        if request.num_computed < request.num_tokens:
            return []
        request.generated += 1
        request.num_tokens += 1
        self.tallies.generation_tokens += 1
        events: list[NodeEvent] = []
        if request.first_token_time is None:
            request.first_token_time = end
            self.tallies.prompt_tokens += request.spec.prompt.tokens
            events.append(FirstToken(end, request.request_id, end - request.arrival))
        if request.remaining_outputs == 0:
            self.running.remove(request)
            events.append(self.finish(request, end, request.spec.finish_reason))
        return events

    def complete_decode(self, request: LiveRequest, steps: int, end: float) -> list[NodeEvent]:
        """Account `steps` consecutive decode steps of a request (blocks were extended by the caller)."""
        request.num_computed += steps
        request.num_tokens += steps
        request.generated += steps
        self.tallies.generation_tokens += steps
        if request.remaining_outputs > 0:
            return []
        self.running.remove(request)
        return [self.finish(request, end, request.spec.finish_reason)]

    def abort(self, request: LiveRequest, time: float) -> Finished:
        if request in self.running:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        return self.finish(request, time, "abort")

    def finish(self, request: LiveRequest, time: float, reason: FinishReason) -> Finished:
        """Forget a request that left `running`/`waiting`: free its blocks, count it, report it."""
        self.pool.release(*request.drop_blocks())
        del self.requests[request.request_id]
        self.tallies.request_success[reason] += 1
        return Finished(
            time=time,
            request_id=request.request_id,
            session_id=request.spec.session_id,
            reason=reason,
            prompt_tokens=request.spec.prompt.tokens,
            cached_tokens=request.cached_tokens or 0,
            completion_tokens=request.generated,
            arrival_time=request.arrival,
            first_token_time=request.first_token_time,
            num_preemptions=request.preemptions,
        )
