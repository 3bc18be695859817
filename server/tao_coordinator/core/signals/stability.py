"""Stability: 1 on the node where the session holds its place now, 0 elsewhere.

Last in TAO's order, it only breaks ties: among plans equal on every component above it, the one that moves
the fewest sessions wins, so equal-valued alternatives never cause an interruption followed by a re-admission.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..model import AgentSession, NodeId
from .base import NO_FIELDS, NO_NODES, SignalContext


class Stability:
    name = "stability"
    node_dependent = True
    node_fields = NO_FIELDS

    def base(self, session: AgentSession, ctx: SignalContext) -> int:
        return 0

    def on_nodes(self, session: AgentSession, ctx: SignalContext) -> Mapping[NodeId, int]:
        if session.node is None or session.node not in ctx.nodes:
            return NO_NODES
        return {session.node: 1}

    def changes_at(self, session: AgentSession, ctx: SignalContext) -> float:
        return math.inf
