"""Which cached blocks of a node belong to which session, per tier, from its KV events (its first source:
docs/design.md#cache-credit).

vLLM ≥ 0.30 copies the request's session id into a GPU `BlockStored`. A block belongs to the session that stored
it; a block stored twice (two requests computed the same prefix at once) is reference-counted by hash, as vLLM
publishes one `BlockRemoved` per physical block (reference §3.5). A node with several data-parallel ranks has one
cache per rank, each with its own event stream: a block is keyed by `(rank, hash)`, so the same prefix cached on two
ranks is two blocks, and one rank's `AllBlocksCleared` or lost events clear that rank only.

With vLLM's CPU offloading, the tier below HBM publishes on the same stream with medium `"CPU"`, and 0.33's default
payload names neither the session nor the tokens: one hash per offloaded chunk, the hash of its last GPU block. A
chunk is stored right after its blocks were computed, while HBM still holds them, so it belongs to the session that
owns that hash in HBM (else to none). A chunk is counted as one GPU block (vLLM's default chunk). The tiers are
independent, as vLLM's events are: evicting a block from HBM leaves its CPU copy, and `AllBlocksCleared` (which
vLLM publishes for HBM only) leaves the CPU tier alone. Other media (`STORAGE`) are not tracked.

Invariant, per tier: `tokens_of(session, tier)` is block_size × the number of distinct resident `(rank, hash)` keys
whose first storer was that session; only sessions with at least one such block have a key (memory follows the
resident blocks); `changed` collects the (session, tier) pairs whose count moved since the last `take_changed()`.
"""

from __future__ import annotations

from collections import Counter

from ..core.model import Tier
from ..kv_wire import Cleared, KvWireEvent, Removed, Stored

_Block = tuple[int, int]  # (data-parallel rank, block hash)

CPU_MEDIA = frozenset({"CPU", "CPU_PINNED", "CPU_TIER1"})


def tier_of(medium: str) -> Tier | None:
    if medium == "GPU":
        return "GPU"
    return "CPU" if medium in CPU_MEDIA else None


class _TierIndex:
    def __init__(self, tier: Tier, changed: set[tuple[str, Tier]]) -> None:
        self.tier = tier
        self.refs: Counter[_Block] = Counter()
        self.owner: dict[_Block, str] = {}
        self.per_session: Counter[str] = Counter()
        self._changed = changed

    def store(self, block: _Block, session_id: str | None) -> None:
        if self.refs[block] == 0 and session_id:
            self.owner[block] = session_id
            self.per_session[session_id] += 1
            self._changed.add((session_id, self.tier))
        self.refs[block] += 1

    def remove(self, block: _Block) -> None:
        if self.refs[block] <= 0:
            return
        self.refs[block] -= 1
        if self.refs[block] == 0:
            del self.refs[block]
            owner = self.owner.pop(block, None)
            if owner is not None:
                self._drop_one(owner)

    def clear(self, rank: int) -> None:
        for block in [block for block in self.refs if block[0] == rank]:
            del self.refs[block]
            owner = self.owner.pop(block, None)
            if owner is not None:
                self._drop_one(owner)

    def _drop_one(self, session_id: str) -> None:
        self.per_session[session_id] -= 1
        if self.per_session[session_id] <= 0:
            del self.per_session[session_id]
        self._changed.add((session_id, self.tier))


class NodeKvIndex:
    def __init__(self) -> None:
        self.changed: set[tuple[str, Tier]] = set()
        self._tiers: dict[Tier, _TierIndex] = {
            "GPU": _TierIndex("GPU", self.changed),
            "CPU": _TierIndex("CPU", self.changed),
        }
        self.block_size = 16
        self.resets = 0
        """Engine restarts seen in the node's events (`reset`)."""

    def apply(self, event: KvWireEvent, rank: int = 0) -> None:
        if isinstance(event, Stored):
            tier = tier_of(event.medium)
            if tier == "GPU":
                if event.block_size:
                    self.block_size = event.block_size
                for block in ((rank, h) for h in event.hashes):
                    self._tiers["GPU"].store(block, event.session_id)
            elif tier == "CPU":
                gpu_owner = self._tiers["GPU"].owner
                for block in ((rank, h) for h in event.hashes):
                    self._tiers["CPU"].store(block, gpu_owner.get(block) or event.session_id)
        elif isinstance(event, Removed):
            tier = tier_of(event.medium)
            if tier is not None:
                for block in ((rank, h) for h in event.hashes):
                    self._tiers[tier].remove(block)
        elif isinstance(event, Cleared):  # vLLM clears HBM only
            self._tiers["GPU"].clear(rank)

    def sessions(self) -> int:
        """Sessions holding at least one block in HBM: the index keeps no key for any other."""
        return len(self._tiers["GPU"].per_session)

    def clear(self, rank: int) -> None:
        """Forget the blocks of one data-parallel rank, in every tier (events lost may have been either tier's)."""
        for tier in self._tiers.values():
            tier.clear(rank)

    def reset(self, rank: int) -> None:
        """Forget everything of one rank: its engine restarted (a new process holds no cache)."""
        self.clear(rank)
        self.resets += 1

    def tokens_of(self, session_id: str, tier: Tier = "GPU") -> int:
        return self._tiers[tier].per_session[session_id] * self.block_size

    def residents(self, tier: Tier = "GPU") -> dict[str, int]:
        """Tokens per session with at least one block resident in `tier`."""
        return {session: count * self.block_size for session, count in self._tiers[tier].per_session.items()}

    def take_changed(self) -> dict[tuple[str, Tier], int]:
        changed = {(session, tier): self.tokens_of(session, tier) for session, tier in self.changed}
        self.changed.clear()
        return changed
