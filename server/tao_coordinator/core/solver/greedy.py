"""The fallback when the DP is over budget: best-fit decreasing, then swap-and-insert improvement.

`best_fit_decreasing` takes items by best value (ties: larger weight first) and puts each where its value is highest,
breaking ties by the tightest fit; on its own it is the `tao-no-dp` ablation and the paper's fallback. `improve`
then repeatedly tries to place each left-out item, directly or by evicting one member of a node whose value there is
lower (the evicted item is re-placed elsewhere when it fits). Every accepted step strictly raises the objective, so
it terminates; `max_evaluations` bounds its work on large instances. No optimality guarantee: `tao bench planner`
measures the gap against the MILP.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from ..value import Value
from .problem import Item, Problem, Solution


class _Packing:
    """Remaining capacities with a sorted index, so best fit over nodes without special values is O(log m)."""

    def __init__(self, capacities: tuple[int, ...]) -> None:
        self.remaining = list(capacities)
        self.members: list[list[int]] = [[] for _ in capacities]
        self.sorted = sorted((c, b) for b, c in enumerate(capacities))

    def place(self, i: int, weight: int, node: int) -> None:
        self._resize(node, self.remaining[node] - weight)
        self.members[node].append(i)

    def remove(self, i: int, weight: int, node: int) -> None:
        self._resize(node, self.remaining[node] + weight)
        self.members[node].remove(i)

    def _resize(self, node: int, new: int) -> None:
        del self.sorted[bisect_left(self.sorted, (self.remaining[node], node))]
        self.remaining[node] = new
        insort(self.sorted, (new, node))

    def best_node(self, item: Item, exclude: int = -1) -> int:
        """The node where the item's value is highest, ties to the tightest fit then the lowest index; −1: none."""
        weight = item.weight
        best: tuple[Value, int, int] | None = None
        for b, value in item.on_nodes.items():
            if b != exclude and self.remaining[b] >= weight:
                key = (value, weight - self.remaining[b], -b)
                if best is None or key > best:
                    best = key
        k = bisect_left(self.sorted, (weight, -1))
        while k < len(self.sorted) and (self.sorted[k][1] in item.on_nodes or self.sorted[k][1] == exclude):
            k += 1
        if k < len(self.sorted):
            left, b = self.sorted[k]
            key = (item.base, weight - left, -b)
            if best is None or key > best:
                best = key
        return -1 if best is None else -best[2]


def _order(problem: Problem) -> list[int]:
    node_count = len(problem.capacities)
    return sorted(
        range(len(problem.items)),
        key=lambda i: (problem.items[i].best_value(node_count), problem.items[i].weight),
        reverse=True,
    )


def best_fit_decreasing(problem: Problem) -> Solution:
    packing = _Packing(problem.capacities)
    assignment: list[int | None] = [None] * len(problem.items)
    for i in _order(problem):
        node = packing.best_node(problem.items[i])
        if node >= 0:
            packing.place(i, problem.items[i].weight, node)
            assignment[i] = node
    return Solution(tuple(assignment), problem.objective(assignment), "greedy")


def _sub(a: Value, b: Value) -> Value:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def improve(problem: Problem, start: Solution, rounds: int, max_evaluations: int = 20_000) -> Solution:
    items = problem.items
    packing = _Packing(problem.capacities)
    assignment = list(start.assignment)
    for i, node in enumerate(assignment):
        if node is not None:
            packing.place(i, items[i].weight, node)
    zero = (0,) * problem.width
    evaluations = 0
    for _ in range(rounds):
        changed = False
        for i in _order(problem):
            if assignment[i] is not None or evaluations >= max_evaluations:
                continue
            item = items[i]
            direct = packing.best_node(item)
            if direct >= 0:
                packing.place(i, item.weight, direct)
                assignment[i] = direct
                changed = True
                continue
            best: tuple[Value, int, int] | None = None
            for b in _swap_targets(item, packing):
                value = item.value_on(b)
                for j in packing.members[b]:
                    evaluations += 1
                    if packing.remaining[b] + items[j].weight < item.weight:
                        continue
                    gain = _sub(value, items[j].value_on(b))
                    if gain > zero and (best is None or gain > best[0]):
                        best = (gain, b, j)
            if best is None:
                continue
            _, b, j = best
            packing.remove(j, items[j].weight, b)
            assignment[j] = None
            packing.place(i, item.weight, b)
            assignment[i] = b
            moved = packing.best_node(items[j])
            if moved >= 0:
                packing.place(j, items[j].weight, moved)
                assignment[j] = moved
            changed = True
        if not changed:
            break
    return Solution(tuple(assignment), problem.objective(assignment), "fallback")


def _swap_targets(item: Item, packing: _Packing, widest: int = 4) -> list[int]:
    """The item's special nodes, plus the nodes with the most room (all nodes on small fleets)."""
    if len(packing.remaining) <= 16:
        return list(range(len(packing.remaining)))
    roomiest = [b for _, b in packing.sorted[-widest:]]
    return list(dict.fromkeys([*item.on_nodes, *roomiest]))
