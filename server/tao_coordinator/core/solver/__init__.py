"""Solvers for the placement problem: the certified all-fit path, the exact branch and bound, the greedy heuristics,
and the MILP reference (imported lazily, only by tests and benchmarks: it needs SciPy).

`solve` is the pipeline TAO plans with: all-fit when it reaches the upper bound; else branch and bound, certified
optimal when the search finishes within `node_limit` nodes, and otherwise the better of the best plan found and the
home-first plan, with a certified upper bound. The search starts from the compiled kernel's home start (the
per-node credit knapsacks read back from its bound tables, then the rest greedily), which makes its first stage
end at the root whenever credit is single-homed; `greedy.home_first`, in Python and lexicographic in every
component of the home sets, is only consulted when the search is cut short. `solve_greedy` is plain best-fit
decreasing (the paper's fallback).
"""

from __future__ import annotations

from dataclasses import replace

from .all_fit import solve_all_fit
from .branch_bound import solve_branch_and_bound
from .greedy import best_fit_decreasing, home_first
from .problem import Item, Problem, Solution, relative_gap


def solve(problem: Problem, node_limit: int) -> Solution:
    if not any(problem.fits_somewhere(item) for item in problem.items):
        assignment: tuple[int | None, ...] = (None,) * len(problem.items)
        objective = problem.objective(assignment)
        return Solution(assignment, objective, "all-fit", True, objective, exact_components=problem.width)
    certified = solve_all_fit(problem)
    if certified is not None:
        return certified
    searched = solve_branch_and_bound(problem, None, node_limit)
    if searched.certified:
        return searched
    fallback = home_first(problem)
    if fallback.objective <= searched.objective:
        return searched
    # the components the search proved are the optimum's, so a better fallback ties them: still proven
    return replace(searched, assignment=fallback.assignment, objective=fallback.objective)


def solve_greedy(problem: Problem) -> Solution:
    return best_fit_decreasing(problem)


__all__ = ["Item", "Problem", "Solution", "relative_gap", "solve", "solve_greedy"]
