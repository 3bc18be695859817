"""Continuum (released preview): pin a session's KV for 2 s after a call that ends in a short tool; job-FCFS order.

Source: `reference/routers-and-baselines.md` §5.2, the released preview (`Hanchenli/vllm-continuum`, read in the
fork `Whrlicht/vllm-continuum` HEAD cbd3702; `FIXED_THRESHOLD_CONTINUUM = 2.0`), not the paper's τ* rule:

    on_finish(req of job j): unpin(j); tool = parse_tool(output); m = running mean of that tool's gap
        pin(j, 2.0 s) if tool is not None and (m unknown or m ≤ 2.0) else free the KV
    each step: unpin pins whose time is up while the job has no request waiting
    queue: jobs with pinned KV first, then job-level FCFS (by the job's first arrival); a head that does not fit
        waits; with nothing running and pins held, the pin ending last is evicted

In our terms (an admission policy, like TAO): "holds a place" is "its KV is held". A call holds its node; when it
ends the session keeps the place only while pinned (a pinned job's next request therefore starts at once, as the
pinned-first order gives it in vLLM) and is interrupted when the pin runs out with the tool still running, or at
once when not pinned (its blocks become ordinary LRU cache, as `kv_cache_manager.free` makes them). Waiting requests
(a session whose tool ended, or that just registered, is about to ask: it counts as waiting; one released between
calls that asks nothing does not) are
admitted in job-FCFS order while they fit: on the node of the session's last call if there is room, else on the
node with the most room. The preview is per engine, so head-of-line blocking is too: a session that fits nowhere
queues at its last node (a new one at the node with the most room) and blocks that node alone, while later sessions
may still start elsewhere. Need = the prompt (announced, else the context), capped at the node capacity so a huge
session runs alone on an empty node: vLLM admits a request when its prompt's blocks fit and reserves nothing for
its output, so decode growth is left to the engine (which preempts when KV runs out). The node choice is ours.

Tool names: the preview parses the tool from the reply (the first word of its only ```bash block, the mini-swe-agent
v1 text format) and finds none in tool-calling harnesses (Claude Code, OpenCode) — so it pins only for sessions whose
harness is in `text_harnesses` and tools that are real commands (not a `<placeholder>`). The mean is the running mean
of (next request − previous answer) per tool over all jobs. Deterministic. Options: `ContinuumOptions`
(`baselines/options.py`).

Tiers: the preview reads none. Pins hold blocks in the GPU KV cache manager and need is counted in GPU blocks; it
consumes no KV events, so an offloading tier below HBM changes only what the engine does with unpinned blocks.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.eligibility import eligible, session_model
from ..core.events import Acquire, Close, Event, ToolStart
from ..core.model import AgentSession, Node, NodeId, Phase, SessionId
from ..core.plan import Placement, Plan
from ..core.policies.base import PlanningPolicy
from ..core.snapshot import Snapshot
from .options import ContinuumOptions


def asks(session: AgentSession) -> bool:
    """Whether the session wants a call now: a pending acquire, a tool just ended, or a new session."""
    if session.phase is Phase.WAITING:
        return session.acquire_pending or session.completed_calls == 0
    return session.phase is Phase.READY


class ContinuumPolicy(PlanningPolicy):
    name = "continuum"

    def __init__(self, options: ContinuumOptions | None = None) -> None:
        options = options or ContinuumOptions()
        self.pin_s = options.pin_s
        self.text_harnesses = frozenset(options.text_harnesses)
        self.means: dict[str, tuple[float, int]] = {}
        self.pinned_until: dict[SessionId, float] = {}
        self._departures: dict[SessionId, tuple[str, float]] = {}

    def wake_times(self, session: AgentSession) -> Iterable[float]:
        """A pin's end; and the moment a session without a place asks for a call, so that a plan considers it even
        when the coordinator saw no reason to plan (an acquire by a session already in the waiting pool)."""
        if session.phase is Phase.IN_TOOL and session.node is not None:
            return (min(tool.started_at for tool in session.tools) + self.pin_s,)
        if session.node is None and session.acquire_pending:
            return (session.phase_since,)
        return ()

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, ToolStart):
            self.pinned_until.pop(event.session_id, None)
            if self.parses(event.tool):
                self._departures[event.session_id] = (event.tool, now)
                total, count = self.means.get(event.tool, (0.0, 0))
                if count == 0 or total / count <= self.pin_s:
                    self.pinned_until[event.session_id] = now + self.pin_s
        elif isinstance(event, Acquire):
            departure = self._departures.pop(event.session_id, None)
            if departure is not None:
                tool, at = departure
                total, count = self.means.get(tool, (0.0, 0))
                self.means[tool] = (total + now - at, count + 1)
        elif isinstance(event, Close):
            self.pinned_until.pop(event.session_id, None)
            self._departures.pop(event.session_id, None)

    def parses(self, tool: str) -> bool:
        """Whether the preview's parser would find this tool in the reply (harness checked in `plan`)."""
        return not tool.startswith("<")

    def pinned(self, session: AgentSession, now: float) -> bool:
        return session.context.harness in self.text_harnesses and self.pinned_until.get(session.id, -1.0) > now

    def need(self, session: AgentSession, node: Node) -> int:
        return min(max(session.context_tokens, session.expected_input_tokens), node.capacity_tokens)

    def plan(self, snapshot: Snapshot) -> Plan:
        now = snapshot.now
        nodes = {node.id: node for node in snapshot.nodes if node.healthy}
        free = {node_id: node.capacity_tokens for node_id, node in nodes.items()}
        running = set()
        pins: dict[NodeId, list[AgentSession]] = {}
        releases: list[Placement] = []
        for session in snapshot.sessions:
            if session.node not in nodes:
                continue
            if session.phase is Phase.IN_LLM or session.completed_calls == 0:
                running.add(session.node)
            elif not self.pinned(session, now):
                releases.append(Placement(session.id, session.version, None, 0))
                continue
            else:
                pins.setdefault(session.node, []).append(session)
            free[session.node] -= self.need(session, nodes[session.node])
        admits = self._admit(snapshot, nodes, free, running, pins, releases)
        return Plan(tuple(releases + admits), "continuum")

    def _admit(
        self,
        snapshot: Snapshot,
        nodes: dict[NodeId, Node],
        free: dict[NodeId, int],
        running: set[NodeId],
        pins: dict[NodeId, list[AgentSession]],
        releases: list[Placement],
    ) -> list[Placement]:
        waiting = [s for s in snapshot.sessions if s.node is None and asks(s)]
        admits: list[Placement] = []
        open_nodes = dict(nodes)
        for session in sorted(waiting, key=lambda s: (s.registered_at, s.id)):
            if not open_nodes:
                break
            serving = eligible(
                open_nodes, session_model(session, snapshot.nodes)
            )  # only engines serving its model queue it
            if not serving:
                continue
            target = self._fit(session, serving, free)
            if target is None:
                target = self._evict_pin(session, serving, free, running, pins, releases)
            if target is None:
                open_nodes.pop(self._queue_of(session, serving, free))  # its engine's queue head: blocked
                continue
            free[target] -= self.need(session, nodes[target])
            running.add(target)
            admits.append(Placement(session.id, session.version, target, 0))
        return admits

    def _fit(self, session: AgentSession, nodes: dict[NodeId, Node], free: dict[NodeId, int]) -> NodeId | None:
        if session.last_node in nodes and self.need(session, nodes[session.last_node]) <= free[session.last_node]:
            return session.last_node
        fitting = [n for n in sorted(nodes) if self.need(session, nodes[n]) <= free[n]]
        return max(fitting, key=lambda n: free[n]) if fitting else None

    @staticmethod
    def _queue_of(session: AgentSession, nodes: dict[NodeId, Node], free: dict[NodeId, int]) -> NodeId:
        """The engine whose queue a session that fits nowhere waits in: its last node, else the one with most room."""
        if session.last_node in nodes:
            return session.last_node
        return max(sorted(nodes), key=lambda n: free[n])

    def _evict_pin(
        self,
        session: AgentSession,
        nodes: dict[NodeId, Node],
        free: dict[NodeId, int],
        running: set[NodeId],
        pins: dict[NodeId, list[AgentSession]],
        releases: list[Placement],
    ) -> NodeId | None:
        """With nothing running on a node and pins held there, evict pins ending last until the head fits."""
        for node_id in sorted(pins):
            if node_id in running or node_id not in nodes:
                continue
            held = sorted(pins[node_id], key=lambda s: (self.pinned_until.get(s.id, 0.0), s.id))
            while held and self.need(session, nodes[node_id]) > free[node_id]:
                victim = held.pop()
                free[node_id] += self.need(victim, nodes[node_id])
                releases.append(Placement(victim.id, victim.version, None, 0))
            pins[node_id] = held
            if self.need(session, nodes[node_id]) <= free[node_id]:
                return node_id
        return None
