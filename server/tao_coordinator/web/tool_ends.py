"""Tool ends on their way into the core: what the history learns from each is committed first, then the end is fed.

Invariants:
- a tool end is judged against its session as feeding it would judge it (`core/state_machine.py`) before anything is
  stored, so one the core would refuse stores nothing;
- without `--redis`, its row is committed to the store (`store.py`) before the end is fed and answered; one the store
  cannot take raises `StoreUnavailable` (a 503) and is never fed, so a refused tool end changes nothing;
- a session that closes while its row is written keeps the row (the tool did run that long), and the answer is then
  the core's error; a client that hangs up does not stop a stored row from being fed;
- a repeat of a tool end being stored waits for the first, then is judged afresh;
- a tool end that came with an age (`age_s`) is fed with the time its row took to store added to it, so the core
  dates it where its duration was measured;
- the tool ends judged in one turn of the event loop go to the store together (`record_all`): one transaction, and
  one wake-up of the loop when it commits;
- with `--redis` there is no store here: the end is fed at once, and the replica writes the row before the answer
  (`replica.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from ..core.errors import CoreError
from ..core.events import MAX_AGE_S, ToolEnd
from ..core.forecast import learned_duration
from ..core.model import RunningTool
from ..core.state_machine import tool_end as checked_tool_end
from ..core.state_machine import tool_end_time
from ..store import HistoryStore, StoreUnavailable, ToolRow
from .core_slot import CoreSlot

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Ending:
    """A tool end judged and on its way to the store: what is fed once its row is, and who is told."""

    key: tuple[str, str]
    event: ToolEnd
    running: RunningTool
    row: ToolRow
    judged: float
    """Loop time when it was judged."""
    fed: asyncio.Future[None]
    """Its requester's answer; cancelled when the requester hangs up, which stops nothing."""
    repeats: list[asyncio.Future[None]] = field(default_factory=list)
    """Repeats of the same end, waiting for this one to finish before they are judged."""


class ToolEnds:
    """Hands each tool end, with the duration the history learns from it, to `commit` (which feeds it) once `store`
    holds its row; tells `refused` of every row the store could not take."""

    def __init__(
        self,
        core: CoreSlot,
        store: HistoryStore | None,
        commit: Callable[[ToolEnd, RunningTool, ToolRow], None],
        refused: Callable[[], None],
    ) -> None:
        self.core = core
        self.store = store
        self.commit = commit
        self.refused = refused
        self._ending: dict[tuple[str, str], _Ending] = {}
        """Tool ends being stored, by (session, call)."""
        self._unqueued: list[_Ending] = []
        """Tool ends judged in this turn of the loop, queued to the store together at its end (`_queue`)."""

    async def end(self, event: ToolEnd) -> None:
        """Returns once the end is fed (its row committed first, without `--redis`); raises the core's errors, or
        `StoreUnavailable` with the core unchanged."""
        key = (event.session_id, event.call_id)
        loop = asyncio.get_running_loop()
        while (pending := self._ending.get(key)) is not None:
            pending.repeats.append(repeat := loop.create_future())
            await repeat
        session = self.core.coordinator.session(event.session_id)
        now = loop.time()
        checked_tool_end(session, now, event.call_id)  # raises as feeding it would, and changes nothing
        running = next(tool for tool in session.tools if tool.call_id == event.call_id)
        ended = tool_end_time(session, now, event.call_id, event.age_s)
        duration = event.duration_s if event.duration_s is not None else max(0.0, ended - running.started_at)
        event = replace(event, duration_s=duration)
        row = (running.tool, running.program, learned_duration(running.hints, duration), time.time())
        if self.store is None:
            self.commit(event, running, row)
            return
        ending = self._ending[key] = _Ending(key, event, running, row, now, loop.create_future())
        self._unqueued.append(ending)
        if len(self._unqueued) == 1:
            loop.call_soon(self._queue, self.store)
        await ending.fed

    def _queue(self, store: HistoryStore) -> None:
        """Queue the rows judged in this turn of the loop in one `record_all`: one future and one transaction for a
        batch of events, where a future and a wake-up of the loop for each row cost more than the row."""
        endings, self._unqueued = self._unqueued, []
        try:
            written = store.record_all([ending.row for ending in endings])
        except StoreUnavailable as refusal:
            for ending in endings:
                self._stored(ending, refusal)
            return
        loop = asyncio.get_running_loop()

        def committed(_: Future[None]) -> None:  # in the store's writer thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._all_stored, endings, written)

        written.add_done_callback(committed)

    def _all_stored(self, endings: list[_Ending], written: Future[None]) -> None:
        error = written.exception()
        for ending in endings:
            try:
                self._stored(ending, error)
            except Exception:
                log.exception("a stored tool end could not be answered")

    def _stored(self, ending: _Ending, error: BaseException | None) -> None:
        """Feed the end whose row is stored (`error` None), then answer its requester and release its repeats."""
        del self._ending[ending.key]
        outcome = error
        if isinstance(error, StoreUnavailable):
            self.refused()
        elif error is None:
            event = ending.event
            if event.age_s:  # dated as it was judged: the time its row took to store is not the tool's
                waited = asyncio.get_running_loop().time() - ending.judged
                event = replace(event, age_s=min(MAX_AGE_S, event.age_s + waited))
            try:
                self.commit(event, ending.running, ending.row)
            except Exception as refusal:  # the core's refusal (its session closed meanwhile) answers the requester
                outcome = refusal
        for repeat in ending.repeats:
            if not repeat.done():
                repeat.set_result(None)
        if ending.fed.done():  # its requester hung up
            if outcome is not None and not isinstance(outcome, (StoreUnavailable, CoreError)):
                log.error("a stored tool end could not be fed", exc_info=outcome)
        elif outcome is None:
            ending.fed.set_result(None)
        else:
            ending.fed.set_exception(outcome)
