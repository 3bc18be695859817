"""Least-loaded: a per-request router on the engines' own queue lengths.

Source: `reference/routers-and-baselines.md` §5.11 (`least_loaded`, a reference choice: no single canonical
implementation; SMG ships a `least_load` policy, production-stack falls back to the lowest load):

    least_loaded(r): argmin over healthy nodes of (num_requests_running + num_requests_waiting) from the last
                     /metrics scrape, ties by kv_cache_usage_perc, then router-side in-flight count
                     (updated on dispatch, so bursts spread)

Signals: the scraped `running`, `waiting` and `kv_usage` of each `Node` (the driver sends a `NodeUpdate` per node
from a scrape before routing; `inputs = {"node_load"}`), and its own dispatch counts. Last tie-break: node name.
Admits everything at once; never plans; deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..events import Event
from ..model import AgentSession, Node, NodeId
from ..plan import Plan
from ..snapshot import Snapshot
from .load import InFlight


class LeastLoadedPolicy:
    name = "least-loaded"
    plans = False
    inputs = frozenset({"node_load"})

    def __init__(self, *, seed: int = 0) -> None:
        self.in_flight = InFlight()

    def plan(self, snapshot: Snapshot) -> Plan:
        return Plan(())

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        node = min(
            nodes.values(),
            key=lambda n: (n.running + n.waiting, n.kv_usage, self.in_flight.load(n.id), n.id),
        )
        self.in_flight.dispatch(session.id, node.id)
        return node.id

    def observe(self, event: Event, now: float) -> None:
        self.in_flight.observe(event)
