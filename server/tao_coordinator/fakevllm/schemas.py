"""Request bodies the fake server accepts, validated like vLLM's pydantic protocol models (unknown fields ignored).

Only the fields the fake acts on are typed; messages, tools and content blocks stay plain JSON and are checked by
the chat template and the Anthropic translation, which name the offending field. A validation failure becomes a 400
whose message names the model, the field path and pydantic's reason.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import BadRequest


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Lenient):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class _Generate(_Lenient):
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    priority: int = 0
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    session_id: str | None = None
    request_id: str | None = None
    vllm_xargs: dict[str, Any] | None = None
    n: int = Field(default=1, ge=1, le=1)

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _Generate:
        if self.stream_options is not None and not self.stream:
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return self


class ChatCompletionRequest(_Generate):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @field_validator("tools")
    @classmethod
    def _function_tools(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for index, tool in enumerate(tools or ()):
            function = tool.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ValueError(f"tools[{index}] needs a 'function' object with a string 'name'")
        return tools

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Generate):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)


class AnthropicMessage(_Lenient):
    role: str
    content: str | list[dict[str, Any]]

    @field_validator("role", mode="before")
    @classmethod
    def _claude_code_roles(cls, role: Any) -> Any:
        return {"ctx": "user", "msg": "user"}.get(role, role) if isinstance(role, str) else role

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ("user", "assistant", "system"):
            raise ValueError(f"role must be 'user', 'assistant' or 'system', got {role!r}")
        return role


class AnthropicTool(_Lenient):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class AnthropicCountTokensRequest(_Lenient):
    model: str = Field(min_length=1)
    messages: list[AnthropicMessage]
    system: str | list[dict[str, Any]] | None = None
    tools: list[AnthropicTool] | None = None


class AnthropicMessagesRequest(AnthropicCountTokensRequest):
    max_tokens: int = Field(ge=1)
    stream: bool | None = False
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    session_id: str | None = None
    priority: int = 0


class TokenizeRequest(_Lenient):
    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None


Model = TypeVar("Model", bound=BaseModel)


def parse_body(raw: bytes, model: type[Model]) -> Model:
    """Decode and validate a JSON body; any failure is a 400 naming the problem."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(f"Invalid JSON body: {error}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"Invalid request body: expected a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise BadRequest(_describe(error, model.__name__), param=_first_field(error)) from None


def _describe(error: ValidationError, name: str) -> str:
    problems = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()]
    plural = "s" if len(problems) > 1 else ""
    return f"{len(problems)} validation error{plural} for {name}: " + "; ".join(problems)


def _first_field(error: ValidationError) -> str | None:
    errors = error.errors()
    return str(errors[0]["loc"][0]) if errors and errors[0]["loc"] else None
