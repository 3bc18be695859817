"""What every generation route shares: request metadata from headers and body, the model check, SSE output.

Precedence as in vLLM 0.33 (§6): session id = body `session_id` > header `X-Session-ID` > `vllm_xargs.session_id`;
priority = header `X-Vllm-Priority` when it parses as an integer, else body `priority` (an unparsable header is
ignored, not refused); the public request id = header `X-Request-Id` > body `request_id` > a random 16-hex-digit id
(vLLM's `random_uuid()`), prefixed `chatcmpl-` / `cmpl-` by the route. Header `X-data-parallel-rank` pins the
request to a data-parallel rank when it parses as an integer (else it is ignored); the node checks the rank.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import CIMultiDictProxy

from .errors import ApiError, EngineInputError, ModelNotFound
from .schemas import Model, parse_request
from .service import Generation, GenerationSpec, NodeService

NODE_SERVICE: web.AppKey[NodeService] = web.AppKey("fake_vllm_service", NodeService)
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


@dataclass(frozen=True, slots=True)
class RequestMeta:
    request_id: str
    session_id: str | None
    priority: int
    data_parallel_rank: int | None = None


def random_id() -> str:
    return f"{uuid.uuid4().int & ((1 << 64) - 1):016x}"


def request_meta(
    headers: CIMultiDictProxy[str],
    session_id: str | None,
    priority: int,
    vllm_xargs: dict[str, Any] | None,
    body_request_id: str | None = None,
) -> RequestMeta:
    session = session_id or headers.get("X-Session-ID") or (vllm_xargs or {}).get("session_id")
    header_priority = _integer(headers.get("X-Vllm-Priority"))
    request_id = headers.get("X-Request-Id") or body_request_id or random_id()
    rank = _integer(headers.get("X-data-parallel-rank"))
    priority = priority if header_priority is None else header_priority
    return RequestMeta(request_id, None if session is None else str(session), priority, rank)


def _integer(header: str | None) -> int | None:
    """A header's value as Python's `int()` reads it, or None when absent or unparsable (vLLM ignores it then)."""
    if header is None:
        return None
    try:
        return int(header)
    except ValueError:
        return None


async def run_generation(
    request: web.Request,
    service: NodeService,
    spec: GenerationSpec,
    stream: bool,
    stream_error: Callable[[ApiError], bytes],
) -> Generation | web.StreamResponse:
    """The request on the node. What the engine client refuses is raised without streaming; a stream has answered
    200 by then (vLLM 0.33), so it gets the route's error frames (`stream_error`) and ends."""
    try:
        return service.generate(spec)
    except EngineInputError as error:
        if not stream:
            raise
        response = await open_stream(request, spec.public_id)
        await response.write(stream_error(error))
        return response


async def read_request_model(request: web.Request, model: type[Model]) -> Model:
    return parse_request(await request.read(), request.headers.get("Content-Type"), model)


def check_model(service: NodeService, model: str | None, *, anthropic: bool = False) -> str:
    """The model name to answer with (`model_cards.py`); 404 for a name the node does not serve, unless it accepts
    any name (then answered with the name asked for)."""
    served = service.models
    if model is None:  # no name asks for the base model
        return served.names[0]
    answer = served.answer_name(model)
    if answer is not None:
        return answer
    if not service.config.strict_model_name:
        return model
    raise ModelNotFound(served.not_found_message(model), param="model", anthropic=anthropic)


def dumps(value: Any) -> str:
    """Compact JSON, as vLLM's pydantic `model_dump_json` writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse_data(value: Any) -> bytes:
    return f"data: {dumps(value)}\n\n".encode()


def sse_event(name: str, value: Any) -> bytes:
    return f"event: {name}\ndata: {dumps(value)}\n\n".encode()


async def open_stream(request: web.Request, request_id: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={**SSE_HEADERS, "X-Request-Id": request_id})
    await response.prepare(request)
    return response
