"""The live fleet: sessions and nodes by id, the waiting pool and the wake-up times kept in step with them.

Invariants: `pool` is exactly the set of live sessions that are candidates without a place (WAITING, READY or
IN_TOOL with no node); `holders[n]` is the number of live sessions holding a place on node n, `holders_at(n)` those
sessions and `footprint_bound(n)` the sum of their footprints in cells; closed sessions are not kept. Every node on
which a session was put holding a place since the last `take_holdings_changed` is in the set it returns (its
holders' footprints may have grown). Every live session's wake-up times (as given by `wake_times`) are in the heap,
tagged with the version and lease they were computed for; entries whose tag no longer matches are stale and
skipped. Only `put`, `forget` and `put_node`/`drop_node` change the state, so none of them can drift.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Collection, Iterable

from .eligibility import serves, session_model
from .errors import UnknownNode, UnknownSession
from .model import AgentSession, Node, NodeId, Phase, SessionId
from .settings import CoreSettings
from .signals.footprint import footprint_tokens
from .snapshot import Snapshot


def in_pool(session: AgentSession) -> bool:
    return session.node is None and session.phase in (Phase.WAITING, Phase.READY, Phase.IN_TOOL)


class FleetState:
    def __init__(
        self,
        wake_times: Callable[[AgentSession], Iterable[float]] = lambda session: (),
        settings: CoreSettings | None = None,
    ) -> None:
        """`settings`: those every footprint is computed with (`footprint_bound`)."""
        self._settings = settings or CoreSettings()
        self.sessions: dict[SessionId, AgentSession] = {}
        self.nodes: dict[NodeId, Node] = {}
        self.pool: set[SessionId] = set()
        self.holders: Counter[NodeId] = Counter()
        """Sessions holding a place, per node."""
        self._holders_at: dict[NodeId, set[SessionId]] = {}
        self._footprint_cells: Counter[NodeId] = Counter()
        self._holdings_changed: set[NodeId] = set()
        self._wake_times = wake_times
        self._wakeups: list[tuple[float, SessionId, int, float]] = []
        self._touched: set[SessionId] | None = None
        """Kept only once someone reads it (`take_touched`), so that a coordinator that never does keeps nothing."""

    def session(self, session_id: SessionId) -> AgentSession:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise UnknownSession(session_id) from None

    def node(self, node_id: NodeId) -> Node:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNode(node_id) from None

    def take_touched(self) -> set[SessionId]:
        """The sessions put or forgotten since the last call, what a replicated coordinator must write (those no
        longer in `sessions` are gone); the first call starts keeping them and returns none."""
        touched, self._touched = self._touched or set(), set()
        return touched

    def put(self, session: AgentSession) -> None:
        if session.phase is Phase.CLOSED:
            self.forget(session.id)
            return
        if self._touched is not None:
            self._touched.add(session.id)
        self._count_holder(self.sessions.get(session.id), -1)
        self._count_holder(session, +1)
        self.sessions[session.id] = session
        if session.node is not None:
            self._holdings_changed.add(session.node)
        if in_pool(session):
            self.pool.add(session.id)
        else:
            self.pool.discard(session.id)
        for at in self._wake_times(session):
            heapq.heappush(self._wakeups, (at, session.id, session.version, session.lease_expires_at))
        if len(self._wakeups) > 8 * len(self.sessions) + 64:
            self._wakeups = [entry for entry in self._wakeups if self._current(entry)]
            heapq.heapify(self._wakeups)

    def _current(self, entry: tuple[float, SessionId, int, float]) -> bool:
        session = self.sessions.get(entry[1])
        return session is not None and (session.version, session.lease_expires_at) == entry[2:]

    def pop_due(self, now: float) -> set[SessionId]:
        """Sessions with a wake-up time at or before `now`; their entries are consumed."""
        due: set[SessionId] = set()
        while self._wakeups and self._wakeups[0][0] <= now:
            entry = heapq.heappop(self._wakeups)
            if self._current(entry):
                due.add(entry[1])
        return due

    def next_wakeup(self) -> float | None:
        """The earliest wake-up time not yet consumed by `pop_due` (it may already have passed)."""
        while self._wakeups and not self._current(self._wakeups[0]):
            heapq.heappop(self._wakeups)
        return self._wakeups[0][0] if self._wakeups else None

    def _count_holder(self, session: AgentSession | None, delta: int) -> None:
        if session is not None and session.node is not None:
            self.holders[session.node] += delta
            self._footprint_cells[session.node] += delta * token_cells(
                footprint_tokens(session, self._settings), self._settings
            )
            at = self._holders_at.setdefault(session.node, set())
            if delta > 0:
                at.add(session.id)
            else:
                at.discard(session.id)
            if not self.holders[session.node]:
                del self.holders[session.node]
                del self._holders_at[session.node]
                del self._footprint_cells[session.node]

    def holders_at(self, node_id: NodeId) -> Collection[SessionId]:
        return self._holders_at.get(node_id, ())

    def footprint_bound(self, node_id: NodeId) -> int:
        """The cells the node's holders would hold, each charged its whole footprint: at least `cells_held`
        (which caps what a session outside a call is charged), kept as sessions are put, so O(1)."""
        return self._footprint_cells.get(node_id, 0)

    def take_holdings_changed(self) -> set[NodeId]:
        """The nodes on which a session was put holding a place since the last call."""
        changed, self._holdings_changed = self._holdings_changed, set()
        return changed

    def forget(self, session_id: SessionId) -> None:
        if self._touched is not None:
            self._touched.add(session_id)
        self._count_holder(self.sessions.pop(session_id, None), -1)
        self.pool.discard(session_id)

    def put_node(self, node: Node) -> None:
        self.nodes[node.id] = node

    def drop_node(self, node_id: NodeId) -> None:
        self.nodes.pop(node_id, None)

    def usable_node(self, node_id: NodeId | None) -> Node | None:
        node = self.nodes.get(node_id) if node_id is not None else None
        return node if node is not None and node.healthy else None

    def snapshot(self, now: float, settings: CoreSettings) -> Snapshot:
        return Snapshot(now, tuple(self.sessions.values()), tuple(self.nodes.values()), settings)

    def used_cells(self, settings: CoreSettings) -> dict[NodeId, int]:
        """Capacity cells held per node by the sessions that hold places there, at their current footprint —
        charged as the planner charges them (`policies/problem.py`): a session outside a call at most the
        largest plannable capacity of the nodes serving its model, so a plan the solver found feasible is feasible
        here too."""
        cap = ChargeCap(self.nodes.values(), settings)
        return {node_id: self.cells_held(node_id, settings, cap) for node_id in self._holders_at}

    def cells_held(self, node_id: NodeId, settings: CoreSettings, cap: ChargeCap | None = None) -> int:
        """`used_cells` of one node, from its holders alone."""
        cap = cap or ChargeCap(self.nodes.values(), settings)
        cells = 0
        for session_id in self._holders_at.get(node_id, ()):
            session = self.sessions[session_id]
            tokens = footprint_tokens(session, settings)
            if session.phase is not Phase.IN_LLM:
                tokens = min(tokens, cap(session))
            cells += token_cells(tokens, settings)
        return cells


def capacity_cells(node: Node, settings: CoreSettings) -> int:
    """What the planner may fill on `node`, in cells: capacity × utilisation target (the node's own when the policy
    adapts it, else the settings'), rounded down."""
    target = settings.utilization_target if node.utilization_target is None else node.utilization_target
    return int(node.capacity_tokens * target) // settings.capacity_quantum_tokens


def token_cells(tokens: int, settings: CoreSettings) -> int:
    """Cells that `tokens` occupy: rounded up, as vLLM allocates whole blocks."""
    return -(-tokens // settings.capacity_quantum_tokens)


class ChargeCap:
    """The most a session outside a call is charged, in tokens: the largest plannable capacity of the healthy nodes
    serving its main model (`largest_plannable_tokens`), each model's figure computed once. One rule for the planner
    (`policies/problem.py`) and for what holders hold (`FleetState.used_cells`), so a plan the solver found feasible
    is feasible when applied. `nodes`: every known node (of any health; the unhealthy ones offer nothing)."""

    def __init__(self, nodes: Collection[Node], settings: CoreSettings) -> None:
        self._nodes, self._settings = nodes, settings
        self._by_model: dict[str, int] = {}

    def __call__(self, session: AgentSession) -> int:
        model = session_model(session, self._nodes)
        cap = self._by_model.get(model)
        if cap is None:
            cap = self._by_model[model] = largest_plannable_tokens(self._nodes, self._settings, model)
        return cap


def largest_plannable_tokens(nodes: Iterable[Node], settings: CoreSettings, model: str = "") -> int:
    """The largest capacity any healthy node serving `model` offers the planner, in tokens: the most a session of
    that main model is charged outside a call, so that no session is too large to place anywhere it may go (a
    larger node of another model is no place for it: `eligibility.py`)."""
    plannable = (capacity_cells(node, settings) for node in nodes if node.healthy and serves(node, model))
    return max(plannable, default=0) * settings.capacity_quantum_tokens
