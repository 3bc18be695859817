"""`POST /v1/events`: a batch of events from a short-lived hook process, applied in order, each answered on its
own — one bad event fails alone and changes nothing, the others still apply.

A tool end is answered once its row is stored (`CoordinatorService.tool_end`). The batch does not wait for each
commit in turn: a tool end's wait overlaps the events of other sessions after it, so the store commits the batch's
rows together. Order is kept where it means something, within a session: an event waits for the tool end of its
session before it. The answer waits for every one. Each event is applied by the dispatch the per-session endpoints
use (`session_events.py`)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from tao_sdk import protocol

from ..core.errors import CoreError
from ..store import StoreUnavailable
from .auth import require_api, require_session
from .body import read_body
from .caps import CapReached
from .errors import RequestError, status_of
from .handlers import register
from .keys import SERVICE
from .service import SessionGone
from .session_events import BODIES, apply


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
        part = None if BODIES[event.kind] is None else getattr(event, event.kind)
        await apply(service, event.session_id, event.kind, part)
        return protocol.EventResult(ok=True, status=204)
    except (RequestError, CoreError, SessionGone, StoreUnavailable) as error:
        status, message, _ = status_of(error)
        return protocol.EventResult(ok=False, status=status, error=message)
    except CapReached as refusal:  # the batch goes on: a later event may be about a session already registered
        return protocol.EventResult(ok=False, status=refusal.status, error=refusal.message)
