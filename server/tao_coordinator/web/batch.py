"""`POST /v1/events`: a batch of events from a short-lived hook process, applied in order, each answered on its
own — one bad event fails alone and changes nothing, the others still apply.

A tool end is answered once its row is stored (`CoordinatorService.tool_end`). The batch does not wait for each
commit in turn: a tool end's wait overlaps the events of other sessions after it, so the store commits the batch's
rows together. Order is kept where it means something, within a session: an event waits for the tool end of its
session before it. The answer waits for every one."""

from __future__ import annotations

import asyncio

from aiohttp import web
from pydantic import BaseModel

from tao_sdk import protocol

from ..core.errors import CoreError
from ..core.events import Close, Heartbeat, ToolEnd
from ..store import StoreUnavailable
from .auth import require_api, require_session
from .body import read_body
from .caps import CapReached
from .errors import RequestError, status_of
from .handlers import llm_end_event, register, tool_start_event
from .keys import SERVICE
from .service import CoordinatorService, SessionGone


async def post_events(request: web.Request) -> web.Response:
    batch = await read_body(request, protocol.EventsRequest)
    storing: dict[str, asyncio.Task[protocol.EventResult]] = {}  # by session: its tool end being stored
    results: list[asyncio.Task[protocol.EventResult] | protocol.EventResult] = []
    for event in batch.events:
        if (before := storing.pop(event.session_id, None)) is not None:
            await asyncio.wait([before])
        if event.kind == "tool_end":
            storing[event.session_id] = task = asyncio.ensure_future(_apply(request, event))
            results.append(task)
        else:
            results.append(await _apply(request, event))
    answered = [await result if isinstance(result, asyncio.Task) else result for result in results]
    answer = protocol.EventsResponse(results=answered)
    return web.json_response(answer.model_dump(mode="json", exclude_none=True))


async def _apply(request: web.Request, event: protocol.BatchedEvent) -> protocol.EventResult:
    service = request.app[SERVICE]
    try:
        if event.kind == "register":
            owner = require_api(request)
            service.caps.check(owner, service.now())
            body = event.registration or protocol.RegisterRequest()
            registered = register(service, body.model_copy(update={"session_id": event.session_id}), owner)
            return protocol.EventResult(ok=True, status=201, session_token=registered.session_token)
        require_session(request, event.session_id, event.session_token)
        await _dispatch(service, event)
        return protocol.EventResult(ok=True, status=204)
    except (RequestError, CoreError, SessionGone, StoreUnavailable) as error:
        status, message, _ = status_of(error)
        return protocol.EventResult(ok=False, status=status, error=message)
    except CapReached as refusal:  # the batch goes on: a later event may be about a session already registered
        return protocol.EventResult(ok=False, status=refusal.status, error=refusal.message)


def _part(event: protocol.BatchedEvent, name: str) -> BaseModel:
    part = getattr(event, name)
    if part is None:
        raise RequestError(422, f"{name}: required for kind {event.kind!r}", name)
    assert isinstance(part, BaseModel)
    return part


async def _dispatch(service: CoordinatorService, event: protocol.BatchedEvent) -> None:
    session_id = event.session_id
    match event.kind:
        case "tool_start":
            start = _part(event, "tool_start")
            assert isinstance(start, protocol.ToolStartRequest)
            service.feed(tool_start_event(service, session_id, start))
        case "tool_end":
            end = _part(event, "tool_end")
            assert isinstance(end, protocol.ToolEndRequest)
            await service.tool_end(ToolEnd(session_id, end.call_id, end.duration_s, end.status))
        case "llm_end":
            done = _part(event, "llm_end")
            assert isinstance(done, protocol.LlmEndRequest)
            service.end_llm_call(llm_end_event(service, session_id, done))
        case "heartbeat":
            service.feed(Heartbeat(session_id))
        case "close":
            service.feed(Close(session_id))
            service.forget(session_id)
