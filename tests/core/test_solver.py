"""The solvers against the exact MILP reference on random small instances, and their structural promises."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tao_coordinator.core.solver import Item, Problem, solve
from tao_coordinator.core.solver.all_fit import solve_all_fit
from tao_coordinator.core.solver.dp import group_nodes, solve_dp
from tao_coordinator.core.solver.greedy import best_fit_decreasing, home_first
from tao_coordinator.core.solver.milp import solve_milp
from tao_coordinator.core.value import total


@st.composite
def problems(draw, max_nodes=4, max_items=8, max_capacity=12):
    node_count = draw(st.integers(1, max_nodes))
    if draw(st.booleans()):
        # many interchangeable nodes: exercises grouping
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
        items.append(Item(weight, base, on_nodes))
    problem = Problem(tuple(items), capacities)
    problem.validate()
    return problem


@settings(max_examples=500)
@given(problems())
def test_dp_reaches_the_milp_optimum_and_respects_capacities(problem):
    exact = solve_milp(problem)
    dp = solve_dp(problem, budget=10**7)
    assert exact is not None and dp is not None
    assert problem.is_feasible(dp.assignment)
    assert dp.objective == exact.objective
    assert dp.objective == problem.objective(dp.assignment)


@settings(max_examples=200)
@given(problems())
def test_pipeline_is_exact_within_budget_and_feasible_beyond_it(problem):
    exact = solve_milp(problem)
    assert exact is not None
    within = solve(problem, budget=10**7)
    assert within.method in ("all-fit", "dp")
    assert within.objective == exact.objective
    beyond = solve(problem, budget=1)
    assert problem.is_feasible(beyond.assignment)
    assert beyond.objective <= exact.objective


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
def test_fallbacks_are_feasible_and_home_first_reaches_the_optimal_credit(problem):
    exact = solve_milp(problem)
    assert exact is not None
    for fallback in (best_fit_decreasing(problem), home_first(problem)):
        assert problem.is_feasible(fallback.assignment)
        assert fallback.objective <= exact.objective
    single_home = all(sum(v[0] > item.base[0] for v in item.on_nodes.values()) <= 1 for item in problem.items)
    if single_home and problem.items:
        assert home_first(problem).objective[0] == exact.objective[0]


def test_identical_nodes_form_one_group_with_multiset_states():
    items = tuple(Item(3, (0, 1, 3, 0)) for _ in range(5))
    problem = Problem(items, (6, 6, 6, 6))
    groups = group_nodes(problem)
    assert len(groups) == 1 and groups[0].size == 4
    # multisets of 4 usages in [0, 6]: C(10, 4) = 210 states instead of 7**4 = 2401
    assert groups[0].state_count == 210
    solution = solve_dp(problem, budget=10**6)
    assert solution is not None
    assert None not in solution.assignment
    assert problem.is_feasible(solution.assignment)


def test_credit_on_one_node_splits_it_from_its_group():
    items = (Item(3, (0, 1, 3, 0), {2: (4, 1, 3, 0)}), Item(3, (0, 1, 3, 0)))
    groups = group_nodes(Problem(items, (6, 6, 6)))
    assert sorted(group.nodes for group in groups) == [(0, 1), (2,)]


def test_dp_declines_instances_over_budget():
    items = tuple(Item(1, (0, 1, 1, 0), {b: (1, 1, 1, 0)}) for b in range(6))
    assert solve_dp(Problem(items, (100,) * 6), budget=10_000) is None


def test_lexicographic_order_beats_any_amount_of_lower_components():
    # one unit of credit outranks readiness and any footprint
    credited = Item(5, (0, 0, 1, 0), {0: (1, 0, 1, 0)})
    ready_and_big = Item(5, (0, 1, 1000, 0))
    problem = Problem((credited, ready_and_big), (5,))
    for solution in (solve_dp(problem, 10**6), solve_milp(problem)):
        assert solution is not None
        assert solution.assignment == (0, None)


def test_items_that_fit_nowhere_are_never_placed():
    problem = Problem((Item(50, (0, 1, 50, 0)), Item(2, (0, 1, 2, 0))), (10, 10))
    solution = solve(problem, budget=10**6)
    assert solution.assignment[0] is None and solution.assignment[1] is not None


@pytest.mark.parametrize("budget", [1, 10**7])
def test_empty_problems(budget):
    assert solve(Problem((), (4, 4)), budget).assignment == ()
    assert solve(Problem((Item(1, (0, 1, 1, 0)),), ()), budget).assignment == (None,)


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
