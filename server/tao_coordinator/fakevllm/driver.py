"""Runs one `NodeEngine` in real time inside an asyncio loop, and tells each submitted request how far it got.

One engine task loops: advance the engine to the clock's now; hand the events (maybe none) to the listener, which
publishes KV events and refreshes metrics; update every live request's ticket (tokens generated so far, finish);
sleep until the engine's next event time, a tick while the engine is busy (so streams and metrics move during long
decode stretches), or a wake-up from a submit/abort. Everything runs on the loop's thread, so submits always happen
between two advances — never during one — and `next_event_time()` is asked only after every request of an instant
was submitted. If the loop fails (a bug), every request in flight is marked failed and new submits are refused.

Invariants: a ticket's `generated` never decreases and reaches the request's output tokens exactly when `finished`
is set; `changed` is set whenever either moves; a finished ticket is no longer tracked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from ..sim.node import Finished, NodeEngine, NodeEvent, NodeRequest
from .clock import ScaledClock

log = logging.getLogger(__name__)

EventListener = Callable[[Sequence[NodeEvent]], None]


class Ticket:
    """A submitted request's progress, as its HTTP handler sees it."""

    __slots__ = ("changed", "failed", "finished", "generated", "request_id")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.generated = 0
        self.finished: Finished | None = None
        self.failed = False
        """The engine loop died; the request will never finish."""
        self.changed = asyncio.Event()

    async def wait_change(self) -> None:
        await self.changed.wait()
        self.changed.clear()


class EngineDriver:
    def __init__(self, engine: NodeEngine, clock: ScaledClock, tick_seconds: float, listener: EventListener) -> None:
        self.engine = engine
        self.clock = clock
        self._tick = tick_seconds
        self._listener = listener
        self._tickets: dict[str, Ticket] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def in_flight(self) -> int:
        return len(self._tickets)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fake-vllm-engine-{id(self)}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure was logged when it happened
                await self._task
            self._task = None

    def submit(self, request: NodeRequest) -> Ticket:
        """Queue a request now; raises the node's `RequestRejected`."""
        if self._task is not None and self._task.done():
            raise RuntimeError("the fake node's engine loop is not running")
        self.engine.submit(request, self.clock.now())
        ticket = Ticket(request.request_id)
        self._tickets[request.request_id] = ticket
        self._wake.set()
        return ticket

    def abort(self, request_id: str) -> None:
        if request_id in self._tickets and self.engine.abort(request_id, self.clock.now()):
            self._wake.set()

    def replace_engine(self, engine: NodeEngine) -> None:
        """Run `engine` from now on (a restart): the requests in flight fail, as they would with the process."""
        self._fail_all()
        self.engine = engine
        self._wake.set()

    def poke(self) -> None:
        """Advance soon: the engine changed outside a submit or abort (e.g. a prefix-cache reset)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                delay = self._step()
            except Exception:  # a listener bug must not silently freeze every request on the node
                log.exception("fake vLLM engine loop failed; failing the requests in flight")
                self._fail_all()
                raise
            if delay is None:
                await self._wake.wait()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    def _step(self) -> float | None:
        now = self.clock.now()
        events = self.engine.advance(now)
        self._listener(events)
        for event in events:
            if isinstance(event, Finished):
                self._finish(event)
        for request_id, ticket in self._tickets.items():
            generated = self.engine.generated_tokens(request_id)
            if generated != ticket.generated:
                ticket.generated = generated
                ticket.changed.set()
        next_time = self.engine.next_event_time()
        if next_time is None:
            return None
        return min(self.clock.wall_delay(next_time - now), self._tick)

    def _finish(self, event: Finished) -> None:
        ticket = self._tickets.pop(event.request_id, None)
        if ticket is not None:
            ticket.generated = event.completion_tokens
            ticket.finished = event
            ticket.changed.set()

    def _fail_all(self) -> None:
        for ticket in self._tickets.values():
            ticket.failed = True
            ticket.changed.set()
        self._tickets.clear()
