"""KV-cache facts of the step being planned, in order; stamped with the step's end time when drained.

GPU facts come first, then the CPU tier's (vLLM appends the offloading connector's events after the block pool's in
one batch). Disabled, it records nothing, so nodes whose events nobody reads pay nothing.
"""

from __future__ import annotations

from ...core.model import BlockRun
from .block_pool import HeldRun
from .events import AllBlocksCleared, BlockEvent, BlockRemoved, BlockStored
from .request import LiveRequest

_Stored = tuple[str, str | None, int, tuple[BlockRun, ...], int | None]
_Fact = _Stored | list[BlockRun]


class KvLog:
    def __init__(self, enabled: bool, block_size: int) -> None:
        self.enabled = enabled
        self._block_size = block_size
        self._facts: list[_Fact] = []
        self._cpu_facts: list[_Fact] = []

    def stored(self, request: LiveRequest, first_index: int, pieces: list[HeldRun]) -> None:
        """GPU blocks committed: one event per run of indexed pieces (private copies are not announced)."""
        if not self.enabled:
            return
        group: list[BlockRun] = []
        index = group_index = first_index
        for piece in [*pieces, HeldRun(0, 0, private=True)]:
            if piece.private:
                if group:
                    self._facts.append(_stored_fact(request, group_index, group))
                group, group_index = [], index + piece.count
            else:
                group.append((piece.first, piece.count))
            index += piece.count

    def removed(self, runs: list[BlockRun]) -> None:
        if self.enabled and runs:
            _append_removed(self._facts, runs)

    def cpu_stored(
        self, request: LiveRequest, first_index: int, offered: list[BlockRun], stored: list[BlockRun]
    ) -> None:
        """CPU blocks stored out of an offer of the sequence's blocks first_index…: one event per contiguous range."""
        if not self.enabled or not stored:
            return
        group: list[BlockRun] = []
        group_index = group_end = -1
        j, index = 0, first_index
        for first, count in offered:
            while j < len(stored) and first <= stored[j][0] < first + count:
                piece_index = index + stored[j][0] - first
                if group and piece_index != group_end:
                    self._cpu_facts.append(_stored_fact(request, group_index, group))
                    group = []
                if not group:
                    group_index = piece_index
                group.append(stored[j])
                group_end = piece_index + stored[j][1]
                j += 1
            index += count
        if group:
            self._cpu_facts.append(_stored_fact(request, group_index, group))

    def cpu_removed(self, runs: list[BlockRun]) -> None:
        if self.enabled and runs:
            _append_removed(self._cpu_facts, runs)

    def drain(self, time: float) -> list[BlockEvent]:
        events = [*_events(self._facts, time, self._block_size, "GPU")]
        events.extend(_events(self._cpu_facts, time, self._block_size, "CPU"))
        self._facts.clear()
        self._cpu_facts.clear()
        return events

    def cleared(self, time: float) -> list[BlockEvent]:
        return [AllBlocksCleared(time)] if self.enabled else []


def _stored_fact(request: LiveRequest, index: int, group: list[BlockRun]) -> _Stored:
    parent = request.sequence.id_at(index - 1) if index else None
    return (request.request_id, request.spec.session_id, index, tuple(group), parent)


def _append_removed(facts: list[_Fact], runs: list[BlockRun]) -> None:
    if facts and isinstance(facts[-1], list):
        facts[-1].extend(runs)
    else:
        facts.append(list(runs))


def _events(facts: list[_Fact], time: float, block_size: int, medium: str) -> list[BlockEvent]:
    events: list[BlockEvent] = []
    for fact in facts:
        if isinstance(fact, list):
            events.append(BlockRemoved(time, tuple(fact), medium))
        else:
            request_id, session_id, first_index, runs, parent = fact
            events.append(BlockStored(time, runs, parent, block_size, request_id, session_id, first_index, medium))
    return events
