"""Tool calls and results read off the wire (`tao_sdk/wire_tools.py`), the starts and ends inferred from them
(`tao_sdk/inferred_tools.py`) and a session's identity without hooks (`tao_sdk/session_identity.py`)."""

import json
from pathlib import Path

import pytest

from tao_sdk import protocol
from tao_sdk.claude_code_tools import tool_hints
from tao_sdk.inferred_tools import InferredTools, Start, start_of
from tao_sdk.session_identity import ANONYMOUS, session_id_of
from tao_sdk.wire_tools import ToolCallReader, ToolResult, WireToolCall, offered_tools, tool_results

SAMPLES = json.loads((Path(__file__).parent / "wire_samples.json").read_text())
COMMAND = "cd repo && timeout 30 pytest -q; sleep 2"


def read(sample: dict, chunk: int = 7) -> tuple[WireToolCall, ...]:
    """The calls of a sample's response, its bytes fed in pieces of `chunk` (SSE lines and JSON split anywhere)."""
    body = sample["response"].encode()
    reader = ToolCallReader(streaming=sample["request"]["stream"])
    for k in range(0, len(body), chunk):
        reader.feed(body[k : k + chunk])
    return reader.calls()


@pytest.mark.parametrize("name", ["anthropic_json", "anthropic_sse", "openai_json", "openai_sse"])
def test_the_tool_call_of_a_response_is_read_streamed_or_not(name):
    sample = SAMPLES[name]
    [call] = read(sample)
    assert call.call_id.startswith("chatcmpl-tool-") and call.name in ("Bash", "bash")
    assert call.arguments == {"command": COMMAND, "timeout": 5000}
    start = start_of(call, offered_tools(sample["request"]))
    # the schema's 5000 ms under the command's own `timeout 30`; the command sleeps 2 s; `timeout` is its program
    assert (start.tool, start.program) == (call.name, "timeout")
    assert start.hints == protocol.ToolHints(timeout_s=5.0, sleep_s=2.0, background=False)


@pytest.mark.parametrize("name", ["anthropic_sse", "openai_sse"])
def test_a_stream_cut_before_it_finished_asks_for_nothing(name):
    sample = SAMPLES[name]
    cut = sample["response"][: sample["response"].rindex('"partial_json"' if "anthropic" in name else '"arguments"')]
    assert read({**sample, "response": cut}) == ()


def test_a_response_finished_at_its_length_limit_or_without_tool_calls_asks_for_nothing():
    openai_body = json.loads(SAMPLES["openai_json"]["response"])
    openai_body["choices"][0]["finish_reason"] = "length"
    anthropic_body = json.loads(SAMPLES["anthropic_json"]["response"])
    anthropic_body["stop_reason"] = "max_tokens"
    text_only = {"choices": [{"index": 0, "message": {"content": "done"}, "finish_reason": "stop"}]}
    for body in (openai_body, anthropic_body, text_only):
        reader = ToolCallReader(streaming=False)
        reader.feed(json.dumps(body).encode())
        assert reader.calls() == ()


def test_vllm_finishing_a_forced_tool_choice_with_stop_still_starts_the_call():
    body = json.loads(SAMPLES["openai_json"]["response"])
    body["choices"][0]["finish_reason"] = "stop"
    reader = ToolCallReader(streaming=False)
    reader.feed(json.dumps(body).encode())
    assert [call.name for call in reader.calls()] == ["bash"]


def test_parallel_calls_in_one_stream_keep_their_order_and_arguments():
    chunks = [
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "read"}}]}}
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "bash"}}]}}
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": '{"command": "ls"}'}}]}}
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "not json"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    reader = ToolCallReader(streaming=True)
    reader.feed(b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n")
    assert reader.calls() == (WireToolCall("call_a", "read", {}), WireToolCall("call_b", "bash", {"command": "ls"}))


def test_tool_results_of_a_request_with_their_status():
    anthropic = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True, "content": "no such file"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_3",
                        "is_error": True,
                        "content": [{"type": "text", "text": "Exit code 143\nCommand timed out after 2s"}],
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
        ]
    }
    assert tool_results(anthropic) == (
        ToolResult("toolu_1", "ok"),
        ToolResult("toolu_2", "error"),
        ToolResult("toolu_3", "timeout"),
    )
    late = "(no output)\n\n<shell_metadata>\nshell tool terminated command after exceeding timeout 1500 ms.\n"
    openai = {
        "messages": [
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            {"role": "tool", "tool_call_id": "call_2", "content": late},
        ]
    }
    assert tool_results(openai) == (ToolResult("call_1", "ok"), ToolResult("call_2", "timeout"))
    assert tool_results(None) == () and tool_results({"messages": "x"}) == ()


CLAUDE_CODE_BASH = [  # the tool's input, and the hints Claude Code's hook sends for it (timeout, sleep, background)
    ({"command": "sleep 1; echo hi", "timeout": 5000}, (5.0, 1.0, False)),
    ({"command": "npm test"}, (120.0, None, False)),
    ({"command": "timeout 10 make", "timeout": 900000}, (10.0, None, False)),
    ({"command": "sleep 4; echo bg", "timeout": 5000, "run_in_background": True}, (5.0, 4.0, True)),
    ({"command": "python -m http.server &"}, (120.0, None, True)),
    ({"command": "ls", "timeout": "soon"}, (120.0, None, False)),
    ({"timeout": 3000}, (3.0, None, False)),
]


@pytest.mark.parametrize(("tool_input", "expected"), CLAUDE_CODE_BASH)
def test_claude_codes_bash_is_hinted_as_its_hook_hints_it(tool_input, expected):
    start = start_of(WireToolCall("toolu_1", "Bash", tool_input), {})
    timeout_s, sleep_s, background = expected
    assert start.hints == protocol.ToolHints(timeout_s=timeout_s, sleep_s=sleep_s, background=background)
    assert protocol.ToolHints.model_validate(tool_hints("Bash", tool_input, {})) == start.hints  # the hook's rule


@pytest.mark.parametrize(
    ("tool_input", "timeout_s"),
    [({"task_id": "b1"}, 30.0), ({"task_id": "b1", "timeout": 5000}, 5.0), ({"block": False}, None)],
)
def test_claude_codes_task_output_is_hinted_as_its_hook_hints_it(tool_input, timeout_s):
    start = start_of(WireToolCall("toolu_1", "TaskOutput", tool_input), {})
    assert start.hints == protocol.ToolHints(timeout_s=timeout_s)
    assert start.program is None


def test_opencode_and_mini_swe_agent_bash_hints_and_other_tools():
    opencode = {"bash": {"command": {}, "timeout": {}, "workdir": {}}}
    mini = {"bash": {"command": {}}}
    call = WireToolCall("call_1", "bash", {"command": "timeout 200 make"})
    assert start_of(call, opencode).hints.timeout_s == 120.0  # OpenCode's default under the command's own 200 s
    assert start_of(call, mini).hints.timeout_s == 200.0  # mini-swe-agent's bash says nothing of a timeout
    assert start_of(WireToolCall("call_2", "bash", {"command": "ls"}), mini) == Start(
        "call_2", "bash", protocol.ToolHints(), "ls"
    )
    assert start_of(WireToolCall("call_3", "read", {"filePath": "x"}), opencode) == Start(
        "call_3", "read", protocol.ToolHints(), None
    )


def _start(call_id: str) -> Start:
    return Start(call_id, "Bash", protocol.ToolHints(), "ls")


def test_inference_ends_only_the_calls_it_holds_open_once_each():
    tools = InferredTools()
    assert tools.started("s", [_start("a"), _start("b")], now=10.0) == [_start("a"), _start("b")]
    assert tools.started("s", [_start("a")], now=11.0) == []  # a response that repeats a call id starts it once
    ends = tools.ended("s", [ToolResult("old", "ok"), ToolResult("a", "error")], now=12.5)
    assert [(e.call_id, e.duration_s, e.status) for e in ends] == [("a", 2.5, "error")]
    ends = tools.ended("s", [ToolResult("a", "error"), ToolResult("b", "ok")], now=13.0)  # history repeats "a"
    assert [(e.call_id, e.duration_s) for e in ends] == [("b", 3.0)]
    assert tools.ended("other", [ToolResult("b", "ok")], now=14.0) == []


def _hook(kind: str, session_id: str = "s", call_id: str = "a") -> protocol.BatchedEvent:
    body = {"kind": kind, "session_id": session_id}
    if kind == "tool_start":
        body["tool_start"] = {"call_id": call_id, "tool": "Bash"}
    elif kind == "tool_end":
        body["tool_end"] = {"call_id": call_id}
    return protocol.BatchedEvent.model_validate(body)


def test_a_session_a_hook_has_named_is_never_inferred_and_its_hook_events_pass():
    tools = InferredTools()
    assert tools.hook_event(_hook("register"), 0.0)
    assert tools.hook_driven("s") and tools.started("s", [_start("a")], now=1.0) == []
    assert tools.hook_event(_hook("tool_start"), 0.0) and tools.hook_event(_hook("tool_end"), 0.0)
    assert tools.ended("s", [ToolResult("a", "ok")], now=2.0) == []
    assert tools.hook_event(_hook("close"), 0.0) and not tools.hook_driven("s")


def test_a_hook_start_of_a_call_inference_reported_is_dropped_and_its_end_is_the_hooks():
    tools = InferredTools()
    tools.started("s", [_start("a"), _start("b")], now=1.0)
    assert not tools.hook_event(_hook("tool_start", call_id="a"), 0.0)  # counted already: not sent again
    assert tools.hook_event(_hook("tool_end", call_id="a"), 0.0)
    assert tools.started("s", [_start("c")], now=2.0) == []  # hook-driven from the hook's first event
    ends = tools.ended("s", [ToolResult("a", "ok"), ToolResult("b", "ok")], now=3.0)
    assert [e.call_id for e in ends] == ["b"]  # inference still ends the call only it reported


def test_a_hook_start_is_dated_by_the_first_source_to_show_it():
    tools = InferredTools()
    assert tools.hook_event(_hook("register"), 0.0)
    tools.started("s", [_start("a")], now=1.0)  # the response asking for "a" ended at 1.0
    assert tools.hook_start_time("s", "a", reported=1.6) == 1.0  # the harness ran its hook later
    assert tools.hook_start_time("s", "a", reported=0.9) == 0.9  # a hook dated earlier than the wire keeps its time
    assert tools.hook_start_time("s", "unseen", reported=1.6) == 1.6  # a call the wire never showed


def test_session_headers_in_their_order_then_codexs():
    assert session_id_of({"X-Session-Id": "mine", "x-tao-session": "other"}, None) == "mine"
    assert session_id_of({"session-id": "0199-codex", "session_id": "old"}, None) == "0199-codex"
    assert session_id_of({"session_id": "old-codex"}, None) == "old-codex"
    assert session_id_of({"x-gemini-api-privileged-user-id": "install-1"}, None) == ANONYMOUS
    assert session_id_of({"x-session-affinity": "not valid!"}, None).startswith("tao-proxy-")


def test_without_a_header_a_conversation_is_named_by_how_it_began():
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cch=1a2b;"},
        {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
    ]
    first = {"role": "user", "content": [{"type": "text", "text": "fix it", "cache_control": {"type": "ephemeral"}}]}
    turn_1 = {"system": system, "messages": [first]}
    system_2 = [
        {"type": "text", "text": "x-anthropic-billing-header: cch=9f8e;"},
        {"type": "text", "text": system[1]["text"]},
    ]
    turn_2 = {
        "system": system_2,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
        ],
    }
    named = session_id_of({}, turn_1)
    assert named.startswith("tao-conversation-") and session_id_of({}, turn_2) == named
    other = {"system": system, "messages": [{"role": "user", "content": "fix that"}]}
    openai = {"messages": [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "fix it"}]}
    assert len({named, session_id_of({}, other), session_id_of({}, openai)}) == 3
    assert session_id_of({}, {"prompt": "complete this"}) == ANONYMOUS
    assert session_id_of({}, {"messages": [{"role": "system", "content": "x"}]}) == ANONYMOUS


def test_an_anthropic_stream_with_thinking_text_and_two_tool_uses():
    def event(kind, **fields):
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"

    def use(call_id, name):
        return {"type": "tool_use", "id": call_id, "name": name, "input": {}}

    stream = "".join(
        [
            event("message_start", message={"content": [], "usage": {"input_tokens": 5, "output_tokens": 0}}),
            event("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
            event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}),
            event("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "abc"}),
            event("content_block_start", index=1, content_block={"type": "text", "text": ""}),
            event("content_block_delta", index=1, delta={"type": "text_delta", "text": "Reading."}),
            event("content_block_start", index=2, content_block=use("toolu_r", "Read")),
            event("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '{"file_pa'}),
            event("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": 'th": "a.py"}'}),
            event("content_block_start", index=3, content_block=use("toolu_b", "Bash")),
            event(
                "content_block_delta", index=3, delta={"type": "input_json_delta", "partial_json": '{"command": "ls"}'}
            ),
            event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 30}),
            event("message_stop"),
        ]
    )
    reader = ToolCallReader(streaming=True)
    reader.feed(stream.encode())
    assert reader.calls() == (
        WireToolCall("toolu_r", "Read", {"file_path": "a.py"}),
        WireToolCall("toolu_b", "Bash", {"command": "ls"}),
    )
