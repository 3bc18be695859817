"""`NodeEngine`: one vLLM v1 node as a pure, synchronous, clock-free state machine.

Time only enters as the `now`/`until` arguments, in seconds, and must never go backwards. The engine runs steps
back to back while it has work: a step is scheduled when the previous one ends (or, when idle, at the time of the
first `advance`/`next_event_time` after a submit), and its effects — tokens, finishes, KV events — appear at its
end. A request submitted while a step is in flight is considered at the next step boundary, as in vLLM, whose engine
core adds new requests between steps. Aborts, too, take effect at the next boundary (immediately when idle, or when
the request is still waiting).

Drivers:
* virtual time: keep `next_event_time()` of every node in a heap; pop the earliest, `advance` that node to it;
  submit arrivals at their time. `next_event_time()` commits the next step if the engine is between steps, so submit
  every request of an instant before asking it.
* real time: call `advance(wall_now)` whenever woken, sleep until `next_event_time()` or the next streaming tick,
  and read `generated_tokens(request_id)` to stream progressively.

Events are buffered by every call that moves time (`submit`, `abort`, `reset_prefix_cache` advance first) and
handed out by `advance`, in time order; `next_event_time()` is `now` while any are buffered.

CPU tier: a request whose CPU→GPU load is in flight holds its blocks but runs nothing. Load completions are seen at
step boundaries (vLLM polls transfers at the end of every step): a decode stretch is cut at the first step ending
at or after the next completion, and when nothing can run until a load ends, the engine waits for it
(`next_event_time()` is then that completion).

Invariants: `_clock ≤ _now`; a plan (one scheduled step, or a decode stretch) exists only while there is work, and
its first step started at `_clock`; pending aborts name running requests of the plan in flight; loads that ended by
`_clock` have been completed whenever no plan is in flight.
"""

from __future__ import annotations

import math

from ...core.model import BlockRun
from .counters import NodeCounters, snapshot
from .decode_stretch import DecodeStretch, plan_decode_stretch
from .events import NodeEvent
from .profile import NodeProfile
from .queues import SchedulingPolicy
from .request import LiveRequest, NodeRequest, build_sequence
from .scheduler import ScheduledStep, complete_step, schedule_step
from .state import NodeState
from .step_time import StepTimeModel


class RequestRejected(ValueError):
    """The node refuses a request at submit (vLLM answers 400), so it can never wedge the node."""


class _StepInFlight:
    __slots__ = ("end", "step")

    def __init__(self, end: float, step: ScheduledStep) -> None:
        self.end = end
        self.step = step


class NodeEngine:
    """One node. `policy` is vLLM's --scheduling-policy; `start_time` the initial clock (a real-time server passes its
    clock's now). `closed_form_decode=False` schedules every step singly (for checks; same results, slower);
    `kv_events=False` skips building KV events when nobody consumes them."""

    def __init__(
        self,
        profile: NodeProfile,
        *,
        policy: SchedulingPolicy = "fcfs",
        start_time: float = 0.0,
        closed_form_decode: bool = True,
        kv_events: bool = True,
    ) -> None:
        self._state = NodeState(profile, policy, kv_events)
        self._model = StepTimeModel(profile.step)
        self._closed_form = closed_form_decode
        self._plan: _StepInFlight | DecodeStretch | None = None
        self._clock = start_time  # last step end while busy; the latest time reached while idle
        self._now = start_time
        self._events: list[NodeEvent] = []
        self._pending_aborts: set[str] = set()
        self._submitted = 0
        self._next_fresh_id = 0

    @property
    def profile(self) -> NodeProfile:
        return self._state.profile

    @property
    def now(self) -> float:
        """The latest time the engine was advanced to."""
        return self._now

    def submit(self, request: NodeRequest, now: float) -> None:
        self._advance_to(now)
        self._validate(request)
        sequence = build_sequence(request, self._state.block_size, self._fresh_run)
        arrival = now if request.arrival_time is None else request.arrival_time
        live = LiveRequest(request, sequence, arrival, self._submitted)
        self._submitted += 1
        self._state.requests[request.request_id] = live
        self._state.waiting.add(live)
        if isinstance(self._plan, DecodeStretch) and self._state.waiting.peek() is live:
            self._plan.cut_after_inflight_step()

    def advance(self, until: float) -> list[NodeEvent]:
        """Run the engine up to `until` (every step that ends by then) and return the events produced so far."""
        if until >= self._now:
            self._advance_to(until)
        events, self._events = self._events, []
        return events

    def next_event_time(self) -> float | None:
        """When the step in flight (or the closed-form decode stretch) ends; None when idle with nothing to do.

        While events are buffered (a submit, abort or reset moved time and produced some), it is `now`, so a driver
        that only advances at this time still collects them.
        """
        if self._events:
            return self._now
        if self._plan is None:
            if not self._state.has_work():
                return None
            if not self._start_plan():
                return self._now if self._events else self._load_wake()
        if isinstance(self._plan, DecodeStretch):
            return self._plan.final_end
        assert self._plan is not None
        return self._plan.end

    def abort(self, request_id: str, now: float) -> bool:
        """Abort a live request (reported as Finished with reason "abort"); False if it is not live."""
        self._advance_to(now)
        request = self._state.requests.get(request_id)
        if request is None:
            return False
        if isinstance(self._plan, DecodeStretch):
            self._plan.cut_after_inflight_step()  # the running set or the queue head changes
        if self._plan is not None and request in self._state.running:
            self._pending_aborts.add(request_id)
        else:
            self._events.append(self._state.abort(request, self._now))
        return True

    def reset_prefix_cache(self, now: float, *, reset_external: bool = False) -> bool:
        """Drop every cached GPU block and emit AllBlocksCleared; refused (False) while any request holds blocks.

        `reset_external` (vLLM's `/reset_prefix_cache?reset_external=true`) also empties the CPU tier, even when the
        GPU reset is refused, and emits nothing for it (vLLM publishes no CPU events on a connector reset).
        """
        self._advance_to(now)
        done = self._state.pool.reset()
        if done:
            self._events.extend(self._state.kv.cleared(self._now))
        if reset_external and self._state.offload is not None:
            self._state.offload.reset()
        return done

    def generated_tokens(self, request_id: str) -> int:
        """Output tokens a live request has produced so far (for progressive streaming)."""
        try:
            return self._state.requests[request_id].generated
        except KeyError:
            raise KeyError(f"request {request_id!r} is not live on node {self.profile.name!r}") from None

    def is_live(self, request_id: str) -> bool:
        return request_id in self._state.requests

    def cached_block_runs(self) -> list[BlockRun]:
        """The ids in this node's prefix cache right now (ground truth for what KV events describe)."""
        return self._state.pool.cached_runs()

    def counters(self) -> NodeCounters:
        return snapshot(self._state)

    def cpu_block_runs(self) -> list[BlockRun]:
        """The ids in this node's CPU tier right now (empty without a tier)."""
        offload = self._state.offload
        return [] if offload is None else offload.pool.runs()

    def check_invariants(self) -> None:
        """Assert the block pools' and the requests' invariants (O(state); for tests and debugging)."""
        state = self._state
        state.pool.check_invariants()
        holding = list(state.running)
        if state.offload is not None:
            state.offload.check_invariants()
            holding += [*state.offload.loading, *state.offload.loaded]
        assert len(holding) == len(set(holding)), "a request is in two places"
        assert len(holding) + len(state.waiting) == len(state.requests), "a live request is lost or duplicated"
        held = sum(r.held_blocks for r in holding)
        assert held >= state.pool.used_blocks, "requests hold fewer blocks than the pool has in use"
        holders = set(holding)
        assert all(r.held_blocks == 0 for r in state.requests.values() if r not in holders)

    def _validate(self, request: NodeRequest) -> None:
        profile = self._state.profile
        if request.request_id in self._state.requests:
            raise RequestRejected(f"request {request.request_id!r} is already live on this node")
        if request.arrival_time is not None and request.arrival_time > self._now:
            raise RequestRejected(f"request {request.request_id!r}: arrival_time is after the submit time {self._now}")
        full_blocks = request.prompt.tokens // profile.block_size
        if request.prompt.block_count > full_blocks:
            raise RequestRejected(
                f"request {request.request_id!r}: a {request.prompt.tokens}-token prompt has {full_blocks} full blocks "
                f"of {profile.block_size} tokens, but its block_runs name {request.prompt.block_count}"
            )
        total = request.prompt.tokens + request.output_tokens
        if total > profile.model_len_limit:
            raise RequestRejected(
                f"request {request.request_id!r}: prompt {request.prompt.tokens} + output {request.output_tokens} = "
                f"{total} tokens exceeds max_model_len {profile.model_len_limit} of node profile {profile.name!r} "
                f"(KV capacity (num_gpu_blocks − 1) × block_size = {profile.capacity_tokens} tokens)"
            )

    def _fresh_run(self, count: int) -> int:
        self._next_fresh_id -= count
        return self._next_fresh_id

    def _advance_to(self, until: float) -> None:
        if until < self._now:
            raise ValueError(f"time went backwards: {until} < {self._now}")
        if math.isnan(until):
            raise ValueError("time is NaN")
        self._now = until
        while True:
            if self._plan is None:
                self._state.complete_loads(self._clock)
                if not self._state.has_work():
                    self._clock = until
                    return
                if self._clock >= until:
                    return
                if not self._start_plan():
                    wake = self._load_wake()
                    if wake is None or wake > until:
                        self._clock = until
                        return
                    self._clock = wake
                    continue
            if not self._consume_plan(until):
                return

    def _load_wake(self) -> float | None:
        offload = self._state.offload
        return None if offload is None else offload.next_completion

    def _start_plan(self) -> bool:
        """Plan the next step(s) from `_clock`; False when nothing can run before a load ends (or a request comes)."""
        state = self._state
        stretch = plan_decode_stretch(state, self._model, self._clock) if self._closed_form else None
        if stretch is not None:
            wake = self._load_wake()
            if wake is not None:  # stop at the first step boundary that sees the load done
                steps = stretch.clock.steps_within(wake - self._clock, stretch.remaining)
                if steps == 0 or stretch.end_of(steps) < wake:
                    steps += 1
                stretch.remaining = min(stretch.remaining, steps)
            self._plan = stretch
            return True
        step = schedule_step(state, self._model)
        if state.offload is not None:
            state.offload.launch(self._clock + step.duration)
        if not step.work and not step.preempted:  # only loads admitted, or nothing: no forward pass
            self._events.extend(complete_step(state, step, self._clock))
            return False
        self._plan = _StepInFlight(self._clock + step.duration, step)
        return True

    def _consume_plan(self, until: float) -> bool:
        """Apply the plan's steps that end by `until`; True when the plan is used up."""
        plan = self._plan
        if isinstance(plan, _StepInFlight):
            if plan.end > until:
                return False
            self._clock = plan.end
            self._events.extend(complete_step(self._state, plan.step, plan.end))
        elif plan is not None:
            steps = plan.steps_ending_by(until)
            if steps == 0:
                return False
            self._clock, events = plan.apply(self._state, steps)
            self._events.extend(events)
            if plan.remaining > 0:
                return False
        self._plan = None
        self._apply_pending_aborts()
        return True

    def _apply_pending_aborts(self) -> None:
        for request_id in sorted(self._pending_aborts):
            request: LiveRequest | None = self._state.requests.get(request_id)
            if request is not None:
                self._events.append(self._state.abort(request, self._clock))
        self._pending_aborts.clear()
