"""ThunderAgent: program-level pause and resume on a token budget per backend, checked every 5 s.

Source: `reference/routers-and-baselines.md` §5.1, the released code (`ThunderAgent-org/ThunderAgent` HEAD a7eef77,
`router_mode="tr"`): scheduler_interval 5 s, acting_token_weight 1.0, 100-token buffer per program, forced resume
after 1800 s, `use_acting_token_decay = False`. `decay="paper"` is the paper's Eq. 7 (acting tokens weighted
2^(−t) in the pause check too, t in seconds since the program started acting); `decay="resume"` is the code's flag
(decay in resume only). Registered as `thunderagent` (decay off) and `thunderagent-paper`; options:
`ThunderAgentOptions` (`baselines/options.py`).

    rem(b) = C_b − (Σ_{R on b} c + A_b + 100·n_b)      A_b = Σ_{A on b} c·2^(−t) with decay, else 1.0·Σ c
    new program:  if the global queue is empty, the backend with the least active tokens among those with
                  rem ≥ c + 100; otherwise (or if none fits) it joins the queue
    every 5 s:    RESUME  candidates = paused with a pending request ↑c ++ new ↑c ++ paused ACTING ↑c; keep each that
                          still fits in Σ rem; place the kept ones largest first on the backend with the most room
                          (worst-fit, although the code says best fit); drop a backend once its room ≤ 100
                  PAUSE   per backend while rem < 0: pause the smallest ACTING program, else mark the smallest
                          unmarked REASONING one (paused when its call returns) — marking never restores rem ≥ 0,
                          so once no ACTING program is left every REASONING one on the backend gets marked
    a program whose request waited 1800 s is resumed on the backend with the least active tokens

In our terms (an admission policy, like TAO): a program is a session; its place is its backend; pausing is an
interruption (the KV stays in vLLM's LRU, as in the code). REASONING = waiting to call or inside a call; ACTING =
between the end of a call and its next request (in a tool). c = the session's context after its last call, or the
announced prompt of the call it is making (the code estimates it from the request's characters). C_b =
num_gpu_blocks × block_size. Placements carry weight 0: the policy's own budget decides, not TAO's footprint check.
The 5-s tick runs at the coordinator's periodic plans (`plan_interval_s`); between ticks a plan only places new
programs, pauses marked ones whose call returned, and forces old waits.

Tiers: the released code reads none. Its budget is GPU blocks only and it consumes no KV events, so a CPU
offloading tier changes nothing in its decisions (only in what the engine does with a paused program's blocks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.eligibility import serves, session_model
from ..core.model import AgentSession, Node, NodeId, Phase, SessionId
from ..core.plan import Placement, Plan
from ..core.policies.base import PlanningPolicy
from ..core.snapshot import Snapshot
from .options import ThunderAgentOptions, ThunderAgentPaperOptions


@dataclass(slots=True)
class _Backend:
    capacity: int
    programs: dict[SessionId, AgentSession] = field(default_factory=dict)


@dataclass(slots=True)
class _Round:
    """One plan's working state: the backends as the plan changes them, the queue, and the changes so far."""

    now: float
    backends: dict[NodeId, _Backend]
    pool: list[AgentSession]
    out: list[Placement] = field(default_factory=list)
    nodes: dict[NodeId, Node] = field(default_factory=dict)
    """The healthy nodes, by id."""
    fleet: tuple[Node, ...] = ()
    """Every known node (`core/eligibility.py` reads a registration's model against them)."""

    def placed(self) -> set[SessionId]:
        return {p.session_id for p in self.out if p.node is not None}

    def serving(self, session: AgentSession, node_ids: Iterable[NodeId]) -> list[NodeId]:
        """The nodes of `node_ids` that serve the session's main model (`core/eligibility.py`), in their order."""
        model = session_model(session, self.fleet)
        return [b for b in node_ids if serves(self.nodes[b], model)]


def program_tokens(session: AgentSession) -> int:
    return max(session.context_tokens, session.expected_input_tokens)


def has_request(session: AgentSession) -> bool:
    """A paused program whose next request is pending (or about to leave: its tool just ended)."""
    return session.acquire_pending or session.phase is Phase.READY


def is_acting(session: AgentSession) -> bool:
    return session.completed_calls > 0 and session.phase in (Phase.IN_TOOL, Phase.ADMITTED)


class ThunderAgentPolicy(PlanningPolicy):
    plan_interval_s: float
    """The scheduler's tick: resume and pause run at most this often."""

    def __init__(self, options: ThunderAgentOptions | None = None, name: str = "thunderagent") -> None:
        options = options or ThunderAgentOptions()
        self.name = name
        self.decay = options.decay
        self.plan_interval_s = options.interval_s
        self.acting_weight = options.acting_weight
        self.buffer = options.buffer_tokens
        self.force_resume_s = options.force_resume_s
        self.half_life_s = options.half_life_s
        self.marked: set[SessionId] = set()
        self.queued: set[SessionId] = set()
        self._seen: set[SessionId] = set()
        self._next_tick: float | None = None

    def plan(self, snapshot: Snapshot) -> Plan:
        now = snapshot.now
        nodes = [node for node in snapshot.nodes if node.healthy]
        backends = {node.id: _Backend(node.capacity_tokens + node.block_size) for node in nodes}
        live = {s.id: s for s in snapshot.sessions if s.phase is not Phase.CLOSED}
        for session in live.values():
            if session.node in backends:
                backends[session.node].programs[session.id] = session
        self.marked &= live.keys()
        self.queued &= live.keys()
        self._seen &= live.keys()
        pool = [s for s in live.values() if s.node is None and s.is_candidate]
        round_ = _Round(now, backends, pool, nodes={node.id: node for node in nodes}, fleet=snapshot.nodes)
        self._arrivals(round_)
        if self._next_tick is None or now >= self._next_tick:
            self._next_tick = now + self.plan_interval_s
            self._resume(round_)
            self._pause(round_)
        self._pause_marked(round_)
        self._force_resume(round_)
        interrupts = [c for c in round_.out if c.node is None]
        return Plan(tuple(interrupts + [c for c in round_.out if c.node is not None]), "thunderagent")

    def remaining(self, backend: _Backend, now: float, decayed: bool) -> float:
        used = 0.0
        for session in backend.programs.values():
            tokens = program_tokens(session)
            if not is_acting(session):
                used += tokens
            elif decayed:
                used += tokens * 2.0 ** (-(now - session.phase_since) / self.half_life_s)
            else:
                used += self.acting_weight * tokens
        return backend.capacity - used - self.buffer * len(backend.programs)

    def _place(self, session: AgentSession, node: NodeId, round_: _Round) -> None:
        round_.backends[node].programs[session.id] = session
        self.queued.discard(session.id)
        round_.out.append(Placement(session.id, session.version, node, 0))

    def _arrivals(self, round_: _Round) -> None:
        backends = round_.backends
        queue_busy = any(s.completed_calls > 0 or s.id in self.queued for s in round_.pool)
        for session in sorted(round_.pool, key=lambda s: (s.registered_at, s.id)):
            if session.id in self._seen or session.completed_calls > 0:
                continue
            self._seen.add(session.id)
            need = program_tokens(session) + self.buffer
            serving = round_.serving(session, backends)
            fitting = [b for b in serving if self.remaining(backends[b], round_.now, False) >= need]
            if queue_busy or not fitting:
                self.queued.add(session.id)
                queue_busy = True
                continue
            self._place(session, min(fitting, key=lambda b: (_active(backends[b]), b)), round_)

    def _resume(self, round_: _Round) -> None:
        decayed = self.decay in ("resume", "paper")
        room = {b: self.remaining(round_.backends[b], round_.now, decayed) for b in sorted(round_.backends)}
        room = {b: r for b, r in room.items() if r > self.buffer}
        placed = round_.placed()
        by_size = sorted((s for s in round_.pool if s.id not in placed), key=lambda s: (program_tokens(s), s.id))
        candidates = [s for s in by_size if s.completed_calls > 0 and has_request(s)]
        candidates += [s for s in by_size if s.completed_calls == 0]
        candidates += [s for s in by_size if s.completed_calls > 0 and not has_request(s)]
        selected: list[AgentSession] = []
        budget, total = 0, sum(room.values())
        for session in candidates:
            if budget + program_tokens(session) + self.buffer <= total:
                selected.append(session)
                budget += program_tokens(session) + self.buffer
        for session in sorted(selected, key=lambda s: (-program_tokens(s), s.id)):
            if not room:
                break
            serving = round_.serving(session, room)
            if not serving:
                continue
            node = max(serving, key=lambda b: (room[b], b))
            need = program_tokens(session) + self.buffer
            if need > room[node]:
                continue
            self._place(session, node, round_)
            room[node] -= need
            if room[node] <= self.buffer:
                del room[node]

    def _pause(self, round_: _Round) -> None:
        for node in sorted(round_.backends):
            backend = round_.backends[node]
            while self.remaining(backend, round_.now, self.decay == "paper") < 0:
                programs = sorted(backend.programs.values(), key=lambda s: (program_tokens(s), s.id))
                acting = [s for s in programs if is_acting(s)]
                reasoning = [s for s in programs if not is_acting(s) and s.id not in self.marked]
                if acting:
                    self._interrupt(acting[0], backend, round_)
                elif reasoning:
                    self.marked.add(reasoning[0].id)
                else:
                    break

    def _pause_marked(self, round_: _Round) -> None:
        for backend in round_.backends.values():
            for session in [s for s in backend.programs.values() if s.id in self.marked and is_acting(s)]:
                self._interrupt(session, backend, round_)

    def _interrupt(self, session: AgentSession, backend: _Backend, round_: _Round) -> None:
        """Pause a program; one resumed earlier in the same plan simply stays in the queue."""
        del backend.programs[session.id]
        self.marked.discard(session.id)
        resumed = [p for p in round_.out if p.session_id == session.id]
        if resumed:
            round_.out.remove(resumed[0])
            self.queued.add(session.id)
        else:
            round_.out.append(Placement(session.id, session.version, None, 0))

    def _force_resume(self, round_: _Round) -> None:
        placed = round_.placed()
        for session in round_.pool:
            overdue = session.acquire_pending and round_.now - session.phase_since >= self.force_resume_s
            serving = round_.serving(session, round_.backends)
            if overdue and session.id not in placed and serving:
                backends = round_.backends
                self._place(session, min(serving, key=lambda b: (_active(backends[b]), b)), round_)


def _active(backend: _Backend) -> int:
    return sum(program_tokens(s) for s in backend.programs.values())


def thunderagent_paper(options: ThunderAgentPaperOptions | None = None) -> ThunderAgentPolicy:
    return ThunderAgentPolicy(options or ThunderAgentPaperOptions(), "thunderagent-paper")
