"""Readiness r(i) ∈ {0, 1}: will the session want the LLM within the horizon H (design §4)?

r = 1 when the session is not in a tool (new, ready, admitted: it is about to call), or when every running tool is
predicted to return within H, or a prediction has expired (elapsed past it; `Coordinator` re-estimates it at most
every `reestimate_interval_s`). r = 0 otherwise, and for sessions inside an LLM call (they are not candidates).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model import NodeId, Phase, Session
from .base import NO_NODES, SignalContext


def is_ready(session: Session, now: float, horizon_s: float) -> bool:
    if session.phase is Phase.IN_TOOL:
        return max(tool.predicted_end for tool in session.tools) - now <= horizon_s
    return session.phase in (Phase.WAITING, Phase.ADMITTED, Phase.READY)


def next_flip(session: Session, now: float, horizon_s: float) -> float | None:
    """When an in-tool session becomes ready, if it is not yet."""
    if session.phase is not Phase.IN_TOOL:
        return None
    at = max(tool.predicted_end for tool in session.tools) - horizon_s
    return at if at > now else None


class Readiness:
    name = "readiness"
    node_dependent = False

    def base(self, session: Session, ctx: SignalContext) -> int:
        return int(is_ready(session, ctx.now, ctx.settings.readiness_horizon_s))

    def on_nodes(self, session: Session, ctx: SignalContext) -> Mapping[NodeId, int]:
        return NO_NODES
