"""The live service's alarm clock: the core says when time alone will change something (`next_wakeup`,
`core/coordinator.py`), and a `Tick` is fed then.

Invariants: at most one wake-up is pending, set for the core's latest answer (asked again after every fed event,
`schedule`); a wake-up already due fires at once; a time asked for twice is not set twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..core.events import Tick
from .core_slot import CoreSlot


class Wakeup:
    """Feeds `Tick()` to `feed` when the current core next asks for one."""

    def __init__(self, core: CoreSlot, feed: Callable[[Tick], object]) -> None:
        self.core = core
        self.feed = feed
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None

    def schedule(self) -> None:
        """Ask the core when it next wants a tick, and set the alarm for then unless it is set for that already."""
        wake = self.core.coordinator.next_wakeup()
        if wake is None or wake == self._at:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._at = wake
        loop = asyncio.get_running_loop()
        self._handle = loop.call_at(max(wake, loop.time()), self._ring)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def _ring(self) -> None:
        self._handle = self._at = None
        self.feed(Tick())
