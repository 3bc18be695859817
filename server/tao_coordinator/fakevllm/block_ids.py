"""Names for block hashes: the engine's integer block ids, handed out so that one request's new blocks form one run.

The node model identifies a KV block by an integer id (equal ids at equal positions ⇔ equal prefix); vLLM identifies
it by its chained hash. This registry maps one to the other. A hash seen for the first time gets the next unused id,
so the blocks a request adds to the cache (its new prompt suffix, then its answer) get consecutive ids and travel as
one run through the node model.

Invariants:
* the map is a bijection between the hashes and ids it holds;
* it holds exactly the ids that are cached on the node, in HBM (between their BlockStored and BlockRemoved / clear)
  or in the CPU tier (between their CPU BlockStored and CPU BlockRemoved / `cpu_retain`), or named by a live request
  (between `acquire` and `release`) — so it stays as small as the caches plus the requests in flight, and an id that
  left it is never handed out again (ids only grow).

Keeping CPU-resident ids is what lets a later request find a prefix that left HBM: it gets the same ids back, and
the node model looks them up in its CPU pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class BlockIdRegistry:
    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}
        self._hashes: dict[int, bytes] = {}
        self._refs: dict[int, int] = {}
        self._cached: set[int] = set()
        self._cpu: set[int] = set()
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._ids)

    def acquire(self, hashes: Sequence[bytes]) -> list[int]:
        """The ids of these hashes (new ones for unknown hashes), each referenced once more."""
        ids: list[int] = []
        for block_hash in hashes:
            block_id = self._ids.get(block_hash)
            if block_id is None:
                block_id = self._next_id
                self._next_id += 1
                self._ids[block_hash] = block_id
                self._hashes[block_id] = block_hash
            self._refs[block_id] = self._refs.get(block_id, 0) + 1
            ids.append(block_id)
        return ids

    def release(self, ids: Iterable[int]) -> None:
        for block_id in ids:
            left = self._refs[block_id] - 1
            if left:
                self._refs[block_id] = left
            else:
                del self._refs[block_id]
                self._forget_if_unused(block_id)

    def hash_of(self, block_id: int) -> bytes:
        return self._hashes[block_id]

    def stored(self, block_id: int, block_hash: bytes) -> None:
        """The node cached this block (it may have been evicted and recomputed under the same id)."""
        self._cached.add(block_id)
        self._hashes.setdefault(block_id, block_hash)
        self._ids.setdefault(block_hash, block_id)

    def removed(self, block_id: int) -> bytes:
        """The node evicted this block; returns its hash."""
        block_hash = self._hashes[block_id]
        self._cached.discard(block_id)
        self._forget_if_unused(block_id)
        return block_hash

    def cleared(self) -> None:
        cached, self._cached = self._cached, set()
        for block_id in cached:
            self._forget_if_unused(block_id)

    def cpu_stored(self, block_id: int) -> bytes:
        """The node's CPU tier stored this block (it is named by a live request or cached in HBM); returns its hash."""
        self._cpu.add(block_id)
        return self._hashes[block_id]

    def cpu_removed(self, block_id: int) -> bytes:
        """The CPU tier evicted this block; returns its hash."""
        block_hash = self._hashes[block_id]
        self._cpu.discard(block_id)
        self._forget_if_unused(block_id)
        return block_hash

    def cpu_retain(self, resident: set[int]) -> None:
        """The CPU tier now holds only `resident` (after a reset that publishes no events)."""
        dropped, self._cpu = self._cpu - resident, self._cpu & resident
        for block_id in dropped:
            self._forget_if_unused(block_id)

    def _forget_if_unused(self, block_id: int) -> None:
        if block_id in self._refs or block_id in self._cached or block_id in self._cpu:
            return
        block_hash = self._hashes.pop(block_id)
        if self._ids.get(block_hash) == block_id:
            del self._ids[block_hash]
