"""Solvers for the placement problem: the certified all-fit path, the exact branch and bound, the greedy heuristics,
and the MILP reference (imported lazily, only by tests and benchmarks: it needs SciPy).

`solve` is the pipeline TAO plans with: all-fit when it reaches the upper bound; else branch and bound, certified
optimal when the search finishes within `node_limit` nodes, and otherwise the best plan found with a certified upper
bound. The search starts from the compiled kernel's home start (the per-node credit knapsacks read back from its
bound tables, then the rest greedily), which makes its first stage end at the root whenever credit is
single-homed. Only when even that credit stage is cut short is `greedy.home_first` (in Python, lexicographic in
every component of the home sets) consulted, and the better plan kept: at 1,024 sessions on 64 nodes it took
17 ms a plan and, where only later stages were cut short, beat the search in held footprint alone, by at most
0.3 %. `solve_greedy` is plain best-fit decreasing (the paper's fallback). Both solve a problem with excluded
placements (nodes that do not serve an item's model) exactly through its relaxation (`problem.py`).
"""

from __future__ import annotations

from dataclasses import replace

from .all_fit import solve_all_fit
from .branch_bound import solve_branch_and_bound
from .greedy import best_fit_decreasing, home_first
from .problem import Item, Problem, Solution, relative_gap


def solve(problem: Problem, node_limit: int) -> Solution:
    if problem.has_exclusions:
        return problem.restricted(_solve(problem.relaxed(), node_limit))
    return _solve(problem, node_limit)


def _solve(problem: Problem, node_limit: int) -> Solution:
    if not any(problem.fits_somewhere(item) for item in problem.items):
        assignment: tuple[int | None, ...] = (None,) * len(problem.items)
        objective = problem.objective(assignment)
        return Solution(assignment, objective, "all-fit", True, objective, exact_components=problem.width)
    certified = solve_all_fit(problem)
    if certified is not None:
        return certified
    searched = solve_branch_and_bound(problem, None, node_limit)
    if searched.exact_components >= 1:
        return searched  # certified, or credit proven and only later components cut short
    fallback = home_first(problem)
    if fallback.objective <= searched.objective:
        return searched
    return replace(searched, assignment=fallback.assignment, objective=fallback.objective)  # under the same bound


def solve_greedy(problem: Problem) -> Solution:
    if problem.has_exclusions:
        return problem.restricted(best_fit_decreasing(problem.relaxed()))
    return best_fit_decreasing(problem)


__all__ = ["Item", "Problem", "Solution", "relative_gap", "solve", "solve_greedy"]
