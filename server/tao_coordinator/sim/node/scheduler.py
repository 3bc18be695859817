"""One vLLM v1 engine step, scheduled the way `Scheduler.schedule()` does it (§7.1–7.2 of the vLLM reference).

1. Running requests first, in admission order, while the token budget lasts: each gets its remaining tokens (one
   for a decode, the next chunk for a prefill) capped by the budget. If its new blocks do not fit, preempt by
   recompute — the last running request (fcfs) or the worst (priority, arrival) (priority) — until they fit or the
   request itself was the victim, which ends the running pass.
2. Only if nobody was preempted: admit waiting requests in queue order while budget and `max_num_seqs` allow. A
   request is admitted only if blocks for its whole sequence fit now (`scheduler_reserve_full_isl`); the first that
   does not fit stops admission (head-of-line blocking). NodeAdmission takes the longest cached prefix (never the last
   token) and allocates blocks for the scheduled chunk only.
   With a CPU tier: requests whose CPU→GPU load ended are scheduled first (the first that does not fit stops
   admission); a queued request with a CPU hit after its GPU hit is admitted without compute — it takes its blocks
   and starts its load (`offload.py`), using no token budget — and one whose CPU hit reaches a block in flight is
   skipped this step and keeps its place.

Blocks are allocated and full blocks committed (visible to later lookups, even in the same step) at scheduling time;
tokens are accounted when the step ends (`complete_step`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .events import NodeEvent, Preempted
from .request import LiveRequest
from .state import DEFERRED, NodeAdmission, NodeState
from .step_time import StepTimeModel


@dataclass(slots=True)
class ScheduledStep:
    work: dict[LiveRequest, int] = field(default_factory=dict)
    """Scheduled tokens per request, in scheduling order."""
    preempted: list[LiveRequest] = field(default_factory=list)
    duration: float = 0.0


def schedule_step(state: NodeState, model: StepTimeModel) -> ScheduledStep:
    step = ScheduledStep()
    budget = _schedule_running(state, step, state.profile.max_num_batched_tokens)
    if not step.preempted:
        _admit_waiting(state, step, budget)
    step.duration = _duration(step, model)
    return step


def _schedule_running(state: NodeState, step: ScheduledStep, budget: int) -> int:
    index = 0
    while index < len(state.running) and budget > 0:
        request = state.running[index]
        tokens = min(request.num_tokens - request.num_computed, budget)
        while state.blocks_needed(request, tokens) > state.pool.free_blocks:
            victim, victim_index = _pick_victim(state)
            del state.running[victim_index]
            if victim in step.work:
                budget += step.work.pop(victim)
                index -= 1
            state.preempt(victim)
            step.preempted.append(victim)
            if victim is request:
                return budget
        state.grow(request, tokens)
        step.work[request] = tokens
        budget -= tokens
        index += 1
    return budget


def _pick_victim(state: NodeState) -> tuple[LiveRequest, int]:
    if state.policy == "fcfs":
        return state.running[-1], len(state.running) - 1
    victim = max(state.running, key=lambda request: request.priority_key)  # first of equals, like vLLM
    return victim, state.running.index(victim)


def _admit_waiting(state: NodeState, step: ScheduledStep, budget: int) -> None:
    if state.offload is not None and state.offload.loaded:
        resumed = _resume_loaded(state, step, budget)
        if resumed is None:
            return
        budget = resumed
    skipped: list[LiveRequest] = []
    while budget > 0 and len(state.running) < state.profile.max_num_seqs:
        request = state.waiting.peek()
        if request is None:
            break
        admission = state.admission_match(request)
        if admission is None:
            break
        state.waiting.pop()
        if not isinstance(admission, NodeAdmission):
            assert admission == DEFERRED
            skipped.append(request)
            continue
        state.admit(request, admission)
        if admission.load_blocks:
            continue
        tokens = min(request.num_tokens - request.num_computed, budget)
        state.grow(request, tokens)
        step.work[request] = tokens
        budget -= tokens
    if skipped:
        state.waiting.return_skipped(skipped)


def _resume_loaded(state: NodeState, step: ScheduledStep, budget: int) -> int | None:
    """Schedule requests whose load ended; the budget left, or None if one did not fit (admission stops)."""
    assert state.offload is not None
    loaded = state.offload.loaded
    while loaded and budget > 0 and len(state.running) < state.profile.max_num_seqs:
        request = loaded[0]
        if not state.resumable(request):
            return None
        state.resume(request)
        tokens = min(request.num_tokens - request.num_computed, budget)
        state.grow(request, tokens)
        step.work[request] = tokens
        budget -= tokens
    return budget


def _duration(step: ScheduledStep, model: StepTimeModel) -> float:
    tokens = decode_context = 0
    prefill_pairs = 0.0
    for request, new_tokens in step.work.items():
        tokens += new_tokens
        if request.is_decoding:
            decode_context += request.num_computed + 1
        else:
            prefill_pairs += new_tokens * (request.num_computed + new_tokens / 2)
    return model.step_seconds(tokens, decode_context, prefill_pairs)


def complete_step(state: NodeState, step: ScheduledStep, end: float) -> list[NodeEvent]:
    """Apply a scheduled step at its end time: preemption reports, KV events, then token milestones."""
    events: list[NodeEvent] = [Preempted(end, r.request_id, r.generated) for r in step.preempted]
    if state.offload is not None:
        state.offload.end_step()
    events.extend(state.kv.drain(end))
    start = end - step.duration
    for request, tokens in step.work.items():
        if request.first_scheduled is None:
            request.first_scheduled = start
        events.extend(state.complete_tokens(request, tokens, end))
    return events
