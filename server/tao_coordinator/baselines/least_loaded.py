"""Least-loaded: a per-request router on the engines' own queue lengths.

Source: `reference/routers-and-baselines.md` §5.11 (`least_loaded`, a reference choice: no single canonical
implementation; SMG ships a `least_load` policy, production-stack falls back to the lowest load):

    least_loaded(r): argmin over healthy nodes of (num_requests_running + num_requests_waiting) from the last
                     /metrics scrape, ties by kv_cache_usage_perc, then router-side in-flight count
                     (updated on dispatch, so bursts spread)

Signals: the scraped `running`, `waiting` and `kv_usage` of each `Node` (the driver sends a `NodeUpdate` per node
from a scrape before routing; `inputs = {Feed.NODE_LOAD}`), and its own dispatch counts. Last tie-break: node name.
Admits everything at once; never plans; deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.events import Event
from ..core.model import AgentSession, Node, NodeId
from ..core.policies.base import Feed, Router
from .load import InFlight


class LeastLoadedPolicy(Router):
    name = "least-loaded"
    inputs = frozenset({Feed.NODE_LOAD})

    def __init__(self) -> None:
        self.in_flight = InFlight()

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        node = min(
            nodes.values(),
            key=lambda n: (n.load.running + n.load.waiting, n.load.kv_usage, self.in_flight.load(n.id), n.id),
        )
        self.in_flight.dispatch(session.id, node.id)
        return node.id

    def observe(self, event: Event, now: float) -> None:
        self.in_flight.observe(event)
