"""The fake server's chat template: OpenAI-style messages and tools → one prompt string, ChatML as Qwen3 uses it.

    <|im_start|>system\\n{system}{tools section}<|im_end|>\\n
    <|im_start|>user\\n{text}<|im_end|>\\n
    <|im_start|>assistant\\n{content}\\n<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call><|im_end|>\\n
    <|im_start|>user\\n<tool_response>\\n{result}\\n</tool_response><|im_end|>\\n
    <|im_start|>assistant\\n                                   (the generation prompt)

Invariants:
* deterministic: the same messages and tools give the same text, byte for byte;
* append-only across turns: every message renders on its own, so the prompt of turn k+1 starts with the prompt of
  turn k followed by the assistant reply exactly as `render_assistant_body` renders it — which is how the server
  lays out what it generates, so a follow-up turn hits the blocks of the previous answer in the prefix cache;
* tool-call arguments are re-serialised from their parsed JSON with fixed separators, so a client that re-encodes
  them (the Anthropic `input` object, or a different JSON spacing) still renders the same text.
Reasoning/thinking of earlier turns is dropped (as Qwen3's template does); ids of tool calls are not rendered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import BadRequest
from .tokenizer import IM_END, IM_START

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\n</tool_call>"
)
GENERATION_PROMPT = f"{IM_START}assistant\n"


def template_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_chat(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> str:
    """The prompt for the next assistant turn (with the generation prompt)."""
    parts: list[str] = []
    tools_section = _tools_section(tools)
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise BadRequest(f"messages[{index}].role: unexpected role {role!r}; expected one of {sorted(ROLES)}")
        if index == 0 and role in ("system", "developer"):
            parts.append(_turn("system", content_text(message.get("content"), index) + tools_section))
            tools_section = ""
            continue
        if tools_section:
            parts.append(_turn("system", tools_section.lstrip("\n")))
            tools_section = ""
        parts.append(_render_message(message, str(role), index))
    if tools_section:
        parts.append(_turn("system", tools_section.lstrip("\n")))
    parts.append(GENERATION_PROMPT)
    return "".join(parts)


def render_assistant_body(content: str, tool_calls: Sequence[tuple[str, str]]) -> str:
    """An assistant turn's text: its content, then one `<tool_call>` block per (name, arguments JSON) pair."""
    blocks = [content] if content else []
    blocks += [tool_call_block(name, arguments) for name, arguments in tool_calls]
    return "\n".join(blocks)


def content_text(content: Any, index: int) -> str:
    """The text of a message's content: a string, null, or a list of parts whose text parts are concatenated."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or "type" not in part:
                raise BadRequest(f"messages[{index}].content: every part must be an object with a 'type'")
            if part["type"] in ("text", "input_text", "output_text"):
                texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise BadRequest(f"messages[{index}].content: expected a string, null or a list of parts")


def _render_message(message: Mapping[str, Any], role: str, index: int) -> str:
    text = content_text(message.get("content"), index)
    if role == "assistant":
        calls = [_call_pair(call, index) for call in message.get("tool_calls") or ()]
        return _turn("assistant", render_assistant_body(text, calls))
    if role in ("tool", "function"):
        return _turn("user", f"<tool_response>\n{text}\n</tool_response>")
    return _turn("system" if role == "developer" else role, text)


def _call_pair(call: Any, index: int) -> tuple[str, str]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise BadRequest(f"messages[{index}].tool_calls: every call needs a function with a name")
    arguments = function.get("arguments", "{}")
    return function["name"], arguments if isinstance(arguments, str) else template_json(arguments)


def tool_call_block(name: str, arguments: str) -> str:
    try:
        parsed: Any = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        parsed = arguments
    return f"<tool_call>\n{template_json({'name': name, 'arguments': parsed})}\n</tool_call>"


def _tools_section(tools: Sequence[Mapping[str, Any]] | None) -> str:
    if not tools:
        return ""
    lines = "".join("\n" + template_json(tool) for tool in tools)
    return "\n\n" + _TOOLS_PREAMBLE + lines + _TOOLS_POSTAMBLE


def _turn(role: str, body: str) -> str:
    return f"{IM_START}{role}\n{body}{IM_END}\n"
