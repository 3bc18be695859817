"""Exact reference solver: the same problem as a mixed-integer program, solved by HiGHS through SciPy.

An item's excluded nodes (nodes that do not serve its model) get no variable: the reference states eligibility as
the constraint it is, not as the solvers' relaxation (`problem.py`), so tests comparing the two check that relaxation.

Lexicographic objectives are solved one component at a time: maximise component 1; add "component 1 ≥ its optimum"
as a constraint; maximise component 2; and so on. All data are integers, so the added constraints are exact.
Used by tests and `tao bench planner` to check the branch and bound and measure the gap of the plans it does not
certify; never on the planning path.

Each stage is solved to `mip_rel_gap` (0 by default: proven optimal). HiGHS's own default, 1e-4, would accept an
incumbent 10 units short of a 10^5 optimum, and an early stage's shortfall is then fixed as a constraint of every
later stage, so the later components would be optimised over the wrong set: a reference must not accept a gap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from .problem import Problem, Solution


def solve_milp(problem: Problem, time_limit_s: float | None = None, mip_rel_gap: float = 0.0) -> Solution | None:
    """The lexicographic optimum, or None when HiGHS did not reach `mip_rel_gap` within the time limit (which
    applies to each component's solve)."""
    if mip_rel_gap < 0:
        raise ValueError("mip_rel_gap: must be at least 0")
    items, capacities = problem.items, problem.capacities
    pairs = [
        (i, b)
        for i, item in enumerate(items)
        for b, cap in enumerate(capacities)
        if item.weight <= cap and b not in item.excluded
    ]
    if not pairs:
        assignment: tuple[int | None, ...] = (None,) * len(items)
        return Solution(assignment, problem.objective(assignment), "milp")
    count = len(pairs)
    rows = lil_matrix((len(items) + len(capacities), count))
    for k, (i, b) in enumerate(pairs):
        rows[i, k] = 1
        rows[len(items) + b, k] = items[i].weight
    upper = np.array([1.0] * len(items) + [float(c) for c in capacities])
    constraints = [LinearConstraint(rows.tocsr(), -np.inf, upper)]
    values = np.array([items[i].value_on(b) for i, b in pairs], dtype=float).reshape(count, problem.width)
    options: dict[str, Any] = {"mip_rel_gap": mip_rel_gap}
    if time_limit_s is not None:
        options["time_limit"] = time_limit_s

    x = None
    for component in range(problem.width):
        result = milp(
            -values[:, component],
            integrality=np.ones(count, dtype=np.int64),
            bounds=Bounds(0, 1),
            constraints=constraints,
            options=options,  # type: ignore[arg-type]
        )
        if result.status != 0 or result.x is None:
            return None
        x = np.round(result.x)
        reached = float(values[:, component] @ x)
        constraints.append(LinearConstraint(values[:, component].reshape(1, -1), reached - 0.5, np.inf))

    chosen: list[int | None] = [None] * len(items)
    assert x is not None
    for k, (i, b) in enumerate(pairs):
        if x[k] > 0.5:
            chosen[i] = b
    return Solution(tuple(chosen), problem.objective(chosen), "milp")
