"""AgentSession timelines for `GET /v1/sessions/{id}`: what the coordinator saw of a session and decided for it.

The service hands every event it fed the core to `Timelines.observe`, with the session as it was before the event
and the actions the core answered; a plan's decisions come with it (`core/decision.py`). From these the
timeline keeps the session's phases (a new span whenever its phase or node changes), its tools with the duration
predicted at the start and the one reported at the end, its waits (from an acquire that found no place until one was
given), its calls (node, tokens, cached tokens) and the decisions that gave or took its place.

Bounds: a session keeps its latest `ENTRIES` entries, all kinds together (older ones are dropped and counted in
`truncated`); a closed session's timeline is kept until `CLOSED_KEPT` sessions closed after it. Entries are slotted
records (the protocol's models are built only for a view), and the text they keep — call ids, tool names, programs,
errors — is clipped to `TEXT_BYTES` of UTF-8 each, so a full timeline costs tens of KiB whatever its clients send
(`limits.py`). Times are Unix times taken when the service fed the event, not the core's clock; a tool start or end
reported late (`age_s`) is shown when the core placed it (`state_machine.tool_start_time`, `tool_end_time`), and so
is the phase it began.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pydantic import BaseModel

from tao_sdk import protocol

from ..core.actions import Action, Expired, Route
from ..core.decision import PlanDecision
from ..core.events import Acquire, Close, Event, LlmEnd, Register, ToolEnd, ToolStart
from ..core.model import AgentSession, Phase
from ..core.plan import PlanFinished
from ..core.state_machine import tool_end_time, tool_start_time

ENTRIES = 256
CLOSED_KEPT = 1_000
TEXT_BYTES = 64
"""UTF-8 bytes of each call id, tool name, program and error a timeline entry keeps (a usual one is shorter)."""
DecisionKind = Literal["admitted", "interrupted", "moved", "routed"]
V = TypeVar("V", bound=BaseModel)


@dataclass(slots=True)
class _Phase:
    phase: str
    since: float
    node: str | None


@dataclass(slots=True)
class _Tool:
    call_id: str
    tool: str
    program: str | None
    started_at: float
    predicted_s: float
    prediction: str
    ended_at: float | None = None
    actual_s: float | None = None
    status: str | None = None


@dataclass(slots=True)
class _Wait:
    since: float
    seconds: float | None = None
    node: str | None = None


@dataclass(slots=True)
class _Call:
    node: str
    ended_at: float
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    ttft_s: float | None
    duration_s: float | None
    error: str | None


@dataclass(slots=True)
class _Decision:
    at: float
    kind: DecisionKind
    node: str | None
    by: str
    from_node: str | None = None
    plan: int | None = None
    method: str | None = None
    value: tuple[int, ...] | None = None


_Entry = _Phase | _Tool | _Wait | _Call | _Decision


@dataclass(slots=True)
class _Timeline:
    session_id: str
    context: protocol.AgentContext
    registered_at: float
    entries: deque[_Entry]
    truncated: int = 0
    phase: str = "waiting"
    node: str | None = None
    nodes: list[str] = field(default_factory=list)
    running: dict[str, _Tool] = field(default_factory=dict)
    wait: _Wait | None = None
    closed_at: float | None = None
    closed_by: Literal["client", "lease"] | None = None

    def add(self, entry: _Entry) -> None:
        if len(self.entries) == self.entries.maxlen:
            self.truncated += 1
        self.entries.append(entry)


def _lateness(event: Event | PlanFinished, before: AgentSession | None, now: float | None) -> float:
    """How long before it was fed the core placed a tool start or end that came with an age (the core's own rule,
    applied to the session as it was before the event); 0 otherwise."""
    if now is None or before is None or not isinstance(event, ToolStart | ToolEnd) or not event.age_s:
        return 0.0
    if isinstance(event, ToolEnd):
        return now - tool_end_time(before, now, event.call_id, event.age_s)
    return now - tool_start_time(before, now, event.age_s)


class Timelines:
    def __init__(self, acquire_admission: str, entries: int = ENTRIES, closed_kept: int = CLOSED_KEPT) -> None:
        """`acquire_admission`: what gives a session without a place one at its acquire, `fast-admission` or
        `router` (a policy that does not plan)."""
        self.acquire_admission = acquire_admission
        self.entries = entries
        self.closed_kept = closed_kept
        self.live: dict[str, _Timeline] = {}
        self.closed: OrderedDict[str, _Timeline] = OrderedDict()

    def observe(
        self,
        event: Event | PlanFinished,
        before: AgentSession | None,
        sessions: Mapping[str, AgentSession],
        actions: Sequence[Action],
        at: float,
        plan: PlanDecision | None = None,
        now: float | None = None,
    ) -> None:
        """`at`: the Unix time the event was fed; `now`: the core's clock then (without it, a late tool boundary is
        shown when it was fed)."""
        touched = {action.session_id for action in actions if isinstance(action, Route | Expired)}
        if plan is not None:
            self._plan(plan, at)
            touched |= {*plan.admitted, *plan.interrupted, *plan.moved}
        session_id: str | None = getattr(event, "session_id", None)
        happened = at - _lateness(event, before, now)
        timeline = self._event(event, before, sessions, actions, happened) if session_id is not None else None
        if timeline is not None:
            touched.add(timeline.session_id)
        for action in actions:
            if isinstance(action, Expired) and (expired := self.live.get(action.session_id)) is not None:
                expired.closed_by = "lease"
        for touched_id in sorted(touched):
            self._sync(touched_id, sessions.get(touched_id), happened if touched_id == session_id else at)

    def _event(
        self,
        event: Event | PlanFinished,
        before: AgentSession | None,
        sessions: Mapping[str, AgentSession],
        actions: Sequence[Action],
        at: float,
    ) -> _Timeline | None:
        if isinstance(event, Register):
            self.closed.pop(event.session_id, None)
            context = protocol.AgentContext(
                harness=event.context.harness,
                workflow_id=event.context.workflow_id,
                parent_session_id=event.context.parent_session_id,
                model=event.context.model,
            )
            timeline = _Timeline(event.session_id, context, at, deque(maxlen=self.entries))
            self.live[event.session_id] = timeline
            timeline.add(_Phase("waiting", at, None))
            return timeline
        known = self.live.get(getattr(event, "session_id", ""))
        if known is None:
            return None
        timeline, after = known, sessions.get(known.session_id)
        match event:
            case Acquire():
                node = next(
                    (
                        a.node
                        for a in actions
                        if isinstance(a, Route) and not a.side and a.session_id == event.session_id
                    ),
                    None,
                )
                if node is not None and before is not None and before.node is None:
                    timeline.add(_Decision(at, "admitted", node, self.acquire_admission))
                elif after is not None and after.phase is Phase.WAITING and timeline.wait is None:
                    timeline.wait = _Wait(at)
                    timeline.add(timeline.wait)
            case ToolStart():
                tool = next(t for t in after.tools if t.call_id == event.call_id) if after else None
                if tool is not None:
                    entry = _Tool(
                        _text(tool.call_id),
                        _text(tool.tool),
                        _maybe_text(tool.program),
                        at,
                        max(0.0, tool.predicted_end - tool.started_at),
                        tool.source,
                    )
                    timeline.running[tool.call_id] = entry
                    timeline.add(entry)
            case ToolEnd():
                if (ended := timeline.running.pop(event.call_id, None)) is not None:
                    ended.ended_at = at
                    ended.actual_s = (
                        event.duration_s if event.duration_s is not None else max(0.0, at - ended.started_at)
                    )
                    ended.status = event.status
            case LlmEnd():
                timeline.add(
                    _Call(
                        event.node_id,
                        at,
                        event.prompt_tokens,
                        event.cached_tokens,
                        event.completion_tokens,
                        event.ttft_s,
                        event.duration_s,
                        _maybe_text(event.error),
                    )
                )
            case Close():
                timeline.closed_by = "client"
        return timeline

    def _plan(self, plan: PlanDecision, at: float) -> None:
        def add(session_id: str, kind: DecisionKind, node: str, source: str | None = None) -> None:
            if (timeline := self.live.get(session_id)) is not None:
                value = plan.values.get(session_id)
                timeline.add(_Decision(at, kind, node, "plan", source, plan.plan, plan.method, _value(value)))

        for session_id, node in plan.interrupted.items():
            add(session_id, "interrupted", node)
        for session_id, (source, target) in plan.moved.items():
            add(session_id, "moved", target, source)
        for session_id, node in plan.admitted.items():
            add(session_id, "admitted", node)

    def _sync(self, session_id: str, session: AgentSession | None, at: float) -> None:
        """A new phase span when the session's phase or node changed; a wait ends when it gets a place."""
        timeline = self.live.get(session_id)
        if timeline is None:
            return
        phase = "closed" if session is None else session.phase.name.lower()
        node = None if session is None else session.node
        if (phase, node) == (timeline.phase, timeline.node):
            return
        timeline.phase, timeline.node = phase, node
        timeline.add(_Phase(phase, at, node))
        if node is not None and node not in timeline.nodes:
            timeline.nodes.append(node)
        wait = timeline.wait
        if wait is not None and (node is not None or session is None):
            wait.seconds, wait.node, timeline.wait = at - wait.since, node, None
        if session is None:
            timeline.closed_at = at
            del self.live[session_id]
            self.closed[session_id] = timeline
            while len(self.closed) > self.closed_kept:
                self.closed.popitem(last=False)

    def view(self, session_id: str) -> protocol.SessionTimeline | None:
        timeline = self.live.get(session_id) or self.closed.get(session_id)
        if timeline is None:
            return None
        phases = [e for e in timeline.entries if isinstance(e, _Phase)]
        ends = [p.since for p in phases[1:]] + [None]
        return protocol.SessionTimeline(
            session_id=timeline.session_id,
            harness=timeline.context.harness,
            model=timeline.context.model,
            workflow_id=timeline.context.workflow_id,
            parent_session_id=timeline.context.parent_session_id,
            open=timeline.closed_at is None,
            phase=timeline.phase,
            node=timeline.node,
            registered_at=timeline.registered_at,
            closed_at=timeline.closed_at,
            closed_by=timeline.closed_by,
            nodes=list(timeline.nodes),
            phases=[
                protocol.TimelinePhase(phase=p.phase, since=p.since, until=end, node=p.node)
                for p, end in zip(phases, ends, strict=True)
            ],
            tools=_views(protocol.TimelineTool, _Tool, timeline.entries),
            waits=_views(protocol.TimelineWait, _Wait, timeline.entries),
            calls=_views(protocol.TimelineCall, _Call, timeline.entries),
            decisions=_views(protocol.TimelineDecision, _Decision, timeline.entries),
            truncated=timeline.truncated,
        )


def _views(view: type[V], kind: type, entries: Iterable[_Entry]) -> list[V]:
    """The entries of `kind` as the protocol shows them (their fields have the view's names)."""
    return [view.model_validate(entry, from_attributes=True) for entry in entries if isinstance(entry, kind)]


def _text(text: str) -> str:
    """`text` as an entry keeps it: its first `TEXT_BYTES` of UTF-8, marked with `…` when cut."""
    if len(text) <= TEXT_BYTES and (text.isascii() or len(text.encode("utf-8", "surrogatepass")) <= TEXT_BYTES):
        return text
    return text.encode("utf-8", "surrogatepass")[: TEXT_BYTES - 3].decode("utf-8", "ignore") + "…"


def _maybe_text(text: str | None) -> str | None:
    return None if text is None else _text(text)


def _value(value: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)
