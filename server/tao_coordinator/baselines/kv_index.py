"""What each node holds, as its KV events tell it: the exact prefix indexes of Dynamo, llm-d-precise and cost-model.

A `KvCacheEvent` names a node and a medium (`"GPU"`, `"CPU"`, … as the engine publishes them). Each router files
media under its own keys (`key`): Dynamo by storage tier, llm-d by the lower-cased name, cost-model by the name as
sent. One `RunSet` per (node, key), created when the node first reports that key: `BlockStored` adds ids,
`BlockRemoved` removes them from that key only, `AllBlocksCleared` empties it (`clears`; llm-d's index ignores it).

Invariants: an index exists for a (node, key) only once an event reported it; no event touches another key's index.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.events import KvCacheEvent
from ..core.model import BlockRun, NodeId
from .runs import RunSet


def _as_sent(medium: str) -> str:
    return medium


class KvIndex:
    def __init__(self, key: Callable[[str], str] = _as_sent, *, clears: bool = True) -> None:
        self.key = key
        self.clears = clears
        self.sets: dict[tuple[NodeId, str], RunSet] = {}

    def observe(self, event: KvCacheEvent) -> None:
        index = self.sets.setdefault((event.node_id, self.key(event.medium)), RunSet())
        if event.cleared and self.clears:
            index.clear()
        index.discard(event.removed)
        index.add(event.stored)

    def get(self, node_id: NodeId, key: str) -> RunSet | None:
        return self.sets.get((node_id, key))

    def prefix(self, node_id: NodeId, key: str, runs: tuple[BlockRun, ...]) -> int:
        """Leading ids of `runs` the node holds under `key` (0 without an index there)."""
        index = self.sets.get((node_id, key))
        return index.prefix(runs) if index is not None else 0

    def on(self, node_id: NodeId) -> dict[str, RunSet]:
        """The node's indexes by key, in the order the node first reported them."""
        return {key: index for (node, key), index in self.sets.items() if node == node_id}
