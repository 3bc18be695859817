"""Cache credit, readiness, footprint and stability as the planner sees them."""

import math

import pytest

from tao_coordinator.core.model import (
    AgentProfile,
    AgentSession,
    CacheEvidence,
    DurationHints,
    EvidenceSource,
    Node,
    Phase,
    ReadinessSchedule,
    RunningTool,
)
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals import CacheCredit, Footprint, Readiness, SignalContext, Stability
from tao_coordinator.core.value import ValueModel

SETTINGS = CoreSettings()
NODES = {"a": Node("a", 100_000, prefix_hit_rate=0.5), "b": Node("b", 100_000)}


def ctx(now, nodes=NODES, **overrides):
    return SignalContext(now, SETTINGS.model_copy(update=overrides), nodes)


def session(**fields):
    defaults = dict(id="s", context=AgentProfile(), registered_at=0.0, lease_expires_at=1e9)
    return AgentSession(**(defaults | fields))


def usage(node, tokens, at):
    return CacheEvidence(node, tokens, at, EvidenceSource.USAGE)


def test_credit_halves_every_half_life_and_floors_to_whole_units():
    s = session(evidence=(usage("a", 64 * 1024, 0.0),))
    credit = CacheCredit()
    assert credit.on_nodes(s, ctx(0.0)) == {"a": 64}
    assert credit.on_nodes(s, ctx(10.0)) == {"a": 32}
    assert credit.on_nodes(s, ctx(15.0)) == {"a": 22}  # 64 · 2^-1.5 = 22.6
    assert credit.on_nodes(s, ctx(59.0)) == {"a": 1}
    assert credit.on_nodes(s, ctx(61.0)) == {}  # below one unit: no credit at all


def test_no_decay_keeps_credit():
    s = session(evidence=(usage("a", 64 * 1024, 0.0),))
    assert CacheCredit(decay=False).on_nodes(s, ctx(3600.0)) == {"a": 64}


def test_best_source_wins_even_when_it_says_less():
    kv = CacheEvidence("a", 8 * 1024, 5.0, EvidenceSource.KV_EVENTS)
    s = session(evidence=(usage("a", 64 * 1024, 0.0), kv))
    assert CacheCredit().on_nodes(s, ctx(5.0)) == {"a": 5}  # 8 resident, 5 s after the call: 8 · 2^-0.5 = 5.7
    evicted = session(evidence=(usage("a", 64 * 1024, 0.0), CacheEvidence("a", 0, 5.0, EvidenceSource.KV_EVENTS)))
    assert CacheCredit().on_nodes(evicted, ctx(6.0)) == {}


def test_live_credit_decays_from_what_is_resident_since_the_last_call_on_the_node():
    # the rent of a place held idle: what KV events say is resident, halved every h since the call there ended
    kv = CacheEvidence("a", 32 * 1024, 20.0, EvidenceSource.KV_EVENTS)
    s = session(evidence=(usage("a", 64 * 1024, 10.0), kv))
    credit = CacheCredit()
    assert credit.on_nodes(s, ctx(10.0)) == {"a": 32}
    assert credit.on_nodes(s, ctx(20.0)) == {"a": 16}
    assert credit.on_nodes(s, ctx(1000.0)) == {}
    # the next drop is computed from the same basis, so a value cache re-evaluates it in time
    assert credit.compute(s, ctx(15.0)) == ({"a": 22}, pytest.approx(10.0 + 10.0 * math.log2(32 / 22)))
    assert CacheCredit(decay=False).on_nodes(s, ctx(1000.0)) == {"a": 32}


def test_live_credit_without_a_call_on_the_node_does_not_decay():
    kv = CacheEvidence("b", 16 * 1024, 0.0, EvidenceSource.KV_EVENTS)
    s = session(evidence=(usage("a", 64 * 1024, 0.0), kv))
    assert CacheCredit().on_nodes(s, ctx(1000.0)) == {"b": 16}


def test_estimate_uses_the_node_hit_rate():
    s = session(evidence=(CacheEvidence("a", 8192, 0.0, EvidenceSource.ESTIMATE),))
    assert CacheCredit().on_nodes(s, ctx(0.0)) == {"a": 4}  # 8192 × 0.5 / 1024


def test_no_credit_on_nodes_missing_from_the_context():
    s = session(evidence=(usage("gone", 64 * 1024, 0.0),))
    assert CacheCredit().on_nodes(s, ctx(0.0)) == {}


def _tool(flip, top=4):
    """A call whose readiness goes from 0 to `top` at `flip`."""
    schedule = ReadinessSchedule(1.0, 0, (flip,), (top,))
    return RunningTool("c", "bash", 0.0, DurationHints(), flip + 1.0, 0.0, "forecast", readiness=schedule)


def test_readiness_by_phase_and_schedule():
    r = Readiness()
    top = 4
    for phase in (Phase.WAITING, Phase.ADMITTED, Phase.READY):
        waiting = session(phase=phase, node="a" if phase is Phase.ADMITTED else None)
        assert r.base(waiting, ctx(0.0, readiness_levels=top)) == top
    assert r.base(session(phase=Phase.IN_LLM, node="a"), ctx(0.0, readiness_levels=top)) == 0
    in_tool = session(phase=Phase.IN_TOOL, tools=(_tool(9.0),))
    assert r.base(in_tool, ctx(8.0, readiness_levels=top)) == 0
    assert r.base(in_tool, ctx(9.0, readiness_levels=top)) == top
    two = session(phase=Phase.IN_TOOL, tools=(_tool(9.0), _tool(29.0, top=2)))
    assert r.base(two, ctx(9.5, readiness_levels=top)) == 0  # ready only when every tool is
    assert r.base(two, ctx(30.0, readiness_levels=top)) == 2  # and as ready as the least ready


def test_footprint_subtracts_the_shared_prefix_and_adds_expected_output():
    s = session(
        context=AgentProfile(shared_prefix_tokens=2000),
        context_tokens=10_000,
        expected_input_tokens=12_000,
        completed_calls=2,
        output_tokens_total=600,
    )
    assert Footprint().base(s, ctx(0.0)) == 12_000 - 2000 + 300
    fresh = session()
    assert Footprint().base(fresh, ctx(0.0)) == SETTINGS.default_session_tokens + SETTINGS.default_output_tokens


def test_stability_marks_the_current_healthy_node_only():
    assert Stability().on_nodes(session(phase=Phase.ADMITTED, node="b"), ctx(0.0)) == {"b": 1}
    assert Stability().on_nodes(session(phase=Phase.ADMITTED, node="x"), ctx(0.0)) == {}


def test_value_model_builds_sparse_per_node_values():
    model = ValueModel([CacheCredit(), Readiness(), Footprint(), Stability()])
    s = session(phase=Phase.ADMITTED, node="b", evidence=(usage("a", 4096, 0.0),), context_tokens=4096)
    value = model.evaluate(s, ctx(0.0))
    footprint = 4096 + SETTINGS.default_output_tokens
    ready = SETTINGS.readiness_levels
    assert value.base == (0, ready, footprint, 0)
    assert value.on_nodes == {"a": (4, ready, footprint, 0), "b": (0, ready, footprint, 1)}
