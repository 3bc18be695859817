"""The exact solver on instances shaped like the fleets it plans for, against the MILP at zero gap.

Realistic shapes: a node with more than 20 sessions at home on it, sessions with credit on several
nodes, eight nodes that all hold credit, and sessions almost as large as a node. Values are TAO's: cache credit in
units, decayed from the context with a random age; readiness; held footprint in units; stability. Weights and
capacities are in 16-token cells of an H100-TP4 node. Seeded, so every run checks the same instances.

These are harder than the snapshots the dev replays produce (`tao bench planner` measures those): with a crowded
node and several multi-homed sessions the second stage may not finish in the default node limit, which is why one
test holds the certificate and the bound to the MILP and another asks for exactness on the common shape.
"""

import random

import pytest

from tao_coordinator.core.solver import Item, Problem, relative_gap, solve
from tao_coordinator.core.solver.milp import solve_milp

NODE_CELLS = 50_400


def fleet_instance(seed: int, nodes: int = 8, crowded_node_sessions: int = 24, multi_homed: int = 4) -> Problem:
    rng = random.Random(seed)
    capacities = [rng.randint(NODE_CELLS // 3, NODE_CELLS) for _ in range(nodes)]
    items = []

    def credit(weight: int) -> int:
        # the context in credit units (a cell is 16 tokens, a unit 1,024), halved every 10 s since the last call
        return max(1, int(weight / 64 * 2 ** (-rng.expovariate(1 / 8) / 10)))

    def session(weight: int, home: int | None, ready: int, resident: bool) -> Item:
        base = (0, ready, 0, 0)
        if home is None:
            return Item(weight, base)
        held = weight // 64 if resident else 0
        return Item(weight, base, {home: (credit(weight), ready, held, int(resident))})

    # node 0 is crowded with small sessions at home
    for _ in range(crowded_node_sessions):
        weight = rng.randint(400, 2_400)
        items.append(session(weight, 0, rng.random() < 0.2, rng.random() < 0.6))
    # every node holds credit of a few large sessions
    for node in range(nodes):
        for _ in range(rng.randint(3, 6)):
            weight = rng.randint(3_000, 12_000)
            items.append(session(weight, node, rng.random() < 0.15, rng.random() < 0.7))
    # sessions with credit on two or three nodes (moved once, or evidence from several calls)
    for _ in range(multi_homed):
        weight = rng.randint(2_000, 8_000)
        homes = rng.sample(range(nodes), rng.randint(2, 3))
        ready = int(rng.random() < 0.5)
        on_nodes = {b: (credit(weight), ready, 0, 0) for b in homes}
        items.append(Item(weight, (0, ready, 0, 0), on_nodes))
    # waiting sessions without credit, some nearly a whole node
    for _ in range(8):
        weight = rng.choice([rng.randint(1_000, 6_000), rng.randint(40_000, NODE_CELLS)])
        items.append(session(weight, None, 1, False))
    problem = Problem(tuple(items), tuple(capacities))
    problem.validate()
    return problem


def assert_gap_certified(found, optimum):
    """The certified gap is a statement about the first component where the bound exceeds the plan: the optimum
    ties the plan before it and falls short of the plan there by no more than the bound does."""
    j = next(j for j, (b, v) in enumerate(zip(found.bound, found.objective, strict=True)) if b != v)
    assert optimum[:j] == found.objective[:j]
    assert optimum[j] - found.objective[j] <= found.bound[j] - found.objective[j]
    assert relative_gap(found.bound, found.objective) == (found.bound[j] - found.objective[j]) / max(1, found.bound[j])


@pytest.mark.parametrize("seed", range(6))
def test_on_fleet_sized_instances_credit_is_proven_and_the_bound_is_true(seed):
    problem = fleet_instance(seed)
    homes = [max(item.on_nodes, key=lambda b: item.on_nodes[b][0]) for item in problem.items if item.on_nodes]
    assert homes.count(0) > 20
    assert len(set(homes)) == len(problem.capacities)
    assert sum(len(item.on_nodes) > 1 for item in problem.items) >= 4

    found = solve(problem, node_limit=20_000)
    exact = solve_milp(problem, time_limit_s=120)
    assert exact is not None
    assert problem.is_feasible(found.assignment)
    # the first stage always finishes: the credit kept is the optimum
    assert found.exact_components >= 1
    assert found.objective[0] == exact.objective[0]
    assert found.bound is not None and found.objective <= exact.objective <= found.bound
    if found.certified:
        assert found.objective == exact.objective
    else:
        assert_gap_certified(found, exact.objective)


@pytest.mark.parametrize("seed", range(6))
def test_exact_solver_matches_the_zero_gap_milp_on_eight_credited_nodes(seed):
    # every node holds credit; no crowded node, no multi-homed session: what the dev replays mostly produce
    problem = fleet_instance(seed, crowded_node_sessions=0, multi_homed=0)
    found = solve(problem, node_limit=200_000)
    exact = solve_milp(problem, time_limit_s=120)
    assert exact is not None
    assert found.certified, f"search visited {found.search_nodes} nodes without finishing"
    assert found.objective == exact.objective
    assert problem.is_feasible(found.assignment)


@pytest.mark.parametrize("seed", range(6, 10))
def test_a_search_cut_short_returns_a_feasible_plan_under_a_true_bound(seed):
    problem = fleet_instance(seed)
    exact = solve_milp(problem, time_limit_s=120)
    assert exact is not None
    cut = solve(problem, node_limit=3)
    assert problem.is_feasible(cut.assignment)
    assert cut.bound is not None
    assert cut.objective <= exact.objective <= cut.bound
    if not cut.certified:
        assert_gap_certified(cut, exact.objective)
