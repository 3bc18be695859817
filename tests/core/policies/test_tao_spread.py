"""tao-spread breaks TAO's ties towards the emptiest node and changes nothing else."""

from tao_coordinator.core.policies.tao_spread import spread
from tao_coordinator.core.solver import solve
from tao_coordinator.core.solver.problem import Item, Problem, Solution


def test_new_sessions_spread_over_equal_nodes_with_the_same_objective():
    # four node-indifferent sessions of 10 cells on two nodes of 40, packed on one node as best fit would
    problem = Problem(tuple(Item(10, (0, 1, 10)) for _ in range(4)), (40, 40))
    packed = Solution((0, 0, 0, 0), problem.objective((0, 0, 0, 0)), "greedy")
    spread_out = spread(problem, packed)
    assert sorted(spread_out.assignment) == [0, 0, 1, 1]
    assert problem.objective(spread_out.assignment) == packed.objective == spread_out.objective
    assert problem.is_feasible(spread_out.assignment)


def test_sessions_worth_more_on_their_node_stay_there():
    # item 0 has cache credit (or stability) on node 0: moving it would lose value, so it stays although node 1 is empty
    items = (Item(10, (0, 1, 10), {0: (3, 1, 10)}), Item(10, (0, 1, 10)))
    problem = Problem(items, (40, 40))
    result = spread(problem, solve(problem, 1 << 15))
    assert result.assignment[0] == 0
    assert result.assignment[1] == 1
