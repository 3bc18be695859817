"""The live service's planning off the event loop: the plan the core asks for (`StartPlan`) is solved in one worker
thread on its frozen snapshot (`core/snapshot.py`), and its result handed back to the core (`PlanFinished`).

Invariants:
- at most one plan is in flight (the core asks for the next one only after the last came back), so one thread is
  enough and plans are solved in the order asked;
- every plan asked for comes back: one whose solve raised comes back empty, since the core holds no other plan while
  it waits and every session without a place would wait with it;
- a plan solved for a core that was replaced meanwhile (a replica that stopped leading, `replica.py`) is dropped;
- a result that could not be handed back is logged at once, loudly: no plan would start again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..core.plan import Plan, PlanFinished
from ..core.snapshot import PlanJob
from .core_slot import CoreSlot

log = logging.getLogger("tao.coordinator")


class PlanRunner:
    """Solves each job given to `start`, tells `solved` how long it took, and hands the plan to `finished` with its
    job and that time."""

    def __init__(
        self,
        core: CoreSlot,
        finished: Callable[[PlanFinished, PlanJob, float], object],
        solved: Callable[[float], None],
    ) -> None:
        self.core = core
        self.finished = finished
        self.solved = solved
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tao-planner")
        self._in_flight: asyncio.Future[None] | None = None
        """Held so that the event loop, which keeps only weak references to tasks, does not lose it."""

    def start(self, job: PlanJob) -> None:
        self._in_flight = asyncio.ensure_future(self._solve(job))
        self._in_flight.add_done_callback(_report_plan_failure)

    def stop(self) -> None:
        """Wait for a solve under way, then release the worker thread."""
        self._executor.shutdown(wait=True)

    async def _solve(self, job: PlanJob) -> None:
        core = self.core.coordinator

        def timed() -> tuple[float, Plan]:
            started = time.perf_counter()
            plan = job.solve()
            return time.perf_counter() - started, plan

        try:
            elapsed, plan = await asyncio.get_running_loop().run_in_executor(self._executor, timed)
        except Exception:
            log.exception("plan %d could not be solved; an empty plan stands in", job.id)
            elapsed, plan = 0.0, Plan(())
        self.solved(elapsed)
        if self.core.coordinator is core:
            self.finished(PlanFinished(job.id, plan), job, elapsed)


def _report_plan_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("a finished plan could not be handed to the core; no plan will start again", exc_info=error)
