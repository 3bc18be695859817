"""Bad requests get vLLM-style errors: the status, the error class name and a message naming the problem."""

import json
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

MODEL = "Qwen/Qwen3-32B"


def _post(url, body, headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    return caught.value.code, json.loads(caught.value.read())


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"model": MODEL}, "messages", "Field required"),
        ({"messages": [], "stream_options": {"include_usage": True}}, None, "only be defined when `stream=True`"),
        ({"messages": [{"role": "robot", "content": "x"}]}, None, "messages[0].role"),
        ({"messages": [], "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"messages": [], "cache_salt": ""}, "cache_salt", "at least 1 character"),
        ({"messages": [], "n": 2}, "n", "less than or equal to 1"),
    ],
)
def test_invalid_chat_requests_get_a_400_naming_the_problem(node, body, field, words):
    status, error = _post(node.openai_base_url + "/chat/completions", body)
    assert status == 400
    assert error["error"]["type"] == "BadRequestError" and error["error"]["code"] == 400
    assert words in error["error"]["message"]
    if field is not None:
        assert error["error"]["param"] == field


def test_invalid_json_and_priority_header(node):
    status, error = _post(node.openai_base_url + "/chat/completions", b"{not json")
    assert status == 400 and "Invalid JSON body" in error["error"]["message"]
    status, error = _post(node.openai_base_url + "/chat/completions", {"messages": []}, {"X-Vllm-Priority": "high"})
    assert status == 400 and "X-Vllm-Priority" in error["error"]["message"]


def test_context_length_is_checked_like_vllm(oai, node):
    limit = node.service.max_model_len
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=limit)
    message = caught.value.body["message"]
    assert f"maximum context length is {limit} tokens" in message and "output tokens" in message
    with pytest.raises(openai.BadRequestError, match="out of vocabulary"):
        oai.completions.create(model=MODEL, prompt=[1, 10**9])
    with pytest.raises(openai.BadRequestError, match="prompt cannot be empty"):
        oai.completions.create(model=MODEL, prompt="")


def test_unknown_model_is_a_404(oai, claude):
    with pytest.raises(openai.NotFoundError, match="The model `gpt-4` does not exist"):
        oai.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "The model `claude-x` does not exist."},
    }


def test_anthropic_errors(node, small_node, anthropic_for):
    status, error = _post(node.url + "/v1/messages", {"model": MODEL, "messages": []})
    assert status == 400 and "max_tokens: Field required" in error["error"]["message"]  # schema errors: OpenAI shape
    claude = anthropic_for(small_node)
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=MODEL, max_tokens=1000, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "invalid_request_error"
    assert "maximum context length" in caught.value.body["error"]["message"]
