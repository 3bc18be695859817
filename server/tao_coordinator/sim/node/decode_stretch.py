"""Closed-form runs of pure-decode steps: apply k engine steps at once instead of scheduling them one by one.

A stretch may start when the next step would be a pure-decode step that changes nothing but token counts and block
tables: every running request decodes, all fit in the token budget, and no waiting request can be admitted (none
waits, `max_num_seqs` is reached, or the queue head's whole sequence does not fit). During the stretch free blocks
only shrink and nothing finishes before its last step, so admission stays impossible and the step sequence is
exactly what the step-by-step scheduler would produce. Its length is the largest k such that
* no request finishes before step k (k = the fewest remaining output tokens), and
* the blocks needed by steps 1…k fit in the free pool — the step after that may preempt, so it is scheduled singly.
With a CPU tier, no request may have a failed store offer to retry (vLLM retries at every step it schedules), and
the engine cuts the stretch at the next load completion.

Step j lasts base + slope·(j − 1) (`DecodeStretchClock`); the driver applies the steps that end by a given time, and
cuts the stretch after its in-flight step when something new (an arrival that heads the queue, an abort) must be
considered at the next step boundary. KV events of applied steps are stamped with the last applied step's end.
"""

from __future__ import annotations

from .events import NodeEvent
from .request import LiveRequest
from .state import NodeState
from .step_time import DecodeStretchClock, StepTimeModel


class DecodeStretch:
    """`remaining` pure-decode steps of the running set, the first starting at `start`."""

    __slots__ = ("clock", "remaining", "start")

    def __init__(self, start: float, clock: DecodeStretchClock, remaining: int) -> None:
        self.start = start
        self.clock = clock
        self.remaining = remaining

    @property
    def final_end(self) -> float:
        return self.end_of(self.remaining)

    def end_of(self, steps: int) -> float:
        return self.start + self.clock.elapsed(steps)

    def steps_ending_by(self, until: float) -> int:
        """How many of the remaining steps end by `until`, judged on the same sums `end_of` reports."""
        steps = self.clock.steps_within(until - self.start, self.remaining)
        while steps > 0 and self.end_of(steps) > until:
            steps -= 1
        while steps < self.remaining and self.end_of(steps + 1) <= until:
            steps += 1
        return steps

    def cut_after_inflight_step(self) -> None:
        self.remaining = min(self.remaining, 1)

    def apply(self, state: NodeState, steps: int) -> tuple[float, list[NodeEvent]]:
        """Apply the next `steps` steps; return the end time of the last one and the events they produced."""
        end = self.end_of(steps)
        events: list[NodeEvent] = []
        batch = list(state.running)
        for request in batch:
            slots = request.num_computed + steps
            if slots > request.held_blocks * state.block_size or slots // state.block_size > request.committed_blocks:
                state.extend_table(request, slots, slots // state.block_size)
        events.extend(state.kv.drain(end))
        for request in batch:
            events.extend(state.complete_decode(request, steps, end))
        self.start = end
        self.clock = DecodeStretchClock(self.clock.base_s + self.clock.slope_s * steps, self.clock.slope_s)
        self.remaining -= steps
        return end, events


def plan_decode_stretch(state: NodeState, model: StepTimeModel, start: float) -> DecodeStretch | None:
    running = state.running
    batch = len(running)
    if batch == 0 or batch > state.profile.max_num_batched_tokens:
        return None
    if not all(request.is_decoding for request in running) or _can_admit(state, batch):
        return None
    if state.offload is not None and state.offload.has_pending_offer(running):
        return None
    finish_limit = min(request.remaining_outputs for request in running)
    steps = _steps_within_free_blocks(running, state.pool.free_blocks, state.block_size, finish_limit)
    if steps == 0:
        return None
    context_sum = sum(request.num_computed + 1 for request in running)
    return DecodeStretch(start, model.decode_stretch(batch, context_sum), steps)


def _can_admit(state: NodeState, batch: int) -> bool:
    if batch >= state.profile.max_num_seqs or batch >= state.profile.max_num_batched_tokens:
        return False
    if state.offload is not None and state.offload.loaded:
        return state.resumable(state.offload.loaded[0])
    head = state.waiting.peek()
    if head is None:
        return False
    return state.admission_match(head) is not None  # a deferred head lets the next one try: not a stretch


def _steps_within_free_blocks(running: list[LiveRequest], free: int, block_size: int, cap: int) -> int:
    """The largest k ≤ cap such that k more decode steps of every request need at most `free` new blocks."""

    def demand(steps: int) -> int:
        return sum(-(-(r.num_computed + steps) // block_size) - r.held_blocks for r in running)

    low, high = 0, cap
    while low < high:
        middle = (low + high + 1) // 2
        if demand(middle) <= free:
            low = middle
        else:
            high = middle - 1
    return low
