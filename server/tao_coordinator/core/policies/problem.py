"""Between snapshots and solvers: build the placement problem (a lexicographic multiple knapsack,
docs/algorithm.md), and turn a solution into a plan that carries its values.

Items are the candidate sessions (everything but IN_LLM); knapsacks are the healthy nodes, with capacity `capacity ×
utilisation target` minus what their in-LLM sessions hold, in cells of the capacity quantum (rounded down); weights
are footprints rounded up, so any plan the solver returns fits. A session larger than every plannable capacity of the
nodes serving its model is charged the largest of them instead (`state.ChargeCap`): it can then be admitted alone on
such a node once it drains, rather than wait forever (vLLM itself accepts it up to `max_model_len`). A session's value
comes from the policy's `ValueModel`. A session may not go to a node that does not serve its main model
(`eligibility.py`): its item excludes those nodes, and the solvers keep to the rest exactly (`solver/problem.py`).

Values are kept from one plan to the next (`ValueCache`), signal by signal (`value.SignalPart`): a session is
evaluated afresh when its `AgentSession` object changed (every transition makes a new one) or the healthy nodes, the
models they serve or the settings changed; otherwise only the signals whose part reached its next step
(`SignalPart.until`) or one of whose node attributes (`Signal.node_fields`) changed on some node are evaluated again,
and the item is rebuilt only when a part came out different. Between decision points most sessions change in none of
these ways — and a node's measured step time, which changes often, moves only the token time of sessions waiting
without a place — so most plans evaluate a handful of parts instead of every session; a plan built with or without the
cache is the same.

The plan lists only changes: interruptions first (they free capacity), then moves, then admissions, each group by
descending value, so the longest valid prefix the planner applies keeps the most valuable decisions. It carries the
value it ranked each change by (`Plan.values`), so the decision record (`core/decision.py`) evaluates nothing again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..eligibility import serves, session_model
from ..model import AgentSession, Node, NodeId, Phase, SessionId
from ..plan import Placement, Plan
from ..settings import CoreSettings
from ..signals.base import SignalContext
from ..signals.footprint import footprint_tokens
from ..signals.workflow import WorkflowIndex
from ..snapshot import Snapshot
from ..solver.problem import Item, Problem, Solution, relative_gap
from ..state import ChargeCap, capacity_cells, token_cells
from ..value import SessionValue, SignalPart, Value, ValueModel


@dataclass(frozen=True, slots=True)
class PlacementProblem:
    problem: Problem
    sessions: tuple[AgentSession, ...]
    node_ids: tuple[NodeId, ...]
    weight_tokens: tuple[int, ...]
    values: tuple[SessionValue, ...]
    """Each candidate's value, as its item carries it (by node id rather than by knapsack)."""
    value_names: tuple[str, ...]


@dataclass(slots=True)
class _Kept:
    session: AgentSession
    parts: list[SignalPart]
    since: list[float]
    """When each part was evaluated: it holds from then until its `until`."""
    value: SessionValue
    footprint: int
    item: Item
    """The session's item, its weight from `tokens`: the footprint, capped at the largest plannable capacity."""
    tokens: int


class ValueCache:
    """What `build_problem` evaluated for each candidate at the last plan, and under which nodes and settings.
    Owned by one policy; used by one plan at a time (the planner never runs two plans at once)."""

    def __init__(self) -> None:
        self._inputs: object = None
        self._signal_inputs: tuple[object, ...] = ()
        self._kept: dict[SessionId, _Kept] = {}
        self.evaluated = 0
        self.reused = 0

    def begin(self, inputs: object, signal_inputs: tuple[object, ...]) -> tuple[dict[SessionId, _Kept], frozenset[int]]:
        """The entries still valid under `inputs` (nodes and settings), and the signals whose own node inputs
        (`signal_inputs[j]`) changed since the last plan; the next plan keeps only what this one stores again."""
        if inputs == self._inputs:
            kept = self._kept
            changed = frozenset(
                j for j, (now, then) in enumerate(zip(signal_inputs, self._signal_inputs, strict=True)) if now != then
            )
        else:
            kept, changed = {}, frozenset()
        self._inputs, self._signal_inputs, self._kept = inputs, signal_inputs, {}
        return kept, changed

    def keep(self, kept: dict[SessionId, _Kept], evaluated: int) -> None:
        self._kept = kept
        self.evaluated += evaluated
        self.reused += len(kept) - evaluated


def build_problem(
    snapshot: Snapshot, values: ValueModel, cache: ValueCache | None = None, workflows: WorkflowIndex | None = None
) -> PlacementProblem:
    """`workflows`: the snapshot's sessions by workflow when the caller built them already (else built here)."""
    settings = snapshot.settings
    now = snapshot.now
    healthy = [node for node in snapshot.nodes if node.healthy]
    index = {node.id: k for k, node in enumerate(healthy)}
    free = [capacity_cells(node, settings) for node in healthy]
    workflows = WorkflowIndex.of(snapshot.sessions) if workflows is None else workflows
    ctx = SignalContext(now, settings, {node.id: node for node in healthy}, workflows)
    cap = ChargeCap(snapshot.nodes, settings)
    previous: dict[SessionId, _Kept] = {}
    changed: frozenset[int] = frozenset()
    if cache is not None:
        signal_inputs = tuple(
            _node_inputs(healthy, signal.node_fields) if signal.node_fields else () for signal in values.signals
        )
        previous, changed = cache.begin((settings, _node_inputs(healthy, ())), signal_inputs)
    kept: dict[SessionId, _Kept] = {}
    evaluated = 0

    candidates: list[AgentSession] = []
    session_values: list[SessionValue] = []
    items: list[Item] = []
    weights: list[int] = []
    for session in snapshot.sessions:
        if session.phase is Phase.IN_LLM:
            if session.node in index:
                free[index[session.node]] -= token_cells(footprint_tokens(session, settings), settings)
            continue
        if session.phase is Phase.CLOSED:
            continue
        charged_at_most = cap(session)
        entry = previous.get(session.id)
        if entry is None or entry.session is not session:
            parts = values.parts(session, ctx)
            value, footprint = values.assemble(parts), footprint_tokens(session, settings)
            tokens = min(footprint, charged_at_most)
            item = _item(value, tokens, index, settings, _excluded(session, healthy, snapshot.nodes))
            entry = _Kept(session, parts, [now] * len(parts), value, footprint, item, tokens)
            evaluated += 1
        else:
            new_value = False
            if changed or not now < entry.value.until:
                refreshed, new_value = _refresh(entry, values, ctx, changed)
                evaluated += refreshed
            tokens = min(entry.footprint, charged_at_most)
            if new_value or entry.tokens != tokens:
                entry.item = _item(entry.value, tokens, index, settings, entry.item.excluded)
                entry.tokens = tokens
        kept[session.id] = entry
        candidates.append(session)
        session_values.append(entry.value)
        items.append(entry.item)
        weights.append(tokens)
    if cache is not None:
        cache.keep(kept, evaluated)
    problem = Problem(tuple(items), tuple(max(0, cells) for cells in free))
    node_ids = tuple(node.id for node in healthy)
    return PlacementProblem(problem, tuple(candidates), node_ids, tuple(weights), tuple(session_values), values.names)


def _refresh(entry: _Kept, values: ValueModel, ctx: SignalContext, changed: frozenset[int]) -> tuple[bool, bool]:
    """Evaluate again the parts of `entry` that `changed` names or whose time ran out. Returns whether any part was
    evaluated, and whether the value's components changed (the caller then rebuilds the item)."""
    now, parts, since = ctx.now, entry.parts, entry.since
    stale = [j for j, part in enumerate(parts) if j in changed or not since[j] <= now < part.until]
    if not stale:
        return False, False
    different = False
    for j in stale:
        part = values.part(j, entry.session, ctx)
        if part.base != parts[j].base or part.on_nodes != parts[j].on_nodes:
            different = True
        parts[j], since[j] = part, now
    if different:
        entry.value = values.assemble(parts)
    else:  # the same components: only the time they hold until may have moved
        entry.value = replace(entry.value, until=min(part.until for part in parts))
    return True, different


def _item(
    value: SessionValue, tokens: int, index: dict[NodeId, int], settings: CoreSettings, excluded: frozenset[int]
) -> Item:
    on_nodes = {index[node]: v for node, v in value.on_nodes.items() if node in index}
    return Item(token_cells(tokens, settings), value.base, on_nodes, excluded)


def _excluded(session: AgentSession, healthy: list[Node], fleet: Iterable[Node]) -> frozenset[int]:
    """The knapsacks (indices into `healthy`) that do not serve the session's main model."""
    model = session_model(session, fleet)
    if not model:
        return frozenset()
    return frozenset(k for k, node in enumerate(healthy) if not serves(node, model))


def _node_inputs(healthy: list[Node], fields: tuple[str, ...]) -> tuple[tuple[object, ...], ...]:
    return tuple((node.id, node.models, *(getattr(node, name) for name in fields)) for node in healthy)


def plan_from_solution(placement: PlacementProblem, solution: Solution) -> Plan:
    """The changes of `solution`, ranked, each with its session's value on the node it gains or loses."""
    interrupts: list[Placement] = []
    ranked: list[tuple[int, Value, str, Placement]] = []
    values: dict[SessionId, Value] = {}
    for i, (session, target) in enumerate(zip(placement.sessions, solution.assignment, strict=True)):
        node = None if target is None else placement.node_ids[target]
        if node == session.node:
            continue
        change = Placement(session.id, session.version, node, placement.weight_tokens[i])
        value = placement.values[i]
        valued_on = node if node is not None else session.node
        values[session.id] = value.base if valued_on is None else value.on_nodes.get(valued_on, value.base)
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
        values,
        placement.value_names if values else (),
    )


def _descending(value: Value) -> Value:
    return tuple(-component for component in value)
