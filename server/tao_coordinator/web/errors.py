"""One place that turns every failure into a JSON answer naming what was wrong: 4xx for anything a client can cause
(bad JSON, a field out of range, an unknown session, an event the session's phase does not allow, a 409
`model_not_served` for a call whose model no healthy node serves), never a 500; a 503 `store_unavailable` with a
Retry-After for a tool end the store could not take (nothing of it was kept)."""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import ValidationError

from tao_sdk import protocol
from tao_sdk.hints import PROGRAM_PATTERN
from tao_sdk.ids import SESSION_ID_PATTERN, SESSION_ID_RULE

from ..core.errors import CoreError, IllegalTransition, InvalidEvent, ModelNotServed, UnknownNode, UnknownSession
from ..store import StoreUnavailable
from .keys import SERVICE
from .service import CoordinatorService, SessionGone

log = logging.getLogger("tao.coordinator")

STORE_UNAVAILABLE = "store_unavailable"
"""`ErrorBody.code` of a 503 for a write the coordinator could not store: send it again after Retry-After."""


class RequestError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


PATTERNS = {
    SESSION_ID_PATTERN: SESSION_ID_RULE,
    PROGRAM_PATTERN: "a program name: letters, digits and . _ + -, the first a letter or digit",
}
"""What a pattern of the protocol allows, in words, for the message of a value that does not match it."""


def _shortened(part: str, limit: int = 40) -> str:
    # a location can hold a client's dict key: the answer names it without echoing a huge one back
    return part if len(part) <= limit else part[:limit] + "…"


def validation_error(error: ValidationError) -> RequestError:
    first = error.errors()[0]
    field = ".".join(_shortened(str(part)) for part in first["loc"]) or "body"
    pattern = (first.get("ctx") or {}).get("pattern")
    if first["type"] == "string_pattern_mismatch" and pattern in PATTERNS:
        return RequestError(422, f"{field}: must be {PATTERNS[pattern]}", field)
    return RequestError(422, f"{field}: {first['msg']}", field)


def status_of(error: Exception) -> tuple[int, str, str | None]:
    """HTTP status, message and field for an exception a handler let through."""
    if isinstance(error, RequestError):
        return error.status, error.message, error.field
    if isinstance(error, UnknownSession):
        return 404, str(error), "session_id"
    if isinstance(error, UnknownNode):
        return 404, str(error), "node"
    if isinstance(error, InvalidEvent):
        return 422, str(error), error.field
    if isinstance(error, ModelNotServed):
        return 409, str(error), "model"
    if isinstance(error, IllegalTransition | CoreError):
        return 409, str(error), None
    if isinstance(error, SessionGone):
        return 410, f"session {error} closed or expired", "session_id"
    if isinstance(error, StoreUnavailable):
        return 503, str(error), None
    raise error


def json_error(
    status: int,
    message: str,
    field: str | None = None,
    *,
    code: str | None = None,
    session: protocol.SessionView | None = None,
    leader: str | None = None,
) -> web.Response:
    body = protocol.ErrorBody(error=message, field=field, code=code, session=session, leader=leader)
    headers = {protocol.LEADER_HEADER: leader} if leader else None
    return web.json_response(body.model_dump(mode="json", exclude_none=True), status=status, headers=headers)


def session_view(service: CoordinatorService, session_id: str) -> protocol.SessionView | None:
    """The coordinator's view of a session, sent with every 409 about it so the client can converge on it
    (`tao_sdk/convergence.py`): the coordinator is the judge of a session's phase."""
    session = service.coordinator.sessions.get(session_id)
    if session is None:
        return None
    return protocol.SessionView(
        phase=session.phase.name.lower(),
        node=session.node,
        running_calls=[tool.call_id for tool in session.tools],
        llm_calls=session.llm_calls,
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return json_error(error.status, error.reason or "error")
    except IllegalTransition as error:
        return json_error(409, str(error), session=session_view(request.app[SERVICE], error.session_id))
    except ModelNotServed as error:
        return json_error(409, str(error), "model", code=protocol.MODEL_NOT_SERVED)
    except (RequestError, CoreError, SessionGone) as error:
        response = json_error(*status_of(error))
        if response.status == 408:
            response.force_close()  # the rest of a late body could be read as the next request
        return response
    except StoreUnavailable as error:
        response = json_error(503, str(error), code=STORE_UNAVAILABLE)
        response.headers["Retry-After"] = str(error.retry_after_s)
        return response
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return json_error(500, "internal error")
