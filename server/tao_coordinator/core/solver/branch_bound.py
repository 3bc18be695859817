"""Exact lexicographic multiple knapsack by depth-first branch and bound, with a certificate.

The search assigns items in a fixed order to a node or to nothing, and prunes a branch when an upper bound on every
completion cannot beat the incumbent lexicographically. The bound is componentwise — for each component j, the
most any completion could add to it — so a completion's value is componentwise ≤ (value so far + bound), hence
lexicographically ≤, and pruning is exact. Component j's bound is only computed when components 0…j−1 tie with
the incumbent.

Bounds of component j over the undecided items, given the capacity left:
- tabled: when every item's base value in j is 0 (cache credit, the held footprint, stability), the sum over
  nodes of the exact 0/1 knapsack optimum, in that node's remaining capacity, of the undecided items valued
  there. An item placed elsewhere or left out adds nothing to a node, so the only relaxation is that an item valued
  on several nodes may count on each.
- otherwise the smaller of: the fractional knapsack of the items' best values with all nodes pooled (the LP
  relaxation), and the sum over nodes of each node's own fractional knapsack rounded down (a node holds whole
  items, and values are integers).
- committed: when the first component is tabled and ties with the incumbent, a better completion must reach every
  node's own bound in it, so on node b the items valued there take at least the least weight reaching that bound.
  Then component j is bounded by the best values of those items plus, in the room they leave, the fractional
  knapsack of everything, rounded down per node.

Symmetry and dominance, both exact: when an item is left out, the next is too if it has the same values on every
node and no less weight (were it placed, the lighter one could take its place for the same value, so some optimum
never places the heavier while leaving the lighter out; swapping such pairs ends, since each swap moves a placement
to an earlier item); and nodes on which no undecided item has a special value and which have the same room are
interchangeable for the current item, so only the first is tried.

Order: first the items valued on several nodes in the first component (deciding them makes the tabled bounds of
every node exact), then those valued on one node, grouped by that node, each group by ratio of the first component
to weight; then the rest by the ratios of their later components. The search starts from a feasible incumbent —
given, or the kernel's home start: each node's credit-optimal set read back from its credit table, then the rest
greedily — so an interrupted search returns a plan at least that good, with `certified` false and `bound` the root
bound: the optimum lies between the objective and the bound.

The inner loops are compiled (`search_kernel.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .problem import Item, Problem, Solution
from .search_kernel import home_start, prepare, search
from .search_kernel import root_bound as kernel_root_bound

MAX_TABLE_CELLS = 1 << 22
"""Above this many table entries for a component (values summed per node, times items there), the component is
bounded fractionally instead: tables are for small integer values such as credit units."""

MAX_JOINT_SPAN = 64
"""Joint tables (first component × a later one) are built for later components whose sums over one node's items
stay below this: counts such as readiness."""


class _Arrays:
    """The problem in search order (module docstring) as the kernel's dense arrays, built by `prepare`."""

    def __init__(self, problem: Problem) -> None:
        items, width = problem.items, problem.width
        largest = problem.largest_capacity
        fits = [i for i, item in enumerate(items) if item.weight <= largest]
        weight = np.array([items[i].weight for i in fits], dtype=np.int64)
        # flat lists of ints convert to arrays several times faster than lists of tuples
        flat_base: list[int] = []
        flat_rows: list[int] = []
        for k, i in enumerate(fits):
            item = items[i]
            flat_base += item.base
            for b, node_value in item.on_nodes.items():
                flat_rows.append(k)
                flat_rows.append(b)
                flat_rows += node_value
        base = np.array(flat_base, dtype=np.int64).reshape(len(fits), width)
        rows = np.array(flat_rows, dtype=np.int64).reshape(-1, 2 + width)
        self.capacities = np.array(problem.capacities, dtype=np.int64)
        (
            order,
            self.weight,
            self.value,
            self.special,
            self.best,
            self.twin,
            self.last_special,
            self.lightest_after,
            self.orders,
            self.counts,
            self.tabled,
            self.offset,
            self.length,
            self.data,
            self.suffix_of,
            self.member_best,
            self.joint_offset,
            self.joint_span,
            self.joint_data,
        ) = prepare(weight, base, rows, self.capacities, MAX_TABLE_CELLS, MAX_JOINT_SPAN)
        self.order = [fits[k] for k in order.tolist()]

    def root_bound(self) -> tuple[int, ...]:
        bound = kernel_root_bound(
            self.capacities,
            int(self.lightest_after[0]),
            self.weight,
            self.best,
            self.orders,
            self.counts,
            self.tabled,
            self.offset,
            self.length,
            self.data,
            self.suffix_of,
        )
        return tuple(int(c) for c in bound)


def solve_branch_and_bound(problem: Problem, incumbent: Sequence[int | None] | None, node_limit: int) -> Solution:
    """The lexicographic optimum when the search finishes within `node_limit` nodes (`certified`), else the best
    plan found, never worse than the start: `incumbent` (a feasible assignment), or when None the kernel's own
    (`home_start`: credit-optimal when every session's credit sits on one node). Exclusions are solved through the
    problem's relaxation (`problem.py`)."""
    if problem.has_exclusions:
        return problem.restricted(solve_branch_and_bound(problem.relaxed(), incumbent, node_limit))
    if not any(problem.fits_somewhere(item) for item in problem.items):
        empty: tuple[int | None, ...] = (None,) * len(problem.items)
        objective = problem.objective(empty)
        return Solution(empty, objective, "exact", True, objective, exact_components=problem.width)
    arrays = _Arrays(problem)
    order = arrays.order
    if incumbent is None:
        path = home_start(
            arrays.weight,
            arrays.value,
            arrays.special,
            arrays.capacities,
            arrays.tabled,
            arrays.offset,
            arrays.length,
            arrays.data,
        )
    else:
        path = np.array([-1 if incumbent[i] is None else incumbent[i] for i in order], dtype=np.int64)
    nodes, finished, exact_components = 0, True, 0
    for used in sorted({1, problem.width}):
        path, nodes, finished = _stage(arrays, path, node_limit - nodes, used, nodes)
        if not finished:
            break
        exact_components = used
    assignment: list[int | None] = [None] * len(problem.items)
    for k, i in enumerate(order):
        assignment[i] = None if path[k] < 0 else int(path[k])
    objective = problem.objective(assignment)
    # componentwise: the proven components are the optimum's, the others at most the root bound's
    bound = objective[:exact_components] + arrays.root_bound()[exact_components:]
    method = "exact" if finished else "bounded"
    return Solution(
        tuple(assignment), objective, method, bool(finished), bound, int(nodes), exact_components=exact_components
    )


def _stage(
    arrays: _Arrays, start: npt.NDArray[np.int64], node_limit: int, used: int, nodes_before: int
) -> tuple[npt.NDArray[np.int64], int, bool]:
    """One stage: the optimum of the first `used` components. The first stage finds the best first component
    alone (cheap: its bound is exact per node); the second starts from that incumbent, so every branch that loses
    credit is cut at once."""
    path, _, nodes, finished = search(
        arrays.weight,
        arrays.value,
        arrays.best,
        arrays.special,
        arrays.capacities,
        arrays.twin,
        arrays.last_special,
        arrays.lightest_after,
        arrays.orders,
        arrays.counts,
        arrays.tabled,
        arrays.offset,
        arrays.length,
        arrays.data,
        arrays.suffix_of,
        arrays.member_best,
        arrays.joint_offset,
        arrays.joint_span,
        arrays.joint_data,
        start,
        max(node_limit, 1),
        used,
    )
    return path, nodes_before + int(nodes), bool(finished) and node_limit > 0


def _warm_up() -> None:
    """Compile (or load from Numba's on-disk cache) every kernel now, on a two-node instance that reaches each
    bound, so no plan pays for it."""
    items = (
        Item(3, (0, 1, 0), {0: (2, 1, 1)}),
        Item(2, (0, 0, 0), {1: (1, 0, 1)}),
        Item(2, (0, 1, 0)),
        Item(4, (0, 1, 0)),
    )
    problem = Problem(items, (4, 4))
    solve_branch_and_bound(problem, (None,) * len(items), 1)
    solve_branch_and_bound(problem, None, 1000)


_warm_up()
