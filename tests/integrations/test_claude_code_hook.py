"""`tao hook claude-code`: Claude Code's hook payloads (as captured from 2.1.197) mapped to relay events, and the
command's behaviour as a process — always exit 0, print nothing, return fast whether or not anything answers."""

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tao_coordinator.core.events import Close, Register
from tao_integrations.claude_code import BACKGROUND_WAIT, events_for
from tao_sdk import protocol
from tests.conftest import listen_to_feed

from .conftest import free_port, python_env

SESSION = "2acda954-c347-4d3f-9007-6ed45501e1c7"
COMMON = {"session_id": SESSION, "transcript_path": "/t.jsonl", "cwd": "/p", "permission_mode": "default"}
HELLO = {"command": "sleep 1; echo hello-from-tool", "timeout": 5000, "description": "Say hello"}


def hook(event, **fields):
    return {**COMMON, "hook_event_name": event, **fields}


def only(payload, env=None):
    events = events_for(payload, env or {})
    protocol.EventsRequest.model_validate({"events": events})  # what the relay accepts
    [event] = events
    return event


def test_session_start_and_end_register_and_close():
    start = only(hook("SessionStart", source="startup"), {"ANTHROPIC_MODEL": "Qwen/Qwen3-32B"})
    assert (start["kind"], start["session_id"]) == ("register", SESSION)
    assert start["registration"]["context"]["harness"] == "claude-code"
    assert start["registration"]["context"]["model"] == "Qwen/Qwen3-32B"
    assert only(hook("SessionEnd", reason="other")) == {"kind": "close", "session_id": SESSION}


def test_the_session_registers_as_its_own_workflow_which_its_subagents_share():
    context = only(hook("SessionStart", source="startup"))["registration"]["context"]
    assert context["workflow_id"] == SESSION
    protocol.RegisterRequest.model_validate({"context": context})  # what the proxy relays, valid as sent
    # a subagent's payloads name the top session (with its `agent_id`): they add no session and no other workflow
    assert events_for(hook("SessionStart", source="startup", agent_id="a1"), {}) == []


@pytest.mark.parametrize(
    ("tool_input", "env", "hints", "program"),
    [
        (HELLO, {}, {"timeout_s": 5.0, "sleep_s": 1.0, "background": False}, "sleep"),
        ({"command": "pytest -x"}, {}, {"timeout_s": 120.0, "background": False}, "pytest"),
        ({"command": "make"}, {"BASH_DEFAULT_TIMEOUT_MS": "30000"}, {"timeout_s": 30.0, "background": False}, "make"),
        ({"command": "make", "timeout": 900000}, {}, {"timeout_s": 600.0, "background": False}, "make"),
        ({"command": "timeout 10 make", "timeout": 60000}, {}, {"timeout_s": 10.0, "background": False}, "timeout"),
        (
            {"command": "sleep 3; echo bg", "run_in_background": True},
            {},
            {"timeout_s": 120.0, "sleep_s": 3.0, "background": True},
            "sleep",
        ),
        ({"command": "ls -la"}, {}, {"timeout_s": 120.0, "background": False}, "ls"),
        ({"command": "cd x && pytest -q"}, {}, {"timeout_s": 120.0, "background": False}, "pytest"),
        ({"command": "$RUNNER --all"}, {}, {"timeout_s": 120.0, "background": False}, None),
    ],
)
def test_pre_tool_use_starts_the_call_with_bash_hints_and_program(tool_input, env, hints, program):
    event = only(hook("PreToolUse", tool_name="Bash", tool_input=tool_input, tool_use_id="toolu_a25e"), env)
    assert event["kind"] == "tool_start"
    named = {"program": program} if program else {}
    assert event["tool_start"] == {"call_id": "toolu_a25e", "tool": "Bash", "hints": hints, **named}
    if tool_input["command"] != program:
        assert tool_input["command"] not in json.dumps(event)  # the program's name only, never the command


def test_other_tools_get_their_own_hints_and_no_program():
    output = only(hook("PreToolUse", tool_name="TaskOutput", tool_input={"task_id": "b1"}, tool_use_id="t1"))
    assert output["tool_start"]["hints"] == {"timeout_s": 30.0}
    fetch = only(hook("PreToolUse", tool_name="WebFetch", tool_input={"url": "x", "command": "ls"}, tool_use_id="t2"))
    assert fetch["tool_start"]["hints"] == {}
    assert "program" not in output["tool_start"] and "program" not in fetch["tool_start"]


@pytest.mark.parametrize(
    ("payload", "status", "duration_s"),
    [
        (hook("PostToolUse", tool_name="Bash", tool_input=HELLO, tool_use_id="t", duration_ms=1046,
              tool_response={"stdout": "hello", "stderr": "", "interrupted": False}), "ok", 1.046),
        (hook("PostToolUse", tool_name="Bash", tool_use_id="t", duration_ms=26,
              tool_input={**HELLO, "run_in_background": True},
              tool_response={"interrupted": False, "backgroundTaskId": "bcq3juir1"}), "ok", 0.026),
        (hook("PostToolUse", tool_name="Bash", tool_use_id="t", duration_ms=2019, tool_input=HELLO,
              tool_response={"interrupted": False, "backgroundTaskId": "b2"}), "timeout", 2.019),
        (hook("PostToolUseFailure", tool_name="Bash", tool_use_id="t", duration_ms=2031, tool_input=HELLO,
              error="Exit code 143\nCommand timed out after 2s", is_interrupt=False), "timeout", 2.031),
        (hook("PostToolUseFailure", tool_name="Bash", tool_use_id="t", duration_ms=12, tool_input=HELLO,
              error="Exit code 1", is_interrupt=False), "error", 0.012),
        (hook("PostToolUseFailure", tool_name="Bash", tool_use_id="t", tool_input=HELLO,
              error="Interrupted", is_interrupt=True), "error", None),
    ],
)  # fmt: skip
def test_post_tool_use_ends_the_call(payload, status, duration_s):
    event = only(payload)
    assert event["kind"] == "tool_end"
    assert event["tool_end"] == {"call_id": "t", "status": status, **({"duration_s": duration_s} if duration_s else {})}


def test_a_turn_that_ends_with_background_work_waits_for_its_notification():
    running = [{"id": "bcq3juir1", "type": "shell", "status": "running", "command": "sleep 3; echo bg-done"}]
    wait = only(hook("Stop", stop_hook_active=False, background_tasks=running))
    assert wait["tool_start"] == {"call_id": BACKGROUND_WAIT, "tool": BACKGROUND_WAIT, "hints": {}}
    assert events_for(hook("Stop", stop_hook_active=False, background_tasks=[]), {}) == []
    notification = (
        "<task-notification>\n<task-id>bcq3juir1</task-id>\n<status>{}</status>\n<summary>…</summary>\n"
        "</task-notification>"
    )
    done = only(hook("UserPromptSubmit", prompt=notification.format("completed")))
    assert done["tool_end"] == {"call_id": BACKGROUND_WAIT, "status": "ok"}
    failed = only(hook("UserPromptSubmit", prompt=notification.format("failed")))
    assert failed["tool_end"]["status"] == "error"
    assert only(hook("UserPromptSubmit", prompt="run it"))["tool_end"]["status"] == "ok"


@pytest.mark.parametrize(
    "payload",
    [
        hook("PreToolUse", tool_name="Bash", tool_input=HELLO, tool_use_id="t", agent_id="a1", agent_type="x"),
        {"hook_event_name": "PreToolUse", "tool_name": "Bash"},
        hook("PreToolUse", tool_name="Bash", tool_input="not a dict", tool_use_id=""),
        hook("Notification", message="hi"),
        hook("PostToolBatch", tool_calls=[]),
        # an id the coordinator would refuse: the whole id must match, a trailing newline included
        {**hook("SessionStart"), "session_id": "abc\n"},
    ],
)
def test_what_is_not_reported(payload):
    assert events_for(payload, {}) == []


ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)
EVENTS = st.sampled_from(["SessionStart", "SessionEnd", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop",
                          "UserPromptSubmit", "Other"])  # fmt: skip
FIELDS = ["session_id", "tool_name", "tool_input", "tool_use_id", "tool_response", "duration_ms", "error",
          "is_interrupt", "background_tasks", "prompt", "source", "agent_id"]  # fmt: skip


@given(
    event=EVENTS,
    fields=st.fixed_dictionaries({}, optional={name: ANY for name in FIELDS}),
    session=st.text(max_size=40) | st.uuids().map(str),
    tool_input=st.fixed_dictionaries({}, optional={k: ANY for k in ("command", "timeout", "run_in_background")}),
    env=st.dictionaries(st.sampled_from(["BASH_DEFAULT_TIMEOUT_MS", "BASH_MAX_TIMEOUT_MS", "ANTHROPIC_MODEL"]),
                        st.text(max_size=12)),
)  # fmt: skip
def test_any_payload_maps_to_events_the_relay_accepts(event, fields, session, tool_input, env):
    payload = {"session_id": session, "hook_event_name": event, "tool_name": "Bash", "tool_input": tool_input}
    events = events_for({**payload, **fields}, env)
    if events:
        protocol.EventsRequest.model_validate({"events": events})


class Relay(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self):
        Relay.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"results": []}')

    def log_message(self, *args):
        pass


def run_hook(
    payload: bytes, proxy: str, timeout_s: str = "1.5", **env: str
) -> tuple[subprocess.CompletedProcess[bytes], float]:
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "tao_sdk.cli", "hook", "claude-code"],
        input=payload,
        env=python_env(TAO_PROXY_URL=proxy, TAO_HOOK_TIMEOUT_S=timeout_s, **env),
        capture_output=True,
        timeout=30,
        check=False,
    )
    return completed, time.monotonic() - started


def test_the_hook_posts_to_the_relay():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        payload = hook("PreToolUse", tool_name="Bash", tool_input=HELLO, tool_use_id="toolu_1")
        completed, _ = run_hook(json.dumps(payload).encode(), f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    [body] = Relay.received
    assert body["events"][0]["tool_start"]["call_id"] == "toolu_1"


def test_a_wait_is_ended_only_when_a_turn_started_one(tmp_path):
    """`claude -p` submits a prompt before any turn: ending a wait then made the coordinator answer 409."""
    running = [{"id": "b1", "type": "shell", "status": "running", "command": "sleep 3"}]
    steps = [
        ("UserPromptSubmit", {"prompt": "first prompt of the session"}, []),
        ("Stop", {"background_tasks": running}, [("tool_start", BACKGROUND_WAIT)]),
        ("Stop", {"background_tasks": running}, []),  # still waiting: one wait at a time
        ("UserPromptSubmit", {"prompt": "<task-notification>…"}, [("tool_end", BACKGROUND_WAIT)]),
        ("UserPromptSubmit", {"prompt": "next prompt"}, []),
        ("Stop", {"background_tasks": running}, [("tool_start", BACKGROUND_WAIT)]),
        ("SessionEnd", {"reason": "other"}, [("close", None)]),
        ("UserPromptSubmit", {"prompt": "after the end"}, []),
    ]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Relay.received.clear()
    posted = []
    try:
        for event, fields, _ in steps:
            payload = json.dumps(hook(event, **fields)).encode()
            completed, _ = run_hook(payload, f"http://127.0.0.1:{server.server_port}", TAO_HOOK_STATE_DIR=str(tmp_path))
            assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
            sent = [e for body in Relay.received for e in body["events"]]
            Relay.received.clear()
            posted.append([(e["kind"], (e.get("tool_start") or e.get("tool_end") or {}).get("call_id")) for e in sent])
    finally:
        server.shutdown()
        server.server_close()
    assert posted == [expected for _, _, expected in steps]
    assert list(tmp_path.iterdir()) == []


PRE_TOOL_USE = json.dumps(hook("PreToolUse", tool_name="Bash", tool_input=HELLO, tool_use_id="t")).encode()


@pytest.mark.parametrize(
    "payload", [PRE_TOOL_USE, b"{not json", b"", b"[1, 2]"], ids=["payload", "bad", "empty", "list"]
)
def test_with_nothing_listening_the_hook_exits_0_silently_and_fast(payload):
    completed, elapsed = run_hook(payload, f"http://127.0.0.1:{free_port()}")
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    assert elapsed < 5.0  # Python start-up and imports; the refused connection itself is immediate


def test_a_relay_that_never_answers_costs_at_most_the_hook_timeout():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts connections into its backlog, never answers
        completed, elapsed = run_hook(PRE_TOOL_USE, f"http://127.0.0.1:{silent.getsockname()[1]}", "0.5")
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    assert elapsed < 4.5


def test_with_a_log_named_the_hook_says_what_became_of_each_event(tmp_path):
    """The hook is silent and always exits 0, so a report that never reached the proxy left no trace: with
    `$TAO_HOOK_LOG` each event's outcome is appended there."""
    log = tmp_path / "hook.log"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run_hook(PRE_TOOL_USE, f"http://127.0.0.1:{server.server_port}", TAO_HOOK_LOG=str(log))
    finally:
        server.shutdown()
        server.server_close()
    session_end = json.dumps(hook("SessionEnd", reason="other")).encode()
    run_hook(session_end, f"http://127.0.0.1:{free_port()}", TAO_HOOK_LOG=str(log))
    run_hook(b"{not json", f"http://127.0.0.1:{free_port()}", TAO_HOOK_LOG=str(log))
    relayed, refused, broken = [json.loads(line) for line in log.read_text().splitlines()]
    assert (relayed["event"], relayed["session_id"], relayed["outcome"]) == ("PreToolUse", SESSION, "relayed")
    assert (refused["event"], refused["outcome"]) == ("SessionEnd", "not relayed: the proxy did not answer 2xx")
    assert broken["event"] is None and broken["outcome"].startswith("failed: JSONDecodeError")
    assert all(entry["took_s"] >= 0 and entry["at"] > 0 for entry in (relayed, refused, broken))


def test_a_tool_end_reported_after_the_session_end_leaves_the_session_closed(coordinator, start_proxy):
    """Real hook processes through a real `tao proxy`: Claude Code runs its PostToolUse hook in the background, so
    its report can reach the proxy after SessionEnd's close. The session stays closed (the proxy used to register
    it again, and the coordinator gave it a place nobody would use)."""
    proxy = start_proxy(coordinator.url, coordinator.token)
    call = {"tool_name": "Bash", "tool_input": HELLO, "tool_use_id": "toolu_1"}
    for payload in (
        hook("SessionStart", source="startup"),
        hook("PreToolUse", **call),
        hook("SessionEnd", reason="other"),
        hook("PostToolUse", **call, duration_ms=1010, tool_response={"interrupted": False}),
    ):
        completed, _ = run_hook(json.dumps(payload).encode(), proxy)
        assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    items = coordinator.recorder.items
    fed = [type(event).__name__ for event, _ in items if getattr(event, "session_id", None) == SESSION]
    assert fed == ["Register", "ToolStart", "Close"]
    assert SESSION not in coordinator.service.coordinator.sessions


def test_a_session_end_while_the_session_registers_closes_it(coordinator, start_proxy):
    """Real hook processes through a real `tao proxy`, the coordinator answering the registration 0.5 s late: a
    SessionEnd reported meanwhile waits for the registration and closes the session (it used to find the session
    not yet registered, drop the close, and leave the session holding a place until its lease ran out)."""
    proxy = start_proxy(coordinator.url, coordinator.token)
    registering = threading.Event()

    def registration_answered_late(event, actions, error):
        if isinstance(event, Register) and event.session_id == SESSION:
            registering.set()
            time.sleep(0.5)

    listen_to_feed(coordinator.service, registration_answered_late)
    start = threading.Thread(target=run_hook, args=(json.dumps(hook("SessionStart", source="startup")).encode(), proxy))
    start.start()
    assert registering.wait(10), "the registration never reached the coordinator"
    completed, _ = run_hook(json.dumps(hook("SessionEnd", reason="other")).encode(), proxy)
    start.join(30)
    assert completed.returncode == 0
    assert [type(event) for event in coordinator.recorder.events(Close, SESSION)] == [Close]
    assert SESSION not in coordinator.service.coordinator.sessions
