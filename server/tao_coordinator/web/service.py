"""The live driver: the scheduling core on an asyncio loop, fed by HTTP handlers, node pollers and KV events.

Its parts, one job each: the current core with its history and decision log (`core_slot.py`), the watch over the
fleet that feeds it scrapes and KV evidence (`fleet_watch.py`), the plans solved off the event loop
(`plan_runner.py`), the ticks it asks for (`wakeup.py`), the grants on their way to clients (`grants.py`), the
metrics (`metrics.py`), the demotion driver (`demotions.py`), the replica (`replica.py`), the session timelines
(`timeline.py`), the registration caps (`caps.py`). None of them holds the service: each gets what it reads or calls,
so `web/` has no import cycle (`tests/core/test_read_api.py`); those that feed the core do it through `feed`.

Invariants:
- the core is only touched from the event loop thread (`feed`), and only through its read API and `on_event`
  (`core/coordinator.py`); plans are solved in one worker thread on frozen snapshots and their results come back
  through `feed(PlanFinished)` (`plan_runner.py`);
- the core's clock is the loop's monotonic clock; wall-clock deadlines from clients are converted on the way in;
- a `Route` becomes a grant (`grants.py`): it answers the session's waiting `acquire`, or is kept until the session
  asks, and calls that overlap a running one share its lease;
- session tokens live here (issued by `tokens.py`), not in the core: they authenticate, they are not scheduling
  state;
- what was decided is told here, not in the core: every fed event goes to the session timelines (`timeline.py`),
  every applied plan and every admission at an acquire to the decision log (`decisions.py`);
- without `--redis`, a tool end is fed to the core only once what the history learns from it is committed to the
  store (`tool_ends.py`), and answered after that; one the store cannot take raises `StoreUnavailable` (a 503) and
  is never fed, so a refused tool end changes nothing;
- with `--redis` (`replica.py`) the sessions each fed event touched are written to Redis before the request that fed
  it is answered, and a replica that stops leading replaces its core with an empty one; a plan solved for a core
  that was replaced meanwhile is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Mapping

from tao_sdk import protocol

from ..config import CoordinatorConfig, NodeConfig
from ..core.actions import Action, Expired, NodeDemoted, NodeRestored, NodeRetired, ProbeNode, Route, StartPlan
from ..core.coordinator import Coordinator
from ..core.decision import PlanDecision
from ..core.eligibility import is_side_call
from ..core.events import Acquire, Event, Heartbeat, LlmEnd, ToolEnd
from ..core.forecast import ToolHistory, ToolKey
from ..core.model import AgentSession, Phase, RunningTool
from ..core.plan import PlanFinished
from ..core.snapshot import PlanJob
from ..ha.codec import SessionRecord
from ..store import HistoryStore, ToolRow
from .cache_reports import CacheReports
from .caps import RegistrationCaps
from .core_slot import CoreSlot
from .decisions import DecisionLog
from .demotions import DemotionDriver
from .fleet_watch import FleetWatch
from .grants import Grants
from .membership import FleetMembership, StoredNode
from .metrics import ServiceMetrics, StateCollector
from .node_sources import NodeSources, Reload
from .plan_runner import PlanRunner
from .queue_answer import waiting_answer
from .replica import Replica
from .timeline import Timelines
from .tokens import SessionTokens
from .tool_ends import ToolEnds
from .wakeup import Wakeup

log = logging.getLogger("tao.coordinator")


class SessionGone(Exception):
    """The session closed or expired while a call about it was waiting."""


class CoordinatorService:
    def __init__(self, config: CoordinatorConfig, reload: Reload | None = None) -> None:
        self.config = config
        self.nodes: dict[str, NodeConfig] = {node.name: node for node in config.nodes}
        history = ToolHistory.from_settings(config.core)
        self.store: HistoryStore | None = None
        if not config.server.redis:
            self.store = HistoryStore(
                config.server.state_dir,
                config.core.forecast_window,
                config.core.forecast_max_levels,
                probe_interval_s=min(1.0, config.fleet.scrape_interval_s / 2),  # back within one scrape
            )
            loaded = 0
            for key, duration in self.store.load():
                history.add(key, duration)
                loaded += 1
            self.store.prune()
            log.info("loaded %d tool durations into %d learned levels from %s", loaded, history.levels, self.store.path)
        self.core = CoreSlot(config, history)
        # the parts that feed the core call `self.feed` as it is when they call: a test may wrap it meanwhile
        state = StateCollector(
            self.core, self.nodes, lambda name: self.fleet.kv_index(name), self.store, lambda: self.caps.live()
        )
        self.metrics = ServiceMetrics(config.policy.name, state)
        self.fleet = FleetWatch(self.nodes, config.fleet, self.core, lambda event: self.feed(event), state.observe_node)
        self.plans = PlanRunner(
            self.core, lambda event, job, solve_s: self.feed(event, job, solve_s), self.metrics.plan_seconds.observe
        )
        self.wakeup = Wakeup(self.core, lambda event: self.feed(event))
        self.replica = (
            Replica(
                config.server,
                self.metrics.registry,
                self.restore,
                self.forget_everything,
                self._changes,
                lambda: len(self.coordinator.sessions),
            )
            if config.server.redis
            else None
        )
        self.node_urls = {name: node.url for name, node in self.nodes.items()}
        self.demotions = DemotionDriver(self.node_urls, self.feed, self.metrics.registry, self.core)
        self.membership = FleetMembership(self.nodes, self.node_urls, self.fleet, self.core, lambda e: self.feed(e))
        if self.replica is not None:
            replica = self.replica
            self.membership.persist = lambda name, entry: replica.store_node(name, entry.model_dump_json())
        self.node_sources = NodeSources(self.membership, config.discovery, reload)
        self.caps = RegistrationCaps(
            config, lambda token, cap: self.metrics.registrations_refused.labels(token, cap).inc()
        )
        self.timelines = Timelines(self.decisions.acquire_admission)
        self.cache_reports = CacheReports()
        self.session_tokens: dict[str, str] = {}
        self.tokens = (
            SessionTokens.in_state_dir(config.server.state_dir) if self.replica is None else SessionTokens(b"")
        )
        self.grants = Grants()
        self.side_routes: dict[str, str] = {}
        """The node of a side call the core just routed, by session, taken by the acquire that asked for it."""
        self.tool_ends = ToolEnds(self.core, self.store, self._feed_tool_end, self.metrics.store_refused.inc)

    @property
    def coordinator(self) -> Coordinator:
        """The current core (a replica's takeover replaces it): read through its read API only."""
        return self.core.coordinator

    @property
    def history(self) -> ToolHistory:
        """What the current core learned of tool durations."""
        return self.core.history

    @property
    def decisions(self) -> DecisionLog:
        return self.core.decisions

    @property
    def leases(self) -> dict[str, str]:
        """Each session's current lease id (`grants.py`)."""
        return self.grants.leases

    # -- life cycle ------------------------------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def now(self) -> float:
        return self.loop.time()

    async def start(self) -> None:
        self.fleet.replay()
        if self.replica is not None:
            self.tokens = SessionTokens(await self.replica.start())
        self.fleet.start()
        self.node_sources.start()
        log.info("coordinator started: %d nodes, policy %s", len(self.nodes), self.config.policy.name)

    async def stop(self) -> None:
        if self.replica is not None:
            await self.replica.stop()
        await self.node_sources.stop()
        await self.fleet.stop()
        self.wakeup.cancel()
        self.grants.cancel_waiting()
        await self.demotions.stop()
        self.plans.stop()
        if self.store is not None:
            self.store.close()
            store = self.store
            if store.not_written:
                log.warning(
                    "coordinator stopped; tool history in %s: %d rows written by this run, %d tool ends not "
                    "written (each answered 503, so its client could send it again)",
                    store.path,
                    store.written,
                    store.not_written,
                )
            else:
                log.info(
                    "coordinator stopped; tool history persisted to %s: %d rows written by this run",
                    store.path,
                    store.written,
                )
        else:
            log.info("coordinator stopped; its state is in Redis")

    # -- the core --------------------------------------------------------------------------------------------------

    def feed(self, event: Event | PlanFinished, job: PlanJob | None = None, solve_s: float = 0.0) -> list[Action]:
        """Hand one event to the core, tell what it decided, and carry out what it asks. Raises the core's errors
        unchanged. `job` and `solve_s`: the plan job a `PlanFinished` answers, and how long its solve took."""
        now = self.now()
        core = self.coordinator
        stats = core.plan_stats
        session_id: str | None = getattr(event, "session_id", None)
        before = core.sessions.get(session_id) if session_id is not None else None
        applied = (stats.applied, stats.cut)
        actions = core.on_event(event, now)
        try:
            self.metrics.on_event(event, actions, now, core.sessions)
            decision: PlanDecision | None = None
            if isinstance(event, PlanFinished) and job is not None:
                outcome = "applied" if stats.applied > applied[0] else "cut" if stats.cut > applied[1] else "dropped"
                decision = self.decisions.plan(job.id, event.plan, solve_s, outcome, actions, core.holders, core.nodes)
            elif isinstance(event, Acquire):
                self.decisions.acquired(before, actions, core.sessions, core.nodes)
            self.timelines.observe(event, before, core.sessions, actions, time.time(), decision, now)
        except Exception:
            # what the core decided must be carried out whatever happens to the record of it: a lost StartPlan
            # would leave the planner waiting for a plan nobody solves, and every session without a place with it
            log.exception("could not record %s for the operator's view", type(event).__name__)
        for action in actions:
            self._carry_out(action)
        self.wakeup.schedule()
        if self.replica is not None:
            self.replica.fed()
        return actions

    def end_llm_call(self, event: LlmEnd) -> None:
        """Feed a call's end, then note whether its node reports cached tokens (`cache_reports.py`)."""
        self.feed(event)
        self.cache_reports.observe(event)

    def _carry_out(self, action: Action) -> None:
        match action:
            case Route(side=True):
                self.side_routes[action.session_id] = action.node
            case Route():
                self._grant(action.session_id, action.node)
            case StartPlan():
                self.plans.start(action.job)
            case NodeDemoted() | ProbeNode() | NodeRestored():
                self.demotions.carry_out(action)
            case NodeRetired():
                self.membership.retired(action.node)
            case Expired():
                log.info("session %s expired: no event within its lease", action.session_id)
                self.forget(action.session_id)

    # -- sessions --------------------------------------------------------------------------------------------------

    def new_session(self, requested: str | None) -> tuple[str, str]:
        session_id = requested or f"s-{uuid.uuid4().hex}"
        return session_id, self.tokens.issue(session_id)

    def forget(self, session_id: str) -> None:
        self.session_tokens.pop(session_id, None)
        self.caps.release(session_id)
        self.grants.forget(session_id, SessionGone(session_id))

    def _grant(self, session_id: str, node: str) -> None:
        # calls that overlap a running one share its lease: an llm_end for any of them must still be accepted
        session = self.coordinator.sessions.get(session_id)
        self.grants.grant(session_id, node, overlapping=session is not None and session.llm_calls > 1)

    def _side_call(self, session_id: str, request: protocol.AcquireRequest) -> protocol.AcquireResponse:
        """A call for another model than the session's main one (`core/eligibility.py`): placed at once beside the
        session's calls, outside its grants (a waiting acquire of the session's own call must not receive it), and
        without a lease (its `llm_end` may come after the session's own lease changed)."""
        self.side_routes.pop(session_id, None)
        self.feed(acquire_event(session_id, request))
        node = self.side_routes.pop(session_id)
        url = self.nodes[node].url if node in self.nodes else ""
        return protocol.AcquireResponse(status="admitted", node=node, node_url=url, base_url=f"{url}/v1")

    async def acquire(self, session_id: str, request: protocol.AcquireRequest) -> protocol.AcquireResponse:
        core = self.coordinator
        if is_side_call(core.session(session_id), request.model, core.nodes.values()):
            return self._side_call(session_id, request)
        started = self.now()
        grant = self.grants.claim(session_id)
        if grant is not None and self.coordinator.session(session_id).phase is not Phase.IN_LLM:
            grant = None  # the call it was made for has ended (a client closing a call it lost) before it was claimed
        if grant is None:
            session = self.coordinator.session(session_id)
            if request.avoid_nodes or not (session.phase is Phase.WAITING and session.acquire_pending):
                self.feed(acquire_event(session_id, request))
            else:  # the same call asking again: a sign of life, or a client that only polls would expire waiting
                self.feed(Heartbeat(session_id))
            grant = self.grants.claim(session_id)
        if grant is None:
            grant = await self.grants.wait(session_id, min(request.wait_s, self.config.server.acquire_wait_s))
        if grant is None:
            return waiting_answer(self.coordinator, session_id, self.now())
        self.metrics.acquire_wait_seconds.observe(self.now() - started)
        url = self.nodes[grant.node].url if grant.node in self.nodes else ""
        return protocol.AcquireResponse(
            status="admitted",
            node=grant.node,
            node_url=url,
            base_url=f"{url}/v1",
            lease_id=grant.lease_id,
            expires_at=time.time() + self.config.core.lease_ttl_s,
        )

    async def tool_end(self, event: ToolEnd) -> None:
        """Feed a tool's end, with the duration the history learns from it, once its row is stored
        (`tool_ends.py`)."""
        await self.tool_ends.end(event)

    def _feed_tool_end(self, event: ToolEnd, running: RunningTool, row: ToolRow) -> None:
        self.feed(event)
        assert event.duration_s is not None
        self.metrics.tool_ended(running, event.duration_s, event.status)
        if self.replica is not None:  # what the history learned, so the next leader replays the same values
            self.replica.learned(row)

    def wall_to_core(self, unix_time: float) -> float:
        return self.now() + (unix_time - time.time())

    # -- replicas (`replica.py`) -------------------------------------------------------------------------------------

    def record_of(self, session: AgentSession) -> SessionRecord:
        return SessionRecord(session, self.leases.get(session.id), self.session_tokens.get(session.id))

    def _changes(self) -> tuple[list[SessionRecord], list[str]]:
        """What the replica writes: the records of the sessions the core touched, and the ids of those gone."""
        core = self.coordinator
        touched, live = core.take_touched(), core.sessions
        return [self.record_of(live[i]) for i in touched if i in live], [i for i in touched if i not in live]

    def restore(
        self,
        records: Iterable[SessionRecord],
        tools: Iterable[ToolRow],
        nodes: Mapping[str, dict[str, object]] | None = None,
    ) -> None:
        """Start leading from the stored state: a core built anew with the learned history, the nodes as last
        scraped with the membership changes the leaders stored (`membership.py`), and every stored session."""
        history = ToolHistory.from_settings(self.config.core)
        for tool, program, duration, _ in tools:
            history.add(ToolKey.of(tool, program), duration)
        self.forget_everything(SessionGone("the coordinator's leader changed"), history)
        stored = {}
        for name, entry in (nodes or {}).items():
            try:
                stored[name] = StoredNode.model_validate(entry)
            except ValueError as error:
                log.warning("stored membership of node %s left out: %s", name, error)
        self.membership.apply_stored(stored)
        sessions = []
        for record in records:
            sessions.append(record.session)
            if record.lease_id is not None:
                self.leases[record.session.id] = record.lease_id
            if record.token is not None:
                self.session_tokens[record.session.id] = record.token
        self.coordinator.restore(sessions)  # from here on, what the core touches is written
        self.wakeup.schedule()

    def forget_everything(self, error: Exception, history: ToolHistory | None = None) -> None:
        """Drop every session (a replica that stopped leading): waiting acquires fail with `error`, a plan in flight
        is void, and the nodes stay as last scraped."""
        self.grants.forget_all(error)
        self.session_tokens.clear()
        self.caps.clear()
        self.core.install(history or ToolHistory.from_settings(self.config.core))
        self.fleet.replay()
        self.membership.replay()


def acquire_event(session_id: str, request: protocol.AcquireRequest) -> Acquire:
    """The core event of an acquire; what it says about the agent's step travels with it."""
    tools = request.expected_next_tools
    return Acquire(
        session_id,
        request.expected_input_tokens,
        step_id=request.step_id,
        expected_next_tools=None if tools is None else tuple(tools),
        avoid_nodes=tuple(request.avoid_nodes),
        model=request.model,
    )
