"""vLLM 0.33's `--max-num-queued-reqs` and `/v1/completions` usage details, as its serving code produces them."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import openai
import pytest

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.fleet import FakeNode

from .conftest import MODEL, tiny_profile
from .test_metrics import scrape, value

BUSY = "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance."


@pytest.fixture(scope="module")
def limited() -> Iterator[FakeNode]:
    config = FakeNodeConfig(profile=tiny_profile(name="limited"), time_scale=1.0, max_num_queued_reqs=1)
    with ThreadedFleet([config]) as fleet:
        yield fleet.nodes[0]


def post(node: FakeNode, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        node.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_beyond_the_queue_limit_requests_get_vllms_503(limited, unique_text):
    reason = {"model_name": MODEL, "reason": "max_num_queued_reqs"}
    before = value(scrape(limited), "vllm:admission_rejections", "vllm:admission_rejections_total", **reason)
    with openai.OpenAI(base_url=limited.openai_base_url, api_key="x", max_retries=0) as client:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": unique_text(10)}], max_tokens=500, stream=True
        )
        next(iter(stream))  # one request in flight fills the queue
        chat = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        assert post(limited, "/v1/chat/completions", chat) == (
            503,
            {"error": {"message": BUSY, "type": "Service Unavailable", "param": None, "code": 503}},
        )
        status, body = post(limited, "/v1/messages", chat)
        assert (status, body) == (503, {"type": "error", "error": {"type": "overloaded_error", "message": BUSY}})
        stream.close()
    after = scrape(limited)
    assert value(after, "vllm:admission_rejections", "vllm:admission_rejections_total", **reason) == before + 2
    tokens = {s.labels["reason"] for s in after["vllm:admission_rejections"].samples}
    assert tokens == {"max_num_queued_reqs", "max_num_queued_tokens"}
    deadline = time.monotonic() + 5
    while limited.service.driver.in_flight and time.monotonic() < deadline:  # the aborted stream leaves the queue
        time.sleep(0.02)
    assert post(limited, "/v1/chat/completions", chat)[0] == 200


def test_completions_usage_leaves_created_cache_tokens_null_and_streams_drop_it(node, unique_text):
    prompt = unique_text(40)
    status, body = post(node, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 3})
    assert status == 200
    details = body["usage"]["prompt_tokens_details"]
    assert details == {
        "cached_tokens": details["cached_tokens"],
        "created_cache_tokens": None,
        "multimodal_tokens": None,
    }
    stream_body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        node.url + "/v1/completions",
        data=json.dumps(stream_body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        lines = [line[6:] for line in response.read().decode().splitlines() if line.startswith("data: {")]
    usage = json.loads(lines[-1])["usage"]
    assert (
        list(usage["prompt_tokens_details"]) == ["cached_tokens"]
        and usage["prompt_tokens_details"]["cached_tokens"] > 0
    )
    chat = {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": unique_text(40)}]}
    created = post(node, "/v1/chat/completions", chat)[1]["usage"]["prompt_tokens_details"]["created_cache_tokens"]
    assert created > 0 and created % 16 == 0  # chat fills it: full prompt blocks written to the cache
