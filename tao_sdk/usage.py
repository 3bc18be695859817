"""Reading token usage and the time to first token out of a model response, as its bytes pass by.

Works for OpenAI chat/completions and Anthropic messages, JSON or server-sent events, without buffering a stream:
SSE is parsed line by line and only the usage figures are kept. OpenAI streams carry usage in the last chunk when
`stream_options.include_usage` is set (`with_usage_requested` sets it, for the transport and the proxy alike);
Anthropic streams in `message_start` and `message_delta`. Anthropic's `input_tokens` excludes cached tokens, so
prompt = input + cache read + cache creation.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Usage:
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    error: str | None = None
    refused: bool = False
    """The node refused the call before answering any of it (`refusals.py`); `error` says how."""


def with_usage_requested(raw: bytes, path: str) -> tuple[bytes, bool]:
    """The body to forward, and whether the response streams. OpenAI streams are asked for their usage chunk."""
    try:
        payload = json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw, False
    if not isinstance(payload, dict) or payload.get("stream") is not True:
        return raw, False
    if not path.endswith("/messages") and "stream_options" not in payload:
        payload["stream_options"] = {"include_usage": True}
        return json.dumps(payload).encode(), True
    return raw, True


class UsageObserver:
    def __init__(self, streaming: bool, started: float) -> None:
        self.streaming = streaming
        self.started = started
        self.usage = Usage()
        self._buffer = b""
        self._body = bytearray()
        self._cache_read = 0
        self._cache_creation = 0

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self.usage.ttft_s is None and self.streaming:
            self.usage.ttft_s = time.monotonic() - self.started
        if not self.streaming:
            self._body += chunk
            return
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def finish(self) -> Usage:
        if self.streaming:
            self._line(self._buffer.strip())
        elif self._body:
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
                self._absorb(json.loads(self._body))
        return self.usage

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            return
        try:
            self._absorb(json.loads(data))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return

    def _absorb(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        if "error" in message and isinstance(message["error"], dict | str):
            self.usage.error = str(message["error"])[:500]
        if message.get("type") == "message_start":
            message = message.get("message") or {}
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)

    def _usage(self, usage: dict[str, Any]) -> None:
        if "prompt_tokens" in usage:
            self.usage.prompt_tokens = _int(usage.get("prompt_tokens"))
            self.usage.completion_tokens = _int(usage.get("completion_tokens"))
            details = usage.get("prompt_tokens_details") or {}
            self.usage.cached_tokens = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
            return
        # message_delta may repeat input_tokens without the cache figures message_start gave: keep those
        self._cache_read = _int(usage.get("cache_read_input_tokens")) or self._cache_read
        self._cache_creation = _int(usage.get("cache_creation_input_tokens")) or self._cache_creation
        if "input_tokens" in usage:
            input_tokens = _int(usage.get("input_tokens")) or 0
            self.usage.prompt_tokens = input_tokens + self._cache_read + self._cache_creation
            self.usage.cached_tokens = self._cache_read
        if "output_tokens" in usage:
            self.usage.completion_tokens = _int(usage.get("output_tokens"))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
