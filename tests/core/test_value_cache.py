"""Values kept from one plan to the next are the values a fresh evaluation gives, at every instant.

The planner keeps a session's value while its `AgentSession` object, the nodes and the settings are the same, and
evaluates again only the signals whose next step (`SignalPart.until`) came or one of whose node inputs changed.
These tests drive `build_problem` through a random history — time passing in steps large and tiny, sessions
replaced, nodes changing — and compare each problem with the one built without the cache.
"""

import random
from dataclasses import replace

from tao_coordinator.core.model import (
    AgentProfile,
    AgentSession,
    CacheEvidence,
    DurationHints,
    EvidenceSource,
    Node,
    NodeLoad,
    Phase,
    ReadinessSchedule,
    RunningTool,
)
from tao_coordinator.core.policies.problem import ValueCache, build_problem
from tao_coordinator.core.policies.tao import tao
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals import CacheCredit, Readiness, SignalContext
from tao_coordinator.core.snapshot import Snapshot

SETTINGS = CoreSettings()
SOURCES = (EvidenceSource.KV_EVENTS, EvidenceSource.USAGE, EvidenceSource.ESTIMATE)


def random_session(rng: random.Random, k: int, now: float, nodes: list[Node]) -> AgentSession:
    evidence = tuple(
        CacheEvidence(node.id, rng.randint(0, 90_000), now - rng.uniform(0, 40), rng.choice(SOURCES))
        for node in rng.sample(nodes, rng.randint(0, 3))
    )
    phase = rng.choice([Phase.WAITING, Phase.ADMITTED, Phase.READY, Phase.IN_TOOL, Phase.IN_LLM])
    node = None if phase is Phase.WAITING else rng.choice(nodes).id
    tools: tuple[RunningTool, ...] = ()
    if phase is Phase.IN_TOOL:
        if rng.random() < 0.3:
            node = None
        times = tuple(sorted(now + rng.uniform(0, 5) for _ in range(rng.randint(0, 3))))
        schedule = ReadinessSchedule(1.0, 0, times, tuple(range(1, len(times) + 1)))
        tools = (RunningTool("c", "bash", now, DurationHints(), now + 3, now, "forecast", None, schedule),)
    return AgentSession(
        id=f"s{k}",
        context=AgentProfile(),
        registered_at=0.0,
        lease_expires_at=1e9,
        phase=phase,
        node=node,
        llm_calls=int(phase is Phase.IN_LLM),
        tools=tools,
        context_tokens=rng.randint(0, 80_000),
        completed_calls=rng.randint(0, 5),
        output_tokens_total=rng.randint(0, 5_000),
        evidence=evidence,
    )


def test_a_kept_value_is_the_fresh_value_at_every_instant():
    rng = random.Random(7)
    for history in range(20):
        nodes = [Node(f"n{b}", 300_000, prefix_hit_rate=rng.random()) for b in range(4)]
        now = 100.0
        sessions = [random_session(rng, k, now, nodes) for k in range(24)]
        policy = tao()
        cache = ValueCache()
        for step in range(60):
            now += rng.choice([1e-7, 1e-3, 0.05, 0.4, 3.0])
            if rng.random() < 0.3:
                k = rng.randrange(len(sessions))
                sessions[k] = random_session(rng, k, now, nodes)
            if rng.random() < 0.1:
                b = rng.randrange(len(nodes))
                nodes[b] = replace(nodes[b], prefix_hit_rate=rng.random())
            if rng.random() < 0.1:
                b = rng.randrange(len(nodes))
                nodes[b] = replace(nodes[b], credit_half_life_s=rng.choice([None, 5.0, 30.0]))
            if rng.random() < 0.1:
                b = rng.randrange(len(nodes))
                nodes[b] = replace(
                    nodes[b], load=NodeLoad(running=rng.randint(0, 9)), capacity_tokens=rng.randint(200_000, 400_000)
                )
            if rng.random() < 0.2:  # read by the token time alone: the other parts are kept
                b = rng.randrange(len(nodes))
                nodes[b] = replace(nodes[b], decode_step_s=rng.choice([0.0, 0.011, 0.013, 0.02]))
            if rng.random() < 0.05:
                b = rng.randrange(len(nodes))
                nodes[b] = replace(nodes[b], healthy=not nodes[b].healthy)
            snapshot = Snapshot(now, tuple(sessions), tuple(nodes), SETTINGS)
            kept = build_problem(snapshot, policy.values, cache)
            fresh = build_problem(snapshot, policy.values)
            assert kept == fresh, f"history {history}, step {step}"
    assert cache.reused > cache.evaluated > 0


def test_credit_is_kept_until_it_drops_a_unit_and_evaluated_again_then():
    node = Node("a", 300_000)
    nodes = {"a": node}
    evidence = (CacheEvidence("a", 10 * 1024 + 100, 0.0, EvidenceSource.USAGE),)
    session = AgentSession(id="s", context=AgentProfile(), registered_at=0.0, lease_expires_at=1e9, evidence=evidence)
    credit = CacheCredit()
    until = credit.changes_at(session, SignalContext(0.0, SETTINGS, nodes))
    assert credit.on_nodes(session, SignalContext(0.0, SETTINGS, nodes)) == {"a": 10}
    assert credit.on_nodes(session, SignalContext(until - 1e-7, SETTINGS, nodes)) == {"a": 10}
    assert credit.on_nodes(session, SignalContext(until + 2e-6, SETTINGS, nodes)) == {"a": 9}
    # live KV evidence does not decay: only a new event changes it
    live = replace(session, evidence=(CacheEvidence("a", 4096, 0.0, EvidenceSource.KV_EVENTS),))
    assert credit.changes_at(live, SignalContext(0.0, SETTINGS, nodes)) == float("inf")


def test_readiness_changes_at_its_schedules_next_step():
    schedule = ReadinessSchedule(1.0, 0, (5.0, 9.0), (1, 2))
    tools = (RunningTool("c", "bash", 0.0, DurationHints(), 10.0, 0.0, "forecast", None, schedule),)
    session = AgentSession(
        id="s", context=AgentProfile(), registered_at=0.0, lease_expires_at=1e9, phase=Phase.IN_TOOL, tools=tools
    )
    signal = Readiness()
    assert signal.changes_at(session, SignalContext(1.0, SETTINGS, {})) == 5.0
    assert signal.changes_at(session, SignalContext(5.0, SETTINGS, {})) == 9.0
    assert signal.changes_at(session, SignalContext(9.5, SETTINGS, {})) == float("inf")
