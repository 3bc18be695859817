"""The certified fast path: place every item on a node where it has its best value.

The sum of every item's best value is an upper bound on any plan's objective. If a packing reaches it, it is
optimal, whatever a search would have found; when capacity is not contended (the common case on a healthy fleet) this
answers in O(n log n + n·m) without building any table. Items that fit on no node are left out first (exactly: they
can never be placed). A failed packing proves nothing, and the caller moves on to the branch and bound.

Among the optimal plans it prefers a spread one: items that may go to several nodes go to the one with the most
room left (worst fit), so sessions without cache credit anywhere are balanced across nodes instead of piled on the
fullest — the value cannot see compute load, but a node serving half the fleet decodes slower. Only when spreading
fails to fit everything is the tightest packing (best fit) tried.
"""

from __future__ import annotations

from .problem import Problem, Solution


def solve_all_fit(problem: Problem) -> Solution | None:
    placeable_weight = sum(item.weight for item in problem.items if problem.fits_somewhere(item))
    if placeable_weight > sum(problem.capacities):
        return None
    return _pack(problem, spread=True) or _pack(problem, spread=False)


def _pack(problem: Problem, spread: bool) -> Solution | None:
    node_count = len(problem.capacities)
    remaining = list(problem.capacities)
    assignment: list[int | None] = [None] * len(problem.items)
    pinned: list[tuple[int, list[int]]] = []
    free: list[tuple[int, set[int]]] = []
    for i, item in enumerate(problem.items):
        if not problem.fits_somewhere(item):
            continue
        best = item.best_value(node_count)
        if item.base == best and len(item.on_nodes) < node_count:
            free.append((i, {b for b, value in item.on_nodes.items() if value < best}))
        else:
            pinned.append((i, [b for b, value in item.on_nodes.items() if value == best]))

    pinned.sort(key=lambda entry: (len(entry[1]), -problem.items[entry[0]].weight))
    free.sort(key=lambda entry: -problem.items[entry[0]].weight)
    for i, allowed in pinned:
        if not _place(problem.items[i].weight, allowed, remaining, spread, assignment, i):
            return None
    all_nodes = list(range(node_count))
    for i, excluded in free:
        allowed = [b for b in all_nodes if b not in excluded] if excluded else all_nodes
        if not _place(problem.items[i].weight, allowed, remaining, spread, assignment, i):
            return None
    objective = problem.objective(assignment)
    return Solution(tuple(assignment), objective, "all-fit", True, objective, exact_components=problem.width)


def _place(
    weight: int, allowed: list[int], remaining: list[int], spread: bool, assignment: list[int | None], i: int
) -> bool:
    """Put item i on the allowed node with the most room (spread) or the least room that still fits."""
    chosen = -1
    for b in allowed:
        if remaining[b] < weight:
            continue
        if chosen < 0 or (remaining[b] > remaining[chosen] if spread else remaining[b] < remaining[chosen]):
            chosen = b
    if chosen < 0:
        return False
    remaining[chosen] -= weight
    assignment[i] = chosen
    return True
