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
    ("body", "kind", "field", "words"),
    [
        ({"model": MODEL}, "Bad Request", "body.messages", "Field required"),
        ({"messages": [], "stream_options": {"include_usage": True}}, None, "stream_options", "`stream=True`"),
        ({"messages": [{"role": "robot", "content": "x"}]}, None, None, "messages[0].role"),
        ({"messages": [], "max_tokens": 0}, None, "max_tokens", "max_tokens must be at least 1, got 0."),
        ({"messages": [], "cache_salt": ""}, "Bad Request", "body.cache_salt", "at least 1 character"),
        ({"messages": [], "n": 2}, "Bad Request", "body.n", "less than or equal to 1"),
    ],
)
def test_invalid_chat_requests_get_a_400_naming_the_problem(node, body, kind, field, words):
    """Schema errors come from FastAPI ("Bad Request", param `body.<field>`), the rest from vLLM's serving code."""
    status, error = _post(node.openai_base_url + "/chat/completions", body)
    assert status == 400
    assert error["error"]["type"] == (kind or "BadRequestError") and error["error"]["code"] == 400
    assert words in error["error"]["message"]
    assert error["error"]["param"] == field


def test_invalid_json_is_a_schema_error_and_an_invalid_priority_header_is_ignored(node):
    status, error = _post(node.openai_base_url + "/chat/completions", b"{not json")
    assert status == 400 and "JSON decode error" in error["error"]["message"]
    assert (error["error"]["type"], error["error"]["param"]) == ("Bad Request", "body.1")
    request = urllib.request.Request(
        node.openai_base_url + "/chat/completions",
        data=json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode(),
        headers={"Content-Type": "application/json", "X-Vllm-Priority": "high"},
    )
    with urllib.request.urlopen(request) as response:
        assert response.status == 200


def test_context_limits_are_checked_like_vllm(oai, node):
    limit = node.service.max_model_len
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=limit + 1)
    assert caught.value.body["message"].startswith(f"max_tokens={limit + 1} cannot be greater than max_model_len")
    with pytest.raises(openai.BadRequestError, match="out of vocabulary"):
        oai.completions.create(model=MODEL, prompt=[1, 10**9])
    with pytest.raises(openai.BadRequestError, match="Either prompt or prompt_embeds must be provided"):
        oai.completions.create(model=MODEL, prompt="")
    with pytest.raises(openai.BadRequestError, match="The decoder prompt cannot be empty"):
        oai.completions.create(model=MODEL, prompt=[])


def test_unknown_model_is_a_404(oai, claude):
    with pytest.raises(openai.NotFoundError, match=f"The model `gpt-4` does not exist. Valid aliases: {MODEL}."):
        oai.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": f"The model `claude-x` does not exist. Valid aliases: {MODEL}.",
        },
    }


def test_anthropic_errors(node, small_node, anthropic_for):
    status, error = _post(node.url + "/v1/messages", {"model": MODEL, "messages": []})
    assert status == 400 and error["error"]["type"] == "Bad Request"  # schema errors: OpenAI shape
    assert "'loc': 'body.max_tokens', 'msg': 'Field required'" in error["error"]["message"]
    claude = anthropic_for(small_node)
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=MODEL, max_tokens=1000, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"].startswith("max_completion_tokens=1000 cannot be greater than")
