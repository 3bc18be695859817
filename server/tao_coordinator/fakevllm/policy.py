"""Scripted behaviour: which reply a request gets — a scripted step (tool call or final answer) or filler text.

A policy (JSON or TOML file, `--policy`; or `PUT /fake/policy`) lists scripts. The first script whose `match` fits
the request answers it (`contains`: substring of the first user message; `session`: the request's session id;
`model`: the requested model name; an empty match fits everything). Step k answers the conversation's turn k, where
k is the number of assistant messages already in the request — so the policy is stateless: a harness that retries,
or sends side requests, gets the same answer for the same conversation. Past the last step, or with no script,
the reply is filler text.

Steps (exactly one kind each, plus optional `content` text before a tool call):
* `{"text": "..."}` — a final answer;
* `{"filler": n}` — n tokens of filler text, ending the turn;
* `{"bash": "cmd", "timeout_ms": 5000, "description": ..., "run_in_background": ..., "workdir": ...}` — a call of the
  request's bash tool, found by name case-insensitively (Claude Code's `Bash`, OpenCode's and mini-swe-agent's
  `bash`); the optional fields are passed only where that tool's JSON schema has them (`description` is also
  made up when the schema requires it);
* `{"submit": true}` — mini-swe-agent's completion: bash `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`;
* `{"tool": "name", "input": {...}}` — any other tool call, verbatim.
A tool step for a request that does not offer the tool gets filler text (e.g. OpenCode's tool-less title request).

Filler length: `filler_tokens` when set (capped by max_tokens); otherwise the request's max_tokens exactly (finish
`length`), or `default_output_tokens` when the request gives none.
"""

from __future__ import annotations

import json
import tomllib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .reply import Reply, ScriptedToolCall
from .template import content_text, template_json
from .tokenizer import filler_pieces

SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_KINDS = ("text", "filler", "bash", "submit", "tool")


class ReplyStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    filler: int | None = Field(default=None, ge=1)
    bash: str | None = None
    submit: bool = False
    tool: str | None = None
    input: dict[str, Any] | None = None
    content: str = ""
    timeout_ms: int | None = Field(default=None, ge=1)
    description: str | None = None
    run_in_background: bool | None = None
    workdir: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ReplyStep:
        kinds = [kind for kind in _KINDS if getattr(self, kind) not in (None, False)]
        if len(kinds) != 1:
            raise ValueError(f"a step needs exactly one of {', '.join(_KINDS)}; got {kinds or 'none'}")
        return self


class Match(BaseModel):
    model_config = ConfigDict(extra="forbid")
    contains: str | None = None
    session: str | None = None
    model: str | None = None


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    match: Match = Field(default_factory=Match)
    steps: list[ReplyStep]


class ReplyPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default_output_tokens: int = Field(default=64, ge=1)
    filler_tokens: int | None = Field(default=None, ge=1)
    scripts: list[Script] = Field(default_factory=list)


def load_policy(path: str | Path) -> ReplyPolicy:
    text = Path(path).read_text(encoding="utf-8")
    data = tomllib.loads(text) if str(path).endswith(".toml") else json.loads(text)
    return ReplyPolicy.model_validate(data)


@dataclass(frozen=True, slots=True)
class Conversation:
    """What the policy looks at: the request in OpenAI form."""

    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]]
    session_id: str | None = None
    model: str | None = None


def choose_reply(policy: ReplyPolicy, conversation: Conversation, max_tokens: int | None) -> Reply:
    step = _current_step(policy, conversation)
    if step is not None:
        if step.text is not None:
            return Reply(content=step.text)
        if step.filler is not None:
            return Reply(content="".join(filler_pieces(step.filler - 1)))
        call = _tool_call(step, conversation.tools)
        if call is not None:
            return Reply(content=step.content, tool_calls=(call,))
    return _filler(policy, max_tokens)


def _filler(policy: ReplyPolicy, max_tokens: int | None) -> Reply:
    if policy.filler_tokens is not None:
        wanted = policy.filler_tokens if max_tokens is None else min(policy.filler_tokens, max_tokens)
        return Reply(content="".join(filler_pieces(wanted - 1)))
    if max_tokens is not None:
        return Reply(content="".join(filler_pieces(max_tokens)))
    return Reply(content="".join(filler_pieces(policy.default_output_tokens - 1)))


def _current_step(policy: ReplyPolicy, conversation: Conversation) -> ReplyStep | None:
    turn = sum(1 for message in conversation.messages if message.get("role") == "assistant")
    for script in policy.scripts:
        if _matches(script.match, conversation):
            return script.steps[turn] if turn < len(script.steps) else None
    return None


def _matches(match: Match, conversation: Conversation) -> bool:
    if match.session is not None and match.session != conversation.session_id:
        return False
    if match.model is not None and match.model != conversation.model:
        return False
    if match.contains is not None:
        first_user = next((m for m in conversation.messages if m.get("role") == "user"), None)
        return first_user is not None and match.contains in content_text(first_user.get("content"), 0)
    return True


def _tool_call(step: ReplyStep, tools: Sequence[Mapping[str, Any]]) -> ScriptedToolCall | None:
    functions = {str(f.get("name")): f for t in tools if isinstance(f := t.get("function"), Mapping)}
    if step.tool is not None:
        return _call(step.tool, step.input or {}) if step.tool in functions else None
    name = next((n for n in functions if n.lower() == "bash"), None)
    if name is None:
        return None
    command = SUBMIT_COMMAND if step.submit else str(step.bash)
    return _call(name, _bash_arguments(step, command, functions[name]))


def _bash_arguments(step: ReplyStep, command: str, function: Mapping[str, Any]) -> dict[str, Any]:
    schema = function.get("parameters") or {}
    properties = schema.get("properties") or {}
    required = schema.get("required") or ()
    arguments: dict[str, Any] = {"command": command}
    optional = {
        "timeout": step.timeout_ms,
        "description": step.description or (f"Run {command[:60]}" if "description" in required else None),
        "run_in_background": step.run_in_background,
        "workdir": step.workdir,
    }
    arguments.update({key: value for key, value in optional.items() if value is not None and key in properties})
    return arguments


def _call(name: str, arguments: Mapping[str, Any]) -> ScriptedToolCall:
    return ScriptedToolCall(id=f"chatcmpl-tool-{uuid.uuid4().hex}", name=name, arguments=template_json(dict(arguments)))
