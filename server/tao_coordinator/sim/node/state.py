"""The mutable state of one node and the request-lifecycle operations the scheduler and the decode stretch share.

Owns the block pool, the waiting queue, the running list (admission order), the live requests, the CPU tier (if
any) and the counters. Invariants between operations:
* a live request is in exactly one of `waiting`, `running`, `offload.loading` (its CPU→GPU load is in flight) and
  `offload.loaded` (load done, waiting to be scheduled ahead of the queue);
* a running request holds ceil(slots / block_size) blocks for the slots scheduled so far, and has committed (indexed
  or private) exactly its full blocks among them; a waiting request holds no block; a loading request holds its
  GPU hit (committed) and the blocks its load fills (committed when the load ends);
* counters only grow (they mirror vLLM's Prometheus counters, §1.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .block_pool import BlockPool, HeldRun, PrefixMatch
from .events import Finished, FinishReason, FirstToken, NodeEvent
from .kv_log import KvLog
from .offload import Offload
from .profile import NodeProfile
from .queues import SchedulingPolicy, make_waiting_queue
from .request import LiveRequest


@dataclass(slots=True)
class Tallies:
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    external_prefix_cache_queries: int = 0
    external_prefix_cache_hits: int = 0
    num_preemptions: int = 0
    prompt_tokens: int = 0
    prompt_tokens_local_hit: int = 0
    prompt_tokens_external: int = 0
    generation_tokens: int = 0
    request_success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    request_prefill_seconds: float = 0.0
    inter_token_seconds: float = 0.0
    inter_tokens: int = 0


@dataclass(frozen=True, slots=True)
class NodeAdmission:
    match: PrefixMatch
    load_blocks: int = 0
    """Blocks after the GPU hit to load from the CPU tier (0: none, the request is scheduled at once)."""


DEFERRED = "deferred"
"""An admission answer: the CPU hit reaches a block in flight; skip the request this step (vLLM's skip_request)."""


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
        self.offload = None if profile.cpu_tier is None else Offload(profile.cpu_tier, profile)

    def has_work(self) -> bool:
        if self.running or len(self.waiting) > 0:
            return True
        return self.offload is not None and bool(self.offload.loading or self.offload.loaded)

    def blocks_needed(self, request: LiveRequest, new_tokens: int) -> int:
        return -(-(request.num_computed + new_tokens) // self.block_size) - request.held_blocks

    def admission_match(self, request: LiveRequest) -> NodeAdmission | str | None:
        """How the request would be admitted now, if its whole sequence fits (scheduler_reserve_full_isl); None if
        it does not; DEFERRED if its CPU hit must wait for a transfer in flight."""
        limit = (request.num_tokens - 1) // self.block_size  # never hit the last token on the GPU
        match = self.pool.match(request.sequence.slice(0, limit), limit)
        load = 0
        reserved = 0
        if self.offload is not None:
            found = self.offload.loadable(request, match.blocks)
            if found is None:
                return DEFERRED
            load = found
            if load:  # an async load holds its blocks without progress: leave room for the others (vLLM)
                reserved = self.offload.reserved_blocks()
        full_blocks = -(-request.num_tokens // self.block_size)
        if full_blocks - match.blocks + match.evictable + reserved > self.pool.free_blocks:
            return None
        return NodeAdmission(match, load)

    def resumable(self, request: LiveRequest) -> bool:
        """Whether a request whose load ended can be scheduled now (its whole sequence fits)."""
        return -(-request.num_tokens // self.block_size) - request.held_blocks <= self.pool.free_blocks

    def admit(self, request: LiveRequest, admission: NodeAdmission) -> None:
        """Take the GPU hit; run the request, or start its CPU load (it then waits in `offload.loading`)."""
        match = admission.match
        hit_runs = list(request.sequence.slice(0, match.blocks))
        self.pool.acquire(hit_runs)
        request.add_held([HeldRun(first, count, private=False) for first, count in hit_runs])
        request.held_blocks = request.committed_blocks = match.blocks
        local = match.blocks * self.block_size
        external = admission.load_blocks * self.block_size
        request.num_computed = min(local + external, request.num_tokens - 1) if external else local
        if request.preemptions == 0:  # vLLM >= 0.11.1 leaves re-admissions out of the hit-rate counters
            self.tallies.prefix_cache_queries += request.num_tokens
            self.tallies.prefix_cache_hits += local
            if self.offload is not None:
                self.tallies.external_prefix_cache_queries += request.num_tokens - local
                self.tallies.external_prefix_cache_hits += external
        if request.cached_tokens is None:
            request.cached_tokens = local + external
            request.external_tokens = external
        request.cpu_offered = 0
        if not external:
            self.running.append(request)
            return
        assert self.offload is not None
        self.kv.removed(self.pool.allocate(admission.load_blocks))
        request.held_blocks += admission.load_blocks
        request.cpu_offered = match.blocks + admission.load_blocks  # loaded blocks are never offered back
        self.offload.start_load(request, match.blocks, admission.load_blocks)

    def complete_loads(self, now: float) -> None:
        """Loads that ended by `now`: their blocks join the GPU prefix cache, their requests become schedulable."""
        if self.offload is None or not self.offload.loads or self.offload.loads[0].end > now:
            return
        for job in self.offload.pop_completed(now):
            request = job.request
            if request is None:
                continue
            end = job.first_block + job.blocks
            previous = request.last_indexed_id() if job.first_block else None
            pieces = self.pool.commit(request.sequence.slice(job.first_block, end), previous)
            request.add_held(pieces)
            self.kv.stored(request, job.first_block, pieces)
            request.committed_blocks = end
            self.offload.loaded.append(request)

    def resume(self, request: LiveRequest) -> None:
        assert self.offload is not None
        self.offload.loaded.popleft()
        self.running.append(request)

    def grow(self, request: LiveRequest, new_tokens: int) -> None:
        """Allocate and commit blocks for `new_tokens` scheduled tokens; the caller checked the free count."""
        slots = request.num_computed + new_tokens
        full_blocks = min(slots, request.num_tokens) // self.block_size
        if full_blocks > request.committed_blocks or slots > request.held_blocks * self.block_size:
            self.extend_table(request, slots, full_blocks)
        if self.offload is not None:
            offer = self.offload.offer(request, slots)
            if offer is not None:
                first_index, offered, stored, evicted = offer
                self.kv.cpu_removed(evicted)
                self.kv.cpu_stored(request, first_index, offered, stored)

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
            self._count_prompt(request, end)
            events.append(FirstToken(end, request.request_id, end - request.arrival))
        else:
            self.tallies.inter_token_seconds += end - request.last_token_time
            self.tallies.inter_tokens += 1
        request.last_token_time = end
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
        self.tallies.inter_token_seconds += end - request.last_token_time
        self.tallies.inter_tokens += steps
        request.last_token_time = end
        if request.remaining_outputs > 0:
            return []
        self.running.remove(request)
        return [self.finish(request, end, request.spec.finish_reason)]

    def _count_prompt(self, request: LiveRequest, first_token: float) -> None:
        tallies = self.tallies
        tallies.prompt_tokens += request.spec.prompt.tokens
        tallies.prompt_tokens_local_hit += (request.cached_tokens or 0) - request.external_tokens
        tallies.prompt_tokens_external += request.external_tokens
        if request.first_scheduled is not None:
            tallies.request_prefill_seconds += first_token - request.first_scheduled

    def abort(self, request: LiveRequest, time: float) -> Finished:
        if request in self.running:
            self.running.remove(request)
        elif self.offload is None or not self.offload.forget(request):
            self.waiting.remove(request)
        return self.finish(request, time, "abort")

    def finish(self, request: LiveRequest, time: float, reason: FinishReason) -> Finished:
        """Forget a request that left `running`/`waiting`: free its blocks, count it, report it."""
        self.pool.release(*request.drop_blocks())
        if self.offload is not None:
            self.offload.on_finish(request)
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
