"""A node's CPU tier at work: the CPU pool, the host↔GPU links, loads in flight (vLLM's OffloadingConnector).

Stores (GPU→CPU, write-through): when a step schedules a request's tokens, the full prompt blocks up to the step's
end that the request has not offered yet are offered to the pool (`offload_prompt_only`, vLLM's default: decode
blocks are never stored). Present blocks are deduplicated; a failed offer is retried at the next step. Stored blocks
stay pinned (not loadable, not evictable) until the end of the step that computes them, when `BlockStored(CPU)` is
due. A request's offers start at block 0 at every admission (GPU-hit blocks the CPU lost are stored again) and after
the blocks it loaded (those are never offered).

Loads (CPU→GPU): one job per admitted request, started at the end of the step that admitted it (vLLM launches the
copy after that step's forward), on the H2D link. Jobs of one direction run one after another in FIFO order (vLLM
chains them on CUDA events, `gpu_worker.py`), so N loads issued together finish after 1, 2, …, N load times: the
link's bandwidth is shared in time, not in rate. Stores use the other direction and never delay loads. With TP,
every rank copies its slice on its own link in parallel, so one job lasts blocks · block_seconds.

Invariants: `loads` are in launch order with non-decreasing ends, and every job in `loads` or `_unlaunched` pins its
CPU runs; `loading` holds exactly the live requests of those jobs; `loaded` requests hold their GPU blocks and no pin.
"""

from __future__ import annotations

from collections import deque

from ...core.model import BlockRun
from .cpu_pool import CpuPool
from .cpu_tier import CpuTier
from .profile import NodeProfile
from .request import LiveRequest

Offer = tuple[int, list[BlockRun], list[BlockRun], list[BlockRun]]


class LoadJob:
    __slots__ = ("blocks", "cpu_runs", "end", "first_block", "request")

    def __init__(self, request: LiveRequest, cpu_runs: list[BlockRun], first_block: int, blocks: int) -> None:
        self.request: LiveRequest | None = request  # None once the request was aborted
        self.cpu_runs = cpu_runs
        self.first_block = first_block
        self.blocks = blocks
        self.end = 0.0


class Offload:
    def __init__(self, tier: CpuTier, profile: NodeProfile) -> None:
        self.tier = tier
        self.pool = CpuPool(tier.num_blocks)
        self.block_size = profile.block_size
        self.tp = profile.step.tp
        self.block_bytes = profile.block_size * profile.step.kv_bytes_per_token  # summed over TP ranks
        self.block_seconds = self.block_bytes / self.tp / tier.link_bytes_per_s  # one rank's slice on its link
        self.loading: dict[LiveRequest, LoadJob] = {}
        self.loaded: deque[LiveRequest] = deque()  # vLLM's kv_holding_waiting: admitted before the waiting queue
        self.loads: deque[LoadJob] = deque()
        self._unlaunched: list[LoadJob] = []
        self._h2d_free_at = float("-inf")
        self._storing: list[BlockRun] = []
        self.load_bytes = self.store_bytes = 0
        self.load_seconds = self.store_seconds = 0.0

    def reserved_blocks(self) -> int:
        """GPU blocks that requests holding KV without running still need for their whole sequence."""
        held = [*self.loading, *self.loaded]
        return sum(-(-r.num_tokens // self.block_size) - r.held_blocks for r in held)

    def loadable(self, request: LiveRequest, gpu_blocks: int) -> int | None:
        """Blocks after the GPU hit found in a row in the CPU pool; None: one is pinned, look again next step."""
        limit = request.num_tokens // self.block_size  # a CPU hit may cover the whole prompt
        if limit <= gpu_blocks or self.pool.cached_blocks == 0:
            return 0
        return self.pool.lookup(request.sequence.slice(gpu_blocks, limit))

    def start_load(self, request: LiveRequest, first_block: int, blocks: int) -> None:
        runs = list(request.sequence.slice(first_block, first_block + blocks))
        self.pool.pin(runs)
        job = LoadJob(request, runs, first_block, blocks)
        self._unlaunched.append(job)
        self.loading[request] = job

    def launch(self, start: float) -> None:
        """Put the loads admitted by a step on the link; `start` is that step's end."""
        for job in self._unlaunched:
            job.end = max(start, self._h2d_free_at) + job.blocks * self.block_seconds
            self._h2d_free_at = job.end
            self.loads.append(job)
        self._unlaunched.clear()

    @property
    def next_completion(self) -> float | None:
        return self.loads[0].end if self.loads else None

    def pop_completed(self, now: float) -> list[LoadJob]:
        """Loads that ended by `now`, unpinned and accounted; their live requests leave `loading`."""
        done: list[LoadJob] = []
        while self.loads and self.loads[0].end <= now:
            job = self.loads.popleft()
            self.pool.unpin(job.cpu_runs)
            self.load_bytes += job.blocks * self.block_bytes
            self.load_seconds += job.blocks * self.block_seconds * self.tp  # vLLM sums the workers' times
            if job.request is not None:
                del self.loading[job.request]
            done.append(job)
        return done

    def forget(self, request: LiveRequest) -> bool:
        """Drop an aborted request that holds KV without running (its transfer still runs); False if not here."""
        job = self.loading.pop(request, None)
        if job is not None:
            job.request = None
            return True
        if request in self.loaded:
            self.loaded.remove(request)
            return True
        return False

    def offer(self, request: LiveRequest, slots: int) -> Offer | None:
        """Offer the request's new full prompt blocks up to `slots` tokens.

        Returns (index of the first offered block, offered runs, stored runs, evicted runs), or None if there was
        nothing to offer or no room (then the same blocks are offered again at the request's next step)."""
        limit = min(slots, request.spec.prompt.tokens) // self.block_size
        if limit <= request.cpu_offered:
            return None
        offered = list(request.sequence.slice(request.cpu_offered, limit))
        result = self.pool.offer(offered)
        if result is None:
            return None
        stored, evicted = result
        blocks = sum(count for _, count in stored)
        self.store_bytes += blocks * self.block_bytes
        self.store_seconds += blocks * self.block_seconds * self.tp
        self._storing.extend(stored)
        first_index, request.cpu_offered = request.cpu_offered, limit
        return first_index, offered, stored, evicted

    def has_pending_offer(self, requests: list[LiveRequest]) -> bool:
        """Whether a request has computed prompt blocks it could not store yet (a failed offer is retried)."""
        block_size = self.block_size
        return any(min(r.num_computed, r.spec.prompt.tokens) // block_size > r.cpu_offered for r in requests)

    def end_step(self) -> None:
        """The step that computed this step's stored blocks ended: they become loadable and evictable."""
        if self._storing:
            self.pool.unpin(self._storing)
            self._storing = []

    def on_finish(self, request: LiveRequest) -> None:
        if request.cpu_offered:
            self.pool.touch(list(request.sequence.slice(0, request.cpu_offered)))

    def reset(self) -> None:
        """vLLM's connector reset: forget every CPU block (no events); transfers in flight still occupy the link."""
        self.pool.clear()
        for job in [*self.loads, *self._unlaunched]:
            job.cpu_runs = []
        self._storing = []

    def check_invariants(self) -> None:
        self.pool.check_invariants()
        ends = [job.end for job in self.loads]
        assert ends == sorted(ends), "loads out of FIFO order"
        live = {job.request for job in [*self.loads, *self._unlaunched] if job.request is not None}
        assert live == set(self.loading), "loading out of sync with the jobs in flight"
        assert all(r.num_computed > 0 and r.held_blocks > 0 for r in self.loaded), "a loaded request lost its KV"
