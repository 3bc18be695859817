"""Anthropic Messages requests in OpenAI chat form, translated as vLLM's Anthropic front end does (§5).

* The top-level `system` (string or text blocks) and inline `role: "system"` messages are concatenated into one
  leading system message; text blocks starting with `x-anthropic-billing-header` are dropped (Claude Code puts a
  per-request hash there, which would defeat prefix caching).
* Assistant `tool_use` blocks become `tool_calls` (arguments = the JSON of `input`); user `tool_result` blocks become
  `role: "tool"` messages, placed before the rest of that user message; `thinking` blocks are reasoning, which the
  template drops; images and other blocks carry no text.
* Tools become OpenAI function tools with `parameters` = `input_schema`.
Pure functions; malformed blocks raise `BadRequest` naming the message index.
"""

from __future__ import annotations

from typing import Any

from .errors import BadRequest
from .schemas import AnthropicCountTokensRequest
from .template import template_json

BILLING_HEADER = "x-anthropic-billing-header"


def to_openai(request: AnthropicCountTokensRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) in OpenAI chat form."""
    messages: list[dict[str, Any]] = []
    system = _system_text(request)
    if system:
        messages.append({"role": "system", "content": system})
    for index, message in enumerate(request.messages):
        if message.role != "system":
            messages.extend(_convert(message.role, message.content, index))
    tools = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
        for t in request.tools or ()
    ]
    return messages, tools


def _system_text(request: AnthropicCountTokensRequest) -> str:
    parts: list[str] = []
    sources: list[Any] = [request.system]
    sources += [m.content for m in request.messages if m.role == "system"]
    for source in sources:
        if isinstance(source, str):
            parts.append(source)
        elif isinstance(source, list):
            parts += [
                str(block["text"])
                for block in source
                if block.get("type") == "text"
                and block.get("text")
                and not str(block["text"]).startswith(BILLING_HEADER)
            ]
    return "".join(parts)


def _convert(role: str, content: str | list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            calls.append(_tool_call(block, index))
        elif kind == "tool_result" and role == "user":
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "", "content": _result(block)})
        elif kind == "tool_result":
            texts.append(f"Tool result: {_result(block)}")
        elif not isinstance(kind, str):
            raise BadRequest(f"messages[{index}].content: every block needs a string 'type'")
    message: dict[str, Any] = {"role": role}
    if texts:
        message["content"] = "".join(texts)
    if calls:
        message["tool_calls"] = calls
    if texts or calls or role == "assistant":
        out.append(message)
    return out


def _tool_call(block: dict[str, Any], index: int) -> dict[str, Any]:
    name = block.get("name")
    if not isinstance(name, str):
        raise BadRequest(f"messages[{index}].content: a tool_use block needs a string 'name'")
    arguments = template_json(block.get("input") or {})
    return {"id": block.get("id") or "", "type": "function", "function": {"name": name, "arguments": arguments}}


def _result(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", "")) for item in content if isinstance(item, dict) and item.get("type") == "text"
        )
    return "" if content is None else str(content)
