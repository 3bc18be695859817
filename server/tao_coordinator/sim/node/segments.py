"""Cached block ids as segments of consecutive ids, plus the LRU list of the free ones: the eviction machinery of
both of a node's block pools (`block_pool.py` for HBM, `cpu_pool.py` for the CPU tier).

A segment is a half-open id range [start, end) whose blocks share one state: `refs` holders (running requests, or
pins), or none (refs == 0: free but still cached, an eviction candidate). Segments come from runs of one request's
block table, so consecutive ids inside a segment are parent and child; the index never merges segments of different
origins.

The LRU list orders free segments by eviction priority (head = next victim). Inside a free segment the last id goes
first: vLLM frees a request's blocks deepest-first to the tail of its free queue, so a prefix outlives its extensions.
`acquire` takes blocks out of the list, `release` (deepest segment first) and `refresh` put them at its newest end,
`evict` shrinks victims from the oldest end.

Invariants (checked by `check`):
* segments are non-empty and pairwise disjoint; `_starts` is sorted and aligned with `_segments`;
* a segment is linked in the LRU list iff refs == 0;
* `block_count` is the total size of all segments, `free_blocks` that of the free ones.
Cost: find/insert/remove are a bisection plus a list insert (memmove) — O(log n) comparisons, no per-block work.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class Segment:
    __slots__ = ("end", "newer", "older", "refs", "start")

    def __init__(self, start: int, end: int, refs: int) -> None:
        self.start = start
        self.end = end
        self.refs = refs
        self.older: Segment = self
        self.newer: Segment = self

    @property
    def size(self) -> int:
        return self.end - self.start


class SegmentIndex:
    def __init__(self) -> None:
        self._starts: list[int] = []
        self._segments: list[Segment] = []
        self._lru = Segment(0, 0, -1)  # sentinel: _lru.newer is the oldest free segment, _lru.older the newest
        self.block_count = 0
        self.free_blocks = 0

    def __len__(self) -> int:
        return len(self._segments)

    def find(self, block_id: int) -> Segment | None:
        i = bisect_right(self._starts, block_id) - 1
        if i >= 0 and self._segments[i].end > block_id:
            return self._segments[i]
        return None

    def insert(self, start: int, end: int, refs: int) -> Segment:
        segment = Segment(start, end, refs)
        i = bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._segments.insert(i, segment)
        self.block_count += end - start
        if refs == 0:
            self._link_before(segment, self._lru)
            self.free_blocks += end - start
        return segment

    def remove(self, segment: Segment) -> None:
        i = bisect_left(self._starts, segment.start)
        del self._starts[i]
        del self._segments[i]
        self.block_count -= segment.size
        if segment.refs == 0:
            self._unlink(segment)
            self.free_blocks -= segment.size

    def extend(self, segment: Segment, new_end: int) -> None:
        self.block_count += new_end - segment.end
        if segment.refs == 0:
            self.free_blocks += new_end - segment.end
        segment.end = new_end

    def shrink_from_end(self, segment: Segment, count: int) -> None:
        segment.end -= count
        self.block_count -= count
        if segment.refs == 0:
            self.free_blocks -= count
        if segment.size == 0:
            self.remove(segment)

    def split_at(self, block_id: int) -> None:
        """Make `block_id` the first id of its segment (no-op if it already is, or is not cached)."""
        segment = self.find(block_id)
        if segment is None or segment.start == block_id:
            return
        deeper = Segment(block_id, segment.end, segment.refs)
        segment.end = block_id
        i = bisect_left(self._starts, block_id)
        self._starts.insert(i, block_id)
        self._segments.insert(i, deeper)
        if segment.refs == 0:
            self._link_before(deeper, segment)

    def overlapping(self, lo: int, hi: int) -> list[Segment]:
        """Segments that intersect [lo, hi), in id order, without splitting them."""
        i = max(0, bisect_right(self._starts, lo) - 1)
        found: list[Segment] = []
        while i < len(self._segments) and self._starts[i] < hi:
            if self._segments[i].end > lo:
                found.append(self._segments[i])
            i += 1
        return found

    def covering(self, lo: int, hi: int) -> list[Segment]:
        """Segments inside [lo, hi) after splitting at both ends, in id order."""
        self.split_at(lo)
        self.split_at(hi)
        i = bisect_left(self._starts, lo)
        j = bisect_left(self._starts, hi, lo=i)
        return self._segments[i:j]

    def runs(self) -> list[tuple[int, int]]:
        return [(segment.start, segment.size) for segment in self._segments]

    def clear(self) -> None:
        self._starts.clear()
        self._segments.clear()
        self._lru.newer = self._lru.older = self._lru
        self.block_count = 0
        self.free_blocks = 0

    # Holders and the LRU list of free segments.

    def acquire(self, lo: int, hi: int) -> None:
        """Add a holder to every cached id in [lo, hi); free ones leave the LRU list."""
        for segment in self.covering(lo, hi):
            if segment.refs == 0:
                self._unlink(segment)
                self.free_blocks -= segment.end - segment.start
            segment.refs += 1

    def release(self, lo: int, hi: int) -> None:
        """Drop one holder from every cached id in [lo, hi), deepest first; the ids nobody holds any more become the
        most recent free ones (`lo`'s segment newest of all)."""
        lru = self._lru
        for segment in reversed(self.covering(lo, hi)):
            segment.refs -= 1
            if segment.refs == 0:
                self._link_before(segment, lru)
                self.free_blocks += segment.end - segment.start

    def refresh(self, lo: int, hi: int) -> None:
        """Make the free cached ids in [lo, hi) the most recent, deepest first (`lo`'s segment newest of all)."""
        lru = self._lru
        for segment in reversed(self.covering(lo, hi)):
            if segment.refs == 0:
                self._unlink(segment)
                self._link_before(segment, lru)

    def evict(self, count: int) -> list[tuple[int, int]]:
        """Forget `count` free ids, the oldest segment first and each from its end; return them as (first, count)
        runs in eviction order."""
        assert count <= self.free_blocks, f"cannot evict {count} ids, only {self.free_blocks} free"
        evicted: list[tuple[int, int]] = []
        while count > 0:
            victim = self._lru.newer
            take = min(count, victim.end - victim.start)
            evicted.append((victim.end - take, take))
            self.shrink_from_end(victim, take)
            count -= take
        return evicted

    def _link_before(self, segment: Segment, anchor: Segment) -> None:
        segment.older = anchor.older
        segment.newer = anchor
        anchor.older.newer = segment
        anchor.older = segment

    @staticmethod
    def _unlink(segment: Segment) -> None:
        segment.older.newer = segment.newer
        segment.newer.older = segment.older
        segment.older = segment.newer = segment

    def check(self) -> None:
        """Assert the invariants (O(segments); for tests and debugging)."""
        assert self._starts == [s.start for s in self._segments], "starts out of sync"
        assert all(a.end <= b.start for a, b in zip(self._segments, self._segments[1:], strict=False)), "overlap"
        assert all(s.size > 0 and s.refs >= 0 for s in self._segments), "empty segment or negative refs"
        assert self.block_count == sum(s.size for s in self._segments), "block_count drifted"
        linked: list[Segment] = []
        node = self._lru.newer
        while node is not self._lru:
            linked.append(node)
            node = node.newer
        free = [s for s in self._segments if s.refs == 0]
        assert len(linked) == len(free) and {id(s) for s in linked} == {id(s) for s in free}, "LRU out of sync"
        assert self.free_blocks == sum(s.size for s in free), "free_blocks drifted"
