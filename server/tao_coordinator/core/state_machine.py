"""The session state machine (docs/design.md#session-life-cycle), as pure functions from a session to its next version.

Rule: everything that changes a session's phase, place or in-flight work lives in this file. Each function either
returns a new `AgentSession` (version + 1) or raises `IllegalTransition` and changes nothing.

    register ─▶ WAITING ──admit(b)──▶ ADMITTED(b) ──acquire──▶ IN_LLM(b) ──llm_end──▶ ADMITTED(b)
    ADMITTED(b) / READY / WAITING ──tool_start──▶ IN_TOOL (keeps its place, or none)
    IN_TOOL(b) ──interrupt──▶ IN_TOOL(None)          IN_TOOL(None) ──admit(b)──▶ IN_TOOL(b)
    IN_TOOL ──last tool_end──▶ READY (keeps its place, or none) ──acquire──▶ IN_LLM(b), or WAITING until admitted
    any ──close / lease expiry──▶ CLOSED

Beyond the diagram, and why:
- several LLM calls of one session may overlap (harnesses make side calls): IN_LLM counts them;
- several tools may run at once (parallel tool calls): IN_TOOL keeps a set of call ids and ends with the last;
- tool_start from READY or WAITING: a harness runs its tool calls one after another without an LLM call between;
- a tool boundary reported late (`age_s`: a hook's start-up, a queue) happened at `now - age_s`, but never before the
  session's current phase began (nor, for an end, before the tool started): `tool_start_time`, `tool_end_time`. With
  no age the time is `now`, exactly.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import IllegalTransition
from .model import AgentSession, NodeId, Phase, RunningTool


def _next(session: AgentSession, now: float, **changes: object) -> AgentSession:
    phase = changes.get("phase", session.phase)
    if phase is not session.phase:
        changes["phase_since"] = now
    node = changes.get("node", session.node)
    if node is not None and node != session.node:
        changes["placed_at"] = now
    return replace(session, version=session.version + 1, **changes)  # type: ignore[arg-type]


def _illegal(session: AgentSession, event: str, detail: str = "") -> IllegalTransition:
    return IllegalTransition(session.id, session.phase.name, event, detail)


def acquire(
    session: AgentSession, now: float, route_to: NodeId | None, expected_input_tokens: int | None
) -> AgentSession:
    """The client asks for a node. `route_to` is where the call goes now, or None to wait for a place."""
    expected = session.expected_input_tokens if expected_input_tokens is None else expected_input_tokens
    if session.phase is Phase.IN_LLM:
        if route_to != session.node:
            raise _illegal(session, "acquire", f"a call is running on {session.node}; overlapping calls share it")
        return _next(session, now, llm_calls=session.llm_calls + 1, expected_input_tokens=expected)
    if session.phase in (Phase.IN_TOOL, Phase.CLOSED):
        raise _illegal(session, "acquire", "report tool_end first" if session.phase is Phase.IN_TOOL else "")
    if route_to is None:
        return _next(session, now, phase=Phase.WAITING, node=None, acquire_pending=True, expected_input_tokens=expected)
    return _next(
        session,
        now,
        phase=Phase.IN_LLM,
        node=route_to,
        llm_calls=1,
        acquire_pending=False,
        expected_input_tokens=expected,
    )


def llm_end(session: AgentSession, now: float, **updates: object) -> AgentSession:
    """One call ended; the last one returns the session to ADMITTED on the same node."""
    if session.phase is not Phase.IN_LLM:
        raise _illegal(session, "llm_end", "no call is running")
    if session.llm_calls > 1:
        return _next(session, now, llm_calls=session.llm_calls - 1, **updates)
    return _next(session, now, phase=Phase.ADMITTED, llm_calls=0, **updates)


def tool_start_time(session: AgentSession, now: float, age_s: float) -> float:
    """When a tool reported `age_s` after its start, at `now`, started: not before the session's phase began."""
    if not age_s:
        return now
    return min(now, max(now - age_s, session.phase_since))


def tool_end_time(session: AgentSession, now: float, call_id: str, age_s: float) -> float:
    """When a running tool reported `age_s` after its end, at `now`, ended: not before the session's phase began,
    nor before the tool started."""
    if not age_s:
        return now
    started = next((tool.started_at for tool in session.tools if tool.call_id == call_id), now)
    return min(now, max(now - age_s, session.phase_since, started))


def tool_start(session: AgentSession, now: float, tool: RunningTool) -> AgentSession:
    if session.phase in (Phase.IN_LLM, Phase.CLOSED):
        raise _illegal(session, "tool_start", "report llm_end first" if session.phase is Phase.IN_LLM else "")
    if any(running.call_id == tool.call_id for running in session.tools):
        raise _illegal(session, "tool_start", f"call {tool.call_id!r} is already running")
    return _next(session, now, phase=Phase.IN_TOOL, tools=(*session.tools, tool), acquire_pending=False)


def tool_end(session: AgentSession, now: float, call_id: str) -> AgentSession:
    if session.phase is not Phase.IN_TOOL or all(running.call_id != call_id for running in session.tools):
        raise _illegal(session, "tool_end", f"call {call_id!r} is not running")
    remaining = tuple(running for running in session.tools if running.call_id != call_id)
    if remaining:
        return _next(session, now, tools=remaining)
    return _next(session, now, phase=Phase.READY, tools=())


def replace_tools(session: AgentSession, now: float, tools: tuple[RunningTool, ...]) -> AgentSession:
    """New predictions for the running tools (re-estimation); the same calls must be running."""
    if session.phase is not Phase.IN_TOOL or {t.call_id for t in tools} != {t.call_id for t in session.tools}:
        raise _illegal(session, "reestimate", "the running tools changed")
    return _next(session, now, tools=tools)


def close(session: AgentSession, now: float) -> AgentSession:
    if session.phase is Phase.CLOSED:
        raise _illegal(session, "close", "already closed")
    return _next(session, now, phase=Phase.CLOSED, node=None, llm_calls=0, tools=(), acquire_pending=False)


def admit(session: AgentSession, now: float, node: NodeId) -> AgentSession:
    """The planner gives the session a place on `node` (or moves it there). A pending acquire starts the call."""
    if session.phase in (Phase.IN_LLM, Phase.CLOSED):
        raise _illegal(session, "admit", "sessions inside an LLM call are never moved")
    if session.acquire_pending:
        return _next(session, now, phase=Phase.IN_LLM, node=node, llm_calls=1, acquire_pending=False)
    phase = Phase.ADMITTED if session.phase is Phase.WAITING else session.phase
    return _next(session, now, phase=phase, node=node)


def interrupt(session: AgentSession, now: float) -> AgentSession:
    """The planner takes the session's place away; it rejoins the waiting pool."""
    if session.node is None or session.phase in (Phase.IN_LLM, Phase.CLOSED):
        raise _illegal(session, "interrupt", "holds no place" if session.node is None else "")
    phase = Phase.WAITING if session.phase is Phase.ADMITTED else session.phase
    return _next(session, now, phase=phase, node=None)
