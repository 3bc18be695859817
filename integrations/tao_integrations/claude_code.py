"""`tao hook claude-code`: one Claude Code hook payload on stdin becomes TAO events, posted to `tao proxy`'s relay.

Claude Code runs this command for each hook event that `tao install claude-code` registered. Mapping:

| hook | event |
|---|---|
| SessionStart / SessionEnd | register / close |
| PreToolUse | tool_start (call id = `tool_use_id`) with hints, see `tool_hints`; for Bash the program it runs |
| PostToolUse | tool_end with `duration_ms`; `timeout` if the command went to the background at its timeout |
| PostToolUseFailure | tool_end with `duration_ms`; `timeout` if the command was killed at its timeout, else `error` |
| Stop, background tasks still running | tool_start of one `background-tasks` wait: the turn is over, they are not |
| UserPromptSubmit, a wait open | tool_end of that wait (status from a `<task-notification>`), before the next call |

`events_for` maps one payload without memory; `run` then drops the wait's start when one is open already and its end
when none is, from a marker file per session (`claude_code_waits`): the prompt payload cannot tell whether the last
turn started a wait, and the coordinator refuses (409) the end of a tool that never started.

Why the relay and not the coordinator: the proxy registers each session under Claude Code's own session id (the
`X-Claude-Code-Session-Id` of its model calls) and holds the session's token; a hook process lives for one event
and has neither. The relay URL is `$TAO_PROXY_URL` (set by `tao install claude-code` in the settings' `env`).

Timing: a tool event carries `age_s`, the time since this hook process (or the shell Claude Code started it with)
began, so the coordinator dates the start or end when Claude Code ran the hook, not when the report got through
(Python's start-up, the relay): read from `/proc` (Linux; elsewhere no age is sent).

Invariants: the command always exits 0 and prints nothing (Claude Code would show stdout to the model for some
events), whatever the payload and whether or not the proxy or the coordinator answer; it returns within
`$TAO_HOOK_TIMEOUT_S` (1.5 s) plus start-up. Subagent tool calls (payloads with `agent_id`) are not reported: a
subagent's model calls share the session and would overlap its tools.

AgentContext: the session registers with `workflow_id` = its own session id, the top session's: a subagent works
inside that session (its model calls carry the same `X-Claude-Code-Session-Id`), so it shares the workflow too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from tao_sdk import environment
from tao_sdk.claude_code_tools import tool_hints
from tao_sdk.hints import program_of
from tao_sdk.ids import SESSION_ID_PATTERN

from .claude_code_waits import BACKGROUND_WAIT, only_open_waits, state_dir
from .relay import post_events, proxy_url

HARNESS = "claude-code"
_NOTIFIED_STATUS = re.compile(r"<status>\s*(\w+)\s*</status>")
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
Event = dict[str, Any]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Read one Claude Code hook payload on stdin and report it to TAO (always exits 0)."


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    payload: Any = None
    outcome = "nothing to report"
    try:
        payload = json.loads(sys.stdin.read() or "{}")
        events = events_for(payload, os.environ) if isinstance(payload, dict) else []
        events = only_open_waits(events, state_dir(os.environ))
        if events:
            relayed = post_events(proxy_url(), with_age(events, started_ago()), _timeout_s(os.environ))
            outcome = "relayed" if relayed else "not relayed: the proxy did not answer 2xx"
    except Exception as error:  # a hook must never fail the user's tool call
        outcome = f"failed: {type(error).__name__}: {error}"
    with contextlib.suppress(Exception):
        log_outcome(os.environ, payload, outcome, time.monotonic() - began)
    return 0


def log_outcome(env: Mapping[str, str], payload: Any, outcome: str, took_s: float) -> None:
    """Append what became of one event to `$TAO_HOOK_LOG`, when set: the hook is silent otherwise, and a report
    that never reached the proxy would leave no trace."""
    path = environment.hook_log(env)
    if not path:
        return
    fields = payload if isinstance(payload, dict) else {}
    line = {
        "at": round(time.time(), 3),
        "event": fields.get("hook_event_name"),
        "session_id": fields.get("session_id"),
        "outcome": outcome,
        "took_s": round(took_s, 3),
        "age_s": started_ago(),
    }
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


SHELLS = frozenset({"sh", "dash", "bash", "zsh"})
SHELL_START_S = 2
"""At most this many seconds between the shell's start and this process's, for the shell to count as the hook's."""


def started_ago() -> float | None:
    """Seconds since this process began, or its parent when that is the shell that ran the hook command (Linux's
    `/proc`); None where it cannot be read."""
    try:
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
        ticks = os.sysconf("SC_CLK_TCK")
        _, started = _proc_stat("self")
        parent_name, parent_started = _proc_stat(str(os.getppid()))
    except (OSError, ValueError, AttributeError, IndexError):
        return None
    if parent_name in SHELLS and 0 <= started - parent_started <= SHELL_START_S * ticks:
        started = parent_started  # a shell started just for this command (a long-lived one is not the hook's)
    return max(0.0, now - started / ticks)


def _proc_stat(pid: str) -> tuple[str, int]:
    """A process's name and start time (clock ticks after boot), from `/proc/PID/stat`."""
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
        text = stat.read()
    name = text[text.index("(") + 1 : text.rindex(")")]
    return name, int(text[text.rindex(")") + 2 :].split()[19])


def with_age(events: list[Event], age_s: float | None) -> list[Event]:
    """`events` with each tool start and end aged `age_s` (none: as they are)."""
    if age_s is None:
        return events
    for event in events:
        if (body := event.get(event["kind"])) is not None and event["kind"] in ("tool_start", "tool_end"):
            body["age_s"] = round(min(age_s, 86_400.0), 4)
    return events


def _timeout_s(env: Mapping[str, str]) -> float:
    try:
        return max(0.1, float(environment.hook_timeout_s(env) or "1.5"))
    except ValueError:
        return 1.5


def events_for(payload: Mapping[str, Any], env: Mapping[str, str]) -> list[Event]:
    """The relay events for one hook payload (empty when there is nothing to report)."""
    session_id = payload.get("session_id")
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id) or payload.get("agent_id"):
        return []
    match payload.get("hook_event_name"):
        case "SessionStart":
            return [_register(session_id, payload, env)]
        case "SessionEnd":
            return [{"kind": "close", "session_id": session_id}]
        case "PreToolUse":
            return _tool_start(session_id, payload, env)
        case "PostToolUse" | "PostToolUseFailure":
            return _tool_end(session_id, payload)
        case "Stop":
            return _background_wait(session_id, payload)
        case "UserPromptSubmit":
            return [_end(session_id, BACKGROUND_WAIT, None, _notified_status(payload.get("prompt")))]
    return []


def _register(session_id: str, payload: Mapping[str, Any], env: Mapping[str, str]) -> Event:
    context = {
        "harness": HARNESS,
        "workflow_id": session_id,
        "model": env.get("ANTHROPIC_MODEL", "")[:200],
        "client_session_id": session_id,
        "labels": {"source": str(payload.get("source", ""))[:100]},
    }
    return {"kind": "register", "session_id": session_id, "registration": {"context": context}}


def _tool_start(session_id: str, payload: Mapping[str, Any], env: Mapping[str, str]) -> list[Event]:
    call_id, tool = payload.get("tool_use_id"), payload.get("tool_name")
    if not isinstance(call_id, str) or not call_id or not isinstance(tool, str) or not tool:
        return []
    tool_input = payload.get("tool_input")
    tool_input = tool_input if isinstance(tool_input, dict) else {}
    start = {"call_id": call_id[:200], "tool": tool[:200], "hints": tool_hints(tool, tool_input, env)}
    command = tool_input.get("command")
    program = program_of(command) if tool == "Bash" and isinstance(command, str) else None
    if program is not None:
        start["program"] = program  # the program's name only: the command never leaves this process
    return [{"kind": "tool_start", "session_id": session_id, "tool_start": start}]


def _tool_end(session_id: str, payload: Mapping[str, Any]) -> list[Event]:
    call_id = payload.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        return []
    return [_end(session_id, call_id[:200], _duration_s(payload.get("duration_ms")), tool_status(payload))]


def tool_status(payload: Mapping[str, Any]) -> str:
    """`ok`, `error` or `timeout` for a PostToolUse / PostToolUseFailure payload."""
    if payload.get("hook_event_name") == "PostToolUseFailure":
        error = str(payload.get("error", ""))
        return "timeout" if "timed out" in error.lower() and not payload.get("is_interrupt") else "error"
    response = payload.get("tool_response")
    tool_input = payload.get("tool_input")
    if isinstance(response, dict) and response.get("backgroundTaskId"):
        explicit = isinstance(tool_input, dict) and tool_input.get("run_in_background") is True
        return "ok" if explicit else "timeout"  # moved to the background when its timeout ran out
    if isinstance(response, dict) and response.get("interrupted") is True:
        return "error"
    return "ok"


def _duration_s(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 86_400_000:
        return None
    return float(value) / 1000


def _end(session_id: str, call_id: str, duration_s: float | None, status: str) -> Event:
    end: dict[str, Any] = {"call_id": call_id, "status": status}
    if duration_s is not None:
        end["duration_s"] = duration_s
    return {"kind": "tool_end", "session_id": session_id, "tool_end": end}


def _background_wait(session_id: str, payload: Mapping[str, Any]) -> list[Event]:
    tasks = payload.get("background_tasks")
    running = (
        [t for t in tasks if isinstance(t, dict) and t.get("status") == "running"] if isinstance(tasks, list) else []
    )
    if not running:
        return []
    start = {"call_id": BACKGROUND_WAIT, "tool": BACKGROUND_WAIT, "hints": {}}
    return [{"kind": "tool_start", "session_id": session_id, "tool_start": start}]


def _notified_status(prompt: object) -> str:
    if not isinstance(prompt, str) or not prompt.lstrip().startswith("<task-notification>"):
        return "ok"
    match = _NOTIFIED_STATUS.search(prompt)
    return "ok" if match is None or match.group(1) == "completed" else "error"
