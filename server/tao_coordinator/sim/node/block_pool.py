"""The KV block pool of one vLLM node (vLLM v1 `BlockPool` semantics, §7.3), counted in blocks and id runs.

Physical blocks: `capacity = num_gpu_blocks − 1` (block 0 is the null block). Each is held by running requests, or
free. Free blocks are either uncached (no id: never used, a freed partial last block, or a private duplicate) or
cached (indexed by id, in the LRU list). Allocation takes uncached blocks first, then evicts cached ones in LRU order,
lazily — a cached block only disappears when its physical block is reused, and that is when `BlockRemoved` is due.
A prefix hit on a free cached block takes it out of the free list (vLLM's `touch`).

Block ids are prefix-chained (see `prompt.py`), so the cache is keyed by id alone. When a request completes a block
whose id is already indexed (two requests computed the same prefix concurrently), its copy is *private*: it holds a
physical block, is not indexed, and returns to the uncached pool when freed (vLLM would index both copies; the
lookup outcome is the same while both exist).

The cached ids, their holders and their LRU order are a `SegmentIndex` (`segments.py`), whose free blocks are the
free cached ones.

Invariants: free_uncached + free cached + used == capacity, where used counts a shared block once; every holder of
a segment holds all of its ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...core.model import BlockRun
from .segments import SegmentIndex


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    blocks: int
    """Leading blocks of the queried runs that are cached (the lookup stops at the first miss)."""
    evictable: int
    """How many of those are free (ref count 0): acquiring them uses free capacity."""


class HeldRun:
    """Part of a request's block table: ids first … first+count−1, indexed (shared) or private copies."""

    __slots__ = ("count", "first", "private")

    def __init__(self, first: int, count: int, private: bool) -> None:
        self.first = first
        self.count = count
        self.private = private

    @property
    def end(self) -> int:
        return self.first + self.count


class BlockPool:
    def __init__(self, num_gpu_blocks: int) -> None:
        if num_gpu_blocks < 2:
            raise ValueError("num_gpu_blocks: need at least 2 (block 0 is the null block)")
        self.capacity = num_gpu_blocks - 1
        self._index = SegmentIndex()
        self._free_uncached = self.capacity

    @property
    def free_blocks(self) -> int:
        return self._free_uncached + self._index.free_blocks

    @property
    def used_blocks(self) -> int:
        return self.capacity - self.free_blocks

    @property
    def cached_blocks(self) -> int:
        return self._index.block_count

    @property
    def usage(self) -> float:
        """vLLM's kv_cache_usage_perc: held blocks over num_gpu_blocks − 1; cached free blocks count as free."""
        return self.used_blocks / self.capacity

    def cached_runs(self) -> list[BlockRun]:
        """Every indexed id, as runs in id order (adjacent segments are not merged)."""
        return self._index.runs()

    def match(self, runs: Iterable[BlockRun], limit: int) -> PrefixMatch:
        matched = evictable = 0
        for first, count in runs:
            position, stop = first, first + min(count, limit - matched)
            while position < stop:
                segment = self._index.find(position)
                if segment is None:
                    return PrefixMatch(matched, evictable)
                take = min(segment.end, stop) - position
                matched += take
                if segment.refs == 0:
                    evictable += take
                position += take
            if matched >= limit or stop < first + count:
                break
        return PrefixMatch(matched, evictable)

    def acquire(self, runs: Iterable[BlockRun]) -> None:
        """Add a holder to cached blocks (a prefix hit); free ones leave the LRU list."""
        for first, count in runs:
            self._index.acquire(first, first + count)

    def allocate(self, count: int) -> list[BlockRun]:
        """Hand out `count` free blocks; return the runs of cached ids evicted to make them."""
        if count > self.free_blocks:
            raise ValueError(f"cannot allocate {count} blocks, only {self.free_blocks} free")
        from_uncached = min(count, self._free_uncached)
        self._free_uncached -= from_uncached
        return self._index.evict(count - from_uncached) if count > from_uncached else []

    def commit(self, runs: Iterable[BlockRun], previous_id: int | None) -> list[HeldRun]:
        """Index newly full blocks (already allocated) held by one request; ids already indexed become private.

        `previous_id` is the id of the request's block just before the first one, if the request holds it indexed;
        a segment that only this request holds is then extended instead of a new one being created.
        """
        pieces: list[HeldRun] = []
        for first, count in runs:
            position, stop = first, first + count
            for segment in self._index.overlapping(first, stop):
                start = max(segment.start, position)
                if start > position:
                    pieces.append(self._index_new(position, start, previous_id))
                end = min(segment.end, stop)
                pieces.append(HeldRun(start, end - start, private=True))
                position, previous_id = end, None
            if position < stop:
                pieces.append(self._index_new(position, stop, previous_id))
            previous_id = None if pieces[-1].private else stop - 1
        return pieces

    def _index_new(self, start: int, end: int, previous_id: int | None) -> HeldRun:
        if previous_id == start - 1:
            before = self._index.find(start - 1)
            if before is not None and before.end == start and before.refs == 1:
                self._index.extend(before, end)
                return HeldRun(start, end - start, private=False)
        self._index.insert(start, end, refs=1)
        return HeldRun(start, end - start, private=False)

    def release(self, held: Sequence[HeldRun], uncommitted: int) -> None:
        """Drop one holder from a request's blocks, deepest first; blocks nobody holds any more become free."""
        self._free_uncached += uncommitted
        for run in reversed(held):
            if run.private:
                self._free_uncached += run.count
            else:
                self._index.release(run.first, run.end)

    def reset(self) -> bool:
        """Forget every cached id (vLLM `reset_prefix_cache`); refused while any block is held."""
        if self.used_blocks:
            return False
        self._index.clear()
        self._free_uncached = self.capacity
        return True

    def check_invariants(self) -> None:
        """Assert the pool's invariants (O(segments); for tests and debugging)."""
        self._index.check()
        assert self._free_uncached >= 0 and self.free_blocks <= self.capacity, "free count out of range"
