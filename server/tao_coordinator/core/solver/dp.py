"""Exact lexicographic DP over quantized node capacities (design §5).

Recurrence, over items j = 1..n and states s (the used capacity of every node, in cells):

    D_0(0) = 0,  D_0(s) = −∞ elsewhere
    D_j(s) = lexmax( D_{j−1}(s),  max_b D_{j−1}(s − w_j·e_b) + u(j, b) )

and the answer is max_s D_n(s), backtracked through the argmax choices. Values are tuples embedded exactly into
int64 (`value.LexEmbedding`), so one vectorised `maximum` per (item, node) does the lexicographic comparison.

Grouping: nodes with the same capacity on which every item has the same value are interchangeable, so a group of g
such nodes is one dimension whose states are the *multisets* of g usages (sorted tuples): C(c+g, g) states instead
of (c+1)^g. This is exact; a placement into the group is turned back into a concrete node by replaying the chosen
path forward (the actual usages always form the state's multiset).

Cost: time and memory are both proportional to (number of states) × (number of items), the quantity compared with
the budget before any work starts; `solve_dp` returns None when the instance is over budget, or when its values
cannot be embedded safely, and the caller falls back.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from ..value import EmbeddingOverflow, LexEmbedding, Value
from .problem import Item, Problem, Solution

NEG = -(1 << 62)


@dataclass(frozen=True, slots=True)
class NodeGroup:
    nodes: tuple[int, ...]
    capacity: int

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def state_count(self) -> int:
        return math.comb(self.capacity + self.size, self.size)

    @property
    def encodable(self) -> bool:
        """Whether a state of this group fits one int64 key (capacity+1)^size, needed to index predecessors."""
        return bool((self.capacity + 1) ** self.size < 1 << 62)


def group_nodes(problem: Problem) -> list[NodeGroup]:
    """Partition nodes into classes of equal capacity and equal value for every item, capacity capped at the total
    weight (cells beyond it can never be used)."""
    total_weight = sum(item.weight for item in problem.items)
    special: dict[int, list[tuple[int, Value]]] = defaultdict(list)
    for i, item in enumerate(problem.items):
        for b, value in item.on_nodes.items():
            special[b].append((i, value))
    classes: dict[tuple[int, tuple[tuple[int, Value], ...]], list[int]] = defaultdict(list)
    for b, capacity in enumerate(problem.capacities):
        classes[(min(capacity, total_weight), tuple(special.get(b, ())))].append(b)
    return [NodeGroup(tuple(nodes), capacity) for (capacity, _), nodes in classes.items()]


def _multisets(capacity: int, size: int) -> npt.NDArray[np.int64]:
    """All multisets of `size` usages in [0, capacity] as rows sorted descending, the all-zero row first."""
    rows = np.arange(capacity + 1, dtype=np.int64).reshape(-1, 1)
    for _ in range(size - 1):
        counts = rows[:, -1] + 1
        repeated = np.repeat(rows, counts, axis=0)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        rows = np.column_stack([repeated, np.arange(len(repeated)) - starts])
    return rows


@dataclass(frozen=True, slots=True)
class _Step:
    """Adding an item to the node at `position` of a group state: the predecessor of each target state."""

    position: int
    predecessor: npt.NDArray[np.intp]
    valid: npt.NDArray[np.bool_]
    usage_before: npt.NDArray[np.int64]


@lru_cache(maxsize=1024)
def _steps(capacity: int, size: int, weight: int) -> tuple[_Step, ...]:
    states = _multisets(capacity, size)
    radix = np.int64(capacity + 1) ** np.arange(size - 1, -1, -1, dtype=np.int64)
    keys = states @ radix
    order = np.argsort(keys)
    steps = []
    for position in range(size):
        valid = states[:, position] >= weight
        if position > 0:
            valid &= states[:, position] != states[:, position - 1]
        if not valid.any():
            continue
        before = states.copy()
        before[:, position] -= weight
        before = -np.sort(-before, axis=1)
        found = order[np.clip(np.searchsorted(keys[order], before @ radix), 0, len(keys) - 1)]
        predecessor = np.where(valid, found, 0).astype(np.intp)
        usage_before = np.where(valid, states[:, position] - weight, 0)
        steps.append(_Step(position, predecessor, valid, usage_before))
    return tuple(steps)


def dp_cost(problem: Problem, groups: list[NodeGroup]) -> int:
    """States × items: what the DP will compute and store."""
    return math.prod(group.state_count for group in groups) * max(1, len(problem.items))


def solve_dp(problem: Problem, budget: int) -> Solution | None:
    """The exact optimum, or None when the instance is over `budget` or cannot be embedded in int64."""
    items = problem.items
    groups = group_nodes(problem)
    if not items or not groups:
        return Solution((None,) * len(items), problem.objective((None,) * len(items)), "dp", 0)
    if dp_cost(problem, groups) > budget or not all(group.encodable for group in groups):
        return None
    try:
        embedding = LexEmbedding.for_items(
            ([item.value_on(group.nodes[0]) for group in groups] for item in items), problem.width
        )
    except EmbeddingOverflow:
        return None

    shape = tuple(group.state_count for group in groups)
    widest = max(group.size for group in groups)
    table = np.full(shape, NEG, dtype=np.int64)
    table[(0,) * len(groups)] = 0
    choices: list[npt.NDArray[np.int16]] = []
    for item in items:
        table, choice = _add_item(table, item, groups, embedding, widest)
        choices.append(choice)

    final = np.unravel_index(int(np.argmax(table)), shape)
    assignment = _backtrack(items, groups, choices, [int(k) for k in final], widest)
    return Solution(assignment, problem.objective(assignment), "dp", int(math.prod(shape)))


def _add_item(
    table: npt.NDArray[np.int64], item: Item, groups: list[NodeGroup], embedding: LexEmbedding, widest: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int16]]:
    best = table.copy()
    choice = np.zeros(table.shape, dtype=np.int16)
    for g, group in enumerate(groups):
        if item.weight > group.capacity:
            continue
        gain = embedding.embed(item.value_on(group.nodes[0]))
        axis_shape = [1] * table.ndim
        axis_shape[g] = group.state_count
        for step in _steps(group.capacity, group.size, item.weight):
            candidate = np.take(table, step.predecessor, axis=g)
            candidate = np.where(step.valid.reshape(axis_shape), candidate + gain, NEG)
            better = candidate > best
            if better.any():
                best = np.where(better, candidate, best)
                choice[better] = 1 + g * widest + step.position
    return best, choice


def _backtrack(
    items: tuple[Item, ...],
    groups: list[NodeGroup],
    choices: list[npt.NDArray[np.int16]],
    state: list[int],
    widest: int,
) -> tuple[int | None, ...]:
    chosen: list[tuple[int, int] | None] = [None] * len(items)
    for j in range(len(items) - 1, -1, -1):
        code = int(choices[j][tuple(state)])
        if code == 0:
            continue
        g, position = divmod(code - 1, widest)
        step = next(s for s in _steps(groups[g].capacity, groups[g].size, items[j].weight) if s.position == position)
        chosen[j] = (g, int(step.usage_before[state[g]]))
        state[g] = int(step.predecessor[state[g]])

    usage = [dict.fromkeys(group.nodes, 0) for group in groups]
    assignment: list[int | None] = [None] * len(items)
    for j, pick in enumerate(chosen):
        if pick is None:
            continue
        g, before = pick
        node = next(b for b, used in usage[g].items() if used == before)
        usage[g][node] += items[j].weight
        assignment[j] = node
    return tuple(assignment)
