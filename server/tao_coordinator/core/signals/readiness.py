"""Readiness r(i) ∈ {0, …, Q}: how likely the session is to want the LLM within the horizon H
(docs/design.md#readiness-forecast).

A session in a tool counts the level its tools' readiness schedules give now (`forecast/forecaster.py`: Q·P(the
call returns within H | the time it has run, its key, its hints), rounded, under the `forecast` rule; 0 or Q under
the binary rules). With several tools running, the least of them: the session wants the LLM only when all have
returned. A session that is not in a tool (new, ready, admitted) is about to call: Q. A session inside an LLM call is
not a candidate: 0. Q is `readiness_levels`.

Why a quantised probability keeps the plan exact: the component is an integer per session, so its sum over a plan
is an integer bounded by Q × the sessions, and the lexicographic order of integer tuples is what the solver
searches exactly; the planner never sees the probability itself, only the level fixed when the schedule was made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..model import AgentSession, NodeId, Phase
from .base import NO_FIELDS, NO_NODES, SignalContext


def readiness_level(session: AgentSession, now: float, levels: int) -> int:
    if session.phase is Phase.IN_TOOL:
        return min(tool.readiness.level_at(now) for tool in session.tools)
    return levels if session.phase in (Phase.WAITING, Phase.ADMITTED, Phase.READY) else 0


def next_level_change(session: AgentSession, now: float) -> float:
    """The first step after `now` of any of the session's readiness schedules (`math.inf`: none)."""
    return min((tool.readiness.next_change(now) for tool in session.tools), default=math.inf)


class Readiness:
    name = "readiness"
    node_dependent = False
    node_fields = NO_FIELDS

    def base(self, session: AgentSession, ctx: SignalContext) -> int:
        return readiness_level(session, ctx.now, ctx.settings.readiness_levels)

    def on_nodes(self, session: AgentSession, ctx: SignalContext) -> Mapping[NodeId, int]:
        return NO_NODES

    def changes_at(self, session: AgentSession, ctx: SignalContext) -> float:
        return next_level_change(session, ctx.now)
