"""The placement problem the solvers see: items (sessions) with weights and per-node values, knapsacks (nodes)
with capacities, both in capacity cells. Nothing here knows about sessions, time or signals.

Maximise the lexicographic sum of the values of placed items, each item on at most one node, each node's placed
weight within its capacity (docs/design.md#the-decision). An item's value on node b is `on_nodes[b]` if present, else
`base`; an item may not go to the nodes in its `excluded` set (nodes that do not serve its model).

Exclusion reaches the solvers as a relaxation (`Problem.relaxed`): an excluded placement becomes a placement worth
nothing (every component 0). That is exact: such a placement adds nothing to the objective and only takes room, so
removing it from any plan keeps the plan feasible and its objective unchanged. The relaxed problem therefore has the
same optimum, every bound on it bounds the original, and `Problem.restricted` turns any of its plans into a plan of
the original problem with the same objective. The solvers themselves never see exclusions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..value import Value, total


@dataclass(frozen=True, slots=True)
class Item:
    weight: int
    base: Value
    on_nodes: Mapping[int, Value] = field(default_factory=dict)
    excluded: frozenset[int] = frozenset()
    """Nodes the item may not go to: they do not serve its model."""

    def value_on(self, node: int) -> Value:
        return self.on_nodes.get(node, self.base)

    def best_value(self, node_count: int) -> Value:
        candidates = [value for b, value in self.on_nodes.items() if b not in self.excluded]
        if len(self.on_nodes.keys() | self.excluded) < node_count:
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
            if any(not 0 <= b < len(self.capacities) for b in item.excluded):
                raise ValueError("items: excluded names a node index out of range")

    @property
    def width(self) -> int:
        return len(self.items[0].base) if self.items else 0

    def fits_somewhere(self, item: Item) -> bool:
        return item.weight <= self.largest_capacity

    @property
    def has_exclusions(self) -> bool:
        return any(item.excluded for item in self.items)

    def relaxed(self) -> Problem:
        """The problem without exclusions: an excluded placement is worth nothing instead (module docstring)."""
        nothing = (0,) * self.width
        items = tuple(
            Item(item.weight, item.base, {**item.on_nodes, **dict.fromkeys(item.excluded, nothing)})
            if item.excluded
            else item
            for item in self.items
        )
        return Problem(items, self.capacities)

    def restricted(self, solution: Solution) -> Solution:
        """A solution of `relaxed()` as one of this problem: its excluded placements left out, the objective kept."""
        assignment = tuple(
            None if b is not None and b in item.excluded else b
            for item, b in zip(self.items, solution.assignment, strict=True)
        )
        return replace(solution, assignment=assignment, objective=self.objective(assignment))

    def objective(self, assignment: Sequence[int | None]) -> Value:
        return total(
            (item.value_on(b) for item, b in zip(self.items, assignment, strict=True) if b is not None), self.width
        )

    def is_feasible(self, assignment: Sequence[int | None]) -> bool:
        used = [0] * len(self.capacities)
        for item, b in zip(self.items, assignment, strict=True):
            if b is not None:
                if b in item.excluded:
                    return False
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
