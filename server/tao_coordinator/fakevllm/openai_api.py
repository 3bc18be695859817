"""`POST /v1/chat/completions` and `POST /v1/completions`, streaming and not, over the simulated node.

A streaming response opens when the request arrives and sends its first chunk (the role chunk) with the first
generated token, as vLLM does; then one chunk per token that releases text or tool-call arguments, the finishing
chunk, the usage chunk (with `stream_options.include_usage`) and `data: [DONE]`. If the client goes away mid-stream
the request is aborted on the node. A non-streaming response is sent when the request finishes.

What the engine client refuses (a data-parallel rank the node does not have, an empty prompt) is a 400 without
streaming; a stream has already answered 200 by then, as in vLLM 0.33, and gets an error frame and `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .errors import BadRequest, openai_stream_error
from .http_common import (
    NODE_SERVICE,
    check_model,
    dumps,
    open_stream,
    read_request_model,
    request_meta,
    run_generation,
    sse_data,
)
from .openai_shapes import (
    UsageRoute,
    chat_chunk,
    chat_response,
    completion_body,
    completion_choice,
    content_choice,
    finish_reason,
    role_choice,
    usage,
)
from .openai_shapes import delta as delta_of
from .policy import Conversation
from .schemas import ChatCompletionRequest, CompletionRequest, StreamOptions
from .service import Generation, GenerationSpec, NodeService
from .template import render_chat
from .tokenizer import VOCAB_SIZE, encode

DONE = b"data: [DONE]\n\n"
ChunkFactory = Callable[[dict[str, Any], str | None, int], dict[str, Any]]


async def chat_completions(request: web.Request) -> web.StreamResponse:
    service = request.app[NODE_SERVICE]
    body = await read_request_model(request, ChatCompletionRequest)
    model = check_model(service, body.model)
    meta = request_meta(request.headers, body.session_id, body.priority, body.vllm_xargs, body.request_id)
    tools = body.tools or []
    prompt = encode(render_chat(body.messages, tools))
    spec = GenerationSpec(
        meta.request_id,
        prompt,
        Conversation(body.messages, tools, meta.session_id, model),
        body.output_limit,
        meta.priority,
        body.cache_salt,
        meta.session_id,
        max_tokens_param=body.output_limit_param,
        data_parallel_rank=meta.data_parallel_rank,
    )
    generation = await run_generation(request, service, spec, bool(body.stream), openai_stream_error)
    if isinstance(generation, web.StreamResponse):
        return generation
    response_id = f"chatcmpl-{meta.request_id}"
    if body.stream:
        return await _stream(
            request, service, generation, body.stream_options, _chat_factory(generation, response_id, model)
        )
    await _wait(service, generation)
    payload = chat_response(generation, response_id, model, service.config.enable_prompt_tokens_details)
    return web.json_response(payload, dumps=dumps, headers={"X-Request-Id": meta.request_id})


async def completions(request: web.Request) -> web.StreamResponse:
    service = request.app[NODE_SERVICE]
    body = await read_request_model(request, CompletionRequest)
    model = check_model(service, body.model)
    meta = request_meta(request.headers, body.session_id, body.priority, body.vllm_xargs, body.request_id)
    prompt = _prompt_tokens(body.prompt)
    text = _prompt_text(body.prompt)
    spec = GenerationSpec(
        meta.request_id,
        prompt,
        Conversation([{"role": "user", "content": text or ""}], []),
        body.max_tokens,
        meta.priority,
        body.cache_salt,
        meta.session_id,
        prompt_from_text=text is not None,
        data_parallel_rank=meta.data_parallel_rank,
    )
    generation = await run_generation(request, service, spec, bool(body.stream), openai_stream_error)
    if isinstance(generation, web.StreamResponse):
        return generation
    response_id = f"cmpl-{meta.request_id}"
    if body.stream:
        factory = _completion_factory(generation, response_id, model)
        return await _stream(request, service, generation, body.stream_options, factory)
    await _wait(service, generation)
    choice = completion_choice(generation.layout.reply.content, finish_reason(generation))
    payload = completion_body(generation, response_id, model, [choice])
    payload.update(service_tier=None, system_fingerprint=None, kv_transfer_params=None)
    payload["usage"] = usage(generation, service.config.enable_prompt_tokens_details, route="completion")
    return web.json_response(payload, dumps=dumps, headers={"X-Request-Id": meta.request_id})


def _prompt_text(prompt: str | list[int] | list[str] | list[list[int]]) -> str | None:
    """The prompt's text, or None when it came as token ids."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    return prompt if isinstance(prompt, str) else None


def _prompt_tokens(prompt: str | list[int] | list[str] | list[list[int]]) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return encode(prompt)
    if prompt and not all(isinstance(token, int) for token in prompt):
        raise BadRequest("prompt: the fake vLLM server accepts one prompt per request, not a batch", param="prompt")
    tokens = [token for token in prompt if isinstance(token, int)]
    bad = next((token for token in tokens if not 0 <= token < VOCAB_SIZE), None)
    if bad is not None:
        raise BadRequest(f"Token id {bad} is out of vocabulary", param="prompt")
    return tokens


def _chat_factory(generation: Generation, response_id: str, model: str) -> ChunkFactory:
    def make(delta: dict[str, Any], finish: str | None, _tokens: int) -> dict[str, Any]:
        chunk = chat_chunk(generation, response_id, model, [content_choice(delta, finish)])
        chunk["kv_transfer_params"] = None
        return chunk

    return make


def _completion_factory(generation: Generation, response_id: str, model: str) -> ChunkFactory:
    def make(delta: dict[str, Any], finish: str | None, _tokens: int) -> dict[str, Any]:
        choice = completion_choice(str(delta.get("content", "")), finish)
        return completion_body(generation, response_id, model, [choice])

    return make


async def _wait(service: NodeService, generation: Generation) -> None:
    try:
        async for _ in generation.progress():
            pass
    except asyncio.CancelledError:
        service.abort(generation)
        raise


async def _stream(
    request: web.Request,
    service: NodeService,
    generation: Generation,
    options: StreamOptions | None,
    make: ChunkFactory,
) -> web.StreamResponse:
    response = await open_stream(request, generation.public_id)
    details = service.config.enable_prompt_tokens_details
    chat = request.path.endswith("/chat/completions")
    # vLLM's /v1/completions continuous-usage chunks carry no prompt_tokens_details
    frames = _Frames(generation, make, bool(options and options.continuous_usage_stats), details and chat)
    try:
        async for before, now in generation.progress():
            role = [frames.role()] if chat and before == 0 and now > 0 else []
            await response.write(b"".join([*role, *frames.tokens(before, now)]))
        if options is not None and options.include_usage:
            final = make({}, None, 0)
            final.pop("kv_transfer_params", None)
            route: UsageRoute = "chat" if chat else "completion-stream"
            final.update(choices=[], usage=usage(generation, details, route=route))
            await response.write(sse_data(final))
        await response.write(DONE)
    except (ConnectionError, asyncio.CancelledError):
        service.abort(generation)
        raise
    return response


class _Frames:
    """The SSE frames a stream's tokens produce: one chunk per token that releases something, the last one with the
    finish reason. Plain content chunks — the bulk of a stream — reuse a pre-serialised chunk in which only the
    text varies; tool-call and closing chunks are built as dicts."""

    _MARK = "\x00text\x00"

    def __init__(self, generation: Generation, make: ChunkFactory, continuous: bool, details: bool) -> None:
        self._generation = generation
        self._make = make
        self._continuous = continuous
        self._details = details
        self._head, self._tail = sse_data(make({"content": self._MARK}, None, 0)).split(dumps(self._MARK).encode())
        self._fast = not generation.layout.reply.tool_calls and not continuous
        self._closing_delta: dict[str, Any] = {} if generation.layout.reply.tool_calls else {"content": ""}

    def role(self) -> bytes:
        """The first chat chunk: the assistant role and vLLM's null prompt fields."""
        chunk = self._make({}, None, 0)
        chunk.pop("kv_transfer_params", None)
        chunk.update(choices=[role_choice()], prompt_token_ids=None, prompt_text=None)
        if self._continuous:
            chunk["usage"] = usage(self._generation, self._details, 0)
        return sse_data(chunk)

    def tokens(self, before: int, now: int) -> list[bytes]:
        generation = self._generation
        closing_at = now if generation.finished is not None else None
        finish = finish_reason(generation) if closing_at is not None else None
        frames = []
        for tokens, delta in self._deltas(before, now):
            if tokens == closing_at:
                frames.append(self._chunk(delta or self._closing_delta, finish, tokens))
            elif self._fast and delta:
                frames.append(self._head + dumps(delta["content"]).encode() + self._tail)
            elif delta:
                frames.append(self._chunk(delta, None, tokens))
        if closing_at is not None and now == before:
            frames.append(self._chunk(self._closing_delta, finish, now))
        return frames

    def _deltas(self, before: int, now: int) -> list[tuple[int, dict[str, Any]]]:
        layout = self._generation.layout
        if self._fast:
            texts = layout.content_deltas(before, now)
            return [(before + 1 + i, {"content": text} if text else {}) for i, text in enumerate(texts)]
        deltas = []
        previous = layout.progress(before)
        for tokens in range(before + 1, now + 1):
            current = layout.progress(tokens)
            deltas.append((tokens, delta_of(layout, previous, current)))
            previous = current
        return deltas

    def _chunk(self, delta: dict[str, Any], finish: str | None, tokens: int) -> bytes:
        chunk = self._make(delta, finish, tokens)
        if self._continuous:
            chunk["usage"] = usage(self._generation, self._details, tokens)
        return sse_data(chunk)
