"""`tao proxy` without hooks: tool starts and ends inferred from the wire reach the coordinator's session timeline;
with hooks, the hooks' reports are the only ones (a real proxy, coordinator and fake vLLM node on loopback)."""

import time

import anthropic
import httpx2
import openai
import pytest

from tao_coordinator.core.events import ToolEnd, ToolStart
from tao_coordinator.fakevllm import FakeNodeConfig, ReplyPolicy, ThreadedFleet
from tao_sdk.proxy import ProxyConfig
from tests.conftest import listen_to_feed
from tests.sdk.test_proxy import ThreadedProxy

MODEL = "fake-model"
COMMAND = "sleep 1; echo hello-from-tao"
OPENCODE_BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    },
}
CLAUDE_CODE_BASH = {
    "name": "Bash",
    "description": "Run a command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"],
    },
}
TOOL_S = 0.3
"""How long each test's harness takes to run the tool before its next call."""


@pytest.fixture(scope="module")
def fleet():
    steps = [{"bash": COMMAND, "timeout_ms": 5000}, {"text": "All done."}]
    policy = ReplyPolicy.model_validate(
        {"filler_tokens": 4, "scripts": [{"match": {"contains": "wire"}, "steps": steps}]}
    )
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50, served_model_name=MODEL, policy=policy)) as running:
        yield running


@pytest.fixture
def proxy(coordinator):
    with ThreadedProxy(ProxyConfig(coordinator.url, coordinator.token)) as running:
        yield running


@pytest.fixture
def fed(coordinator):
    events = []
    listen_to_feed(coordinator.service, lambda event, actions, error: events.append(event))
    return events


def timeline_tools(coordinator, session_id, ended=1):
    """The tools of the session's timeline once `ended` of them have ended (the proxy reports in the background)."""
    headers = {"Authorization": f"Bearer {coordinator.token}"}
    deadline = time.monotonic() + 10
    while True:
        reply = httpx2.get(f"{coordinator.url}/v1/sessions/{session_id}", headers=headers)
        tools = reply.json()["tools"] if reply.status_code == 200 else []
        if sum(tool["ended_at"] is not None for tool in tools) >= ended or time.monotonic() > deadline:
            return tools
        time.sleep(0.05)


def openai_conversation(client, task, stream):
    """Two turns of an OpenCode-like agent: the model asks for bash, the agent runs it and answers with its result."""
    messages = [{"role": "user", "content": task}]
    kwargs = {"model": MODEL, "tools": [OPENCODE_BASH], "max_tokens": 512}
    if stream:
        chunks = list(client.chat.completions.create(messages=messages, stream=True, **kwargs))
        fragments = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        call_id, arguments = fragments[0].id, "".join(f.function.arguments or "" for f in fragments)
    else:
        [call] = client.chat.completions.create(messages=messages, **kwargs).choices[0].message.tool_calls
        call_id, arguments = call.id, call.function.arguments
    time.sleep(TOOL_S)
    function = {"name": "bash", "arguments": arguments}
    messages.append({"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": function}]})
    messages.append({"role": "tool", "tool_call_id": call_id, "content": "hello-from-tao"})
    assert client.chat.completions.create(messages=messages, **kwargs).choices[0].message.content == "All done."
    return call_id


@pytest.mark.parametrize("stream", [True, False])
def test_without_hooks_an_openai_conversations_tool_is_on_the_timeline(proxy, coordinator, fed, stream):
    headers = {"x-session-affinity": f"ses_wire_{stream}"}
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers) as client:
        call_id = openai_conversation(client, "wire hello", stream)
    [tool] = timeline_tools(coordinator, f"ses_wire_{stream}")
    assert (tool["call_id"], tool["tool"], tool["program"], tool["status"]) == (call_id, "bash", "sleep", "ok")
    assert TOOL_S <= tool["actual_s"] < TOOL_S + 1.0
    [start] = [e for e in fed if isinstance(e, ToolStart)]
    assert (start.hints.timeout_s, start.hints.sleep_s, start.hints.background) == (5.0, 1.0, False)


@pytest.mark.parametrize("stream", [True, False])
def test_without_hooks_or_a_session_header_an_anthropic_conversation_is_one_session(proxy, coordinator, stream):
    system = [{"type": "text", "text": "x-anthropic-billing-header: cch=1;"}, {"type": "text", "text": "An agent."}]
    first = {"role": "user", "content": [{"type": "text", "text": f"wire {stream}"}]}
    kwargs = {"model": MODEL, "max_tokens": 512, "tools": [CLAUDE_CODE_BASH]}
    with anthropic.Anthropic(base_url=proxy.url, api_key="x") as client:
        if stream:
            with client.messages.stream(system=system, messages=[first], **kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(system=system, messages=[first], **kwargs)
        [use] = [block for block in reply.content if block.type == "tool_use"]
        time.sleep(TOOL_S)
        system[0]["text"] = "x-anthropic-billing-header: cch=2;"  # Claude Code's per-request hash
        result = {"type": "tool_result", "tool_use_id": use.id, "is_error": True, "content": "exit 1"}
        messages = [first, {"role": "assistant", "content": [use.model_dump()]}, {"role": "user", "content": [result]}]
        client.messages.create(system=system, messages=messages, **kwargs)
    [session_id] = [s for s in coordinator.service.coordinator.sessions if s.startswith("tao-conversation-")]
    [tool] = timeline_tools(coordinator, session_id)
    assert (tool["call_id"], tool["tool"], tool["program"], tool["status"]) == (use.id, "Bash", "sleep", "error")
    assert TOOL_S <= tool["actual_s"] < TOOL_S + 1.0


def relay(proxy, *events):
    answer = httpx2.post(proxy.url + "/tao/v1/events", json={"events": list(events)})
    assert answer.status_code == 200 and all(result["ok"] for result in answer.json()["results"])


def hook_start(session_id, call_id):
    start = {"call_id": call_id, "tool": "bash", "hints": {"timeout_s": 5.0, "sleep_s": 1.0}, "program": "sleep"}
    return {"kind": "tool_start", "session_id": session_id, "tool_start": start}


def hook_end(session_id, call_id):
    end = {"call_id": call_id, "status": "ok", "duration_s": 0.123}
    return {"kind": "tool_end", "session_id": session_id, "tool_end": end}


def test_with_hooks_the_hooks_report_and_nothing_is_inferred(proxy, coordinator, fed):
    session_id = "ses_hooked"
    relay(proxy, {"kind": "register", "session_id": session_id, "registration": {"context": {"harness": "opencode"}}})
    headers = {"x-session-affinity": session_id}
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers=headers) as client:
        kwargs = {"model": MODEL, "tools": [OPENCODE_BASH], "max_tokens": 512}
        messages = [{"role": "user", "content": "wire hooked"}]
        [call] = client.chat.completions.create(messages=messages, **kwargs).choices[0].message.tool_calls
        relay(proxy, hook_start(session_id, call.id))
        time.sleep(TOOL_S)
        relay(proxy, hook_end(session_id, call.id))
        messages += [
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "hello-from-tao"},
        ]
        client.chat.completions.create(messages=messages, **kwargs)
    [tool] = timeline_tools(coordinator, session_id)
    assert (tool["call_id"], tool["actual_s"]) == (call.id, 0.123)  # the hook's duration, not the wire's
    assert [e.call_id for e in fed if isinstance(e, ToolStart)] == [call.id]
    assert [e.call_id for e in fed if isinstance(e, ToolEnd)] == [call.id]


def test_a_hook_that_reports_after_inference_started_the_call_is_not_counted_twice(proxy, coordinator, fed):
    session_id = "ses_late_hook"
    with openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", default_headers={"x-tao-session": session_id}) as c:
        kwargs = {"model": MODEL, "tools": [OPENCODE_BASH], "max_tokens": 512}
        messages = [{"role": "user", "content": "wire late"}]
        [call] = c.chat.completions.create(messages=messages, **kwargs).choices[0].message.tool_calls
        relay(proxy, hook_start(session_id, call.id), hook_end(session_id, call.id))
        messages += [
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "hello-from-tao"},
        ]
        c.chat.completions.create(messages=messages, **kwargs)
    [tool] = timeline_tools(coordinator, session_id)
    assert (tool["call_id"], tool["actual_s"]) == (call.id, 0.123)
    assert [e.call_id for e in fed if isinstance(e, ToolStart)] == [call.id]
    assert [e.call_id for e in fed if isinstance(e, ToolEnd)] == [call.id]
