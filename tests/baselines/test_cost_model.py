"""The study's unified router cost (`cost-model.md`), corrected: its example by hand, the fits, the picker."""

import math
import random
from collections import Counter

import pytest
from pydantic import ValidationError

from tao_coordinator.baselines.choice import pick
from tao_coordinator.baselines.cost_model import (
    LOAD_TOKENS_PER_S,
    PREFILL_TOKENS_PER_S,
    Alphas,
    CostModelPolicy,
    Terms,
    unified_cost,
)
from tao_coordinator.baselines.dynamo import dynamo_cost
from tao_coordinator.baselines.options import CostModelOptions
from tao_coordinator.baselines.step_fit import STEP_PRIOR, StepFit
from tao_coordinator.core.events import KvCacheEvent, LlmEnd, LlmFirstToken, ToolStart
from tao_coordinator.core.model import AgentProfile, AgentSession, Node, NodeLoad, NodeRates
from tao_coordinator.core.policies import UnknownPolicy, make_policy

# The study's parameters (cost-model.md §3), costs in µs: α_p 1 µs/token, α_d 50 µs/token, α_d2 0.001,
# PCIe 64 GB/s at 0.5 KB of KV per token = 128 tokens/µs, α_ho 100, Q_slack 4, α_wf 5,000 µs, λ = 1/120 s.
STUDY = Alphas(prefill_s=1.0, decode_s=50.0, kv_s=0.001, load_tokens_per_s=64e9 / 500 / 1e6, queue_s=100.0)
# The request: ISL 8,000, expected output 500. The study gives each worker's active decode as Σd and Σd²; the
# KV token-time term is α_d2 · Σ(p'·d' + d'²/2), and it gives no contexts p' of the active calls, so Σ d'²/2 only.
# Every active d' is below 500 (W1: 4 calls, Σd 800; W2: 1 call, Σd 200), so min(500, d') = d' throughout.
W1 = Terms(
    prefill_tokens=8000 - 7500, decode_steps=800, kv_token_time=200_000 / 2, queue=2, affinity=math.exp(-30 / 120)
)
W2 = Terms(prefill_tokens=8000 - 7500, decode_steps=200, kv_token_time=50_000 / 2, cpu_hit_tokens=7500)
W3 = Terms(prefill_tokens=8000, decode_steps=0, kv_token_time=0)


def study_costs(link_busy: float) -> list[float]:
    w1 = unified_cost(W1, Alphas(**{**_fields(STUDY), "affinity_s": 5000.0}))
    w2 = unified_cost(W2, Alphas(**{**_fields(STUDY), "link_busy": link_busy}))
    return [w1, w2, unified_cost(W3, STUDY)]


def _fields(alphas: Alphas) -> dict[str, float]:
    return {name: getattr(alphas, name) for name in Alphas.__slots__}


def test_the_study_example_chooses_w3_recompute_is_cheapest():
    # W1: prefill 1·(8000 − 7500) = 500; decode 50·800 = 40,000; KV 0.001·200,000/2 = 100; no tier;
    #     queue 2 ≤ slack 4 → 0; affinity −5,000·e^(−30/120) = −5,000·0.7788 = −3,894.0  → 36,706.0
    # W2: prefill 1·(8000 − 0 HBM − 7500 CPU) = 500 (the CPU hits pay their load, not their prefill);
    #     decode 50·200 = 10,000; KV 0.001·50,000/2 = 25; load 7,500 / (128 · (1 − 0.3)) = 83.7; no queue, no
    #     affinity  → 10,608.7
    # W3: prefill 1·8,000 = 8,000, nothing else  → 8,000: cheapest, the idle worker recomputes the whole prompt.
    costs = study_costs(link_busy=0.3)
    assert costs == pytest.approx([500 + 40_000 + 100 - 5000 * math.exp(-0.25), 500 + 10_000 + 25 + 7500 / 89.6, 8000])
    assert costs == pytest.approx([36_706.0, 10_608.7, 8000.0], abs=0.1)
    assert costs.index(min(costs)) == 2
    # The study's own p_eff = ISL − HBM hits would charge W2's CPU hits twice (8,000 of prefill and their load):
    # 18,108.7; the choice is W3 either way.
    assert unified_cost(Terms(8000, 200, 25_000, 7500), Alphas(**{**_fields(STUDY), "link_busy": 0.3})) > 18_000


def test_a_congested_link_makes_w2_dearer_and_it_still_does_not_win():
    # ρ = 0.95: load 7,500 / (128 · 0.05) = 1,171.9 → W2 = 500 + 10,000 + 25 + 1,171.9 = 11,696.9 > W3's 8,000.
    costs = study_costs(link_busy=0.95)
    assert costs[1] == pytest.approx(11_696.9, abs=0.1)
    assert costs.index(min(costs)) == 2
    # The study's inverted term, 7,500 / (128 · ρ), would price the congested link cheaper (61.7 µs) than the
    # idle one (195.3 µs at ρ = 0.3); the corrected one grows with congestion.
    assert study_costs(0.95)[1] > study_costs(0.3)[1] > study_costs(0.0)[1]


def test_w3_without_free_kv_for_the_output_sends_the_call_back_to_w2():
    # The policy learns free KV from the scrape: capacity · (1 − kv_usage). The call needs its uncached prompt,
    # its loaded prompt and its expected output in HBM: W3 8,000 + 500 = 8,500. With 8,300 free tokens W3 would
    # have to preempt a running call (vLLM V1 preempts by recompute): it is left out while another worker has room,
    # and of W1 (36,706.0) and W2 (10,608.7) W2 is the cheaper.
    w1, w2, _ = study_costs(link_busy=0.3)
    assert min(w1, w2) == w2
    w1, w2, _ = study_costs(link_busy=0.95)  # still W2 with its link congested: 11,696.9
    assert min(w1, w2) == w2
    # The filter in the policy (its own priors, no active calls): W1 holds 7,488 prompt tokens in HBM, W2 as many
    # in the CPU tier; needs W1 512 + 500 = 1,012, W2 and W3 8,000 + 500 = 8,500.
    policy = CostModelPolicy()
    policy.observe(KvCacheEvent("w1", stored=((0, 468),)), 0.0)
    policy.observe(KvCacheEvent("w2", stored=((0, 468),), medium="CPU"), 0.0)
    session = _session("r", 8000, ((0, 500),), output=500)
    nodes = {name: Node(name, 100_000) for name in ("w1", "w2", "w3")}
    assert {name: policy.terms(session, node, 0.0)[2] for name, node in nodes.items()} == {
        "w1": 1012,
        "w2": 8500,
        "w3": 8500,
    }
    assert policy.route(session, nodes, 0.0) == "w1"
    policy.observe(LlmEnd("r", "w1"), 0.0)
    # W1 with 900 free tokens: left out; W2 (512/15,000 + 7,488/190,000 = 0.074 s) beats W3's 0.53 s recompute
    cramped = {**nodes, "w1": Node("w1", 100_000, load=NodeLoad(kv_usage=0.991))}
    assert policy.route(_session("r2", 8000, ((0, 500),), output=500), cramped, 0.0) == "w2"
    # no worker has room: the filter keeps them all and the cost decides
    full = {name: Node(name, 100_000, load=NodeLoad(kv_usage=0.999)) for name in nodes}
    assert CostModelPolicy().route(_session("r3", 8000, ((0, 500),)), full, 0.0) in ("w1", "w2", "w3")


def test_dynamos_linear_logit_picks_w2_blind_to_the_link():
    # Dynamo with block size 64: raw prefill (0 active prefill + 8,000) / 64 = 125 blocks; 7,500 cached tokens are
    # 117 full blocks. Its decode load is the worker's active blocks plus the request's 125 blocks; the study
    # gives the active load only as remaining decode tokens, taken here as blocks: W1 ⌈800/64⌉ = 13, W2 ⌈200/64⌉ = 4.
    # One overlap for every tier (the study's "linear logit"): W1 max(125 − 117, 0) + 13 + 125 = 146,
    # W2 8 + 4 + 125 = 137, W3 125 + 0 + 125 = 250 → W2, and ρ is no input: W2 at ρ = 0.3 or 0.95 alike.
    costs = [dynamo_cost(125, 117, 13 + 125), dynamo_cost(125, 117, 4 + 125), dynamo_cost(125, 0, 125)]
    assert costs == [146, 137, 250]
    assert pick(costs, 0.0, random.Random(0)) == 1
    # Dynamo's default host weight 0.75 credits W2 with 87.75 blocks: 37.25 + 129 = 166.25 > W1's 146 → W1.
    # Neither is W3, the cost model's choice.
    host = [costs[0], dynamo_cost(125, 0, 4 + 125, lower_credit=0.75 * 117), costs[2]]
    assert host[1] == pytest.approx(166.25)
    assert pick(host, 0.0, random.Random(0)) == 0


def test_with_the_step_time_priors_the_link_load_decides_between_w1_and_w2():
    # Same fleet, the policy's own cold-start α (TP=2 step-time model): α_p = 1/15,000 s, α_d = 13 µs and
    # α_d2 = 0.057 µs per KV token-step. The active calls hold 8,000-token contexts, so their KV token-time
    # dominates: W1 ≈ 0.41 s, W2 ≈ 0.17 s, W3's recompute 8,000/15,000 = 0.53 s → W2. With 19 loads waiting on W2's
    # link (ρ = 19/20) its load takes 7,488/(190,000 · 0.05) = 0.79 s → W1.
    def fleet(fetching: int) -> tuple[CostModelPolicy, dict[str, Node]]:
        policy = CostModelPolicy()
        nodes = {
            name: Node(name, 1_000_000, rates=NodeRates(kv_fetch_waiting=fetching * (name == "w2")))
            for name in ("w1", "w2", "w3")
        }
        for k in range(4):
            policy.route(_session(f"a{k}", 8000, ((10_000 * (k + 1), 500),), output=200), {"w1": nodes["w1"]}, 0.0)
        policy.route(_session("b", 8000, ((90_000, 500),), output=200), {"w2": nodes["w2"]}, 0.0)
        policy.observe(KvCacheEvent("w1", stored=((0, 468),)), 0.0)
        policy.observe(KvCacheEvent("w2", stored=((0, 468),), medium="CPU"), 0.0)
        return policy, nodes

    policy, nodes = fleet(0)
    session = _session("r", 8000, ((0, 500),), output=500)
    costs = {name: unified_cost(*policy.terms(session, node, 0.0)[:2]) for name, node in nodes.items()}
    assert costs["w3"] == pytest.approx(8000 / PREFILL_TOKENS_PER_S)
    kv_w2 = 8000 * 200 + 200**2 / 2
    load = 7488 / LOAD_TOKENS_PER_S
    assert costs["w2"] == pytest.approx(512 / PREFILL_TOKENS_PER_S + STEP_PRIOR[1] * 200 + STEP_PRIOR[2] * kv_w2 + load)
    assert costs["w1"] == pytest.approx(512 / PREFILL_TOKENS_PER_S + STEP_PRIOR[1] * 800 + STEP_PRIOR[2] * 4 * kv_w2)
    assert policy.route(session, nodes, 0.0) == "w2"
    policy, nodes = fleet(19)
    assert policy.link_busy(nodes["w2"], 0.0) == pytest.approx(0.95)
    assert policy.route(session, nodes, 0.0) == "w1"


def test_alpha_p_follows_the_node_rate_and_else_the_calls_own_prefill():
    policy = CostModelPolicy()
    assert policy.prefill_s(Node("a", 1000)) == 1 / PREFILL_TOKENS_PER_S
    assert policy.prefill_s(Node("a", 1000, rates=NodeRates(prefill_tokens_per_s=40_000))) == 1 / 40_000
    policy.observe(LlmEnd("s", "a", prompt_tokens=5000, cached_tokens=1000, ttft_s=0.5), 1.0)
    assert policy.prefill_s(Node("a", 1000)) == pytest.approx(0.5 / 4000)  # from the call: 4,000 new tokens in 0.5 s
    policy.observe(LlmEnd("s", "a", prompt_tokens=2000, cached_tokens=0, ttft_s=0.05), 2.0)
    assert 1 / policy.prefill_s(Node("a", 1000)) == pytest.approx(0.7 * 8000 + 0.3 * 40_000)


def test_the_decode_fit_moves_from_the_prior_to_what_the_node_shows():
    fit = StepFit()
    assert fit.coefficients == STEP_PRIOR
    truth = (0.020, 5e-5, 2e-7)  # a slower node: every coefficient above the prior
    rng = random.Random(0)
    for _ in range(400):
        running = rng.randint(1, 64)
        kv = running * rng.choice((1000, 4000, 16000, 32000))
        fit.add(running, kv, truth[0] + truth[1] * running + truth[2] * kv)
    assert fit.coefficients == pytest.approx(truth, rel=0.1)
    # Through the policy: each new scrape (a new node version) with an inter-token time is one observation.
    policy = CostModelPolicy()
    for version in range(50):
        node = Node(
            "a",
            1_000_000,
            version=version,
            load=NodeLoad(running=32, kv_usage=(version % 5 + 1) / 10),
            rates=NodeRates(decode_step_s=0.010 + 4e-7 * (version % 5 + 1) * 100_000),
        )
        policy.terms(_session("s", 100), node, float(version))
    assert policy.views["a"].fit.coefficients[2] > 3 * STEP_PRIOR[2]


def test_the_decode_fit_uses_the_calls_own_inter_token_time_without_node_figures():
    policy = CostModelPolicy()
    nodes = {"a": Node("a", 1_000_000)}
    for k in range(200):
        policy.route(_session(f"s{k}", 30_000), nodes, float(k))
        policy.observe(LlmFirstToken(f"s{k}", "a"), k + 0.1)
        policy.observe(
            LlmEnd(f"s{k}", "a", prompt_tokens=30_000, completion_tokens=101, ttft_s=0.1, duration_s=6.1), k + 1
        )
    # 0.06 s per step for a lone 30,100-token call, against the prior's 14.2 ms + 1.7 ms
    assert policy.views["a"].fit.step_s(1, 30_100) == pytest.approx(0.06, rel=0.1)


def test_affinity_decays_with_the_fitted_half_life_and_tools_need_a_shared_prefix():
    policy = CostModelPolicy()
    context = AgentProfile(workflow_id="wf", shared_prefix_tokens=3000, expected_next_tools=("bash", "edit"))
    node = Node("a", 1_000_000, credit_half_life_s=20.0)
    first = _session("s", 4000, context=context)
    policy.route(first, {"a": node}, 0.0)
    policy.observe(LlmEnd("s", "a", prompt_tokens=4000, completion_tokens=100), 10.0)
    policy.observe(ToolStart("s", "c1", "bash"), 11.0)
    again = _session("s", 5000, context=context, context_tokens=4100)
    terms, alphas, _ = policy.terms(again, node, 30.0)
    assert terms.affinity == pytest.approx(0.5)  # idle 20 s, one half-life
    assert alphas.affinity_s == pytest.approx(4100 / PREFILL_TOKENS_PER_S)  # nothing indexed: all of its context
    assert terms.tools == pytest.approx(2 ** (-19 / 20) / 2)  # bash seen 19 s ago on a, edit never
    assert alphas.tools_s == pytest.approx(3000 / PREFILL_TOKENS_PER_S)
    sibling = _session("t", 5000, context=context)  # same workflow, never served: the workflow's last worker
    terms, alphas, _ = policy.terms(sibling, node, 30.0)
    assert (terms.affinity, alphas.affinity_s) == pytest.approx((0.5, 3000 / PREFILL_TOKENS_PER_S))
    policy.observe(KvCacheEvent("a", stored=((0, 250),)), 31.0)  # 4,000 tokens indexed: the bonus is spent
    terms, alphas, _ = policy.terms(_session("t", 5000, ((0, 300),), context=context), node, 31.0)
    assert alphas.affinity_s == alphas.tools_s == 0.0


def test_temperature_spreads_choices_and_zero_keeps_the_cheapest():
    nodes = {
        "a": Node("a", 1_000_000),
        "b": Node("b", 1_000_000, load=NodeLoad(waiting=8)),
    }  # b: α_ho · (8 − 4)² dearer

    def draws(policy: CostModelPolicy) -> Counter[str | None]:
        chosen: Counter[str | None] = Counter()
        for k in range(400):
            node = policy.route(_session(f"s{k}", 2000), nodes, 0.0)
            policy.observe(LlmEnd(f"s{k}", node or ""), 0.0)
            chosen[node] += 1
        return chosen

    assert draws(CostModelPolicy()) == {"a": 400}
    soft = draws(CostModelPolicy(CostModelOptions(temperature=1.0), seed=3))
    # two workers: normalised costs 0 and 1 at T = 1, p(b) = e^-1 / (1 + e^-1) ≈ 0.269
    assert abs(soft["b"] / 400 - 0.269) < 0.05


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": -1},
        {"temperature": math.inf},
        {"queue_slack": -2},
        {"half_life_s": 0},
        {"default_output_tokens": 0},
        {"link_time_constant_s": "x"},
        {"affinity_weight": True},
    ],
)
def test_bad_parameters_raise_clear_errors(options):
    name = next(iter(options))
    with pytest.raises(ValidationError, match=name):
        CostModelOptions(**options)


def test_the_registry_builds_it_with_options():
    policy = make_policy("cost-model[temperature=0.5;queue_slack=2]", seed=1)
    assert (policy.name, policy.temperature, policy.queue_slack) == (
        "cost-model[temperature=0.5;queue_slack=2]",
        0.5,
        2,
    )
    with pytest.raises(UnknownPolicy):
        make_policy("cost-model[nope=1]")
    with pytest.raises(ValueError, match="temperature"):
        make_policy("cost-model[temperature=-0.5]")


def _session(sid, tokens, runs=(), output=None, context=None, context_tokens=0):
    context = context or AgentProfile()
    if output is not None:
        context = AgentProfile(labels={"expected_output_tokens": str(output)})
    return AgentSession(
        sid, context, 0.0, 1e9, expected_input_tokens=tokens, prompt_block_runs=runs, context_tokens=context_tokens
    )
