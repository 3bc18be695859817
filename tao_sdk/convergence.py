"""Converging a session's state with the coordinator's, after a stall, a restart or a lost report.

The rule: the coordinator is the judge of a session's phase; the client is the judge of the work it is actually
doing. Every 409 about a session carries the coordinator's view of it (`SessionView`: phase, node, the call
ids of the tools it sees running, the model calls it sees in flight). The client then closes on the coordinator
whatever the view shows open and the client does not have open — a `tool_end` for each such tool call (the one it
recorded when the call ended, with the measured duration, if it still has it) and an `llm_end` marked as an error
for each model call beyond its own — and repeats the refused request once. Work the client does have open is left
alone: the refusal then stands (a model call while one of its tools runs, say) and that one call is routed on its
own.

Why this rule, and not a coordinator that accepts any late tool_end: a report the client gave up on can still be
applied later (a stalled coordinator reads its socket when it resumes), so the coordinator can see work that the
client finished and will never report again; no acknowledgement can settle that. Only the client knows which of
the work the coordinator sees is real, and only the coordinator knows what it sees, so each side keeps the part it
is the judge of. Nothing needs a new request kind, and a client that never diverges pays nothing.

Invariants: `open_calls` holds the tool calls started and not ended, whether or not their reports arrived;
`llm_in_flight` counts the model calls the coordinator granted whose `llm_end` is not queued yet; at most
`RECORDED_ENDS` ended calls are remembered. Every method takes the lock and none does I/O.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from .protocol import SessionView

RECORDED_ENDS = 256
LOST_CALL = "closed by the client: its report was lost"


class Ledger:
    """The work one session has open, as the client knows it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[str] = set()
        self._ended: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._llm_in_flight = 0

    def tool_started(self, call_id: str) -> None:
        with self._lock:
            self._open.add(call_id)

    def tool_ended(self, call_id: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._open.discard(call_id)
            self._ended[call_id] = body
            while len(self._ended) > RECORDED_ENDS:
                self._ended.popitem(last=False)

    def llm_granted(self) -> None:
        with self._lock:
            self._llm_in_flight += 1

    def llm_ended(self) -> None:
        with self._lock:
            self._llm_in_flight = max(0, self._llm_in_flight - 1)

    def closing_reports(self, view: SessionView) -> list[tuple[str, dict[str, Any]]]:
        """The reports (verb, body) that close on the coordinator the work `view` shows open and the client does
        not; empty when the two agree."""
        with self._lock:
            reports = [
                ("tool_end", self._ended.get(call_id) or {"call_id": call_id, "status": "error"})
                for call_id in view.running_calls
                if call_id not in self._open
            ]
            lost = view.llm_calls - self._llm_in_flight
        if lost > 0 and view.node is not None:
            reports += [("llm_end", {"node": view.node, "error": LOST_CALL})] * lost
        return reports


def session_view(answer: Any) -> SessionView | None:
    """The coordinator's view of the session in the body of a 409, if it sent one."""
    if not isinstance(answer, dict) or not isinstance(answer.get("session"), dict):
        return None
    try:
        return SessionView.model_validate(answer["session"])
    except ValueError:
        return None
