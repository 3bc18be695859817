"""OpenAI-compatible JSON bodies exactly as vLLM 0.33 serialises them (§4.1 of the vLLM reference).

Chat chunks: the first carries `delta: {"role": "assistant", "content": ""}` and null `prompt_token_ids` /
`prompt_text`; content chunks carry `token_ids: null` and a top-level `kv_transfer_params: null`; the finishing chunk
adds `stop_reason` and `weight_versions`; the usage chunk has `choices: []`. Tool calls follow the OpenAI delta
convention: the first fragment of a call has `index`, `id`, `type` and `function.name`, later ones only
`function.arguments`. Pure functions of a generation's state.
"""

from __future__ import annotations

from typing import Any, Literal

from .reply import ReplyLayout, ReplyProgress
from .service import Generation

UsageRoute = Literal["chat", "completion", "completion-stream"]


def usage(
    generation: Generation, details: bool, completion: int | None = None, *, route: UsageRoute = "chat"
) -> dict[str, Any]:
    """`usage` after `completion` output tokens (default: all so far); cached-token details once finished.

    vLLM 0.33 fills `created_cache_tokens` on chat only: `/v1/completions` builds its details with `cached_tokens`
    alone, so its JSON body shows `created_cache_tokens` and `multimodal_tokens` as null (`model_dump()`), and its
    stream's usage chunk drops them (`exclude_none=True`)."""
    finished = generation.finished
    if completion is None:
        completion = finished.completion_tokens if finished is not None else generation.ticket.generated
    body: dict[str, Any] = {
        "prompt_tokens": generation.prompt_tokens,
        "total_tokens": generation.prompt_tokens + completion,
        "completion_tokens": completion,
    }
    if details and finished is not None and completion == finished.completion_tokens:
        prompt_details: dict[str, Any] = {"cached_tokens": finished.cached_tokens}
        if route == "chat":
            prompt_details["created_cache_tokens"] = created_cache_tokens(generation)
        elif route == "completion":
            prompt_details.update(created_cache_tokens=None, multimodal_tokens=None)
        body["prompt_tokens_details"] = prompt_details
    return body


def created_cache_tokens(generation: Generation) -> int:
    """Prompt tokens this request newly wrote to the prefix cache: its full prompt blocks that were not hits."""
    finished = generation.finished
    cached = finished.cached_tokens if finished is not None else 0
    full_blocks = generation.prompt_tokens // generation.block_size
    return max(0, full_blocks * generation.block_size - cached)


def delta(layout: ReplyLayout, before: ReplyProgress, after: ReplyProgress) -> dict[str, Any]:
    """The chat delta between two progress points (empty when nothing new is out)."""
    body: dict[str, Any] = {}
    content = layout.reply.content[before.content_chars : after.content_chars]
    if content:
        body["content"] = content
    calls = []
    for index, (call, old, new) in enumerate(
        zip(layout.reply.tool_calls, before.tool_arg_chars, after.tool_arg_chars, strict=True)
    ):
        if new is None:
            continue
        if old is None:
            function = {"name": call.name, "arguments": call.arguments[:new]}
            calls.append({"index": index, "id": call.id, "type": "function", "function": function})
        elif new > old:
            calls.append({"index": index, "function": {"arguments": call.arguments[old:new]}})
    if calls:
        body["tool_calls"] = calls
    return body


def chat_chunk(generation: Generation, chunk_id: str, model: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": generation.created,
        "model": model,
        "choices": choices,
    }


def role_choice() -> dict[str, Any]:
    return {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}


def content_choice(body: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": body, "logprobs": None, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = None
    choice["token_ids"] = None
    if finish_reason is not None:
        choice["weight_versions"] = None
    return choice


def finish_reason(generation: Generation) -> str:
    finished = generation.finished
    if finished is not None and finished.reason == "abort":
        return "abort"
    return generation.layout.finish_reason


def chat_message(layout: ReplyLayout) -> dict[str, Any]:
    reply = layout.reply
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reply.tool_calls
    ]
    content = reply.content if reply.content or not calls else None
    return {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": calls,
        "reasoning": None,
    }


def chat_response(generation: Generation, response_id: str, model: str, details: bool) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": chat_message(generation.layout),
        "logprobs": None,
        "finish_reason": finish_reason(generation),
        "stop_reason": None,
        "token_ids": None,
    }
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": generation.created,
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(generation, details),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "kv_transfer_params": None,
    }


def completion_choice(text: str, finish: str | None) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}


def completion_body(
    generation: Generation, response_id: str, model: str, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "text_completion",
        "created": generation.created,
        "model": model,
        "choices": choices,
    }
