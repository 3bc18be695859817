"""Scripted behaviour for harness tests: Claude Code's Bash tool_use, OpenCode's and mini-swe-agent's bash calls."""

import json
import urllib.error
import urllib.request

import pytest

from tao_coordinator.fakevllm import ReplyPolicy, load_policy
from tao_coordinator.fakevllm.policy import SUBMIT_COMMAND

MODEL = "Qwen/Qwen3-32B"
CLAUDE_BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["command"],
        "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "number"},
            "description": {"type": "string"},
            "run_in_background": {"type": "boolean"},
            "dangerouslyDisableSandbox": {"type": "boolean"},
        },
    },
}
OPENCODE_BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {
            "type": "object",
            "required": ["command"],
            "properties": {
                "command": {"type": "string"},
                "timeout": {"type": "integer"},
                "workdir": {"type": "string"},
            },
        },
    },
}
MINI_BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}


def _put_policy(node, policy):
    request = urllib.request.Request(
        node.url + "/fake/policy",
        data=json.dumps(policy).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


@pytest.fixture
def script(node):
    """Install a policy through the admin endpoint; the default policy comes back afterwards."""
    yield lambda policy: _put_policy(node, policy)
    _put_policy(node, {})


def test_opencode_bash_call_streams_then_final_answer(oai, script, unique_text):
    task = unique_text(20)
    script(
        {
            "scripts": [
                {
                    "match": {"contains": task},
                    "steps": [{"bash": "sleep 1; echo hi", "timeout_ms": 5000}, {"text": "Done."}],
                }
            ]
        }
    )
    messages = [{"role": "system", "content": "You are OpenCode."}, {"role": "user", "content": task}]
    stream = oai.chat.completions.create(
        model=MODEL, messages=messages, tools=[OPENCODE_BASH], stream=True, stream_options={"include_usage": True},
        extra_headers={"x-session-affinity": "ses_1"},
    )  # fmt: skip
    chunks = list(stream)
    fragments = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or ()]
    assert fragments[0].id.startswith("chatcmpl-tool-") and fragments[0].function.name == "bash"
    assert len(fragments) > 1 and all(f.index == 0 for f in fragments)
    arguments = "".join(f.function.arguments or "" for f in fragments)
    assert json.loads(arguments) == {"command": "sleep 1; echo hi", "timeout": 5000}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    call = {"id": fragments[0].id, "type": "function", "function": {"name": "bash", "arguments": arguments}}
    follow_up = [*messages, {"role": "assistant", "content": None, "tool_calls": [call]}]
    follow_up.append({"role": "tool", "tool_call_id": fragments[0].id, "content": "hi"})
    final = oai.chat.completions.create(model=MODEL, messages=follow_up, tools=[OPENCODE_BASH])
    assert final.choices[0].message.content == "Done." and final.choices[0].finish_reason == "stop"
    first_sequence = chunks[-1].usage.prompt_tokens + chunks[-1].usage.completion_tokens
    assert final.usage.prompt_tokens_details.cached_tokens == (first_sequence - 1) // 16 * 16


def test_claude_code_bash_tool_use_then_end_turn(claude, script, unique_text):
    task = unique_text(20)
    steps = [{"content": "Running it.", "bash": "echo hello", "timeout_ms": 2000}, {"text": "All good."}]
    script({"scripts": [{"match": {"contains": task}, "steps": steps}]})
    messages = [{"role": "user", "content": [{"type": "text", "text": task}]}]
    with claude.messages.stream(model=MODEL, max_tokens=32000, tools=[CLAUDE_BASH], messages=messages) as stream:
        kinds = [event.type for event in stream]
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    text, tool_use = message.content
    assert text.text == "Running it."
    assert tool_use.type == "tool_use" and tool_use.name == "Bash"
    assert tool_use.input == {"command": "echo hello", "timeout": 2000}
    assert kinds.count("content_block_start") == 2 and kinds[-1] == "message_stop"
    result = {"type": "tool_result", "tool_use_id": tool_use.id, "content": "hello"}
    follow_up = [*messages, {"role": "assistant", "content": message.content}, {"role": "user", "content": [result]}]
    final = claude.messages.create(model=MODEL, max_tokens=4000, tools=[CLAUDE_BASH], messages=follow_up)
    assert final.stop_reason == "end_turn" and final.content[0].text == "All good."
    assert final.usage.cache_read_input_tokens > message.usage.input_tokens


def test_mini_swe_agent_bash_calls_end_with_the_completion_marker(oai, script, unique_text):
    task = unique_text(20)
    script({"scripts": [{"match": {"contains": task}, "steps": [{"bash": "ls", "timeout_ms": 9}, {"submit": True}]}]})
    messages = [{"role": "user", "content": task}]
    for expected in ("ls", SUBMIT_COMMAND):
        response = oai.chat.completions.create(model=MODEL, messages=messages, tools=[MINI_BASH])
        call = response.choices[0].message.tool_calls[0]
        assert json.loads(call.function.arguments) == {"command": expected}  # no timeout: not in this schema
        messages += [response.choices[0].message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "output"}]


def test_requests_without_the_tool_or_past_the_script_get_filler(oai, script, unique_text):
    task = unique_text(20)
    script({"filler_tokens": 5, "scripts": [{"match": {"contains": task}, "steps": [{"bash": "ls"}]}]})
    title = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": task}])
    assert title.choices[0].message.tool_calls == [] and title.usage.completion_tokens == 5
    other = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], tools=[MINI_BASH])
    assert other.choices[0].finish_reason == "stop" and other.usage.completion_tokens == 5


def test_policy_endpoint_rejects_invalid_steps(node, script):
    assert script({"default_output_tokens": 8})["default_output_tokens"] == 8
    with pytest.raises(urllib.error.HTTPError) as caught:
        _put_policy(node, {"scripts": [{"steps": [{"bash": "ls", "text": "both"}]}]})
    assert caught.value.code == 400 and "exactly one of" in json.loads(caught.value.read())["error"]["message"]


def test_policy_files_in_json_and_toml(tmp_path):
    (tmp_path / "p.json").write_text(
        json.dumps({"scripts": [{"match": {"session": "s"}, "steps": [{"submit": True}]}]})
    )
    (tmp_path / "p.toml").write_text(
        'filler_tokens = 3\n[[scripts]]\nsteps = [{ tool = "Read", input = { path = "a" } }]\n'
    )
    assert load_policy(tmp_path / "p.json").scripts[0].steps[0].submit
    toml_policy = load_policy(tmp_path / "p.toml")
    assert isinstance(toml_policy, ReplyPolicy) and toml_policy.scripts[0].steps[0].tool == "Read"
