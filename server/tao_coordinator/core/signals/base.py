"""The interface every signal implements, and the context it is evaluated in.

A signal maps (session, node) to a non-negative integer, one component of the lexicographic value. Most signals do
not depend on the node; the few that do (cache credit, stability) differ from their `base` on a handful of nodes
only, so a signal reports its node-independent `base` and the sparse exceptions `on_nodes`. Building a problem thus
costs O(sessions + evidence), not O(sessions × nodes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..model import Node, NodeId, Session
from ..settings import CoreSettings


@dataclass(frozen=True, slots=True)
class SignalContext:
    now: float
    settings: CoreSettings
    nodes: Mapping[NodeId, Node]
    """Healthy nodes only: a signal never credits a node that cannot take work."""


class Signal(Protocol):
    name: str
    node_dependent: bool
    """False when `on_nodes` is always empty; the value model then never calls it."""

    def base(self, session: Session, ctx: SignalContext) -> int:
        """The value on any node not listed by `on_nodes`."""
        ...

    def on_nodes(self, session: Session, ctx: SignalContext) -> Mapping[NodeId, int]:
        """Nodes where the value differs from `base`, with that value."""
        ...


NO_NODES: Mapping[NodeId, int] = {}
