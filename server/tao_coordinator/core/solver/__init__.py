"""Solvers for the placement problem: the certified all-fit path, the exact DP, the greedy fallback, and the MILP
reference (imported lazily, only by tests and benchmarks: it needs SciPy).

`solve` is the pipeline TAO plans with: all-fit when it reaches the upper bound, else the DP when the instance is
within budget, else the home-first decomposition. `solve_greedy` is plain best-fit decreasing.
"""

from __future__ import annotations

from .all_fit import solve_all_fit
from .dp import solve_dp
from .greedy import best_fit_decreasing, home_first
from .problem import Item, Problem, Solution


def solve(problem: Problem, budget: int) -> Solution:
    placeable = [item for item in problem.items if problem.fits_somewhere(item)]
    if not placeable:
        assignment: tuple[int | None, ...] = (None,) * len(problem.items)
        return Solution(assignment, problem.objective(assignment), "all-fit")
    certified = solve_all_fit(problem)
    if certified is not None:
        return certified
    exact = solve_dp(_only_placeable(problem), budget)
    if exact is not None:
        return _expand(problem, exact)
    return home_first(problem)


def solve_greedy(problem: Problem) -> Solution:
    return best_fit_decreasing(problem)


def _only_placeable(problem: Problem) -> Problem:
    return Problem(tuple(item for item in problem.items if problem.fits_somewhere(item)), problem.capacities)


def _expand(problem: Problem, reduced: Solution) -> Solution:
    """Map a solution of `_only_placeable(problem)` back onto every item of `problem`."""
    picks = iter(reduced.assignment)
    assignment = tuple(next(picks) if problem.fits_somewhere(item) else None for item in problem.items)
    return Solution(assignment, reduced.objective, reduced.method, reduced.dp_states)


__all__ = ["Item", "Problem", "Solution", "solve", "solve_greedy"]
