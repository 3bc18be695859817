"""What every generation route shares: request metadata from headers and body, the model check, SSE output.

Precedence as in vLLM (§6): session id = body `session_id` > header `X-Session-ID` > `vllm_xargs.session_id`;
priority = header `X-Vllm-Priority` > body `priority`; the public request id = header `X-Request-Id` > body
`request_id` > a random 16-hex-digit id (vLLM's `random_uuid()`), prefixed `chatcmpl-` / `cmpl-` by the route.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import CIMultiDictProxy

from .errors import BadRequest, ModelNotFound
from .service import NodeService

SERVICE: web.AppKey[NodeService] = web.AppKey("fake_vllm_service", NodeService)
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


@dataclass(frozen=True, slots=True)
class RequestMeta:
    request_id: str
    session_id: str | None
    priority: int


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
    header_priority = headers.get("X-Vllm-Priority")
    if header_priority is not None:
        try:
            priority = int(header_priority)
        except ValueError:
            raise BadRequest(f"X-Vllm-Priority: expected an integer, got {header_priority!r}") from None
    request_id = headers.get("X-Request-Id") or body_request_id or random_id()
    return RequestMeta(request_id, None if session is None else str(session), priority)


def check_model(service: NodeService, model: str | None, *, anthropic: bool = False) -> str:
    """The model name to answer with; 404 for a name the node does not serve."""
    served = service.config.served_model_name
    if model is None or model == served or not service.config.strict_model_name:
        return served if model is None else model
    raise ModelNotFound(f"The model `{model}` does not exist.", param="model", anthropic=anthropic)


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
