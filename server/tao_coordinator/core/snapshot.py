"""Snapshots: the frozen view of the fleet a plan is computed from, and the job that carries one.

A snapshot shares the immutable `AgentSession` and `Node` objects of the live state, so taking one costs two tuple
copies; nothing in it can change while a plan is solved off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .model import AgentSession, Node
from .plan import Plan
from .settings import CoreSettings


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    sessions: tuple[AgentSession, ...]
    nodes: tuple[Node, ...]
    settings: CoreSettings


@dataclass(frozen=True)
class PlanJob:
    """A snapshot waiting to be solved. `solve()` is pure, so it may run in a worker thread."""

    id: int
    snapshot: Snapshot
    solver: Callable[[Snapshot], Plan] = field(repr=False)

    def solve(self) -> Plan:
        return self.solver(self.snapshot)
