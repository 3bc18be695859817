"""Tool starts and ends inferred from a session's model calls, for harnesses without hooks (`tao proxy`; no I/O, no
clock: times are passed in).

A response that asks for tool calls (`wire_tools.ToolCallReader`) starts them when it ends; the session's next
request that carries a call's result (`wire_tools.tool_results`) ends it, with the time between the two as its
duration and the result's status. Every tool call is reported, under the name the model called it by; a shell
tool also reports the program its command runs (`hints.program_of`) and the hints the harness's hook would send:

| tool (name, offered schema) | harness | timeout hint |
|---|---|---|
| `Bash` | Claude Code | `timeout` ms, else 120 s; at most 600 s |
| `TaskOutput`, unless `block` is false | Claude Code | `timeout` ms, else 30 s; at most 600 s |
| `bash` whose schema offers `timeout` | OpenCode | `timeout` ms, else 120 s |
| `bash` without it | mini-swe-agent | none |
A shell tool (`Bash`, `bash`) adds what its command says (`hints.command_hints`): a `timeout N` caps the timeout,
its `sleep`s, and a trailing `&` (or Claude Code's `run_in_background`) runs it in the background. These are the
rules of `claude_code_tools.py` (Claude Code's hooks read it too) and of the OpenCode plugin, with their defaults (a
harness's own environment, such as `BASH_DEFAULT_TIMEOUT_MS`, is not visible from the wire).

Hooks win, and nothing is counted twice (the rule, per session):
- a session any hook event names (`POST /tao/v1/events`: its registration, a tool event, a heartbeat) is
  *hook-driven* from then on: no tool of it is inferred any more. Claude Code's SessionStart hook and the OpenCode
  plugin's registration arrive before the session's first model call, so with hooks installed nothing is inferred
  and the reports are exactly the hooks';
- should a hook's first event come after inference started a call (a harness whose hooks only see tools), a hook
  start of a call id inference already reported is not sent again, and the call is the hook's from then on: its
  end is the hook's, and inference ends only the calls it still holds.
- a hook's end may come after the wire showed the tool over (Claude Code's PostToolUse runs in the background, so
  the next model call need not wait for it): the request that carries the result of a call a hook started ends it
  (`ended`, at the request's arrival), and the hook's end, when it comes, is not sent (nor a hook's start of a call
  ended so).
Call ids are the harness's own on both paths (Claude Code's `tool_use_id`, OpenCode's `callID` are the wire's
ids), which is what makes them comparable.

The wire is read for hook-driven sessions too (`seen`: each call's wire start and end, the latest `SEEN` calls of a
session), though nothing inferred of them is reported: it dates a hook's start at the wire's when the wire showed
the call first (`hook_start_time`), and it is what `tao proxy --tool-log` writes beside the hooks' reports.

Limits: Claude Code's wait for background tasks is not inferred (its Stop hook sees them, the wire does not);
subagent tools are inferred like any other (their model calls carry the session's id); a call whose result is
never sent (mini-swe-agent's submission, the last action of its run) stays open until the session closes. Bounds:
at most `MAX_OPEN` inferred calls open per session (more are not started); a session's state goes with `forget`
(closed, or reaped idle).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import protocol
from .claude_code_tools import DEFAULT_BASH_TIMEOUT_MS, MAX_SLEEP_S, milliseconds, tool_hints
from .hints import command_hints, program_of
from .wire_tools import Status, ToolResult, WireToolCall

MAX_OPEN = 64
SEEN = 64


@dataclass(frozen=True, slots=True)
class Start:
    call_id: str
    tool: str
    hints: protocol.ToolHints
    program: str | None


@dataclass(frozen=True, slots=True)
class End:
    call_id: str
    duration_s: float
    status: Status


def start_of(call: WireToolCall, offered: Mapping[str, Mapping[str, Any]]) -> Start:
    """What a hook would report as this call's start; `offered`: the request's tools, by name (their schema's
    properties, `wire_tools.offered_tools`)."""
    arguments = call.arguments
    command = arguments.get("command")
    command = command if isinstance(command, str) else None
    hints = protocol.ToolHints()
    if call.name in ("Bash", "TaskOutput"):
        hints = protocol.ToolHints(**tool_hints(call.name, arguments, {}))
    elif call.name.lower() == "bash":
        has_timeout = "timeout" in offered.get(call.name, {})
        default_ms = DEFAULT_BASH_TIMEOUT_MS if has_timeout else None
        hints = _shell_hints(command, arguments.get("timeout") if has_timeout else None, default_ms)
    shell = call.name.lower() == "bash"
    return Start(call.call_id, call.name, hints, program_of(command) if shell and command is not None else None)


def _shell_hints(command: str | None, timeout: object, default_ms: int | None) -> protocol.ToolHints:
    """OpenCode's and mini-swe-agent's `bash`: the tool's `timeout` (else `default_ms`; None: the tool has none),
    capped by what the command says."""
    parsed = command_hints(command) if command is not None else None
    limit_s = milliseconds(timeout, default_ms) / 1000 if default_ms is not None else None
    caps = [cap for cap in (limit_s, parsed.timeout_s if parsed else None) if cap]
    return protocol.ToolHints(
        timeout_s=min(caps) if caps else None,
        sleep_s=min(parsed.sleep_s, MAX_SLEEP_S) if parsed and parsed.sleep_s else None,
        background=bool(parsed and parsed.background),
    )


@dataclass(slots=True)
class Seen:
    """One call as the wire showed it (monotonic times)."""

    start: Start
    started: float
    ended: float | None = None


@dataclass(slots=True)
class _Session:
    open: dict[str, float] = field(default_factory=dict)
    """Call id → when inference started it, for the calls it started and has not ended."""
    hooked: bool = False
    seen: OrderedDict[str, Seen] = field(default_factory=OrderedDict)
    """The latest `SEEN` calls the wire showed, reported or not."""
    hook_open: dict[str, float] = field(default_factory=dict)
    """Call id → when its hook start was relayed, for the calls hooks started and have not ended."""
    ended_for_hooks: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """The latest `SEEN` calls a hook started that the wire ended: their hook events are not sent."""


class InferredTools:
    """Per session: the calls inference holds open, and whether hooks drive the session (the rule above)."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}

    def started(self, session_id: str, starts: Iterable[Start], now: float) -> list[Start]:
        """The starts to report for a response that just ended at `now`."""
        session = self._sessions.setdefault(session_id, _Session())
        reported = []
        for start in starts:
            if start.call_id not in session.seen:
                session.seen[start.call_id] = Seen(start, now)
                while len(session.seen) > SEEN:
                    session.seen.popitem(last=False)
            if session.hooked:
                continue
            if start.call_id not in session.open and len(session.open) < MAX_OPEN:
                session.open[start.call_id] = now
                reported.append(start)
        return reported

    def ended(self, session_id: str, results: Sequence[ToolResult], now: float) -> list[End]:
        """The ends to report for a request that arrived at `now` carrying `results`."""
        session = self._sessions.get(session_id)
        if session is None:
            return []
        for result in results:
            if (seen := session.seen.get(result.call_id)) is not None and seen.ended is None:
                seen.ended = now
        ends = []
        for result in results:
            started = session.open.pop(result.call_id, None)
            if started is None and (started := session.hook_open.pop(result.call_id, None)) is not None:
                session.ended_for_hooks[result.call_id] = None
                while len(session.ended_for_hooks) > SEEN:
                    session.ended_for_hooks.popitem(last=False)
            if started is not None:
                ends.append(End(result.call_id, max(0.0, now - started), result.status))
        return ends

    def hook_event(self, event: protocol.BatchedEvent, now: float) -> bool:
        """Note a hook's event, relayed at `now` (dated by the hook: its start's time); False when it must not be
        sent on (a start inference already reported, an event of a call the wire ended for the hooks)."""
        if event.kind == "close":
            self.forget(event.session_id)
            return True
        session = self._sessions.setdefault(event.session_id, _Session())
        session.hooked = True
        if event.kind == "tool_start" and event.tool_start is not None:
            call_id = event.tool_start.call_id
            if call_id in session.ended_for_hooks or session.open.pop(call_id, None) is not None:
                return False
            if len(session.hook_open) < MAX_OPEN:
                session.hook_open[call_id] = now
            return True
        if event.kind == "tool_end" and event.tool_end is not None:
            session.open.pop(event.tool_end.call_id, None)
            session.hook_open.pop(event.tool_end.call_id, None)
            return event.tool_end.call_id not in session.ended_for_hooks
        return True

    def seen(self, session_id: str, call_id: str) -> Seen | None:
        """The call as the wire showed it, if it did lately."""
        session = self._sessions.get(session_id)
        return None if session is None else session.seen.get(call_id)

    def hook_start_time(self, session_id: str, call_id: str, reported: float) -> float:
        """When a hook's start of `call_id`, dated `reported` by the hook, happened: the wire's start when the
        wire showed the call first, else `reported`. A boundary is dated by the first source to show it: the
        response that asks for a tool ends the session's call, and the harness's own handling until its hook runs
        (OpenCode's 0.35–1.3 s) is time away from the GPU as much as the tool's."""
        seen = self.seen(session_id, call_id)
        return min(seen.started, reported) if seen is not None else reported

    def hook_driven(self, session_id: str) -> bool:
        session = self._sessions.get(session_id)
        return session is not None and session.hooked

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
