"""Between snapshots and solvers: build the placement problem of design §5, and turn a solution into a plan.

Items are the candidate sessions (everything but IN_LLM); knapsacks are the healthy nodes, with capacity
`capacity × utilisation target` minus what their in-LLM sessions hold, in cells of the capacity quantum (rounded
down); weights are footprints rounded up, so any plan the solver returns fits. A session larger than any node's
plannable capacity is charged that capacity instead: it can then be admitted alone on a node that drains, rather
than wait forever (vLLM itself accepts it up to `max_model_len`). A session's value comes from the policy's
`ValueModel`.

The plan lists only changes: interruptions first (they free capacity), then moves, then admissions, each group by
descending value, so the longest valid prefix the planner applies keeps the most valuable decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import NodeId, Phase, Session
from ..plan import Placement, Plan
from ..signals.base import SignalContext
from ..signals.footprint import footprint_tokens
from ..snapshot import Snapshot
from ..solver.problem import Item, Problem, Solution, relative_gap
from ..state import capacity_cells, largest_plannable_tokens, token_cells
from ..value import Value, ValueModel


@dataclass(frozen=True, slots=True)
class PlacementProblem:
    problem: Problem
    sessions: tuple[Session, ...]
    node_ids: tuple[NodeId, ...]
    weight_tokens: tuple[int, ...]


def build_problem(snapshot: Snapshot, values: ValueModel) -> PlacementProblem:
    settings = snapshot.settings
    healthy = [node for node in snapshot.nodes if node.healthy]
    index = {node.id: k for k, node in enumerate(healthy)}
    free = [capacity_cells(node, settings) for node in healthy]
    ctx = SignalContext(snapshot.now, settings, {node.id: node for node in healthy})

    candidates: list[Session] = []
    for session in snapshot.sessions:
        if session.phase is Phase.IN_LLM:
            if session.node in index:
                free[index[session.node]] -= token_cells(footprint_tokens(session, settings), settings)
        elif session.is_candidate:
            candidates.append(session)

    largest = largest_plannable_tokens(healthy, settings)
    items: list[Item] = []
    weights: list[int] = []
    for session in candidates:
        tokens = min(footprint_tokens(session, settings), largest)
        value = values.evaluate(session, ctx)
        on_nodes = {index[node]: v for node, v in value.on_nodes.items() if node in index}
        items.append(Item(token_cells(tokens, settings), value.base, on_nodes))
        weights.append(tokens)
    problem = Problem(tuple(items), tuple(max(0, cells) for cells in free))
    return PlacementProblem(problem, tuple(candidates), tuple(node.id for node in healthy), tuple(weights))


def plan_from_solution(placement: PlacementProblem, solution: Solution) -> Plan:
    interrupts: list[Placement] = []
    ranked: list[tuple[int, Value, str, Placement]] = []
    for i, (session, target) in enumerate(zip(placement.sessions, solution.assignment, strict=True)):
        node = None if target is None else placement.node_ids[target]
        if node == session.node:
            continue
        change = Placement(session.id, session.version, node, placement.weight_tokens[i])
        if node is None:
            interrupts.append(change)
        else:
            assert target is not None
            group = 0 if session.node is not None else 1
            ranked.append((group, placement.problem.items[i].value_on(target), session.id, change))
    ranked.sort(key=lambda entry: (entry[0], _descending(entry[1]), entry[2]))
    return Plan(
        tuple(interrupts + [change for *_, change in ranked]),
        solution.method,
        solution.objective,
        len(placement.sessions),
        solution.certified,
        None if solution.certified or solution.bound is None else relative_gap(solution.bound, solution.objective),
    )


def _descending(value: Value) -> Value:
    return tuple(-component for component in value)
