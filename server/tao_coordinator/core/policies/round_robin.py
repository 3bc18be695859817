"""Round-robin: the simplest per-request router. Admits everything at once and never plans; each call goes to the
next healthy node in name order. It is here to keep the `Policy` interface honest about routers."""

from __future__ import annotations

from collections.abc import Mapping

from ..events import Event
from ..model import AgentSession, Node, NodeId
from ..plan import Plan
from ..snapshot import Snapshot


class RoundRobinPolicy:
    name = "round-robin"
    plans = False

    def __init__(self) -> None:
        self._turn = 0

    def plan(self, snapshot: Snapshot) -> Plan:
        return Plan(())

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = sorted(nodes)
        node = ordered[self._turn % len(ordered)]
        self._turn += 1
        return node

    def observe(self, event: Event, now: float) -> None:
        return None
