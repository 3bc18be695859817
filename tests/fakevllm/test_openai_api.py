"""OpenAI-compatible routes with the real `openai` client: cached tokens, chunk shapes, request fields and headers."""

import json
import threading
import time
import urllib.request

from tao_coordinator.fakevllm.config import VLLM_VERSION

MODEL = "Qwen/Qwen3-32B"


def _messages(system, user="Hello!"):
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _stream(client, messages, **extra):
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}, **extra
        )
    )
    return chunks, chunks[-1].usage


def test_second_streaming_request_sharing_a_prefix_reports_cached_tokens(oai, unique_text):
    system = unique_text(400)
    first_chunks, first = _stream(oai, _messages(system, "first question"), max_tokens=8)
    second_chunks, second = _stream(oai, _messages(system, "second question"), max_tokens=8)
    assert first.prompt_tokens_details.cached_tokens == 0
    assert second.prompt_tokens_details.cached_tokens >= 400
    assert second.prompt_tokens_details.cached_tokens % 16 == 0
    for chunks in (first_chunks, second_chunks):
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-2].choices[0].finish_reason == "length"
        assert chunks[-1].choices == []
        assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]).startswith("The fake node")


def test_non_streaming_request_reports_cached_tokens(oai, unique_text):
    system = unique_text(300)
    first = oai.chat.completions.create(model=MODEL, messages=_messages(system, "a"), max_tokens=4)
    second = oai.chat.completions.create(model=MODEL, messages=_messages(system, "b"), max_tokens=4)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens >= 300
    assert second.choices[0].message.role == "assistant"
    assert second.object == "chat.completion"


def test_the_next_turn_hits_the_blocks_the_answer_filled(oai, unique_text):
    messages = _messages(unique_text(100), "tell me something")
    first = oai.chat.completions.create(model=MODEL, messages=messages)
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.completion_tokens == 64  # the policy's default answer length, <|im_end|> included
    answer = {"role": "assistant", "content": first.choices[0].message.content}
    follow_up = [*messages, answer, {"role": "user", "content": "and then?"}]
    second = oai.chat.completions.create(model=MODEL, messages=follow_up, max_tokens=1)
    sequence = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == (sequence - 1) // 16 * 16


def test_raw_sse_lines_follow_vllm(node, unique_text):
    body = {
        "model": MODEL,
        "messages": _messages(unique_text(20)),
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        node.openai_base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": "raw-1"},
    )
    with urllib.request.urlopen(request) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        raw = response.read().decode()
    events = [line for line in raw.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    first, *middle, last, usage = (json.loads(line[6:]) for line in events[:-1])
    assert first["id"] == "chatcmpl-raw-1" and first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["prompt_token_ids"] is None
    assert all(chunk["choices"][0]["token_ids"] is None and "kv_transfer_params" in chunk for chunk in middle)
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["stop_reason"] is None
    assert usage["choices"] == [] and list(usage["usage"]) == [
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
        "prompt_tokens_details",
    ]


def test_continuous_usage_stats_count_up(oai, unique_text):
    chunks = list(
        oai.chat.completions.create(
            model=MODEL,
            messages=_messages(unique_text(20)),
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
    )
    assert [chunk.usage.completion_tokens for chunk in chunks] == [0, 1, 2, 3, 4, 4]
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0


def test_max_tokens_and_x_request_id_are_honoured(oai, unique_text):
    raw = oai.chat.completions.with_raw_response.create(
        model=MODEL, messages=_messages(unique_text(10)), max_tokens=7, extra_headers={"X-Request-Id": "req-42"}
    )
    response = raw.parse()
    assert raw.headers["X-Request-Id"] == "req-42"
    assert response.id == "chatcmpl-req-42"
    assert response.usage.completion_tokens == 7
    assert response.choices[0].finish_reason == "length"
    other = oai.chat.completions.create(model=MODEL, messages=_messages(unique_text(10)), max_completion_tokens=3)
    assert other.usage.completion_tokens == 3


def test_cache_salt_isolates_the_prefix_cache(oai, unique_text):
    messages = _messages(unique_text(200))

    def cached(**extra):
        response = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, **extra)
        return response.usage.prompt_tokens_details.cached_tokens

    assert cached(extra_body={"cache_salt": "tenant-a"}) == 0
    assert cached(extra_body={"cache_salt": "tenant-a"}) > 0
    assert cached(extra_body={"cache_salt": "tenant-b"}) == 0
    assert cached() == 0


def test_priority_orders_the_waiting_queue(priority_node, openai_for, unique_text):
    client = openai_for(priority_node)
    done: list[str] = []

    def run(name, max_tokens, **extra):
        client.chat.completions.create(model=MODEL, messages=_messages(unique_text(5)), max_tokens=max_tokens, **extra)
        done.append(name)

    blocker = threading.Thread(target=run, args=("blocker", 150))
    blocker.start()
    time.sleep(0.1)
    late = threading.Thread(target=run, args=("low", 5), kwargs={"extra_body": {"priority": 10}})
    late.start()
    time.sleep(0.05)
    urgent = threading.Thread(target=run, args=("high", 5), kwargs={"extra_headers": {"X-Vllm-Priority": "-5"}})
    urgent.start()
    for thread in (blocker, late, urgent):
        thread.join(timeout=30)
    assert done == ["blocker", "high", "low"]


def test_completions_endpoint_streams_and_answers(oai, unique_text):
    prompt = unique_text(50)
    response = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=5)
    assert response.object == "text_completion" and response.id.startswith("cmpl-")
    assert response.usage.completion_tokens == 5
    chunks = list(
        oai.completions.create(
            model=MODEL, prompt=prompt, max_tokens=5, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == response.choices[0].text
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0
    default = oai.completions.create(model=MODEL, prompt=[1, 2, 3])
    assert default.usage.completion_tokens == 16  # vLLM's completions default max_tokens


def test_info_endpoints(node, oai):
    models = oai.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].model_extra["max_model_len"] > 100_000
    with urllib.request.urlopen(node.url + "/health") as response:
        assert response.status == 200 and response.read() == b""
    with urllib.request.urlopen(node.url + "/version") as response:
        assert json.loads(response.read()) == {"version": VLLM_VERSION}
    with urllib.request.urlopen(urllib.request.Request(node.url + "/ping", method="POST")) as response:
        assert response.status == 200
    with urllib.request.urlopen(node.url + "/load") as response:
        assert json.loads(response.read()) == {"server_load": 0}
