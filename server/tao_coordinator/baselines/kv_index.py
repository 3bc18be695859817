"""The prefix indexes of the cache-aware routers, per node: exact ones fed by KV events (`KvIndex`: Dynamo,
llm-d-precise, cost-model), approximate ones learnt from the router's own decisions (`RoutedIndex`: SGLang, llm-d).

A `KvCacheEvent` names a node and a medium (`"GPU"`, `"CPU"`, … as the engine publishes them). Each router files
media under its own keys (`key`): Dynamo by storage tier, llm-d by the lower-cased name, cost-model by the name as
sent. One `RunSet` per (node, key), created when the node first reports that key: `BlockStored` adds ids,
`BlockRemoved` removes them from that key only, `AllBlocksCleared` empties it (`clears`; llm-d's index ignores it).

`RoutedIndex` knows only where the router sent what: each route stamps the prompt's blocks on the chosen node with
the next stamp, so the index's LRU order is the order of the routes (its sets are `RunSet(lru=True)`, trimmed by the
router's own eviction rule).

Invariants: an index exists for a (node, key) only once an event reported it; no event touches another key's index;
a `RoutedIndex` set exists for a node only once a route chose it, and stamps grow with every route.
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


class RoutedIndex:
    def __init__(self) -> None:
        self.sets: dict[NodeId, RunSet] = {}
        self.stamp = 0

    def routed(self, node_id: NodeId, runs: tuple[BlockRun, ...]) -> RunSet:
        """Stamp `runs` on the node a route chose; the node's set, for the router to trim."""
        self.stamp += 1
        index = self.sets.setdefault(node_id, RunSet(lru=True))
        index.touch(runs, self.stamp)
        return index

    def get(self, node_id: NodeId) -> RunSet | None:
        return self.sets.get(node_id)
