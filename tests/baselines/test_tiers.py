"""The baselines read the KV tier below HBM as their real systems do: Dynamo's per-tier overlap weights, llm-d's
precise-prefix medium weights (reference/routers-and-baselines.md §1.1, §1.6, §3.4)."""

import pytest

from tao_coordinator.baselines.dynamo import DynamoPolicy, storage_tier
from tao_coordinator.baselines.llm_d import LlmdPolicy, LlmdPrecisePolicy, weighted_prefix
from tao_coordinator.baselines.runs import skip
from tao_coordinator.core.errors import InvalidEvent
from tao_coordinator.core.events import KvCacheEvent
from tao_coordinator.core.model import AgentProfile, AgentSession, Node
from tao_coordinator.core.policies import BASELINES, make_policy
from tao_coordinator.core.policies.base import Feed


def _session(sid, tokens, runs=()):
    return AgentSession(sid, AgentProfile(), 0.0, 1e9, expected_input_tokens=tokens, prompt_block_runs=runs)


def _nodes(*names):
    return {n: Node(n, 1_000_000) for n in names}


def test_kv_cache_event_carries_vllm_medium():
    assert KvCacheEvent("a").medium == "GPU"
    assert KvCacheEvent("a", stored=((0, 1),), medium="STORAGE").medium == "STORAGE"
    with pytest.raises(InvalidEvent, match="medium"):
        KvCacheEvent("a", medium="")


def test_dynamo_maps_media_as_storage_tier_from_kv_medium():
    assert [storage_tier(m) for m in ("GPU", "CPU", "CPU_PINNED", "STORAGE", "DISK", "REMOTE", "gpu", "HBM3")] == [
        "device",
        "host_pinned",
        "host_pinned",
        "disk",
        "disk",
        "external",
        "device",  # exact names: anything else falls back to the device
        "device",
    ]
    assert skip(((0, 10), (100, 5)), 12) == ((102, 3),)


def test_dynamo_weighs_host_blocks_by_three_quarters_and_prefers_device_to_host_to_nothing():
    policy = DynamoPolicy()
    nodes = _nodes("dev", "host", "none")
    policy.observe(KvCacheEvent("dev", stored=((0, 100),)), 0.0)
    policy.observe(KvCacheEvent("host", stored=((0, 100),), medium="CPU"), 0.0)
    prompt = _session("s", 1760, ((0, 110),))  # 110 blocks
    overlaps = policy.overlaps("host", prompt.prompt_block_runs)
    assert overlaps == {"device": 0, "host_pinned": 100, "disk": 0, "external": 0}
    costs = dict(zip(sorted(nodes), policy.costs(prompt, [nodes[n] for n in sorted(nodes)]), strict=True))
    # raw prefill 110 blocks, decode 110: device 110 − 100 + 110; host 110 − 0.75·100 + 110; nothing 110 + 110
    assert costs == {"dev": (120.0, 100), "host": (145.0, 75.0), "none": (220.0, 0)}
    assert policy.route(prompt, nodes, 0.0) == "dev"
    del nodes["dev"]
    assert policy.route(_session("t", 1760, ((0, 110),)), nodes, 0.0) == "host"
    assert policy.calls.at("t", "host").prefill_tokens == 1760 - 75 * 16


def test_dynamo_host_and_disk_overlap_continue_the_device_match():
    policy = DynamoPolicy()
    policy.observe(KvCacheEvent("a", stored=((0, 40),)), 0.0)
    policy.observe(KvCacheEvent("a", stored=((0, 60),), medium="CPU"), 0.0)  # blocks 0-39 are on both tiers
    policy.observe(KvCacheEvent("a", stored=((60, 10), (80, 10)), medium="STORAGE"), 0.0)
    overlaps = policy.overlaps("a", ((0, 100),))
    # device 0-39; host continues at 40 up to 59; disk continues at 60 up to 69 and stops at the gap (70)
    assert overlaps == {"device": 40, "host_pinned": 20, "disk": 10, "external": 0}
    assert policy.lower_credit(overlaps) == 0.75 * 20 + 0.25 * 10


def test_dynamo_tier_events_leave_other_tiers_alone():
    policy = DynamoPolicy()
    policy.observe(KvCacheEvent("a", stored=((0, 50),)), 0.0)
    policy.observe(KvCacheEvent("a", stored=((0, 50),), medium="CPU"), 0.0)
    policy.observe(KvCacheEvent("a", removed=((0, 50),), medium="CPU"), 1.0)
    assert policy.index.prefix("a", "device", ((0, 50),)) == 50
    policy.observe(KvCacheEvent("a", stored=((0, 50),), medium="CPU"), 2.0)
    policy.observe(KvCacheEvent("a", removed=((0, 50),)), 3.0)
    assert policy.index.prefix("a", "device", ((0, 50),)) == 0
    assert policy.index.prefix("a", "host_pinned", ((0, 50),)) == 50
    policy.observe(KvCacheEvent("a", cleared=True), 4.0)  # AllBlocksCleared is the device's
    assert policy.overlaps("a", ((0, 50),))["host_pinned"] == 50


def test_weighted_prefix_takes_the_best_medium_per_block_and_stops_at_the_first_miss():
    # llm-d-kv-cache's TestLongestPrefixScorerDifferentTiers with weights gpu 1.0 / cpu 0.5: pod A scores 2.5
    assert weighted_prefix([(1.0, [(0, 2), (5, 6)]), (0.5, [(2, 3)])]) == 2.5
    assert weighted_prefix([(1.0, [(0, 3)]), (0.8, [(2, 5)])]) == 3 + 0.8 * 2  # block 2 on both: its best weight
    assert weighted_prefix([(1.0, [(1, 5)])]) == 0.0  # block 0 missing


def test_llmd_precise_scores_cpu_blocks_at_0_8_gpu_blocks_at_1():
    policy = LlmdPrecisePolicy()
    assert policy.inputs == frozenset({Feed.NODE_LOAD, Feed.KV_EVENTS})
    policy.observe(KvCacheEvent("a", stored=((0, 40),)), 0.0)
    policy.observe(KvCacheEvent("a", stored=((40, 50),), medium="CPU"), 0.0)
    policy.observe(KvCacheEvent("a", stored=((95, 5),)), 0.0)  # beyond the first miss (block 90)
    policy.observe(KvCacheEvent("b", stored=((0, 100),), medium="CPU"), 0.0)
    runs = ((0, 100),)
    assert policy.prefix_blocks("a", runs) == pytest.approx(40 + 0.8 * 50)
    assert policy.prefix_blocks("b", runs) == pytest.approx(0.8 * 100)
    nodes = _nodes("a", "b", "c")
    scores = policy.scores(_session("s", 1608, runs), [nodes["a"], nodes["b"], nodes["c"]])
    # 100 full blocks (the trailing 8 tokens are no block); kv 2·1 + queue 2·1 for every pod
    assert scores == pytest.approx([3 * 0.8 + 4, 3 * 0.8 + 4, 4])
    assert policy.route(_session("s", 1600, ((0, 40),)), nodes, 0.0) == "a"


def test_llmd_precise_removals_are_per_medium_and_clears_are_ignored():
    policy = LlmdPrecisePolicy()
    policy.observe(KvCacheEvent("a", stored=((0, 10),)), 0.0)
    policy.observe(KvCacheEvent("a", stored=((0, 10),), medium="CPU"), 0.0)
    policy.observe(KvCacheEvent("a", removed=((0, 10),)), 1.0)
    assert policy.prefix_blocks("a", ((0, 10),)) == pytest.approx(8.0)
    policy.observe(KvCacheEvent("a", cleared=True), 2.0)  # a no-op in llm-d-kv-cache
    assert policy.prefix_blocks("a", ((0, 10),)) == pytest.approx(8.0)
    policy.observe(KvCacheEvent("a", stored=((0, 10),), medium="STORAGE"), 3.0)  # no configured weight: 1.0
    assert policy.prefix_blocks("a", ((0, 10),)) == pytest.approx(10.0)


def test_registry_knows_the_precise_profile_and_keeps_llm_d_approximate():
    assert "llm-d-precise" in BASELINES
    assert isinstance(make_policy("llm-d-precise"), LlmdPrecisePolicy)
    assert make_policy("llm-d-precise[cpu_weight=0.5]").medium_weights == {"gpu": 1.0, "cpu": 0.5}
    assert make_policy("llm-d").inputs == LlmdPolicy.inputs == frozenset({Feed.NODE_LOAD})
