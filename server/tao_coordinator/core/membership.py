"""Which nodes are draining: nodes the fleet keeps watching but admits nothing on, until they hold no session.

A drained node is unhealthy for every decision (the coordinator sets `Node.healthy` false, as for a demoted node),
so no plan, fast admission or router places anything there; the sessions holding a place there outside a call wait
again at once and the plan the drain starts places them elsewhere; a call running there is never moved and ends as
usual, its session then waiting again too. A node drained with `remove` is removed by the
coordinator once no session holds a place there.

Invariants: only known nodes drain; a node that leaves the fleet (`forget`) stops draining; `state` is `active` for
every other node, known or not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal

from .model import NodeId

MembershipState = Literal["active", "draining"]


class Membership:
    def __init__(self) -> None:
        self._draining: dict[NodeId, bool] = {}
        """Each draining node, and whether it is removed once it holds no session."""

    def state(self, node: NodeId) -> MembershipState:
        return "draining" if node in self._draining else "active"

    def is_draining(self, node: NodeId) -> bool:
        return node in self._draining

    def drain(self, node: NodeId, remove: bool) -> None:
        """Start (or keep) draining `node`; once asked to remove it, it stays asked."""
        self._draining[node] = remove or self._draining.get(node, False)

    def retiring(self, holders: Mapping[NodeId, int]) -> Iterator[NodeId]:
        """The nodes drained with `remove` that hold no session now, in name order."""
        yield from sorted(node for node, remove in self._draining.items() if remove and not holders.get(node))

    def forget(self, node: NodeId) -> None:
        self._draining.pop(node, None)
