"""Errors as vLLM 0.33 reports them over HTTP (`middleware.py` turns the exceptions into those responses).

Three families, as 0.33's exception handlers shape them:

* request errors raised by the serving code (`BadRequest`, `ModelNotFound`, `QueueFull`): OpenAI routes answer
  `{"error": {"message", "type", "param", "code"}}` with `type` the error class name (`BadRequestError`, ...) and
  `code` the status; Anthropic routes answer `{"type": "error", "error": {"type", "message"}}` with Anthropic's type
  names (`invalid_request_error`, `not_found_error`, `overloaded_error`). A vLLM validation error's message ends
  with ` (parameter=…, value=…)` when it names them (`invalid_parameter`);
* schema errors (`SchemaError`): raised by FastAPI's request parsing before any route code, so they are
  OpenAI-shaped on every route, with `type` "Bad Request" and `param` the field path `body.<field>`;
* errors vLLM raises inside the engine client, after a streaming response has opened (`EngineInputError`): a plain
  400 without streaming, an error frame inside a 200 stream otherwise (`openai_stream_error`,
  `anthropic_stream_error`).
"""

from __future__ import annotations

import json
from http import HTTPStatus

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


class SchemaError(BadRequest):
    """FastAPI's RequestValidationError (or its body-parsing HTTPException): "Bad Request", OpenAI-shaped on every
    route."""

    kind = HTTPStatus.BAD_REQUEST.phrase


class EngineInputError(BadRequest):
    """A request the engine client refuses (`InputProcessor.process_inputs`): for a stream, after the 200 is sent."""


def invalid_parameter(message: str, *, parameter: str | None = None, value: object = None) -> BadRequest:
    """vLLM's VLLMValidationError as its handler answers it: the parameter and value appended to the message."""
    named = [f"{label}={item}" for label, item in (("parameter", parameter), ("value", value)) if item is not None]
    return BadRequest(f"{message} ({', '.join(named)})" if named else message, param=parameter)


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


def compact(value: object) -> str:
    """JSON as Starlette's JSONResponse and pydantic's `model_dump_json` write it: compact, UTF-8 kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def openai_error_body(
    message: str, status: HTTPStatus, param: str | None = None, kind: str | None = None
) -> dict[str, object]:
    kind = kind or _TYPES.get(status, status.phrase)
    return {"error": {"message": message, "type": kind, "param": param, "code": int(status)}}


def anthropic_error_body(error: ApiError) -> dict[str, object]:
    kind = _ANTHROPIC_TYPES.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def error_body(error: ApiError) -> dict[str, object]:
    if error.anthropic and not isinstance(error, SchemaError):
        return anthropic_error_body(error)
    return openai_error_body(error.message, error.status, error.param, error.kind)


def openai_stream_error(error: ApiError) -> bytes:
    """The frames an OpenAI stream ends with when the engine refuses its request: the error, then `[DONE]`."""
    body = openai_error_body(error.message, error.status, error.param, error.kind)
    return f"data: {compact(body)}\n\ndata: [DONE]\n\n".encode()


def anthropic_stream_error(error: ApiError) -> bytes:
    """The `error` event an Anthropic stream ends with when the engine refuses its request (no `message_stop`)."""
    return f"event: error\ndata: {compact(anthropic_error_body(error))}\n\n".encode()
