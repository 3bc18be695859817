"""`POST /v1/messages` (streaming and not) and `POST /v1/messages/count_tokens`, as vLLM's Anthropic front end.

The request is translated to OpenAI chat form (`anthropic_convert`), rendered by the same chat template and
generated like a chat completion; the answer is converted back: `tool_calls` → `tool_use` blocks (same ids),
finish reasons stop/length/tool_calls → end_turn/max_tokens/tool_use. The stream sends `message_start` with the
first token, content blocks as text and tool-call arguments come out (`text_delta`, `input_json_delta`), then
`message_delta` (stop reason and usage) and `message_stop`.

Usage, with prompt-token details on (vLLM 0.33): `cache_read_input_tokens` = cached prompt tokens,
`cache_creation_input_tokens` = prompt tokens newly cached, `input_tokens` = the rest. `message_start` carries
`input_tokens` = all prompt tokens and `output_tokens` 0; the cache split comes with `message_delta` (the node model
reports a request's cached tokens when it finishes).

Request side, as 0.33 builds its inner chat request: the body has no `priority`, `session_id` or `request_id`
(priority from `X-Vllm-Priority`, session from `X-Session-ID` or `vllm_xargs.session_id`); `max_tokens` becomes
both `max_tokens` and `max_completion_tokens`, so it is clamped to what the context leaves (stop reason
`max_tokens`) and, beyond max_model_len, refused naming `max_completion_tokens`. A refusal by the engine client
(data-parallel rank out of range) inside a stream is an `error` event after the 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from .anthropic_convert import to_openai
from .errors import ApiError, anthropic_stream_error
from .http_common import (
    NODE_SERVICE,
    check_model,
    dumps,
    open_stream,
    read_request_model,
    request_meta,
    run_generation,
    sse_event,
)
from .openai_shapes import created_cache_tokens, finish_reason
from .policy import Conversation
from .reply import ReplyProgress
from .schemas import AnthropicCountTokensRequest, AnthropicMessagesRequest
from .service import Generation, GenerationSpec, NodeService
from .template import render_chat
from .tokenizer import count, encode

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


@contextlib.contextmanager
def _anthropic_errors() -> Iterator[None]:
    try:
        yield
    except ApiError as error:
        error.anthropic = True
        raise


async def messages(request: web.Request) -> web.StreamResponse:
    service = request.app[NODE_SERVICE]
    body = await read_request_model(request, AnthropicMessagesRequest)
    with _anthropic_errors():
        model = check_model(service, body.model)
        meta = request_meta(request.headers, None, 0, body.vllm_xargs)
        openai_messages, tools = to_openai(body)
        prompt = encode(render_chat(openai_messages, tools))
        spec = GenerationSpec(
            meta.request_id,
            prompt,
            Conversation(openai_messages, tools, meta.session_id, model),
            body.max_tokens,
            meta.priority,
            body.cache_salt,
            meta.session_id,
            max_tokens_param="max_completion_tokens",  # vLLM sets both max_tokens and max_completion_tokens
            data_parallel_rank=meta.data_parallel_rank,
        )
        generation = await run_generation(request, service, spec, bool(body.stream), anthropic_stream_error)
        if isinstance(generation, web.StreamResponse):
            return generation
    message_id = f"chatcmpl-{meta.request_id}"
    if body.stream:
        return await _stream(request, service, generation, message_id, model)
    try:
        async for _ in generation.progress():
            pass
    except asyncio.CancelledError:
        service.abort(generation)
        raise
    payload = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": _blocks(generation),
        "model": model,
        "stop_reason": _stop_reason(generation),
        "usage": _usage(generation, service),
    }
    return web.json_response(payload, dumps=dumps, headers={"X-Request-Id": meta.request_id})


async def count_tokens(request: web.Request) -> web.Response:
    service = request.app[NODE_SERVICE]
    body = await read_request_model(request, AnthropicCountTokensRequest)
    with _anthropic_errors():
        check_model(service, body.model)
        openai_messages, tools = to_openai(body)
        input_tokens = count(render_chat(openai_messages, tools))
    return web.json_response(
        {"input_tokens": input_tokens, "context_management": {"original_input_tokens": input_tokens}}
    )


def _stop_reason(generation: Generation) -> str | None:
    return STOP_REASONS.get(finish_reason(generation))


def _usage(generation: Generation, service: NodeService) -> dict[str, int]:
    finished = generation.finished
    output = finished.completion_tokens if finished is not None else generation.ticket.generated
    if not service.config.enable_prompt_tokens_details or finished is None:
        return {"input_tokens": generation.prompt_tokens, "output_tokens": output}
    read, created = finished.cached_tokens, created_cache_tokens(generation)
    return {
        "input_tokens": generation.prompt_tokens - read - created,
        "output_tokens": output,
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": read,
    }


def _blocks(generation: Generation) -> list[dict[str, Any]]:
    reply = generation.layout.reply
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.content}] if reply.content else []
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": json.loads(call.arguments)})
    return blocks


class _BlockStream:
    """Turns progress into Anthropic content-block events, keeping one block open at a time."""

    def __init__(self, generation: Generation) -> None:
        self._layout = generation.layout
        self._open: tuple[str, int] | None = None  # ("text", -1) or ("tool", call index)
        self._index = -1

    def events(self, before: int, now: int) -> list[bytes]:
        """The events of tokens before+1 … now, one delta per token that releases something (as vLLM)."""
        out: list[bytes] = []
        previous = self._layout.progress(before)
        for tokens in range(before + 1, now + 1):
            current = self._layout.progress(tokens)
            out += self._token_events(previous, current)
            previous = current
        return out

    def _token_events(self, previous: ReplyProgress, current: ReplyProgress) -> list[bytes]:
        out: list[bytes] = []
        text = self._layout.reply.content[previous.content_chars : current.content_chars]
        if text:
            out += self._switch(("text", -1), {"type": "text", "text": ""})
            out.append(self._delta({"type": "text_delta", "text": text}))
        calls = self._layout.reply.tool_calls
        for k, (old, new) in enumerate(zip(previous.tool_arg_chars, current.tool_arg_chars, strict=True)):
            if new is None:
                continue
            if old is None:
                out += self._switch(
                    ("tool", k), {"type": "tool_use", "id": calls[k].id, "name": calls[k].name, "input": {}}
                )
            fragment = calls[k].arguments[old or 0 : new]
            if fragment:
                out.append(self._delta({"type": "input_json_delta", "partial_json": fragment}))
        return out

    def close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [sse_event("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def _switch(self, block: tuple[str, int], start: dict[str, Any]) -> list[bytes]:
        if self._open == block:
            return []
        out = self.close()
        self._index += 1
        self._open = block
        out.append(
            sse_event(
                "content_block_start", {"type": "content_block_start", "index": self._index, "content_block": start}
            )
        )
        return out

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse_event("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})


async def _stream(
    request: web.Request, service: NodeService, generation: Generation, message_id: str, model: str
) -> web.StreamResponse:
    response = await open_stream(request, generation.public_id)
    blocks = _BlockStream(generation)
    started = False
    try:
        async for before, now in generation.progress():
            frames = []
            if not started:
                frames.append(sse_event("message_start", _message_start(generation, message_id, model)))
                started = True
            frames += blocks.events(before, now)
            await response.write(b"".join(frames))
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(generation), "stop_sequence": None},
            "usage": _usage(generation, service),
        }
        tail = [*blocks.close(), sse_event("message_delta", delta), sse_event("message_stop", {"type": "message_stop"})]
        await response.write(b"".join(tail))
    except (ConnectionError, asyncio.CancelledError):
        service.abort(generation)
        raise
    return response


def _message_start(generation: Generation, message_id: str, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": generation.prompt_tokens, "output_tokens": 0},
    }
    return {"type": "message_start", "message": message}
