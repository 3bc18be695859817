"""Places the core granted, on their way to the clients that asked: each session's lease, the acquire waiting for
its answer, and a grant kept for a session that is not asking right now.

Invariants:
- a grant answers the session's waiting acquire if there is one (also when it lands as that acquire's wait runs
  out), or is kept until the session asks, so an admission is never lost to a dropped connection or a timeout;
- a lease lives as long as the session's place in an LLM call: calls that overlap a running one (harness side
  calls) get the same lease, so each of their `llm_end`s is accepted;
- a session forgotten (closed, expired, or every session when a replica stops leading) fails its waiting acquire
  with the reason, and keeps neither lease nor grant.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a waiting acquire was placed, and its lease."""

    node: str
    lease_id: str


class Grants:
    def __init__(self) -> None:
        self.leases: dict[str, str] = {}
        """Each session's current lease id, by session."""
        self._waiters: dict[str, asyncio.Future[Placed]] = {}
        self._unclaimed: dict[str, Placed] = {}

    def grant(self, session_id: str, node: str, overlapping: bool) -> None:
        """Hand session `session_id` its place on `node`; `overlapping`: the call overlaps a running one of the
        session, whose lease it shares."""
        shared = self.leases.get(session_id) if overlapping else None
        grant = Placed(node, shared if shared is not None else uuid.uuid4().hex[:16])
        self.leases[session_id] = grant.lease_id
        waiter = self._waiters.pop(session_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(grant)
        else:
            self._unclaimed[session_id] = grant

    def claim(self, session_id: str) -> Placed | None:
        """The grant kept for the session, taken; None when there is none."""
        return self._unclaimed.pop(session_id, None)

    async def wait(self, session_id: str, wait_s: float) -> Placed | None:
        """The session's next grant, or None after `wait_s`; raises what the session was forgotten with."""
        waiter = self._waiters.get(session_id)
        if waiter is None or waiter.done():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[session_id] = waiter
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout=wait_s)
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return waiter.result()  # granted (or forgotten) as the wait ran out: this acquire's answer, not lost
            # nobody awaits it any more: a later admission must be kept for the next acquire instead
            if self._waiters.get(session_id) is waiter:
                del self._waiters[session_id]
                waiter.cancel()
            return None

    def forget(self, session_id: str, error: Exception) -> None:
        self.leases.pop(session_id, None)
        self._unclaimed.pop(session_id, None)
        waiter = self._waiters.pop(session_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def forget_all(self, error: Exception) -> None:
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(error)
        self._waiters.clear()
        self._unclaimed.clear()
        self.leases.clear()

    def cancel_waiting(self) -> None:
        """Stop every waiting acquire (the service stops)."""
        for waiter in self._waiters.values():
            waiter.cancel()

    def holds(self) -> tuple[set[str], set[str], set[str]]:
        """The sessions with a lease, a waiting acquire and an unclaimed grant (what a bounded-memory check reads)."""
        return set(self.leases), set(self._waiters), set(self._unclaimed)
