"""The waiting queue as a client sees it: where a session that asked for a model call stands, and how long it may
wait (`Coordinator.queue_position`).

The waiting sessions are those with an acquire pending (WAITING, `acquire_pending`): they asked for a call and
hold no place. A session in a tool without a place is a candidate of the planner but asks for nothing, so it is
not in the queue.

Order: by when each session asked, first come first. The planner does not admit in that order — it admits by value
(cache credit, readiness, footprint, `docs/algorithm.md`), and a baseline by its own rule — so the position is not a
promise of who goes next. It is the one order every policy has and that never moves a session back: a position only
falls while the session waits, by one for each session ahead of it served or gone, so a harness can show it as
progress. A value order would need the policy's values (a baseline has none), and it ranks a set of placements per
node, not a line; a session's rank in it would jump as credit decays and tools return.

Estimate: the mean busy time between two services of the queue (a waiting session given its place), over the last
`SERVED_WINDOW` services, times the position. Busy time counts only while someone waits, so a quiet spell with an
empty queue does not look like a slow fleet. When the time since the last service, while busy, is already longer
than that mean (the fleet stalls: a node down, long calls), it counts as one more gap, so the estimate grows with
the stall. Until the queue has been served once there is no estimate (None). It is the wait of the position-th
session if places went to the waiting sessions first come first; with value admission the mean over the waiting
sessions is right (as many are served per second whoever they are), one session's wait may be shorter or longer.

Invariants: the queue holds exactly the live sessions with an acquire pending (kept in step by `observe`, given
every session an event or its actions touched); tickets are handed out in increasing order as sessions join, so
`_tickets` stays sorted and a position is a bisection.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import AgentSession, SessionId

SERVED_WINDOW = 16
"""How many of the latest services the estimate averages over: enough to smooth single calls of very different
lengths, few enough to follow a fleet that grows or shrinks within a minute or so of services."""


@dataclass(frozen=True, slots=True)
class QueuePosition:
    """Where a waiting session stands in the queue."""

    position: int
    """1 for the session that has waited longest; the number of waiting sessions that asked before it, plus one."""
    waiting: int
    """Sessions waiting in all."""
    estimated_wait_s: float | None
    """Seconds until it is served, at the rate the queue was served lately; None before any service was seen."""


class CallQueue:
    def __init__(self, window: int = SERVED_WINDOW) -> None:
        self._ticket_of: dict[SessionId, int] = {}
        self._tickets: list[int] = []
        """The tickets of the waiting sessions, sorted (ascending = order of asking)."""
        self._next_ticket = 0
        self._gaps: deque[float] = deque(maxlen=window)
        """Busy seconds between consecutive services, the latest last."""
        self._busy_s = 0.0
        """Busy seconds since the last service."""
        self._seen_at: float | None = None

    def __len__(self) -> int:
        return len(self._tickets)

    def observe(
        self,
        touched: Iterable[SessionId],
        served: set[SessionId],
        sessions: Mapping[SessionId, AgentSession],
        now: float,
    ) -> None:
        """Time moved to `now`; `touched` are the sessions an event or its actions may have changed, `served` those
        of them routed to a node (a `Route` that is not a side call)."""
        if self._seen_at is not None and self._tickets:
            self._busy_s += max(0.0, now - self._seen_at)
        self._seen_at = now
        for session_id in touched:
            session = sessions.get(session_id)
            pending = session is not None and session.acquire_pending
            if pending and session_id not in self._ticket_of:
                self._join(session_id)
            elif not pending and session_id in self._ticket_of:
                self._leave(session_id)
                if session_id in served:
                    self._gaps.append(self._busy_s)
                    self._busy_s = 0.0

    def restore(self, sessions: Iterable[AgentSession]) -> None:
        """Queue the restored sessions that wait, in the order they entered their phase (the best a stored session
        says of when it asked)."""
        for session in sorted(sessions, key=lambda s: (s.phase_since, s.id)):
            if session.acquire_pending and session.id not in self._ticket_of:
                self._join(session.id)

    def position(self, session_id: SessionId, now: float) -> QueuePosition | None:
        """Where `session_id` stands at `now`; None when it does not wait."""
        ticket = self._ticket_of.get(session_id)
        if ticket is None:
            return None
        position = bisect.bisect_left(self._tickets, ticket) + 1
        gap = self.mean_gap_s(now)
        return QueuePosition(position, len(self._tickets), None if gap is None else position * gap)

    def mean_gap_s(self, now: float) -> float | None:
        """Busy seconds per service lately; None before any service."""
        if not self._gaps:
            return None
        busy = self._busy_s
        if self._seen_at is not None and self._tickets:
            busy += max(0.0, now - self._seen_at)
        closed = sum(self._gaps)
        return max(closed / len(self._gaps), (closed + busy) / (len(self._gaps) + 1))

    def _join(self, session_id: SessionId) -> None:
        self._ticket_of[session_id] = self._next_ticket
        self._tickets.append(self._next_ticket)
        self._next_ticket += 1

    def _leave(self, session_id: SessionId) -> None:
        ticket = self._ticket_of.pop(session_id)
        del self._tickets[bisect.bisect_left(self._tickets, ticket)]
