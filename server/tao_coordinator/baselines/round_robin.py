"""Round-robin: the simplest per-request router. Admits everything at once and never plans; each call goes to the
next healthy node in name order. It is here to keep the `Policy` interface (`core/policies/base.py`) honest about
routers."""

from __future__ import annotations

from collections.abc import Mapping

from ..core.model import AgentSession, Node, NodeId
from ..core.policies.base import Router


class RoundRobinPolicy(Router):
    name = "round-robin"

    def __init__(self) -> None:
        self._turn = 0

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = sorted(nodes)
        node = ordered[self._turn % len(ordered)]
        self._turn += 1
        return node
