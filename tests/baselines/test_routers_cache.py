"""Dynamo's KV-router cost and llm-d's weighted scorers on hand-made fleets."""

import random
from collections import Counter

from tao_coordinator.baselines.choice import pick
from tao_coordinator.baselines.dynamo import DynamoPolicy, dynamo_cost
from tao_coordinator.baselines.llm_d import LlmdPolicy
from tao_coordinator.baselines.runs import truncate
from tao_coordinator.core.events import KvCacheEvent, LlmEnd, LlmFirstToken
from tao_coordinator.core.model import AgentProfile, AgentSession, Node, NodeLoad


def _session(sid, tokens, runs=()):
    return AgentSession(sid, AgentProfile(), 0.0, 1e9, expected_input_tokens=tokens, prompt_block_runs=runs)


def _nodes(*names, **loads):
    nodes = {n: Node(n, 1_000_000) for n in names}
    nodes.update({n: Node(n, 1_000_000, load=NodeLoad(waiting=w, kv_usage=kv)) for n, (w, kv) in loads.items()})
    return nodes


def test_dynamo_reproduces_the_worked_example_of_its_router_guide():
    # router_guide.md (weight 1.0): W1 8 + 10 = 18, W2 5 + 5 = 10 (selected), W3 2 + 9 = 11
    costs = [dynamo_cost(8, 0, 10), dynamo_cost(5, 0, 5), dynamo_cost(2, 0, 9)]
    assert costs == [18, 10, 11]
    assert pick(costs, 0.0, random.Random(0)) == 1


def test_dynamo_cost_credits_cached_blocks_and_clamps_prefill_at_zero():
    assert dynamo_cost(raw_prefill_blocks=100, overlap_blocks=60, decode_blocks=40) == 80
    assert dynamo_cost(raw_prefill_blocks=100, overlap_blocks=160, decode_blocks=40) == 40
    assert dynamo_cost(100, 60, 40, credit=0.5, scale=2.0) == 2 * 70 + 40


def test_dynamo_follows_the_kv_events_until_decode_load_outweighs_the_cache():
    policy = DynamoPolicy()
    nodes = _nodes("a", "b")
    policy.observe(KvCacheEvent("b", stored=((0, 100),)), 0.0)  # b holds the first 100 blocks of the prompt
    prompt = _session("s", 1760, ((0, 110),))  # 110 blocks
    # a: prefill 110 + decode 110 = 220; b: prefill 110 − 100 = 10 + decode 110 = 120
    assert policy.route(prompt, nodes, 0.0) == "b"
    assert policy.calls.at("s", "b").prefill_tokens == 1760 - 1600
    # another 110-block session, cached nowhere: a costs 220; b costs (160 + 1760)/16 + 220 = 340 → a
    assert policy.route(_session("t", 1760, ((5000, 110),)), nodes, 0.0) == "a"
    # the prefill of s is done: its uncached tokens leave b's prefill load, its blocks stay as decode load
    policy.observe(LlmFirstToken("s", "b"), 1.0)
    assert policy.calls.at("s", "b").prefill_tokens == 0
    policy.observe(LlmEnd("s", "b"), 2.0)
    assert policy.calls.at("s", "b") is None
    # an eviction event removes the credit
    policy.observe(KvCacheEvent("b", removed=((50, 50),)), 3.0)
    assert policy.index.prefix("b", "device", ((0, 110),)) == 50
    policy.observe(KvCacheEvent("b", cleared=True), 4.0)
    assert policy.index.prefix("b", "device", ((0, 110),)) == 0


def test_dynamo_counts_blocks_shared_by_active_calls_once():
    policy = DynamoPolicy()
    nodes = _nodes("a")
    policy.route(_session("s", 160, ((0, 10),)), nodes, 0.0)
    cost, overlap = policy.costs(_session("t", 320, ((0, 20),)), [nodes["a"]])[0]
    # prefill (10·16 + 320)/16 = 30 blocks, no KV event yet; decode: 10 active + 10 new (10 shared)
    assert (cost, overlap) == (30 + 20, 0)


def test_dynamo_ties_and_softmax_are_seeded():
    draws = [pick([5.0, 5.0, 5.0], 0.0, random.Random(seed)) for seed in range(60)]
    assert set(draws) == {0, 1, 2}
    assert draws == [pick([5.0, 5.0, 5.0], 0.0, random.Random(seed)) for seed in range(60)]
    rng = random.Random(1)
    counts = Counter(pick([0.0, 10.0], 0.5, rng) for _ in range(4000))
    # normalised costs 0 and 1 at T = 0.5: p(expensive) = e^-2 / (1 + e^-2) ≈ 0.119
    assert abs(counts[1] / 4000 - 0.119) < 0.02
    rng = random.Random(2)
    assert 400 < Counter(pick([3.0, 3.0], 2.0, rng) for _ in range(1000))[0] < 600  # all equal: uniform


def test_llmd_scores_prefix_three_kv_two_queue_two():
    policy = LlmdPolicy()
    nodes = _nodes(a=(4, 0.5), b=(0, 0.5), c=(2, 0.0))
    s = _session("s", 1600, ((0, 100),))
    scores = dict(zip(sorted(nodes), policy.scores(s, [nodes[n] for n in sorted(nodes)]), strict=True))
    # queue: (max − q)/(max − min) = 0, 1, 0.5; kv: 1 − usage = 0.5, 0.5, 1; no prefix yet
    assert scores == {"a": 2 * 0.5, "b": 2 * 0.5 + 2 * 1.0, "c": 2 * 1.0 + 2 * 0.5}
    chosen = policy.route(s, nodes, 0.0)
    assert chosen in ("b", "c")  # 3.0 each: a random one of the best
    # its blocks are now indexed under the chosen pod: prefix 1.0 there outweighs anything else
    assert policy.route(_session("s", 1760, ((0, 110),)), nodes, 1.0) == chosen


def test_llmd_looks_at_the_first_256_blocks_only_and_breaks_ties_by_seed():
    assert truncate(((0, 200), (1000, 100)), 256) == ((0, 200), (1000, 56))
    picks = {
        LlmdPolicy(seed=seed).route(_session("s", 1600, ((0, 100),)), _nodes("a", "b", "c"), 0.0) for seed in range(20)
    }
    assert picks == {"a", "b", "c"}
    policy = LlmdPolicy()
    nodes = _nodes("a", "b")
    chosen = policy.route(_session("long", 100_000, ((0, 6000),)), nodes, 0.0)
    # the next turn shares only the first 256 blocks (4,096 tokens) of a 100k prompt, yet scores a full match
    other = "b" if chosen == "a" else "a"
    scores = policy.scores(_session("long", 100_000, ((0, 256), (90_000, 5000))), [nodes[chosen], nodes[other]])
    assert scores[0] - scores[1] == 3.0
