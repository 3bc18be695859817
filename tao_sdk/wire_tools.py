"""Tool calls and tool results read off the OpenAI and Anthropic wire, for `tao proxy` (no I/O, no clock).

Response side: a `ToolCallReader` is fed a model response's bytes as they pass (server-sent events, or one JSON
body) and tells at the end which tool calls the response asks the harness to run:
- OpenAI chat completions: `choices[0].message.tool_calls` (JSON), or `choices[0].delta.tool_calls` fragments (SSE:
  a fragment's `index` names its call, the first carries `id` and `function.name`, the others pieces of
  `function.arguments`), and `finish_reason`;
- Anthropic messages: `tool_use` content blocks (JSON), or the `content_block_start` of a `tool_use` block and the
  `input_json_delta` pieces of its `partial_json` (SSE), and `stop_reason`.
A response's calls count only when it finished for them: `tool_calls` / `tool_use`, or `stop` / `end_turn` with
calls in it (vLLM finishes a forced tool choice with `stop`); a response cut at its length limit, ended by an
error, or never finished asks for nothing. Arguments that do not parse as a JSON object are read as `{}`: the call
still happens (the harness answers it, with an error).

Request side: `tool_results` names the calls a request answers, from Anthropic `tool_result` blocks
(`tool_use_id`, `is_error`) and OpenAI `role: "tool"` messages (`tool_call_id`). A request carries its whole
conversation, so it names every earlier result again: the caller ends only the calls it holds open.

Bounds: a JSON body is kept up to `MAX_BODY_BYTES` (beyond, nothing is read from it), a response yields at most
`MAX_CALLS` calls, and an SSE line longer than `MAX_BODY_BYTES` is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_BODY_BYTES = 16 << 20
MAX_CALLS = 64
FINISHED_FOR_TOOLS = {"tool_calls", "tool_use"}
FINISHED = FINISHED_FOR_TOOLS | {"stop", "end_turn"}
_TIMEOUT_MARKERS = re.compile(
    r"Command timed out after"  # Claude Code's Bash, killed at its timeout
    r"|terminated command after exceeding timeout"  # OpenCode's bash
)
_NEEDLES = (b"tool_", b"input_json", b'_reason":"', b'_reason": "', b'"error"')
"""An SSE line with none of these carries only text (or usage) and is not parsed: the proxy parses each token's JSON
once (for its usage, `usage.py`), not twice."""
Status = Literal["ok", "error", "timeout"]


@dataclass(frozen=True, slots=True)
class WireToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    status: Status
    """`timeout` when the result says the harness stopped the tool at its timeout, `error` when it is flagged as
    one (Anthropic `is_error`), else `ok`."""


@dataclass(slots=True)
class _Pending:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def parse_json(raw: bytes) -> Any:
    """The JSON value of a body, None when it is not JSON (or too large to read)."""
    if not raw or len(raw) > MAX_BODY_BYTES:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


class ToolCallReader:
    """Reads the tool calls of one response as its bytes pass by (`feed`), told whether it streams."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self._body = bytearray()
        self._rest = b""
        self._pending: dict[int, _Pending] = {}
        self._finish: str | None = None
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        if self._overflow:
            return
        if not self.streaming:
            self._body += chunk
            self._overflow = len(self._body) > MAX_BODY_BYTES
            return
        self._rest += chunk
        if b"\n" in chunk:
            *lines, self._rest = self._rest.split(b"\n")
            for line in lines:
                self._line(line)
        if len(self._rest) > MAX_BODY_BYTES:
            self._rest = b""

    def calls(self) -> tuple[WireToolCall, ...]:
        """The calls the response asks for, once it is over (none unless it finished for them)."""
        if self._overflow:
            return ()
        if self.streaming:
            self._line(self._rest)
            self._rest = b""
        else:
            self._absorb_body(parse_json(bytes(self._body)))
        calls = tuple(
            WireToolCall(p.call_id, p.name, _arguments("".join(p.arguments)))
            for _, p in sorted(self._pending.items())
            if p.call_id and p.name
        )[:MAX_CALLS]
        finished = self._finish in FINISHED_FOR_TOOLS or (self._finish in FINISHED and bool(calls))
        return calls if finished else ()

    # -- server-sent events ----------------------------------------------------------------------------------------

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:") or not _may_matter(line):
            return
        event = parse_json(line[5:].strip())
        if isinstance(event, dict):
            self._event(event)

    def _event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self._start(_index(event), block.get("id"), block.get("name"))
                if isinstance(block.get("input"), dict) and block["input"]:
                    self._pending[_index(event)].arguments.append(json.dumps(block["input"]))
        elif kind == "content_block_delta":
            delta = event.get("delta")
            pending = self._pending.get(_index(event))
            if pending is not None and isinstance(delta, dict) and isinstance(delta.get("partial_json"), str):
                pending.arguments.append(delta["partial_json"])
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._finish = delta["stop_reason"]
        elif kind == "error" or "error" in event:
            self._finish = None
        else:
            self._openai_chunk(event)

    def _openai_chunk(self, chunk: Mapping[str, Any]) -> None:
        choice = _first_choice(chunk)
        if choice is None:
            return
        delta = choice.get("delta")
        fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
        for fragment in fragments if isinstance(fragments, list) else ():
            if not isinstance(fragment, dict):
                continue
            index = _index(fragment)
            function = fragment.get("function")
            function = function if isinstance(function, dict) else {}
            if fragment.get("id") or index not in self._pending:
                self._start(index, fragment.get("id"), function.get("name"))
            if isinstance(function.get("arguments"), str):
                self._pending[index].arguments.append(function["arguments"])
        if isinstance(choice.get("finish_reason"), str):
            self._finish = choice["finish_reason"]

    def _start(self, index: int, call_id: object, name: object) -> None:
        pending = self._pending.setdefault(index, _Pending())
        if isinstance(call_id, str) and call_id:
            pending.call_id = call_id[:200]
        if isinstance(name, str) and name:
            pending.name = name[:200]

    # -- one JSON body ---------------------------------------------------------------------------------------------

    def _absorb_body(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        if isinstance(body.get("content"), list):  # Anthropic
            blocks = [b for b in body["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
            for index, block in enumerate(blocks):
                self._start(index, block.get("id"), block.get("name"))
                if isinstance(block.get("input"), dict):
                    self._pending[index].arguments.append(json.dumps(block["input"]))
            self._finish = body.get("stop_reason") if isinstance(body.get("stop_reason"), str) else None
            return
        choice = _first_choice(body)
        message = choice.get("message") if choice is not None else None
        if choice is None or not isinstance(message, dict):
            return
        calls = message.get("tool_calls")
        for index, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                self._start(index, call.get("id"), function.get("name"))
                if isinstance(function.get("arguments"), str):
                    self._pending[index].arguments.append(function["arguments"])
        self._finish = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None


def _may_matter(line: bytes) -> bool:
    return any(needle in line for needle in _NEEDLES)


def tool_results(payload: Any) -> tuple[ToolResult, ...]:
    """The tool results a request body (parsed) carries, in order: Anthropic messages or OpenAI chat."""
    messages = payload.get("messages") if isinstance(payload, dict) else None
    found: list[ToolResult] = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
            found.append(ToolResult(message["tool_call_id"][:200], _status(message.get("content"), False)))
        elif message.get("role") == "user" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    call_id = block.get("tool_use_id")
                    if isinstance(call_id, str) and call_id:
                        found.append(ToolResult(call_id[:200], _status(block.get("content"), block.get("is_error"))))
    return tuple(found)


def offered_tools(payload: Any) -> dict[str, dict[str, Any]]:
    """Each tool a request offers the model, by name: the properties of its input schema (OpenAI `function.
    parameters`, Anthropic `input_schema`)."""
    tools = payload.get("tools") if isinstance(payload, dict) else None
    offered: dict[str, dict[str, Any]] = {}
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        spec = tool.get("function")
        spec = spec if isinstance(spec, dict) else tool
        schema = spec.get("parameters") or spec.get("input_schema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(spec.get("name"), str):
            offered[spec["name"]] = properties if isinstance(properties, dict) else {}
    return offered


def _status(content: object, is_error: object) -> Status:
    if _TIMEOUT_MARKERS.search(_text(content)):
        return "timeout"
    return "error" if is_error is True else "ok"


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _first_choice(message: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = message.get("choices")
    if not isinstance(choices, list):
        return None
    return next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)


def _index(item: Mapping[str, Any]) -> int:
    index = item.get("index", 0)
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
