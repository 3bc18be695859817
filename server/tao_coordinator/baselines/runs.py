"""Sets of KV block ids kept as disjoint runs: the prefix indexes of the cache-aware baselines.

Block ids are prefix-chained (`BlockRun`, `core/model.py`), so "node b holds the first k blocks of this prompt" is
the same as "the prompt's first k ids are all in b's set": a set of ids answers what a radix tree over blocks
answers, without the tree. Ids arrive as a few long runs per prompt, so the set stores maximal segments
`[start, end)`, each with the stamp of its last use; neighbours merge only when their stamps are equal.

`RunSet` serves both kinds of index the baselines keep (`kv_index.py`): exact ones fed by KV events (`add` on
BlockStored, `discard` on BlockRemoved, stamps unused) and approximate ones fed by the router's own decisions with
LRU trimming (SGLang, llm-d: `touch` stamps what a route inserted, `evict_to` trims the least recently used segments
from their end, the deepest blocks of a path first, as a radix tree evicts leaves first).

The functions below read a prompt's block sequence as runs: its length (`block_count`), a cut of its head (`skip`,
`truncate`), one id by position (`block_at`).

Invariants: segments are non-empty, disjoint and sorted by start; `size` is the sum of their lengths; every live
segment has an entry `(stamp, start)` in the heap (stale entries are skipped).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable

from ..core.model import BlockRun


class RunSet:
    """`lru=False` keeps no eviction heap (an exact, event-fed index never evicts by age)."""

    def __init__(self, lru: bool = False) -> None:
        self.lru = lru
        self._starts: list[int] = []
        self._ends: dict[int, int] = {}
        self._stamps: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def segments(self) -> list[tuple[int, int, int]]:
        """`(start, end, stamp)` of every segment, in id order (for tests and reports)."""
        return [(start, self._ends[start], self._stamps[start]) for start in self._starts]

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._stamps.clear()
        self._heap.clear()
        self.size = 0

    def add(self, runs: Iterable[BlockRun], stamp: int = 0) -> None:
        """Put every id of `runs` in the set with `stamp` (ids already present take the new stamp)."""
        for first, count in runs:
            self._cut(first, first + count)
            self._insert(first, first + count, stamp)

    touch = add

    def discard(self, runs: Iterable[BlockRun]) -> None:
        for first, count in runs:
            self._cut(first, first + count)

    def prefix(self, runs: Iterable[BlockRun]) -> int:
        """How many leading ids of the sequence `runs` are in the set (stops at the first missing id)."""
        matched = 0
        for first, count in runs:
            position, stop = first, first + count
            while position < stop:
                k = bisect_right(self._starts, position) - 1
                if k < 0 or self._ends[self._starts[k]] <= position:
                    return matched
                step = min(self._ends[self._starts[k]], stop) - position
                matched += step
                position += step
        return matched

    def held(self, runs: Iterable[BlockRun]) -> list[tuple[int, int]]:
        """The positions `[start, end)` of the sequence `runs` whose ids are in the set, in order."""
        spans: list[tuple[int, int]] = []
        offset = 0
        for first, count in runs:
            stop = first + count
            k = max(0, bisect_right(self._starts, first) - 1)
            while k < len(self._starts) and self._starts[k] < stop:
                low, high = max(self._starts[k], first), min(self._ends[self._starts[k]], stop)
                if low < high:
                    spans.append((offset + low - first, offset + high - first))
                k += 1
            offset += count
        return spans

    def stamp_at(self, block_id: int) -> int | None:
        k = bisect_right(self._starts, block_id) - 1
        if k < 0 or self._ends[self._starts[k]] <= block_id:
            return None
        return self._stamps[self._starts[k]]

    def evict_to(self, capacity: int) -> int:
        """Trim least recently stamped segments from their end until at most `capacity` ids remain; ids removed."""
        if not self.lru:
            raise ValueError("evict_to: this set keeps no LRU order (built with lru=False)")
        removed = 0
        while self.size > capacity and self._heap:
            stamp, start = self._heap[0]
            if self._stamps.get(start) != stamp:
                heapq.heappop(self._heap)
                continue
            end = self._ends[start]
            take = min(end - start, self.size - capacity)
            self._cut(end - take, end)
            removed += take
        return removed

    def _insert(self, start: int, end: int, stamp: int) -> None:
        """Insert `[start, end)`, which overlaps nothing; merge with neighbours of the same stamp."""
        k = bisect_right(self._starts, start)
        if k > 0:
            before = self._starts[k - 1]
            if self._ends[before] == start and self._stamps[before] == stamp:
                self.size -= self._ends[before] - before
                start = before
                self._drop(k - 1)
                k -= 1
        if k < len(self._starts):
            after = self._starts[k]
            if after == end and self._stamps[after] == stamp:
                self.size -= self._ends[after] - after
                end = self._ends[after]
                self._drop(k)
        self._starts.insert(k, start)
        self._ends[start] = end
        self._stamps[start] = stamp
        self.size += end - start
        self._remember(stamp, start)

    def _drop(self, k: int) -> None:
        start = self._starts.pop(k)
        del self._ends[start]
        del self._stamps[start]

    def _cut(self, start: int, end: int) -> None:
        """Remove ids `[start, end)`; segments that stick out keep their stamp."""
        k = max(0, bisect_right(self._starts, start) - 1)
        while k < len(self._starts) and self._starts[k] < end:
            s = self._starts[k]
            e, stamp = self._ends[s], self._stamps[s]
            if e <= start:
                k += 1
                continue
            self._drop(k)
            self.size -= min(e, end) - max(s, start)
            if s < start:
                self._put(k, s, start, stamp)
                k += 1
            if e > end:
                self._put(k, end, e, stamp)
                return

    def _put(self, k: int, start: int, end: int, stamp: int) -> None:
        self._starts.insert(k, start)
        self._ends[start] = end
        self._stamps[start] = stamp
        self._remember(stamp, start)

    def _remember(self, stamp: int, start: int) -> None:
        if not self.lru:
            return
        heapq.heappush(self._heap, (stamp, start))
        if len(self._heap) > 4 * len(self._starts) + 64:
            self._heap = [(self._stamps[s], s) for s in self._starts]
            heapq.heapify(self._heap)


def union_size(run_lists: Iterable[Iterable[BlockRun]]) -> int:
    """Distinct ids over several run lists (Dynamo counts the active blocks of a worker once each)."""
    intervals = sorted((first, first + count) for runs in run_lists for first, count in runs)
    total, reach = 0, None
    for start, end in intervals:
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def block_count(runs: tuple[BlockRun, ...]) -> int:
    return sum(count for _, count in runs)


def skip(runs: tuple[BlockRun, ...], blocks: int) -> tuple[BlockRun, ...]:
    """The sequence `runs` without its first `blocks` ids."""
    kept: list[BlockRun] = []
    for first, count in runs:
        if blocks >= count:
            blocks -= count
            continue
        kept.append((first + blocks, count - blocks))
        blocks = 0
    return tuple(kept)


def truncate(runs: tuple[BlockRun, ...], limit: int) -> tuple[BlockRun, ...]:
    """The first `limit` ids of the sequence `runs`."""
    kept: list[BlockRun] = []
    left = limit
    for first, count in runs:
        if left <= 0:
            break
        kept.append((first, min(count, left)))
        left -= count
    return tuple(kept)


def block_at(runs: tuple[BlockRun, ...], index: int) -> int:
    """The id at position `index` of the sequence `runs`."""
    for first, count in runs:
        if index < count:
            return first + index
        index -= count
    raise IndexError("index past the end of the runs")
