"""The CPU block pool of vLLM's native offloading (`CPUOffloadingManager` with the LRU policy), in id runs.

Blocks are keyed by id (content hash), as on the GPU, in a `SegmentIndex`. A segment's `refs` counts pins: a load in
flight reading it, or a store in flight writing it (vLLM's ref_cnt > 0 and ref_cnt = −1). Pinned blocks are never
evicted, and a lookup whose hit reaches a pinned block is deferred (vLLM's HIT_PENDING and `_chunks_being_loaded`).
Free segments are in LRU order; inside one the last id is evicted first, so a request's tail goes before its head
(vLLM ranks keys (request, −position)).

Recency: an offer (store or dedup) and a load refresh the blocks they touch, tail first so the head ends most recent;
`touch` does the same when a request finishes (vLLM's `on_request_finished`).

Stores are all-or-nothing per offer: blocks already present are skipped (dedup) and protected; if the missing ones
cannot be made room for by evicting unpinned, unoffered blocks, the offer fails and nothing changes.

Invariants: block_count ≤ capacity; the index's free blocks (unpinned, evictable) are exactly its LRU list
(`SegmentIndex.check`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ...core.model import BlockRun
from .segments import SegmentIndex


class CpuPool:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._index = SegmentIndex()

    @property
    def cached_blocks(self) -> int:
        return self._index.block_count

    def runs(self) -> list[BlockRun]:
        return self._index.runs()

    def lookup(self, runs: Iterable[BlockRun]) -> int | None:
        """Leading blocks of `runs` present in the pool; None if that hit reaches a pinned block (retry later)."""
        matched = 0
        for first, count in runs:
            position, stop = first, first + count
            while position < stop:
                segment = self._index.find(position)
                if segment is None:
                    return matched
                if segment.refs:
                    return None
                take = min(segment.end, stop) - position
                matched += take
                position += take
        return matched

    def pin(self, runs: Iterable[BlockRun]) -> None:
        for first, count in runs:
            self._index.acquire(first, first + count)

    def unpin(self, runs: list[BlockRun]) -> None:
        """Drop one pin; blocks left unpinned become the most recent, the runs' head last (most recent of all)."""
        for first, count in reversed(runs):
            self._index.release(first, first + count)

    def touch(self, runs: list[BlockRun]) -> None:
        """Make the unpinned blocks of `runs` the most recent (head last)."""
        for first, count in reversed(runs):
            self._index.refresh(first, first + count)

    def offer(self, runs: list[BlockRun]) -> tuple[list[BlockRun], list[BlockRun]] | None:
        """Store the blocks of `runs` not yet present, pinned until `unpin`; present ones are refreshed.

        Returns (runs now being stored, runs evicted to make room), or None when there is no room (nothing changed).
        """
        present: list[BlockRun] = []
        missing: list[BlockRun] = []
        for first, count in runs:
            position, stop = first, first + count
            for segment in self._index.overlapping(first, stop):
                start = max(segment.start, position)
                if start > position:
                    missing.append((position, start - position))
                end = min(segment.end, stop)
                present.append((start, end - start))
                position = end
            if position < stop:
                missing.append((position, stop - position))
        needed = sum(count for _, count in missing) - (self.capacity - self._index.block_count)
        self.pin(present)  # protects the offer's own blocks from its evictions
        if needed > self._index.free_blocks:
            self.unpin(present)
            return None
        evicted = self._index.evict(needed) if needed > 0 else []
        for first, count in missing:
            self._index.insert(first, first + count, refs=1)
        self.unpin(present)
        return missing, evicted

    def clear(self) -> None:
        self._index.clear()

    def check_invariants(self) -> None:
        self._index.check()
        assert self._index.block_count <= self.capacity, "CPU pool over capacity"
