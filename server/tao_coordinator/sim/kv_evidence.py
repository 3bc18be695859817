"""Cache evidence from the nodes' KV events, for the simulator's coordinator (`tao sim --kv-events`).

The live coordinator reads each node's KV events when the fleet configuration names their endpoints: vLLM ≥ 0.30
copies a request's session id into `BlockStored`, `fleet/kv_index.py` counts per session the blocks each node holds,
and every `kv_flush_interval_s` the counts that moved reach the core as `CacheResidency` events — the exact residency
cache credit starts from (docs/design.md#cache-credit). This feed does the same for simulated nodes with the same
index: each node's block events become the wire events a subscriber decodes (one hash per block id), and `flush`
returns the residency of the sessions the coordinator knows whose count moved, at most once per interval.

Invariants: per node, the index holds exactly the blocks the node's events say are cached (the simulated pool's
ids); `flush` yields nothing before `interval_s` has passed since the last one that was due; a session unknown to
the coordinator (closed, or never registered) gets no event, as in the live fleet watch.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from ..core.events import CacheResidency
from ..fleet.kv_index import NodeKvIndex
from ..kv_wire import Cleared, KvWireEvent, Removed, Stored
from .node import BlockEvent, BlockRemoved, BlockStored
from .prompt import ids_of_runs

DEFAULT_FLUSH_INTERVAL_S = 0.5
"""The live fleet watch's default `kv_flush_interval_s` (`config.py`)."""


def wire_event(event: BlockEvent) -> KvWireEvent:
    """`event` as a KV-event subscriber decodes it from vLLM: one hash per block."""
    if isinstance(event, BlockStored):
        return Stored(tuple(ids_of_runs(event.block_runs)), event.block_size, event.session_id, event.medium)
    if isinstance(event, BlockRemoved):
        return Removed(tuple(ids_of_runs(event.block_runs)), event.medium)
    return Cleared()


class KvEvidenceFeed:
    def __init__(self, nodes: Iterable[str], interval_s: float = DEFAULT_FLUSH_INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s: must be positive, got {interval_s}")
        self.interval_s = interval_s
        self._indexes = {node_id: NodeKvIndex() for node_id in nodes}
        self._flushed_at: float | None = None

    def observe(self, node_id: str, event: BlockEvent) -> None:
        self._indexes[node_id].apply(wire_event(event))

    def residents(self, node_id: str) -> dict[str, int]:
        """Tokens per session resident in `node_id`'s HBM, as its events tell it."""
        return self._indexes[node_id].residents()

    def flush(self, now: float, known: Container[str]) -> list[CacheResidency]:
        """The residency that moved since the last flush, for sessions in `known`; empty while the interval runs."""
        if self._flushed_at is not None and now - self._flushed_at < self.interval_s:
            return []
        self._flushed_at = now
        return [
            CacheResidency(node_id, session_id, tokens, tier)
            for node_id, index in self._indexes.items()
            for (session_id, tier), tokens in sorted(index.take_changed().items())
            if session_id in known
        ]
