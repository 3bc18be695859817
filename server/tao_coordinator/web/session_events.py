"""The one dispatch of a session's events, by kind: what `POST /v1/sessions/{id}/<kind>` (`handlers.py`) and a
`/v1/events` batch (`batch.py`) both feed to the core.

Invariants: the caller has authenticated the session; every check of a body runs before anything is fed, so a
refused event changes nothing; a kind that carries a body (`BODIES`) is applied only with a body of its model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from tao_sdk import protocol

from ..core import model
from ..core.events import Close, Heartbeat, LlmEnd, ToolEnd, ToolStart
from .errors import RequestError
from .limits import check_tool_start
from .service import CoordinatorService

SessionEventKind = Literal["tool_start", "tool_end", "llm_end", "heartbeat", "close"]

BODIES: dict[SessionEventKind, type[BaseModel] | None] = {
    "tool_start": protocol.ToolStartRequest,
    "tool_end": protocol.ToolEndRequest,
    "llm_end": protocol.LlmEndRequest,
    "heartbeat": None,
    "close": None,
}
"""The body each kind carries (its field in `protocol.BatchedEvent` has the kind's name); None: none."""


async def apply(service: CoordinatorService, session_id: str, kind: SessionEventKind, body: BaseModel | None) -> None:
    """Feed one event of session `session_id`. Raises what the checks and the core raise, with nothing changed."""
    match kind, body:
        case "tool_start", protocol.ToolStartRequest():
            service.feed(tool_start_event(service, session_id, body))
        case "tool_end", protocol.ToolEndRequest():
            await service.tool_end(ToolEnd(session_id, body.call_id, body.duration_s, body.status, body.age_s or 0.0))
        case "llm_end", protocol.LlmEndRequest():
            service.end_llm_call(llm_end_event(service, session_id, body))
        case "heartbeat", None:
            service.feed(Heartbeat(session_id))
        case "close", None:
            service.feed(Close(session_id))
            service.forget(session_id)
        case _:
            raise RequestError(422, f"{kind}: required for kind {kind!r}", kind)


def tool_start_event(service: CoordinatorService, session_id: str, body: protocol.ToolStartRequest) -> ToolStart:
    core = service.coordinator
    check_tool_start(core.sessions.get(session_id), body, core.settings)
    hints = body.hints
    deadline = service.wall_to_core(hints.deadline) if hints.deadline is not None else None
    core_hints = model.DurationHints(hints.timeout_s, hints.sleep_s, hints.background, deadline)
    return ToolStart(session_id, body.call_id, body.tool, core_hints, body.program, body.age_s or 0.0)


def llm_end_event(service: CoordinatorService, session_id: str, body: protocol.LlmEndRequest) -> LlmEnd:
    current = service.leases.get(session_id)
    if body.lease_id is not None and current is not None and body.lease_id != current:
        raise RequestError(409, "not the session's current lease", "lease_id")
    return LlmEnd(
        session_id,
        body.node,
        body.prompt_tokens,
        body.cached_tokens,
        body.completion_tokens,
        body.ttft_s,
        body.duration_s,
        body.error,
        body.refused,
    )
