"""`tao-spread`: TAO with worst-fit instead of best-fit among equally valued nodes — a prototype, not TAO as published.

Why: TAO's value has no load term, so when several nodes are worth the same to a session (no cache credit anywhere,
or the same credit) the solvers' tie-break decides, and most of them break ties to the *tightest* node (BFD by best
fit, the branch and bound's home start by the tightest fit; only all-fit spreads, and only when everything fits). On a
fleet that is not full this packs new sessions
onto as few nodes as possible: in an early benchmark run one node of four served twice the requests of
another, its batches decoded slower, and its KV had no room left for the next, larger prompts of its sessions.

What: solve exactly as `tao` does, then move each newly placed session, largest first, to the node with the most
room left among the nodes where its value is *the same*, when that node would still have more room than its current
one. Only ties move: every moved session keeps its value, so the plan's objective is exactly TAO's optimum, and every
move is checked against capacity. Sessions that hold a place keep it (stability makes their current node worth
more). This belongs in the solvers' tie-break; it lives here until the lead decides.
"""

from __future__ import annotations

from dataclasses import replace

from ..plan import Plan
from ..snapshot import Snapshot
from ..solver import solve
from ..solver.problem import Problem, Solution
from .problem import build_problem, plan_from_solution
from .tao import TaoPolicy, value


def spread(problem: Problem, solution: Solution) -> Solution:
    """The same objective with ties broken towards the emptiest node (see the module docstring)."""
    remaining = list(problem.capacities)
    assignment = list(solution.assignment)
    for i, node in enumerate(assignment):
        if node is not None:
            remaining[node] -= problem.items[i].weight
    placed = [i for i, node in enumerate(assignment) if node is not None]
    placed.sort(key=lambda i: -problem.items[i].weight)
    for i in placed:
        item, current = problem.items[i], assignment[i]
        assert current is not None
        value = item.value_on(current)
        target, room = current, remaining[current]
        for node, left in enumerate(remaining):
            eligible = node not in item.excluded
            if node != current and eligible and left - item.weight > room and item.value_on(node) == value:
                target, room = node, left - item.weight
        if target != current:
            remaining[current] += item.weight
            remaining[target] -= item.weight
            assignment[i] = target
    return replace(solution, assignment=tuple(assignment))


class TaoSpreadPolicy(TaoPolicy):
    def plan(self, snapshot: Snapshot) -> Plan:
        placement = build_problem(snapshot, self.values, self.value_cache)
        solution = spread(placement.problem, solve(placement.problem, snapshot.settings.exact_node_limit))
        return plan_from_solution(placement, solution)


def tao_spread() -> TaoSpreadPolicy:
    return TaoSpreadPolicy("tao-spread", value())
