"""The interface every signal implements, and the context it is evaluated in.

A signal maps (session, node) to a non-negative integer, one component of the lexicographic value. Most signals do
not depend on the node; the few that do (cache credit, tier credit, token time, held footprint, stability) differ
from their `base` on a handful of nodes only, so a signal reports its node-independent `base` and the sparse
exceptions `on_nodes`. Building a problem thus costs O(sessions + evidence), not O(sessions × nodes).

A signal's components are a step function of time for a fixed session and fixed nodes: `changes_at` names the next
step, and `node_fields` the node attributes it reads besides membership of the context. The planner keeps a
session's value until either changes (`policies/problem.py`), so both must be complete: a signal that reads a node
field it does not list, or changes before the time it names, makes plans from stale values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..model import AgentSession, Node, NodeId
from ..settings import CoreSettings


@dataclass(frozen=True, slots=True)
class SignalContext:
    now: float
    settings: CoreSettings
    nodes: Mapping[NodeId, Node]
    """Healthy nodes only: a signal never credits a node that cannot take work."""
    workflows: Relatives | None = None
    """The snapshot's sessions by workflow, for the one signal that reads other sessions (workflow affinity in the
    cache credit, `workflow.py`); None where no snapshot is at hand: no session then gains from its relatives."""


class Relatives(Protocol):
    """What the cache credit asks of the snapshot's sessions by workflow (`workflow.py`'s `WorkflowIndex`)."""

    def with_relatives(
        self,
        session: AgentSession,
        ctx: SignalContext,
        credits: dict[NodeId, int],
        earliest: float,
        *,
        decay: bool = True,
    ) -> tuple[dict[NodeId, int], float]:
        """`credits` (the session's own, in units) raised to what its relatives' caches give it."""
        ...


class Signal(Protocol):
    name: str
    node_dependent: bool
    """False when `on_nodes` is always empty; the value model then never calls it."""
    node_fields: tuple[str, ...]
    """The `Node` attributes the signal reads (beyond whether the node is in the context)."""

    def base(self, session: AgentSession, ctx: SignalContext) -> int:
        """The value on any node not listed by `on_nodes`."""
        ...

    def on_nodes(self, session: AgentSession, ctx: SignalContext) -> Mapping[NodeId, int]:
        """Nodes where the value differs from `base`, with that value."""
        ...

    def changes_at(self, session: AgentSession, ctx: SignalContext) -> float:
        """The earliest time after `ctx.now` at which `base` or `on_nodes` may differ, the session and the nodes
        unchanged; `math.inf` when only a change of either can change them."""
        ...


NO_NODES: Mapping[NodeId, int] = {}

NO_FIELDS: tuple[str, ...] = ()


class NodeCredits(ABC):
    """A signal that is 0 everywhere but on the nodes `compute` names. The value model asks `on_nodes` and then
    `changes_at` of one session in one context; both come from one `compute`, kept for that (session, context) pair."""

    node_dependent = True

    def __init__(self) -> None:
        self._last: tuple[AgentSession, SignalContext, dict[NodeId, int], float] | None = None

    @abstractmethod
    def compute(self, session: AgentSession, ctx: SignalContext) -> tuple[dict[NodeId, int], float]:
        """The nodes' values and when the first of them changes."""

    def base(self, session: AgentSession, ctx: SignalContext) -> int:
        return 0

    def on_nodes(self, session: AgentSession, ctx: SignalContext) -> Mapping[NodeId, int]:
        return self._computed(session, ctx)[0]

    def changes_at(self, session: AgentSession, ctx: SignalContext) -> float:
        return self._computed(session, ctx)[1]

    def _computed(self, session: AgentSession, ctx: SignalContext) -> tuple[dict[NodeId, int], float]:
        last = self._last
        if last is not None and last[0] is session and last[1] is ctx:
            return last[2], last[3]
        values, until = self.compute(session, ctx)
        self._last = (session, ctx, values, until)
        return values, until
