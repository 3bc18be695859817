"""The interface every scheduling policy implements: TAO, its ablations and the per-request baselines alike.

A policy answers two questions. `plan(snapshot)`: which sessions hold a place on which node (admission control);
it must be pure, because the live driver runs it in a worker thread on a frozen snapshot. `route(session, nodes,
now)`: where an LLM call goes right now — TAO answers with the session's place (None: wait for a plan), a
per-request router picks a node for every call and never plans (`plans = False`). `observe` sees every accepted
event, for routers that keep load or cache estimates; it runs on the event loop, never concurrently with `route`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ..events import Event
from ..model import Node, NodeId, Session
from ..plan import Plan
from ..snapshot import Snapshot


class Policy(Protocol):
    name: str
    plans: bool
    """True: sessions wait for the planner's admission. False: every call is routed at once by `route`."""

    def plan(self, snapshot: Snapshot) -> Plan: ...

    def route(self, session: Session, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        """`nodes` holds the healthy nodes only."""
        ...

    def observe(self, event: Event, now: float) -> None: ...
