"""Tier credit: what a CPU-resident prefix is worth, how it decays, when it drops, where fast admission sends its
session, and the rates the coordinator measures from a node's counters to price it."""

import math
from dataclasses import replace

import pytest

from tao_coordinator.core.actions import Route
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.errors import InvalidEvent
from tao_coordinator.core.events import Acquire, CacheResidency, EngineCounters, LlmEnd, NodeUpdate, Register, ToolStart
from tao_coordinator.core.model import (
    AgentProfile,
    AgentSession,
    CacheEvidence,
    EvidenceSource,
    Node,
    NodeLoad,
    NodeRates,
    Phase,
)
from tao_coordinator.core.node_rates import NodeRateFit
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.policies.admission import FastAdmit
from tao_coordinator.core.policies.base import Holdings
from tao_coordinator.core.policies.tao import CallingShare, tier_reach
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals import CacheCredit, SignalContext, TierCredit
from tao_coordinator.core.signals.tier import cpu_hit_worth, cpu_retention_s

SETTINGS = CoreSettings()  # h = 10 s, units of 1024 tokens
UNIT = SETTINGS.credit_unit_tokens


def session(*evidence: CacheEvidence) -> AgentSession:
    return AgentSession(id="s", context=AgentProfile(), registered_at=0.0, lease_expires_at=1e9, evidence=evidence)


def usage(tokens: int, at: float = 0.0) -> CacheEvidence:
    return CacheEvidence("a", tokens, at, EvidenceSource.USAGE)


def tiered(worth: float = 0.5, retention: float | None = 100.0) -> Node:
    return Node("a", 100_000, cpu_capacity_tokens=400_000, cpu_hit_worth=worth, cpu_retention_s=retention)


def credits_at(node: Node, now: float, *evidence: CacheEvidence, phase: Phase = Phase.WAITING) -> tuple[int, int]:
    """(HBM credit, tier credit) of a session with `evidence` on node `node` at `now`."""
    s = replace(session(*evidence), phase=phase)
    ctx = SignalContext(now, SETTINGS, {"a": node})
    return CacheCredit().on_nodes(s, ctx).get("a", 0), TierCredit().on_nodes(s, ctx).get("a", 0)


def test_a_cpu_hit_is_worth_the_recompute_a_load_saves_at_the_links_current_load() -> None:
    # recompute 20k tokens/s, load 200k tokens/s: a load takes a tenth of the recompute, worth 0.9 → 14/16
    idle = NodeRates(prefill_tokens_per_s=20_000, load_tokens_per_s=200_000)
    assert cpu_hit_worth(idle, prior=0.5) == 14 / 16
    # four loads queued on average: the new one waits for them, half its recompute is saved
    busy = NodeRates(prefill_tokens_per_s=20_000, load_tokens_per_s=200_000, kv_fetch_queue=4)
    assert cpu_hit_worth(busy, prior=0.5) == 8 / 16
    # ten queued: loading is slower than recomputing, the CPU copy is worth nothing
    congested = NodeRates(prefill_tokens_per_s=20_000, load_tokens_per_s=200_000, kv_fetch_queue=10)
    assert cpu_hit_worth(congested, prior=0.5) == 0.0
    assert cpu_hit_worth(NodeRates(prefill_tokens_per_s=20_000), prior=0.25) == 0.25  # never loaded yet


def test_the_cpu_tier_half_life_is_its_turnover_time() -> None:
    # 400k tokens of tier filled at 4k new tokens/s: an untouched prefix is gone after ~100 s, half-life ln2 × 100
    # = 69 s, in steps of 2^(1/4): 64 s
    assert cpu_retention_s(400_000, NodeRates(new_kv_tokens_per_s=4_000)) == 64.0
    assert cpu_retention_s(400_000, NodeRates(new_kv_tokens_per_s=3_500)) == 2**6.25
    assert cpu_retention_s(0, NodeRates(new_kv_tokens_per_s=4_000)) is None
    assert cpu_retention_s(400_000, NodeRates()) is None


def test_usage_evidence_leaves_tier_credit_after_hbm_credit_is_gone() -> None:
    node = tiered(worth=0.5, retention=100.0)
    evidence = usage(64 * UNIT)
    assert credits_at(node, 0.0, evidence) == (64, 32)  # in HBM, and written through to the tier at half worth
    # after 60 s (6 half-lives of HBM) HBM credit is 1 unit; the tier still holds 2^-0.6 of it at half worth
    assert credits_at(node, 60.0, evidence) == (1, math.floor(0.5 * 64 * 2**-0.6))
    assert credits_at(tiered(worth=0.0), 60.0, evidence) == (1, 0)  # a congested link: the tier earns nothing
    assert credits_at(Node("a", 100_000), 60.0, evidence) == (1, 0)  # no tier at all
    assert credits_at(tiered(retention=None), 60.0, evidence) == (1, 0)  # turnover not measured yet


def test_a_tier_no_larger_than_hbm_earns_no_credit_it_holds_nothing_hbm_lost() -> None:
    evidence = usage(64 * UNIT)
    small = replace(tiered(), cpu_capacity_tokens=100_000)  # written through and no larger than HBM's 100k
    assert credits_at(small, 0.0, evidence) == (64, 0)
    assert credits_at(small, 60.0, evidence) == (1, 0)
    assert credits_at(replace(small, cpu_capacity_tokens=100_001), 60.0, evidence)[1] > 0
    live = CacheEvidence("a", 40 * UNIT, 0.0, EvidenceSource.KV_EVENTS, "CPU")
    assert credits_at(small, 500.0, live) == (0, 20)  # what a live event reports is there: exact, whatever the size


def test_a_session_in_a_tool_earns_no_tier_credit_its_cpu_copy_survives_without_a_place() -> None:
    assert credits_at(tiered(), 0.0, usage(64 * UNIT), phase=Phase.IN_TOOL)[1] == 0


def test_live_cpu_residency_is_exact() -> None:
    node = tiered(worth=0.75)
    gpu = CacheEvidence("a", 8 * UNIT, 0.0, EvidenceSource.KV_EVENTS)
    cpu = CacheEvidence("a", 40 * UNIT, 0.0, EvidenceSource.KV_EVENTS, "CPU")
    assert credits_at(node, 500.0, gpu, cpu) == (8, 30)  # no decay; 0.75 × 40 units
    assert credits_at(node, 500.0, usage(64 * UNIT, at=499.0), cpu)[1] == 30  # live beats the usage snapshot


def test_tier_credit_changes_at_is_never_after_the_first_lost_unit() -> None:
    node = tiered(worth=0.5, retention=100.0)
    credit = TierCredit()
    s = session(usage(64 * UNIT))
    times = [0.5 * k for k in range(1, 2000)]
    units = [credit.on_nodes(s, SignalContext(t, SETTINGS, {"a": node})).get("a", 0) for t in times]
    assert units[0] == 31 and units[-1] == 0
    for k, t in enumerate(times):
        until = credit.changes_at(s, SignalContext(t, SETTINGS, {"a": node}))
        later = [u for u, t2 in zip(units[k:], times[k:], strict=True) if t2 < until]
        assert all(u == units[k] for u in later), f"credit changed before {until} (asked at {t})"
        if units[k]:
            assert until < math.inf


def test_fast_admission_goes_where_the_tier_holds_the_prefix_when_no_hbm_credit_is_left() -> None:
    nodes = {"a": tiered(worth=0.5, retention=100.0), "b": replace(tiered(), id="b", cpu_retention_s=100.0)}
    s = session(usage(64 * UNIT))  # on node a, 60 s ago: HBM credit 1 unit, tier credit 21 units
    room = {"a": 10_000, "b": 10_000}
    assert FastAdmit().admit(s, nodes, room, SETTINGS, 100.0) == "a"
    loaded = {"a": replace(nodes["a"], load=NodeLoad(running=9)), "b": nodes["b"]}
    assert FastAdmit().admit(s, loaded, room, SETTINGS, 100.0) == "a"  # the tier beats load
    assert FastAdmit(tier=False).admit(s, loaded, room, SETTINGS, 100.0) == "b"  # tao-no-tier: by load


def test_rates_are_ratios_of_counter_increments_pooled_until_they_mean_something() -> None:
    fit = NodeRateFit()
    rates = NodeRates()
    rates = fit.observe("a", EngineCounters(), 0.0, rates)
    assert rates.prefill_tokens_per_s == 0.0
    # half a second of prefill: not enough for a rate yet
    rates = fit.observe("a", EngineCounters(prefill_tokens_computed=10_000, prefill_seconds=0.5), 1.0, rates)
    assert rates.prefill_tokens_per_s == 0.0
    counters = EngineCounters(
        prefill_tokens_computed=20_000,
        prefill_seconds=1.0,
        decode_tokens=200,
        decode_seconds=4.0,
        generation_tokens=2_000,
        offload_load_tokens=50_000,
        offload_load_seconds=1.0,
        kv_fetch_waiting=3,
    )
    rates = fit.observe("a", counters, 2.0, rates)
    assert rates.prefill_tokens_per_s == 20_000
    assert rates.decode_step_s == 0.02
    assert rates.load_tokens_per_s == 50_000
    assert rates.new_kv_tokens_per_s == 0.7 * 10_000 + 0.3 * 12_000  # one pool per wall second, then averaged
    assert rates.kv_fetch_waiting == 3
    assert rates.kv_fetch_queue == pytest.approx(3 * (1 - math.exp(-1 / 5)))  # the gauge averaged over seconds
    # a restart (counters back to 0) keeps the averages and starts pooling afresh
    restarted = fit.observe("a", EngineCounters(), 3.0, rates)
    assert restarted.prefill_tokens_per_s == 20_000


def test_the_coordinator_prices_a_nodes_tier_from_its_scrapes() -> None:
    core = Coordinator(make_policy("tao"), SETTINGS)
    core.on_event(NodeUpdate("a", 100_000, cpu_capacity_tokens=400_000, counters=EngineCounters()), 0.0)
    node = core.nodes["a"]
    assert node.cpu_hit_worth == SETTINGS.cpu_hit_worth_prior and node.cpu_retention_s is None
    counters = EngineCounters(
        prefill_tokens_computed=40_000, prefill_seconds=2.0, offload_load_tokens=400_000, offload_load_seconds=2.0
    )
    core.on_event(NodeUpdate("a", 100_000, cpu_capacity_tokens=400_000, counters=counters), 10.0)
    node = core.nodes["a"]
    assert node.cpu_hit_worth == 14 / 16  # loads 10× faster than recompute
    assert node.cpu_retention_s == 64.0
    core.on_event(NodeUpdate("b", 100_000), 10.0)
    assert core.nodes["b"].cpu_hit_worth == 0.0  # no tier, no worth


def test_a_residency_names_a_tier_vllm_has() -> None:
    assert CacheResidency("a", "s", 10, "CPU").tier == "CPU"
    with pytest.raises(InvalidEvent, match="tier"):
        CacheResidency("a", "s", 10, "DISK")  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent, match="prefill_seconds"):
        EngineCounters(prefill_seconds=-1.0)


def test_a_cpu_tier_stretches_what_tao_may_fill_by_its_worth_only_as_far_as_holders_in_tools_leave_hbm_free() -> None:
    counters = EngineCounters(
        prefill_tokens_computed=40_000, prefill_seconds=2.0, offload_load_tokens=400_000, offload_load_seconds=2.0
    )
    prompt = 20_000

    def targets(name: str, in_tool: int) -> list[float | None]:
        """The node's target after a first scrape, after four holders came (`in_tool` of them into a tool), and
        after the same again: the calling share sums over every scrape."""
        core = Coordinator(make_policy(name), SETTINGS)
        seen = []
        core.on_event(NodeUpdate("a", 100_000, cpu_capacity_tokens=400_000, counters=EngineCounters()), 0.0)
        seen.append(core.nodes["a"].utilization_target)
        for index in range(4):
            core.on_event(Register(f"s{index}", expected_input_tokens=prompt), 1.0)
            assert core.on_event(Acquire(f"s{index}"), 1.0) == [Route(f"s{index}", "a")]
            if index < in_tool:
                core.on_event(LlmEnd(f"s{index}", "a", prompt, 0, 100), 2.0)
                core.on_event(ToolStart(f"s{index}", "c", "bash"), 2.0)
        for now in (10.0, 20.0):
            core.on_event(NodeUpdate("a", 100_000, cpu_capacity_tokens=400_000, counters=counters), now)
            seen.append(core.nodes["a"].utilization_target)
        return seen

    floor = SETTINGS.utilization_target
    # worth 14/16 (an idle link), a tier four times HBM: it holds 3 HBMs beyond HBM's own blocks (it is written
    # through), so at most 1 + 0.875 × 3 = 3.625, never before a holder is seen
    assert targets("tao", in_tool=4)[0] == floor
    # every holder in a tool: nothing in HBM must be running, the whole stretch
    assert targets("tao", in_tool=4)[1:] == [pytest.approx(floor * 3.625)] * 2
    # one of four in a tool: HBM must hold the other three's calls, so about 4/3 of the target (the footprints
    # differ by a little: the one in a tool has its measured output, the others the default)
    assert targets("tao", in_tool=1)[1:] == [pytest.approx(floor * 4 / 3, rel=0.01)] * 2
    # nobody in a tool: the tier cannot hold a call, no stretch at all
    assert targets("tao", in_tool=0)[1:] == [floor, floor]
    assert targets("tao-no-tier", in_tool=4)[1:] == [floor, floor]


def test_the_reach_is_one_without_a_tier_beyond_hbm_a_worth_or_a_calling_share() -> None:
    assert tier_reach(Node("b", 100_000), 0.1) == 1.0
    assert tier_reach(tiered(worth=0.0), 0.1) == 1.0  # a congested link: the HBM bound again
    assert tier_reach(tiered(worth=1.0), None) == 1.0  # nothing seen yet
    assert tier_reach(tiered(worth=1.0), 1.0) == 1.0
    assert tier_reach(tiered(worth=1.0), 0.5) == 2.0
    assert tier_reach(tiered(worth=1.0), 0.1) == 4.0  # 1 + 1 × (tier − HBM) / HBM
    small = Node("a", 100_000, cpu_capacity_tokens=60_000, cpu_hit_worth=1.0)
    assert tier_reach(small, 0.0) == 1.0  # a tier smaller than HBM holds nothing HBM does not


def test_the_calling_share_weighs_every_observation_alike() -> None:
    share = CallingShare()
    assert share.observe(Holdings()) is None
    assert share.observe(Holdings(held_tokens=100, calling_tokens=50)) == 0.5
    assert share.observe(Holdings(held_tokens=300, calling_tokens=50)) == 0.25


def test_an_idle_nodes_tier_keeps_a_prefix_long_but_not_forever() -> None:
    assert cpu_retention_s(400_000, NodeRates(new_kv_tokens_per_s=1e-310)) == 2.0**16
