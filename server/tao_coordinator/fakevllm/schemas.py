"""Request bodies the fake server accepts, parsed and validated as vLLM 0.33's FastAPI routes do (unknown fields
ignored).

Only the fields the fake acts on are typed; messages, tools and content blocks stay plain JSON and are checked by
the chat template and the Anthropic translation, which name the offending field.

Errors, in FastAPI's order (`parse_request`): a JSON body that does not decode (`json_invalid`, param
`body.<offset>`); a media type other than `application/json` (vLLM's `validate_json_request`); then the model. A
vLLM model validator that raises its own validation error (`stream_options` without `stream`, an empty completion
prompt) bypasses pydantic and answers like any request error (`BadRequestError`, param the bare field name); every
pydantic failure becomes one `SchemaError`: type "Bad Request", param the first error's path `body.<field>`,
message `"N validation error(s):"` then one line per error (at most ten) — the error's dict as Python prints it,
with the path dotted and the input summarised (long strings cut at 200 characters, containers as
`<list of N items>`).
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import SchemaError, invalid_parameter

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
JSON_MEDIA_TYPE = "application/json"
UNSUPPORTED_MEDIA_TYPE = "Unsupported Media Type: Only 'application/json' is allowed"


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Lenient):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class _Generate(_Lenient):
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    priority: int = Field(default=0, ge=INT64_MIN, le=INT64_MAX)
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    session_id: str | None = None
    request_id: str | None = None
    vllm_xargs: dict[str, Any] | None = None
    n: int = Field(default=1, ge=1, le=1)
    """vLLM accepts any n; the fake generates one choice."""

    @model_validator(mode="before")
    @classmethod
    def _stream_options_need_stream(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise invalid_parameter(
                "Stream options can only be defined when `stream=True`.", parameter="stream_options"
            )
        return data


class ChatCompletionRequest(_Generate):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_completion_tokens: int | None = None

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

    @property
    def output_limit_param(self) -> str:
        """The field vLLM names when the output limit alone exceeds max_model_len."""
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"


class CompletionRequest(_Generate):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16

    @model_validator(mode="before")
    @classmethod
    def _prompt_not_empty(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("prompt") in (None, "") and not data.get("prompt_embeds"):
            raise invalid_parameter(
                "Either prompt or prompt_embeds must be provided and non-empty.", parameter="prompt"
            )
        return data


class AnthropicMessage(_Lenient):
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]

    @field_validator("role", mode="before")
    @classmethod
    def _claude_code_roles(cls, role: Any) -> Any:
        return {"ctx": "user", "msg": "user"}.get(role, role) if isinstance(role, str) else role


class AnthropicTool(_Lenient):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class AnthropicCountTokensRequest(_Lenient):
    model: str
    messages: list[AnthropicMessage]
    system: str | list[dict[str, Any]] | None = None
    tools: list[AnthropicTool] | None = None

    @field_validator("model")
    @classmethod
    def _model_named(cls, model: str) -> str:
        if not model:
            raise ValueError("Model is required")
        return model


class AnthropicMessagesRequest(AnthropicCountTokensRequest):
    """vLLM 0.33's Anthropic request has no `priority`, `session_id` or `request_id`: the priority comes from the
    `X-Vllm-Priority` header only, the session id from `X-Session-ID` or `vllm_xargs.session_id`."""

    max_tokens: int
    stream: bool | None = False
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)
    vllm_xargs: dict[str, Any] | None = None

    @field_validator("max_tokens")
    @classmethod
    def _positive(cls, max_tokens: int) -> int:
        if max_tokens <= 0:
            raise ValueError("max_tokens must be positive")
        return max_tokens


class TokenizeRequest(_Lenient):
    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None


Model = TypeVar("Model", bound=BaseModel)


def parse_request(raw: bytes, content_type: str | None, model: type[Model]) -> Model:
    """A POST body as FastAPI reads it for a vLLM route guarded by `validate_json_request`."""
    content_type = content_type or ""
    media = content_type.split(";", 1)[0].strip().lower()
    data: Any = None
    if raw and (media == JSON_MEDIA_TYPE or (media.startswith("application/") and media.endswith("+json"))):
        data = _decode(raw)
    if content_type.lower().split(";", 1)[0] != JSON_MEDIA_TYPE:
        raise SchemaError(f"1 validation error:\n  {UNSUPPORTED_MEDIA_TYPE}")
    return _validate(data, model)


def parse_body(raw: bytes, model: type[Model]) -> Model:
    """A JSON body (whatever its media type) decoded and validated with the same errors as `parse_request`."""
    return _validate(_decode(raw) if raw else None, model)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        problem = {"type": "json_invalid", "loc": (error.pos,), "msg": "JSON decode error", "input": {}}
        raise schema_error([{**problem, "ctx": {"error": error.msg}}]) from None
    except UnicodeDecodeError:
        raise SchemaError("There was an error parsing the body") from None


def _validate(data: Any, model: type[Model]) -> Model:
    if data is None:
        raise schema_error([{"type": "missing", "loc": (), "msg": "Field required", "input": None}])
    try:
        return model.model_validate(data, from_attributes=True)
    except ValidationError as error:
        raise schema_error(list(error.errors(include_url=False))) from None


_REPORTED_ERRORS = 10
_INPUT_CHARS = 200
_ERROR_CHARS = 1000
_TRUNCATED = "...[truncated]"
_PYDANTIC_LOC_MARKERS = frozenset(
    {
        *("function-wrap", "function-after", "function-before", "function-plain", "json-or-python"),
        *("lax-or-strict", "chain", "default", "nullable", "tagged-union", "union", "call", "arguments"),
        *("is-instance", "is-subclass", "callable", "str", "int", "float", "bool", "bytes", "bytearray"),
        *("list", "tuple", "dict", "set", "frozenset", "complex", "none", "nonetype"),
    }
)
"""pydantic-core's schema kinds, which appear in an error's location for union branches and wrapped validators."""


def schema_error(errors: list[Any]) -> SchemaError:
    """pydantic errors (locations relative to the body) as vLLM 0.33's RequestValidationError handler reports them."""
    errors = [{**e, "loc": ("body", *e["loc"])} if isinstance(e, dict) else e for e in errors]
    first = errors[0] if errors else None
    param = field_path(first["loc"]) if isinstance(first, dict) and first.get("loc") else None
    label = "error" if len(errors) == 1 else "errors"
    lines = [f"{len(errors)} validation {label}:"]
    lines += [f"  {_render(error)}" for error in errors[:_REPORTED_ERRORS]]
    if len(errors) > _REPORTED_ERRORS:
        lines.append(f"  ...and {len(errors) - _REPORTED_ERRORS} more {label}")
    return SchemaError("\n".join(lines) if errors else "Validation error", param=param)


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a dotted path without pydantic's union-branch and wrapper markers."""
    kept = [str(part) for part in loc if not _is_marker(str(part))]
    return ".".join(kept or [str(part) for part in loc])


def _is_marker(part: str) -> bool:
    return any(bracket in part for bracket in "[]{}()") or part.lower() in _PYDANTIC_LOC_MARKERS


def _render(error: Any) -> str:
    if isinstance(error, dict):
        error = dict(error)
        if "input" in error:
            error["input"] = _summary(error["input"])
        if isinstance(error.get("loc"), tuple | list):
            error["loc"] = field_path(tuple(error["loc"]))
    text = str(error)
    return text[:_ERROR_CHARS] + _TRUNCATED if len(text) > _ERROR_CHARS else text


def _summary(value: Any) -> str:
    """A bounded stand-in for an error's input: containers by size, everything else as text."""
    if isinstance(value, bytes | bytearray):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:  # an int beyond Python's digit limit for str()
        return f"<{type(value).__name__}>"
    return text[:_INPUT_CHARS] + _TRUNCATED if len(text) > _INPUT_CHARS else text
