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
- with `--redis` there is no store here: the end is fed at once, and the replica writes the row before the answer
  (`replica.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

from ..core.events import MAX_AGE_S, ToolEnd
from ..core.forecast import learned_duration
from ..core.model import RunningTool
from ..core.state_machine import tool_end as checked_tool_end
from ..core.state_machine import tool_end_time
from ..store import HistoryStore, StoreUnavailable, ToolRow
from .core_slot import CoreSlot


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
        self._ending: dict[tuple[str, str], asyncio.Task[None]] = {}
        """Tool ends being stored, by (session, call)."""

    async def end(self, event: ToolEnd) -> None:
        """Returns once the end is fed (its row committed first, without `--redis`); raises the core's errors, or
        `StoreUnavailable` with the core unchanged."""
        key = (event.session_id, event.call_id)
        while (pending := self._ending.get(key)) is not None:
            await asyncio.wait([pending])
        session = self.core.coordinator.session(event.session_id)
        now = asyncio.get_running_loop().time()
        checked_tool_end(session, now, event.call_id)  # raises as feeding it would, and changes nothing
        running = next(tool for tool in session.tools if tool.call_id == event.call_id)
        ended = tool_end_time(session, now, event.call_id, event.age_s)
        duration = event.duration_s if event.duration_s is not None else max(0.0, ended - running.started_at)
        event = replace(event, duration_s=duration)
        row = (running.tool, running.program, learned_duration(running.hints, duration), time.time())
        if self.store is None:
            self.commit(event, running, row)
            return
        ending = asyncio.ensure_future(self._store_then_commit(self.store, event, running, row, now))
        self._ending[key] = ending
        ending.add_done_callback(lambda done: self._ended(key, done))
        await asyncio.shield(ending)  # a client that hangs up does not stop a stored row from being fed

    async def _store_then_commit(
        self, store: HistoryStore, event: ToolEnd, running: RunningTool, row: ToolRow, judged: float
    ) -> None:
        try:
            await asyncio.wrap_future(store.record(*row))
        except StoreUnavailable:
            self.refused()
            raise
        if event.age_s:  # dated as it was judged above: the time its row took to store is not the tool's
            waited = asyncio.get_running_loop().time() - judged
            event = replace(event, age_s=min(MAX_AGE_S, event.age_s + waited))
        self.commit(event, running, row)

    def _ended(self, key: tuple[str, str], done: asyncio.Task[None]) -> None:
        if self._ending.get(key) is done:
            del self._ending[key]
        if not done.cancelled():
            done.exception()  # read here too: its requester may have hung up
