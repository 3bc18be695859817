"""Usage and time to first token read from OpenAI and Anthropic responses, JSON or SSE, in any chunking."""

import json

import pytest

from tao_sdk.usage import UsageObserver

OPENAI_SSE = (
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":5123,"total_tokens":5125,"completion_tokens":2,'
    b'"prompt_tokens_details":{"cached_tokens":4992}}}\n\n'
    b"data: [DONE]\n\n"
)
ANTHROPIC_SSE = (
    b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":131,'
    b'"output_tokens":0,"cache_read_input_tokens":4992}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","usage":{"input_tokens":131,"output_tokens":2}}\n\n'
)


def observe(body, streaming, size):
    observer = UsageObserver(streaming, started=0.0)
    for start in range(0, len(body), size):
        observer.feed(body[start : start + size])
    return observer.finish()


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_openai_stream_in_any_chunking(size):
    usage = observe(OPENAI_SSE, True, size)
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (5123, 4992, 2)
    assert usage.ttft_s is not None


@pytest.mark.parametrize("size", [1, 13, 10_000])
def test_anthropic_stream_counts_cached_tokens_into_the_prompt(size):
    usage = observe(ANTHROPIC_SSE, True, size)
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (5123, 4992, 2)


def test_json_bodies():
    openai = json.dumps({"usage": {"prompt_tokens": 10, "completion_tokens": 3}}).encode()
    assert observe(openai, False, 4).prompt_tokens == 10
    anthropic = json.dumps({"usage": {"input_tokens": 7, "output_tokens": 1, "cache_creation_input_tokens": 3}})
    usage = observe(anthropic.encode(), False, 100)
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens, usage.ttft_s) == (10, 0, 1, None)


def test_errors_and_garbage():
    usage = observe(b'data: {"error": {"message": "boom"}}\n\ndata: not json\n\n', True, 5)
    assert "boom" in usage.error and usage.prompt_tokens is None
    assert observe(b"<html>", False, 3).prompt_tokens is None
