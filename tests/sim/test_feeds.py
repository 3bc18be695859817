"""The signals baselines need, end to end: events carry them, the coordinator passes them on without planning, the
simulator sends each policy only the feeds it asks for."""

from collections import Counter

import pytest

from tao_coordinator.core.actions import Route
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.errors import InvalidEvent, UnknownNode, UnknownSession
from tao_coordinator.core.events import Acquire, KvCacheEvent, LlmFirstToken, NodeUpdate, Register, Tick
from tao_coordinator.core.model import NodeLoad
from tao_coordinator.core.plan import Plan
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.policies.base import Feed, PlanningPolicy, Router
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.feeds import RouterFeeds
from tao_coordinator.sim.node import NodeEngine, profile_by_name
from tao_coordinator.sim.workloads import generate


class Recorder(Router):
    """A router that remembers what it saw."""

    name = "recorder"

    def __init__(self):
        self.routed = []
        self.observed = []

    def route(self, session, nodes, now):
        self.routed.append((session.expected_input_tokens, session.prompt_block_runs, dict(nodes)))
        return min(nodes)

    def observe(self, event, now):
        self.observed.append(event)


class Periodic(Recorder):
    plans = True
    plan_interval_s = 5.0

    def __init__(self):
        super().__init__()
        self.plans_at = []

    def plan(self, snapshot):
        self.plans_at.append(snapshot.now)
        return Plan(())


def test_bad_router_signals_are_rejected_by_name():
    with pytest.raises(InvalidEvent, match="prompt_block_runs"):
        Acquire("s", 10, prompt_block_runs=((5, 0),))
    with pytest.raises(InvalidEvent, match="kv_usage"):
        NodeUpdate("a", 100, load=NodeLoad(kv_usage=1.5))
    with pytest.raises(InvalidEvent, match="stored"):
        KvCacheEvent("a", stored=((1, -2),))


def test_route_sees_the_call_being_asked_for_and_the_scraped_load():
    policy = Recorder()
    c = Coordinator(policy, CoreSettings())
    c.on_event(NodeUpdate("a", 100_000, load=NodeLoad(running=2, waiting=1, kv_usage=0.25)), 0.0)
    c.on_event(Register("s", expected_input_tokens=100), 0.0)
    c.on_event(Acquire("s", expected_input_tokens=320, prompt_block_runs=((7, 20),)), 0.0)
    tokens, runs, nodes = policy.routed[0]
    assert (tokens, runs) == (320, ((7, 20),))
    assert nodes["a"].load == NodeLoad(2, 1, 0.25)


def test_router_feeds_are_observed_and_plan_nothing():
    c = Coordinator(make_policy("tao"), CoreSettings())
    c.on_event(NodeUpdate("a", 20_000), 0.0)
    c.on_event(Register("s", expected_input_tokens=15_000), 0.0)
    c.on_event(Register("t", expected_input_tokens=15_000), 0.0)  # does not fit next to s: waits
    started = c.plan_stats.started
    assert c.on_event(NodeUpdate("a", 20_000, load=NodeLoad(running=1, kv_usage=0.5)), 1.0) == []
    assert c.on_event(KvCacheEvent("a", stored=((0, 4),)), 1.0) == []
    assert c.on_event(LlmFirstToken("s", "a"), 1.0) == []
    assert c.plan_stats.started == started
    c.on_event(NodeUpdate("a", 40_000), 2.0)  # capacity changed: worth a plan
    assert c.plan_stats.started == started + 1
    with pytest.raises(UnknownNode):
        c.on_event(KvCacheEvent("b"), 3.0)
    with pytest.raises(UnknownSession):
        c.on_event(LlmFirstToken("nobody", "a"), 3.0)


def test_a_periodic_policy_plans_on_its_interval_while_sessions_live_even_when_nobody_waits():
    policy = Periodic()
    c = Coordinator(policy, CoreSettings(lease_ttl_s=1e9))
    c.on_event(NodeUpdate("a", 20_000), 0.0)
    assert c.next_wakeup() is None  # no session: nothing to wake for
    c.on_event(Register("s"), 1.0)
    assert c.next_wakeup() == 6.0
    assert c.on_event(Acquire("s"), 1.0) == [Route("s", "a")]
    assert c.waiting == frozenset()  # s holds a place: only the periodic tick can plan now
    c.on_event(Tick(), 6.0)
    assert policy.plans_at[-1] == 6.0
    assert c.next_wakeup() == 11.0


def test_the_simulator_sends_each_policy_only_the_feeds_it_reads():
    workload = generate("swe-agent", sessions=3, seed=1)
    profile = profile_by_name("h100-tp2")
    dynamo = FleetSimulation(workload, "dynamo", 3, profile, 2)
    sent = Counter[type]()
    on_event = dynamo.coordinator.on_event

    def listening(event, now):
        sent[type(event)] += 1
        return on_event(event, now)

    dynamo.coordinator.on_event = listening  # type: ignore[method-assign]
    dynamo.run()
    assert sent[KvCacheEvent] > 0
    llmd = FleetSimulation(workload, "llm-d", 3, profile, 2)
    assert not llmd.feeds.kv_events and llmd.feeds.node_load
    # TAO's adaptive utilisation target reads the scraped preemptions and waiting queue, nothing else
    tao = FleetSimulation(workload, "tao", 3, profile, 2)
    assert tao.feeds.node_load and not (tao.feeds.kv_events or tao.feeds.first_token)
    static = FleetSimulation(workload, "tao-static-admit", 3, profile, 2)
    assert not (static.feeds.kv_events or static.feeds.node_load or static.feeds.first_token)


def test_a_scrape_is_taken_at_most_once_per_interval():
    engines = {"a": NodeEngine(profile_by_name("h100-tp2"))}
    feeds = RouterFeeds(frozenset({Feed.NODE_LOAD}), engines, scrape_interval_s=0.05)
    assert len(feeds.scrape(0.0)) == 1
    assert feeds.scrape(0.04) == []
    assert feeds.scrape(0.05)[0].node_id == "a"
    assert RouterFeeds(frozenset(), engines).scrape(1.0) == []


class Admits(PlanningPolicy):
    """An admission policy that admits every waiting session on node `a` at weight 0 (its own capacity rule)."""

    name = "admits"

    def plan(self, snapshot):
        from tao_coordinator.core.plan import Placement

        waiting = [s for s in snapshot.sessions if s.node is None]
        return Plan(tuple(Placement(s.id, s.version, "a", 0) for s in waiting))


def test_a_placement_of_weight_zero_is_not_held_to_taos_utilisation_target():
    c = Coordinator(Admits(), CoreSettings())
    c.on_event(NodeUpdate("a", 10_000), 0.0)
    for k in range(3):  # 3 × (8,192 + 512) tokens: far beyond 0.9 × 10,000 by TAO's footprint
        c.on_event(Register(f"s{k}"), 0.0)
    assert all(s.node == "a" for s in c.sessions.values())
