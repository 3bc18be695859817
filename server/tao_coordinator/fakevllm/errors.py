"""Errors as vLLM reports them over HTTP, and the one middleware that turns exceptions into those responses.

OpenAI-style endpoints answer `{"error": {"message", "type", "param", "code"}}` with `code` = the HTTP status and
`type` the status's error class name (`BadRequestError`, `NotFoundError`, ...). Anthropic endpoints translate the
handler's errors to `{"type": "error", "error": {"type", "message"}}`, keeping the status, with Anthropic's type names
(`invalid_request_error`, `not_found_error`, `overloaded_error`, as vLLM 0.33 sends them); schema validation errors
stay OpenAI-shaped everywhere, because vLLM raises them in FastAPI's global handler before any route code runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from aiohttp import web

log = logging.getLogger(__name__)

_TYPES = {
    HTTPStatus.BAD_REQUEST: "BadRequestError",
    HTTPStatus.NOT_FOUND: "NotFoundError",
    HTTPStatus.SERVICE_UNAVAILABLE: "ServiceUnavailableError",
    HTTPStatus.INTERNAL_SERVER_ERROR: "InternalServerError",
}

_ANTHROPIC_TYPES = {
    HTTPStatus.BAD_REQUEST: "invalid_request_error",
    HTTPStatus.NOT_FOUND: "not_found_error",
    HTTPStatus.SERVICE_UNAVAILABLE: "overloaded_error",
    HTTPStatus.INTERNAL_SERVER_ERROR: "api_error",
}


class ApiError(Exception):
    """An error answered to the client; `anthropic` selects the Anthropic envelope."""

    status = HTTPStatus.BAD_REQUEST
    kind: str | None = None
    """The OpenAI body's `type` when it is not the status's usual class name."""

    def __init__(self, message: str, param: str | None = None, *, anthropic: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.anthropic = anthropic


class BadRequest(ApiError):
    status = HTTPStatus.BAD_REQUEST


class ModelNotFound(ApiError):
    status = HTTPStatus.NOT_FOUND


class QueueFull(ApiError):
    """vLLM's QueueOverflowError (--max-num-queued-reqs): a GracefulHTTPError, whose `type` is the status phrase."""

    status = HTTPStatus.SERVICE_UNAVAILABLE
    kind = HTTPStatus.SERVICE_UNAVAILABLE.phrase
    MESSAGE = (
        "The engine is currently busy and cannot accept new requests. "
        "Please try again later or on a different instance."
    )

    def __init__(self, *, anthropic: bool = False) -> None:
        super().__init__(self.MESSAGE, anthropic=anthropic)


def openai_error_body(
    message: str, status: HTTPStatus, param: str | None = None, kind: str | None = None
) -> dict[str, object]:
    kind = kind or _TYPES.get(status, status.phrase)
    return {"error": {"message": message, "type": kind, "param": param, "code": int(status)}}


def error_response(error: ApiError) -> web.Response:
    status = error.status
    body: dict[str, object]
    if error.anthropic:
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": error.message}}
    else:
        body = openai_error_body(error.message, status, error.param, error.kind)
    return web.json_response(body, status=status, dumps=json.dumps)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error)
    except web.HTTPException:
        raise
    except Exception as error:  # vLLM answers 500 with the message rather than dropping the connection
        log.exception("unhandled error in %s %s", request.method, request.path)
        body = openai_error_body(str(error), HTTPStatus.INTERNAL_SERVER_ERROR)
        return web.json_response(body, status=HTTPStatus.INTERNAL_SERVER_ERROR)
