"""The solvers against the exact MILP reference on random small instances, and their structural promises.

Fleet-sized instances of realistic shape are in `test_solver_realistic.py`.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tao_coordinator.core.solver import Item, Problem, solve, solve_greedy
from tao_coordinator.core.solver.all_fit import solve_all_fit
from tao_coordinator.core.solver.branch_bound import solve_branch_and_bound
from tao_coordinator.core.solver.greedy import best_fit_decreasing, home_first
from tao_coordinator.core.solver.milp import solve_milp
from tao_coordinator.core.value import total


@st.composite
def problems(draw, max_nodes=4, max_items=8, max_capacity=12, eligibility=False):
    node_count = draw(st.integers(1, max_nodes))
    if draw(st.booleans()):
        # many interchangeable nodes: exercises the search's node symmetry
        capacities = (draw(st.integers(0, max_capacity)),) * node_count
    else:
        capacities = tuple(draw(st.integers(0, max_capacity)) for _ in range(node_count))
    items = []
    for _ in range(draw(st.integers(0, max_items))):
        weight = draw(st.integers(0, 7))
        base = (0, draw(st.integers(0, 1)), draw(st.integers(0, 9)), 0)
        on_nodes = {}
        for b in range(node_count):
            if draw(st.integers(0, 3)) == 0:
                on_nodes[b] = (draw(st.integers(0, 5)), base[1], base[2], draw(st.integers(0, 1)))
        # nodes that do not serve the item's model; values there stay drawn (credit on a node that stopped serving it)
        excluded = frozenset(b for b in range(node_count) if eligibility and draw(st.integers(0, 2)) == 0)
        items.append(Item(weight, base, on_nodes, excluded))
    problem = Problem(tuple(items), capacities)
    problem.validate()
    return problem


@settings(max_examples=500, deadline=None)
@given(problems())
def test_branch_and_bound_reaches_the_milp_optimum_and_certifies_it(problem):
    exact = solve_milp(problem)
    found = solve_branch_and_bound(problem, (None,) * len(problem.items), node_limit=10**6)
    assert exact is not None
    assert problem.is_feasible(found.assignment)
    assert found.certified and found.method == "exact"
    assert found.objective == exact.objective == problem.objective(found.assignment)


@settings(max_examples=200, deadline=None)
@given(problems())
def test_pipeline_is_exact_and_a_cut_search_keeps_a_true_bound(problem):
    exact = solve_milp(problem)
    assert exact is not None
    within = solve(problem, node_limit=10**6)
    assert within.certified and within.method in ("all-fit", "exact")
    assert within.objective == exact.objective
    cut = solve(problem, node_limit=1)
    assert problem.is_feasible(cut.assignment)
    assert cut.objective <= exact.objective
    assert cut.bound is not None and exact.objective <= cut.bound
    if not cut.certified:
        assert cut.method == "bounded"


@settings(max_examples=300, deadline=None)
@given(problems(eligibility=True))
def test_with_eligibility_every_solver_keeps_to_eligible_nodes_and_the_exact_ones_reach_the_milp_optimum(problem):
    exact = solve_milp(problem)
    assert exact is not None and problem.is_feasible(exact.assignment)
    searched = solve_branch_and_bound(problem, (None,) * len(problem.items), node_limit=10**6)
    within = solve(problem, node_limit=10**6)
    for found in (searched, within):
        assert problem.is_feasible(found.assignment), "a placement on an excluded node"
        assert found.certified and found.objective == exact.objective == problem.objective(found.assignment)
    cut = solve(problem, node_limit=1)
    assert problem.is_feasible(cut.assignment) and cut.objective <= exact.objective
    assert cut.bound is not None and exact.objective <= cut.bound
    greedy = solve_greedy(problem)
    assert problem.is_feasible(greedy.assignment) and greedy.objective == problem.objective(greedy.assignment)


def test_an_item_no_eligible_node_serves_is_left_out_though_its_value_there_is_highest():
    problem = Problem((Item(1, (0, 1), {0: (5, 1)}, frozenset({0})), Item(1, (0, 1))), (1, 1))
    found = solve(problem, node_limit=10**6)
    assert found.assignment[0] in (1, None) and problem.is_feasible(found.assignment)
    assert found.objective == (0, 2) and found.certified


@settings(max_examples=200)
@given(problems())
def test_all_fit_answers_only_with_the_upper_bound(problem):
    certified = solve_all_fit(problem)
    if certified is None:
        return
    node_count = len(problem.capacities)
    bound = total(
        (item.best_value(node_count) for item in problem.items if problem.fits_somewhere(item)), problem.width
    )
    assert problem.is_feasible(certified.assignment)
    assert certified.objective == bound


@settings(max_examples=200)
@given(problems())
def test_heuristics_are_feasible_and_both_home_starts_reach_the_optimal_credit(problem):
    exact = solve_milp(problem)
    assert exact is not None
    for fallback in (best_fit_decreasing(problem), home_first(problem)):
        assert problem.is_feasible(fallback.assignment)
        assert fallback.objective <= exact.objective
    # the search stopped after its root returns its own start: the kernel's home start
    kernel_start = solve_branch_and_bound(problem, None, node_limit=1)
    assert problem.is_feasible(kernel_start.assignment)
    assert kernel_start.objective <= exact.objective
    single_home = all(sum(v[0] > item.base[0] for v in item.on_nodes.values()) <= 1 for item in problem.items)
    if single_home and problem.items:
        assert home_first(problem).objective[0] == exact.objective[0]
        assert kernel_start.objective[0] == exact.objective[0]


def test_the_kernel_start_solves_each_nodes_credit_knapsack_where_greedy_would_not():
    # by credit per cell the first session comes first, and then neither of the others fits beside it
    dense = Item(6, (0, 1, 0, 0), {0: (7, 1, 0, 0)})
    halves = [Item(5, (0, 1, 0, 0), {0: (5, 1, 0, 0)}) for _ in range(2)]
    newcomer = Item(4, (0, 1, 0, 0))
    problem = Problem((dense, *halves, newcomer), (10, 4))
    start = solve_branch_and_bound(problem, None, node_limit=1)
    assert start.assignment == (None, 0, 0, 1)
    assert start.objective[0] == 10


def test_lexicographic_order_beats_any_amount_of_lower_components():
    # one unit of credit outranks readiness and any footprint
    credited = Item(5, (0, 0, 1, 0), {0: (1, 0, 1, 0)})
    ready_and_big = Item(5, (0, 1, 1000, 0))
    problem = Problem((credited, ready_and_big), (5,))
    for solution in (solve(problem, 10**6), solve_milp(problem)):
        assert solution is not None
        assert solution.assignment == (0, None)


def test_items_that_fit_nowhere_are_never_placed():
    problem = Problem((Item(50, (0, 1, 50, 0)), Item(2, (0, 1, 2, 0))), (10, 10))
    solution = solve(problem, node_limit=10**6)
    assert solution.assignment[0] is None and solution.assignment[1] is not None


@pytest.mark.parametrize("node_limit", [1, 10**7])
def test_empty_problems(node_limit):
    assert solve(Problem((), (4, 4)), node_limit).assignment == ()
    assert solve(Problem((Item(1, (0, 1, 1, 0)),), ()), node_limit).assignment == (None,)


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        (Problem((), (-1,)), "capacities"),
        (Problem((Item(-1, (0,)),), (1,)), "weights"),
        (Problem((Item(1, (0,)), Item(1, (0, 1))), (1,)), "same number"),
        (Problem((Item(1, (0,), {3: (1,)}),), (1,)), "out of range"),
    ],
)
def test_malformed_problems_are_named(problem, message):
    with pytest.raises(ValueError, match=message):
        problem.validate()


def test_all_fit_spreads_sessions_without_credit_across_nodes():
    items = tuple(Item(10, (0, 1, 10, 0)) for _ in range(6))
    solution = solve_all_fit(Problem(items, (100, 100, 100)))
    assert solution is not None and sorted(solution.assignment) == [0, 0, 1, 1, 2, 2]


def test_all_fit_packs_tightly_when_spreading_would_not_fit():
    # spreading the two 5s over both nodes leaves no node for the 10
    items = (Item(5, (0, 1, 5, 0)), Item(5, (0, 1, 5, 0)), Item(10, (0, 1, 10, 0)))
    solution = solve_all_fit(Problem(items, (10, 10)))
    assert solution is not None and None not in solution.assignment
