"""Which cached blocks of a node belong to which session, from its KV events (design §4, evidence source 1).

vLLM ≥ 0.30 copies the request's session id into `BlockStored`. A block belongs to the session that stored it; a
block stored twice (two requests computed the same prefix at once) is reference-counted by hash, as vLLM publishes
one `BlockRemoved` per physical block (reference §3.5). A node with several data-parallel ranks has one cache per
rank, each with its own event stream: a block is keyed by `(rank, hash)`, so the same prefix cached on two ranks is
two blocks, and one rank's `AllBlocksCleared` or lost events clear that rank only. Events about another tier than
the GPU (`medium` CPU or STORAGE, from an offloading connector) are ignored: those blocks are not resident.

Invariant: `blocks_of(session)` equals the number of distinct resident GPU `(rank, hash)` keys whose first storer
was that session, and only sessions with at least one such block have a key (memory follows the resident blocks,
not every session ever seen); `changed` collects the sessions whose count moved since the last `take_changed()`.
"""

from __future__ import annotations

from collections import Counter

from .kv_wire import Cleared, KvEvent, Removed, Stored

_Block = tuple[int, int]  # (data-parallel rank, block hash)


class NodeKvIndex:
    def __init__(self) -> None:
        self._refs: Counter[_Block] = Counter()
        self._owner: dict[_Block, str] = {}
        self._per_session: Counter[str] = Counter()
        self.block_size = 16
        self.changed: set[str] = set()

    def apply(self, event: KvEvent, rank: int = 0) -> None:
        if isinstance(event, Stored):
            if not event.gpu:
                return
            self.block_size = event.block_size
            for block in ((rank, h) for h in event.hashes):
                if self._refs[block] == 0 and event.session_id:
                    self._owner[block] = event.session_id
                    self._per_session[event.session_id] += 1
                    self.changed.add(event.session_id)
                self._refs[block] += 1
        elif isinstance(event, Removed):
            if not event.gpu:
                return
            for block in ((rank, h) for h in event.hashes):
                if self._refs[block] <= 0:
                    continue
                self._refs[block] -= 1
                if self._refs[block] == 0:
                    del self._refs[block]
                    owner = self._owner.pop(block, None)
                    if owner is not None:
                        self._drop_one(owner)
        elif isinstance(event, Cleared):
            self.clear(rank)

    def _drop_one(self, session_id: str) -> None:
        self._per_session[session_id] -= 1
        if self._per_session[session_id] <= 0:
            del self._per_session[session_id]
        self.changed.add(session_id)

    def sessions(self) -> int:
        """Sessions holding at least one block here: the index keeps no key for any other."""
        return len(self._per_session)

    def clear(self, rank: int) -> None:
        """Forget the blocks of one data-parallel rank."""
        for block in [block for block in self._refs if block[0] == rank]:
            del self._refs[block]
            owner = self._owner.pop(block, None)
            if owner is not None:
                self._drop_one(owner)

    def tokens_of(self, session_id: str) -> int:
        return self._per_session[session_id] * self.block_size

    def take_changed(self) -> dict[str, int]:
        changed = {session: self.tokens_of(session) for session in self.changed}
        self.changed = set()
        return changed
