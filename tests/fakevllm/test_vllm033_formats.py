"""The fake answers vLLM 0.33's exact request-side formats: golden payloads, one JSON file per case.

Each file in `golden_vllm033/` was written by hand from vLLM 0.33.0's released sources (the file names the source):
a request (path, headers, JSON or raw body) and the answer — the status and either the exact JSON body, a subset
of it (`match`: every key given must be there with that value; lists element by element), or the exact bytes of a
stream. The node has max_model_len 256 so every limit is reached with small requests, and each golden that
generates uses a prompt of its own (no prefix-cache hit from another case).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.fleet import FakeNode

from .conftest import MODEL, tiny_profile

GOLDEN = Path(__file__).parent / "golden_vllm033"
MAX_MODEL_LEN = 256


@pytest.fixture(scope="module")
def golden_node() -> Iterator[FakeNode]:
    profile = dataclasses.replace(tiny_profile(name="golden"), max_model_len=MAX_MODEL_LEN)
    with ThreadedFleet([FakeNodeConfig(profile=profile, time_scale=50.0)]) as fleet:
        yield fleet.nodes[0]


def _send(node: FakeNode, request: dict[str, Any]) -> tuple[int, bytes]:
    raw = request["raw_body"].encode() if "raw_body" in request else json.dumps(request["body"]).encode()
    headers = {"Content-Type": "application/json", **request.get("headers", {})}
    sent = urllib.request.Request(node.url + request["path"], data=raw, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _assert_matches(actual: Any, expected: Any, where: str = "body") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} missing from {sorted(actual)}"
            _assert_matches(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {actual!r} vs {expected!r}"
        for index, (got, wanted) in enumerate(zip(actual, expected, strict=True)):
            _assert_matches(got, wanted, f"{where}[{index}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


@pytest.mark.parametrize("case", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_the_fake_answers_the_golden_payload(golden_node, case):
    golden = json.loads((GOLDEN / f"{case}.json").read_text())
    status, raw = _send(golden_node, golden["request"])
    expected = golden["response"]
    assert status == expected["status"], raw.decode(errors="replace")
    if "stream" in expected:
        assert raw.decode() == expected["stream"]
    elif "body" in expected:
        assert json.loads(raw) == expected["body"]
    else:
        _assert_matches(json.loads(raw), expected["match"])


def test_the_golden_set_covers_the_request_side_items():
    names = {p.stem for p in GOLDEN.glob("*.json")}
    for required in (
        "chat_clamped_to_context",
        "anthropic_clamped",
        "chat_prompt_beyond_context",
        "chat_max_tokens_beyond_context",
        "schema_missing_messages",
        "priority_header_invalid",
        "dp_rank_out_of_range",
        "dp_rank_out_of_range_stream",
    ):
        assert required in names


def test_a_clamped_stream_stops_at_the_context_with_length(golden_node):
    """The streaming path generates exactly the clamped budget and closes with finish_reason `length`."""
    with openai.OpenAI(base_url=golden_node.openai_base_url, api_key="x", max_retries=0) as client:
        chunks = list(
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "Golden stream clamp: go on and on."}],
                max_tokens=MAX_MODEL_LEN,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    usage = chunks[-1].usage
    assert usage is not None and usage.total_tokens == MAX_MODEL_LEN
    assert usage.completion_tokens == MAX_MODEL_LEN - usage.prompt_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_an_invalid_priority_header_falls_back_to_the_body_priority(priority_node, unique_text):
    """One sequence at a time under the priority policy: a request whose header is junk but whose body says -5 is
    served before an earlier request of priority 0."""
    done: list[str] = []

    def run(name: str, max_tokens: int, headers: dict[str, str] | None = None, priority: int = 0) -> None:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": unique_text(5)}],
            "max_tokens": max_tokens,
            "priority": priority,
        }
        status, raw = _send(priority_node, {"path": "/v1/chat/completions", "headers": headers or {}, "body": body})
        done.append(name if status == 200 else f"{name}: {status} {raw.decode(errors='replace')}")

    threads = [
        threading.Thread(target=run, args=("blocker", 150)),
        threading.Thread(target=run, args=("plain", 5)),
        threading.Thread(target=run, args=("urgent", 5, {"X-Vllm-Priority": "high"}, -5)),
    ]
    for thread, pause in zip(threads, (0.1, 0.05, 0.0), strict=True):
        thread.start()
        time.sleep(pause)
    for thread in threads:
        thread.join(timeout=30)
    assert done == ["blocker", "urgent", "plain"]


@pytest.mark.parametrize("rank", ["0", "zero"])
def test_a_pinned_rank_zero_or_an_unreadable_rank_is_served(golden_node, unique_text, rank):
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": unique_text(5)}]}
    status, raw = _send(golden_node, {"path": "/v1/messages", "headers": {"X-data-parallel-rank": rank}, "body": body})
    assert status == 200 and json.loads(raw)["usage"]["output_tokens"] == 2


def test_an_absurd_max_tokens_is_refused_before_any_reply_is_built(golden_node):
    """The limit is checked before the policy lays out a reply of max_tokens tokens (which would not fit in memory)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2**62}
    status, raw = _send(golden_node, {"path": "/v1/chat/completions", "body": body})
    assert status == 400 and json.loads(raw)["error"]["param"] == "max_tokens"
