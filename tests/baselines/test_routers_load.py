"""Least-loaded and SGLang cache-aware on hand-made fleets: each rule of the reference, one situation each."""

from tao_coordinator.baselines.least_loaded import LeastLoadedPolicy
from tao_coordinator.baselines.round_robin import RoundRobinPolicy
from tao_coordinator.baselines.sglang import SglangCacheAwarePolicy
from tao_coordinator.core.events import Close, LlmEnd
from tao_coordinator.core.model import AgentProfile, AgentSession, Node, NodeLoad


def _session(sid, tokens=1600, runs=()):
    return AgentSession(sid, AgentProfile(), 0.0, 1e9, expected_input_tokens=tokens, prompt_block_runs=runs)


def _nodes(**loads):
    return {n: Node(n, 1_000_000, load=NodeLoad(running=r, waiting=w, kv_usage=kv)) for n, (r, w, kv) in loads.items()}


def test_least_loaded_takes_the_shortest_queue_then_kv_usage_then_in_flight():
    policy = LeastLoadedPolicy()
    nodes = _nodes(a=(3, 1, 0.1), b=(1, 1, 0.9), c=(2, 0, 0.5))
    assert policy.route(_session("s1"), nodes, 0.0) == "c"  # 2 each for b and c; c has less KV in use
    # same scrape (figures unchanged): the router's own dispatch count spreads the burst
    nodes = _nodes(a=(0, 0, 0.0), b=(0, 0, 0.0))
    picks = [policy.route(_session(f"t{i}"), nodes, 0.0) for i in range(4)]
    assert picks == ["a", "b", "a", "b"]
    policy.observe(LlmEnd("t0", "a"), 1.0)
    policy.observe(LlmEnd("t2", "a"), 1.0)
    assert policy.route(_session("t4"), nodes, 1.0) == "a"


def test_least_loaded_counts_running_and_waiting_together():
    # neither figure alone: a has fewer waiting but more in total; c has fewer running but more in total
    assert LeastLoadedPolicy().route(_session("s"), _nodes(a=(0, 2, 0.0), b=(3, 0, 0.0)), 0.0) == "a"
    assert LeastLoadedPolicy().route(_session("s"), _nodes(c=(1, 0, 0.0), d=(0, 2, 0.0)), 0.0) == "c"


def test_round_robin_turns_per_call_not_per_session():
    policy = RoundRobinPolicy()
    nodes = _nodes(a=(0, 0, 0.0), b=(0, 0, 0.0), c=(9, 9, 1.0))  # load is not read
    session = _session("s")
    assert [policy.route(session, nodes, float(t)) for t in range(4)] == ["a", "b", "c", "a"]


def _busy(policy, node, calls):
    for i in range(calls):
        policy.in_flight.dispatch(f"{node}-load-{i}", node)


def _warm(policy, nodes):
    """Route a 100-block prompt of session `hot` (to `a`: empty trees, least loaded, first by name) and end it."""
    assert policy.route(_session("hot", 1600, ((1000, 100),)), nodes, 0.0) == "a"
    policy.observe(LlmEnd("hot", "a"), 1.0)


def test_sglang_routes_to_the_tenant_whose_tree_matches_more_than_the_threshold():
    policy = SglangCacheAwarePolicy()
    nodes = _nodes(a=(0, 0, 0), b=(0, 0, 0))
    _warm(policy, nodes)
    _busy(policy, "a", 2)
    # next turn: 140 blocks, 2,240 tokens, 100 blocks (1,600 tokens) matched: 0.71 > 0.3 → a despite its load
    assert policy.route(_session("hot", 2240, ((1000, 140),)), nodes, 2.0) == "a"
    # a session the tree has never seen goes to the least loaded node
    assert policy.route(_session("new", 1600, ((9000, 100),)), nodes, 2.0) == "b"


def test_sglang_a_match_below_the_threshold_goes_to_the_least_loaded_node():
    policy = SglangCacheAwarePolicy()
    nodes = _nodes(a=(0, 0, 0), b=(0, 0, 0))
    _warm(policy, nodes)
    _busy(policy, "a", 1)
    # 20 blocks of the hot prefix in a 1,600-token prompt: 320 / 1600 = 0.2 ≤ 0.3 → least loaded
    assert policy.route(_session("t", 1600, ((1000, 20), (9000, 80))), nodes, 2.0) == "b"


def test_sglang_threshold_is_three_tenths_of_the_prompt():
    policy = SglangCacheAwarePolicy()
    nodes = _nodes(a=(0, 0, 0), b=(0, 0, 0))
    _warm(policy, nodes)
    _busy(policy, "a", 1)
    # 100 of 250 blocks matched: 1,600 / 4,000 = 0.4 > 0.3 → the cache on a, though b is idle
    assert policy.route(_session("hot", 4000, ((1000, 100), (9000, 150))), nodes, 2.0) == "a"


def test_sglang_a_miss_goes_to_the_least_loaded_node_not_the_smallest_tree():
    policy = SglangCacheAwarePolicy()
    nodes = _nodes(a=(0, 0, 0), b=(0, 0, 0))
    _warm(policy, nodes)  # a's tree: 100 blocks
    _busy(policy, "a", 1)
    assert policy.route(_session("big", 3200, ((5000, 200),)), nodes, 1.0) == "b"  # a miss: least loaded
    policy.observe(LlmEnd("big", "b"), 1.5)  # b's tree: 200 blocks, b idle again; a still has one call
    assert policy.route(_session("new", 1600, ((8000, 100),)), nodes, 2.0) == "b"


def test_sglang_switches_to_least_loaded_only_when_both_imbalance_thresholds_pass():
    nodes = _nodes(a=(0, 0, 0), b=(0, 0, 0))
    hot_next = _session("hot", 1700, ((1000, 100),))
    # diff 70 > 64 and 200 > 1.5 · 130 = 195: imbalanced, the cache on a is ignored
    policy = SglangCacheAwarePolicy()
    _warm(policy, nodes)
    _busy(policy, "a", 200)
    _busy(policy, "b", 130)
    assert policy.imbalanced(nodes)
    assert policy.route(hot_next, nodes, 2.0) == "b"
    # diff 66 > 64 but 200 ≤ 1.5 · 134 = 201: balanced, the cache wins
    policy = SglangCacheAwarePolicy()
    _warm(policy, nodes)
    _busy(policy, "a", 200)
    _busy(policy, "b", 134)
    assert not policy.imbalanced(nodes)
    assert policy.route(hot_next, nodes, 2.0) == "a"
    # 1.5× but only 60 apart: balanced
    policy = SglangCacheAwarePolicy()
    _busy(policy, "a", 60)
    assert not policy.imbalanced(nodes)


def test_sglang_close_forgets_a_sessions_open_calls():
    policy = SglangCacheAwarePolicy()
    nodes = _nodes(a=(0, 0, 0))
    policy.route(_session("s"), nodes, 0.0)
    policy.observe(Close("s"), 1.0)
    assert policy.in_flight.load("a") == 0
