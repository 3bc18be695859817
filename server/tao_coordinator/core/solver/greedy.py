"""Heuristics: best-fit decreasing, and the home-first decomposition (the floor of a search cut short).

`best_fit_decreasing` takes items by best value (ties: larger weight first) and puts each where its value is highest,
ties to the tightest fit. It is the paper's fallback and the `tao-no-dp` ablation.

`home_first` exploits the shape of TAO's value, whose most significant component (cache credit) is non-zero on an
item's *home* node only:
1. per node, an exact knapsack over the items at home there picks the lexicographically best set to keep at home —
   when each item's credit sits on one node and no node has more than `HOME_KNAPSACK_ITEMS` at home, the first
   component of the result is optimal, because the total credit is a sum of independent per-node knapsacks;
2. everything else is node-indifferent apart from minor components, and fills the leftover capacity in two orders
   — best value first (largest first among equals), and best value first ignoring the last two components with the
   smallest first (more sessions placed when the count matters) — keeping the better plan.
No optimality guarantee beyond the first component; `tao bench planner` measures the gap to the MILP.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

from ..value import LexEmbedding, Value
from .problem import Item, Problem, Solution

HOME_KNAPSACK_ITEMS = 20
"""Above this many items at home on one node, the per-node knapsack keeps the 20 most valuable (its sparse states
grow exponentially in the worst case). Nodes do hold more at home (up to 32 at AgentX 128 × 8), which is why this
plan is only a floor for a search cut short, never the plan's certificate."""


class _Packing:
    """Remaining capacities with a sorted index, so best fit over nodes without special values is O(log m)."""

    def __init__(self, capacities: Sequence[int]) -> None:
        self.remaining = list(capacities)
        self.sorted = sorted((c, b) for b, c in enumerate(capacities))

    def place(self, weight: int, node: int) -> None:
        del self.sorted[bisect_left(self.sorted, (self.remaining[node], node))]
        self.remaining[node] -= weight
        insort(self.sorted, (self.remaining[node], node))

    def best_node(self, item: Item) -> int:
        """The node where the item's value is highest, ties to the tightest fit then the lowest index; −1: none."""
        weight = item.weight
        best: tuple[Value, int, int] | None = None
        for b, value in item.on_nodes.items():
            if self.remaining[b] >= weight:
                key = (value, weight - self.remaining[b], -b)
                if best is None or key > best:
                    best = key
        k = bisect_left(self.sorted, (weight, -1))
        while k < len(self.sorted) and self.sorted[k][1] in item.on_nodes:
            k += 1
        if k < len(self.sorted):
            left, b = self.sorted[k]
            key = (item.base, weight - left, -b)
            if best is None or key > best:
                best = key
        return -1 if best is None else -best[2]


def _fill(problem: Problem, order: Sequence[int], packing: _Packing, assignment: list[int | None]) -> None:
    for i in order:
        if assignment[i] is None:
            node = packing.best_node(problem.items[i])
            if node >= 0:
                packing.place(problem.items[i].weight, node)
                assignment[i] = node


def _by_value(problem: Problem) -> list[int]:
    node_count = len(problem.capacities)
    return sorted(
        range(len(problem.items)),
        key=lambda i: (problem.items[i].best_value(node_count), problem.items[i].weight),
        reverse=True,
    )


def best_fit_decreasing(problem: Problem) -> Solution:
    assignment: list[int | None] = [None] * len(problem.items)
    _fill(problem, _by_value(problem), _Packing(problem.capacities), assignment)
    return Solution(tuple(assignment), problem.objective(assignment), "greedy")


def home_first(problem: Problem) -> Solution:
    homes = _home_sets(problem)
    kept: list[int | None] = [None] * len(problem.items)
    capacities = list(problem.capacities)
    embedding = LexEmbedding.for_items(
        ([problem.items[i].value_on(node)] for node, members in homes.items() for i in members),
        problem.width,
        int64=False,
    )
    for node, members in homes.items():
        for i in _best_home_set(problem, node, members, embedding):
            kept[i] = node
            capacities[node] -= problem.items[i].weight
    left = [i for i, node in enumerate(kept) if node is None]
    largest_first = sorted(left, key=lambda i: (problem.items[i].base, problem.items[i].weight), reverse=True)
    smallest_first = sorted(left, key=lambda i: (_negated(problem.items[i].base[:-2]), problem.items[i].weight))
    best: Solution | None = None
    for order in (largest_first, smallest_first):
        assignment = list(kept)
        _fill(problem, order, _Packing(capacities), assignment)
        candidate = Solution(tuple(assignment), problem.objective(assignment), "fallback")
        if best is None or candidate.objective > best.objective:
            best = candidate
    assert best is not None
    return best


def _negated(value: Value) -> Value:
    return tuple(-component for component in value)


def _home_sets(problem: Problem) -> dict[int, list[int]]:
    """Items whose best node beats their base value in the first component, grouped by that node."""
    homes: dict[int, list[int]] = {}
    for i, item in enumerate(problem.items):
        if not item.on_nodes:
            continue
        node, value = max(item.on_nodes.items(), key=lambda entry: (entry[1], -entry[0]))
        if value[0] > item.base[0] and item.weight <= problem.capacities[node]:
            homes.setdefault(node, []).append(i)
    return homes


def _best_home_set(problem: Problem, node: int, members: list[int], embedding: LexEmbedding) -> list[int]:
    """The lexicographically best subset of `members` on `node` within its capacity: a sparse 0/1 knapsack over
    (used, value) states that keeps only the non-dominated ones; values embedded in Python ints, chosen sets as
    bit masks."""
    capacity = problem.capacities[node]
    if len(members) > HOME_KNAPSACK_ITEMS:
        members = sorted(members, key=lambda i: problem.items[i].value_on(node), reverse=True)[:HOME_KNAPSACK_ITEMS]
    states: list[tuple[int, int, int]] = [(0, 0, 0)]
    for bit, i in enumerate(members):
        weight, gain, mask = problem.items[i].weight, embedding.embed(problem.items[i].value_on(node)), 1 << bit
        grown = [
            (used + weight, total + gain, chosen | mask) for used, total, chosen in states if used + weight <= capacity
        ]
        frontier: list[tuple[int, int, int]] = []
        for state in sorted(states + grown, key=lambda s: (s[0], -s[1])):
            if not frontier or state[1] > frontier[-1][1]:
                frontier.append(state)
        states = frontier
    chosen = states[-1][2]
    return [i for bit, i in enumerate(members) if chosen >> bit & 1]
