"""The placement problem the solvers see: items (sessions) with weights and per-node values, knapsacks (nodes)
with capacities, both in capacity cells. Nothing here knows about sessions, time or signals.

Maximise the lexicographic sum of the values of placed items, each item on at most one node, each node's placed
weight within its capacity (docs/design.md#the-decision). An item's value on node b is `on_nodes[b]` if present, else
`base`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..value import Value, total


@dataclass(frozen=True, slots=True)
class Item:
    weight: int
    base: Value
    on_nodes: Mapping[int, Value] = field(default_factory=dict)

    def value_on(self, node: int) -> Value:
        return self.on_nodes.get(node, self.base)

    def best_value(self, node_count: int) -> Value:
        candidates = list(self.on_nodes.values())
        if len(self.on_nodes) < node_count:
            candidates.append(self.base)
        return max(candidates) if candidates else self.base


@dataclass(frozen=True, slots=True)
class Problem:
    items: tuple[Item, ...]
    capacities: tuple[int, ...]
    largest_capacity: int = field(init=False, repr=False, compare=False)
    """The largest capacity (−1 without nodes): an item fits somewhere exactly when its weight is at most this."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "largest_capacity", max(self.capacities, default=-1))

    def validate(self) -> None:
        """Raise ValueError unless the problem is well formed. Builders guarantee it; tests and callers with
        hand-made problems check it (not done on construction: planning builds one problem per event)."""
        if any(c < 0 for c in self.capacities):
            raise ValueError("capacities: must be non-negative")
        widths = {len(item.base) for item in self.items}
        if len(widths) > 1:
            raise ValueError("items: all values must have the same number of components")
        for item in self.items:
            if item.weight < 0:
                raise ValueError("items: weights must be non-negative")
            if any(not 0 <= b < len(self.capacities) for b in item.on_nodes):
                raise ValueError("items: on_nodes names a node index out of range")

    @property
    def width(self) -> int:
        return len(self.items[0].base) if self.items else 0

    def fits_somewhere(self, item: Item) -> bool:
        return item.weight <= self.largest_capacity

    def objective(self, assignment: Sequence[int | None]) -> Value:
        return total(
            (item.value_on(b) for item, b in zip(self.items, assignment, strict=True) if b is not None), self.width
        )

    def is_feasible(self, assignment: Sequence[int | None]) -> bool:
        used = [0] * len(self.capacities)
        for item, b in zip(self.items, assignment, strict=True):
            if b is not None:
                used[b] += item.weight
        return all(u <= c for u, c in zip(used, self.capacities, strict=True))


@dataclass(frozen=True, slots=True)
class Solution:
    assignment: tuple[int | None, ...]
    objective: Value
    method: str
    """all-fit, exact, bounded, fallback or greedy: which rule produced the assignment."""
    certified: bool = False
    """Proven optimal: all-fit reached the upper bound, or a search finished."""
    bound: Value | None = None
    """An upper bound on any plan's objective when one is known (equal to `objective` when certified)."""
    search_nodes: int = 0
    exact_components: int = 0
    """How many leading components of `objective` are proven optimal (all of them when certified): a search cut
    short in its second stage still proves the first."""


def relative_gap(bound: Value, reached: Value) -> float:
    """How far `reached` falls short of `bound`, relative, in the first component where they differ (0 when
    equal): a plan that keeps 2 % less cache credit than the bound has gap 0.02, whatever its other components."""
    for best, got in zip(bound, reached, strict=True):
        if best != got:
            return (best - got) / max(1, abs(best))
    return 0.0
