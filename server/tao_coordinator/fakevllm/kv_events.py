"""From the node model's logical KV events (block-id runs) to vLLM's per-block events (hashes and token ids).

The server registers every request's token sequence (prompt, then the answer it will generate), the chained hashes
of its cacheable blocks and the ids the registry gave them, before submitting it. A node `BlockStored` names a
request and the index of its first block, which locates the hashes and tokens; a `BlockRemoved` names ids, whose
hashes the registry still holds (they are cached until that very event).

One wire batch per engine step, as vLLM publishes one per step that produced events: events of equal time form a
batch, in the node's order (GPU events first, then the CPU tier's, as the node and vLLM both order them). vLLM emits
one `BlockRemoved` per evicted block and one `BlockStored` per stored run of a request; so does this translation.
The CPU tier's events (medium "CPU") follow vLLM 0.33's default offloading payload: one `BlockStored` per chunk (one
GPU block, `blocks_per_chunk` 1) with only the hash — the same hash the GPU events used for that block — and one
`BlockRemoved` per eviction batch with every evicted chunk's hash. The registry is kept up to date whether or not
anyone publishes the events.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..kv_wire import MEDIUM_CPU, SPEC_FULL_ATTENTION, Cleared, KvWireEvent, Removed, Stored, cpu_stored
from ..sim.node import AllBlocksCleared, BlockRemoved, BlockStored, NodeEvent
from ..sim.prompt import ids_of_runs
from .block_ids import BlockIdRegistry
from .hashing import event_extra_keys, external

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SequenceRecord:
    """What the server knows of a submitted request's sequence."""

    tokens: list[int]
    """Prompt tokens followed by every output token the request will generate."""
    hashes: list[bytes]
    """Chained hashes of the sequence's cacheable full blocks."""
    ids: list[int]
    """The registry's ids for `hashes`, position by position."""
    cache_salt: str | None


class KvTranslator:
    def __init__(self, registry: BlockIdRegistry, block_size: int, *, wire: bool) -> None:
        self._registry = registry
        self._block_size = block_size
        self._wire = wire
        self._records: dict[str, SequenceRecord] = {}

    def register(self, request_id: str, record: SequenceRecord) -> None:
        self._records[request_id] = record

    def forget(self, request_id: str) -> None:
        record = self._records.pop(request_id, None)
        if record is not None:
            self._registry.release(record.ids)

    def translate(self, events: Sequence[NodeEvent]) -> list[tuple[float, list[KvWireEvent]]]:
        """Wire batches (step time, events) for the KV events among `events`; empty unless publishing."""
        batches: list[tuple[float, list[KvWireEvent]]] = []
        for event in events:
            wire = self._translate_one(event)
            if not wire:
                continue
            if batches and batches[-1][0] == event.time:
                batches[-1][1].extend(wire)
            else:
                batches.append((event.time, wire))
        return batches

    def _translate_one(self, event: NodeEvent) -> list[KvWireEvent]:
        if isinstance(event, BlockStored) and event.medium == MEDIUM_CPU:
            hashes = [self._registry.cpu_stored(block_id) for block_id in ids_of_runs(event.block_runs)]
            return [cpu_stored(external(block_hash)) for block_hash in hashes] if self._wire else []
        if isinstance(event, BlockRemoved) and event.medium == MEDIUM_CPU:
            hashes = [self._registry.cpu_removed(block_id) for block_id in ids_of_runs(event.block_runs)]
            return [Removed(tuple(external(h) for h in hashes), MEDIUM_CPU)] if self._wire and hashes else []
        if isinstance(event, BlockStored):
            return self._stored(event)
        if isinstance(event, BlockRemoved):
            hashes = [self._registry.removed(block_id) for block_id in ids_of_runs(event.block_runs)]
            return [Removed((external(block_hash),)) for block_hash in hashes] if self._wire else []
        if isinstance(event, AllBlocksCleared):
            self._registry.cleared()
            return [Cleared()] if self._wire else []
        return []

    def _stored(self, event: BlockStored) -> list[KvWireEvent]:
        record = self._records[event.request_id]
        first, ids = event.first_block_index, list(ids_of_runs(event.block_runs))
        hashes = record.hashes[first : first + len(ids)]
        for block_id, block_hash in zip(ids, hashes, strict=True):
            self._registry.stored(block_id, block_hash)
        if not self._wire:
            return []
        size = self._block_size
        parent = external(record.hashes[first - 1]) if first else None
        stored = Stored(
            hashes=tuple(external(block_hash) for block_hash in hashes),
            block_size=size,
            session_id=event.session_id,
            parent_hash=parent,
            token_ids=record.tokens[first * size : (first + len(ids)) * size],
            extra_keys=event_extra_keys(record.cache_salt, first, len(ids)),
            spec_kind=SPEC_FULL_ATTENTION,
        )
        return [stored]
