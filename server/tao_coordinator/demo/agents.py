"""Synthetic agents that use the SDK for real: each replays one session script over HTTP.

An agent keeps an append-only chat history, as coding agents do: a system prompt shared by every agent, its task,
then the model's replies and the tool results. Each turn it waits out its script's gap inside `s.tool(…)` (so the
coordinator sees a tool with its hints), appends a tool result sized so the prompt grows as the script says, and
streams one completion through the session's routed `AsyncOpenAI` client, recording when it wanted the call, when
the first token came and when the answer ended. Text is made of one-token words (≤ 4 letters), so sizes are exact
under the fake server's tokenizer; every agent's words come from its own seed, so only the system prompt is shared.
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tao_sdk

from ..fakevllm.config import DEFAULT_MODEL
from ..sim.workloads import SessionScript

SYSTEM_PROMPT_TOKENS = 192
TEMPLATE_TOKENS_PER_MESSAGE = 6


@dataclass
class CallRecord:
    wanted_at: float
    first_token_at: float | None = None
    done_at: float | None = None
    completion_tokens: int = 0


@dataclass
class AgentRecord:
    started_at: float
    finished_at: float | None = None
    calls: list[CallRecord] = field(default_factory=list)
    error: str | None = None


def _vocabulary(size: int = 20_000) -> list[str]:
    rng = random.Random("vocabulary")
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 4))) for _ in range(size)]


VOCABULARY = _vocabulary()


def words(rng: random.Random, count: int) -> str:
    """`count` tokens of text: lowercase words of 1–4 letters, space-separated (one C-level draw: an agent's
    first prompt must not hold up the event loop the other agents share)."""
    return " ".join(rng.choices(VOCABULARY, k=max(0, count)))


SYSTEM_PROMPT = "You are a careful coding agent. " + words(random.Random("system"), SYSTEM_PROMPT_TOKENS)


async def run_agent(
    script: SessionScript,
    open_session: Callable[[SessionScript], tao_sdk.Session],
    time_scale: float,
    record: AgentRecord,
    on_call: Callable[[], None],
) -> None:
    rng = random.Random(script.id)
    first = script.requests[0]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Task {script.id}: " + words(rng, first.prompt.tokens - SYSTEM_PROMPT_TOKENS)},
    ]
    try:
        async with open_session(script) as session:
            client = session.async_openai(max_retries=0)
            context = first.prompt.tokens
            for index, spec in enumerate(script.requests):
                if index:
                    async with session.tool(spec.tool, timeout=60, sleep=spec.gap_before_s):
                        await _sleep(spec.gap_before_s / time_scale)
                    grow = spec.prompt.tokens - context - TEMPLATE_TOKENS_PER_MESSAGE
                    messages.append({"role": "user", "content": words(rng, max(1, grow))})
                call = CallRecord(time.monotonic())
                record.calls.append(call)
                reply = await _complete(client, messages, max(1, spec.output_tokens), call)
                messages.append({"role": "assistant", "content": reply})
                context = spec.prompt.tokens + spec.output_tokens
                on_call()
    except Exception as error:  # an agent that fails is reported, not fatal to the demo
        record.error = f"{type(error).__name__}: {error}"
    record.finished_at = time.monotonic()


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


async def _complete(client: Any, messages: list[dict[str, Any]], max_tokens: int, call: CallRecord) -> str:
    stream = await client.chat.completions.create(
        model=DEFAULT_MODEL,
        messages=messages,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts: list[str] = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            if call.first_token_at is None:
                call.first_token_at = time.monotonic()
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            call.completion_tokens = chunk.usage.completion_tokens
    call.done_at = time.monotonic()
    if call.first_token_at is None:
        call.first_token_at = call.done_at
    return "".join(parts)
