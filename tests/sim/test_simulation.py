"""The fleet simulator end to end: hand-computed figures on tiny traces, the closed loop and sub-agents, requests no
node can take, determinism, the context cap, the CLI."""

import json

import pytest

from tao_coordinator.core.actions import Interrupt
from tao_coordinator.core.model import Phase
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.signals.footprint import footprint_tokens
from tao_coordinator.core.state import capacity_cells
from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.node import NodeProfile, profile_by_name
from tao_coordinator.sim.prompt import Prompt
from tao_coordinator.sim.workloads import (
    TOOL_START,
    TOOL_UNKNOWN,
    LoadReport,
    RequestSpec,
    ScriptMeta,
    SessionScript,
    SubagentLaunch,
    Workload,
    generate,
    load_agentx,
)
from tao_sdk.cli import main as tao

TP1 = profile_by_name("h100-tp1")
JSON_METRICS = {
    "latency_mean_s", "latency_p50_s", "latency_p99_s", "ttft_mean_s", "ttft_p50_s", "ttft_p99_s",
    "decode_throughput_tok_s", "tool_end_to_first_token_mean_s", "prefix_hit_rate", "preemptions", "makespan_s",
    "plan_mean_ms", "plan_p95_ms", "planner_overhead_share",
}  # fmt: skip


def _request(t, tokens, out, ids, kind="tool_result", think=0.0):
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": tokens,
        "out": out,
        "hash_ids": ids,
        "input_types": [kind] if t else ["text"],
        "output_types": ["text"],
        "stop": "end_turn",
        "api_time": 1.0,
        "think_time": think,
    }


def _trace(trace_id, requests):
    return {
        "id": trace_id,
        "models": ["m"],
        "block_size": 64,
        "hash_id_scope": "local",
        "tool_tokens": 0,
        "system_tokens": 0,
        "requests": requests,
    }


def _write(tmp_path, traces):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(trace) + "\n" for trace in traces))
    return path


def _prefill_ms(new, offset):
    """One prefill step of `new` tokens after `offset` cached ones on H100 TP1 — §8.4 of the vLLM reference, by hand:
    linear max(23.4, 0.099·T) + 0.15·min(…); attention 2.097e6·n·(offset + n/2) / 4e14 FLOP/s; no decode, no
    all-reduce at TP1; 1.5 ms overhead + 1.556e9 B of lm_head at 2.8e12 B/s."""
    linear = max(23.4, 0.099 * new) + 0.15 * min(23.4, 0.099 * new)
    attention = 2.097e6 * new * (offset + new / 2) / 4e14 * 1e3
    return linear + attention + 1.5 + 1.556e9 / 2.8e12 * 1e3


def _spec(tokens, first_id, gap=0.0):
    """A request of `tokens` prompt tokens whose blocks are the ids `first_id…`, answered with one token."""
    kind, tool = ("tool", TOOL_UNKNOWN) if gap else ("start", TOOL_START)
    return RequestSpec(Prompt(tokens, ((first_id, tokens // 16),)), 1, gap, kind, tool)


def _script(script_id, *requests, subagents=()):
    return SessionScript(script_id, requests, ScriptMeta("agentx", "m"), subagents)


def _workload(*scripts):
    requests = [r for script in scripts for r in script.all_requests()]
    report = LoadReport(
        "test", len(scripts), len(scripts), len(requests), 0, 0, sum(r.prompt.tokens for r in requests), None
    )
    return Workload("test", scripts, report)


def test_tiny_trace_ttft_and_hit_rate_by_hand(tmp_path):
    # one session: 1,024 tokens (16 trace blocks), then after a 10 s tool 2,048 tokens extending the same prefix
    first = list(range(1, 17))
    second = first + list(range(17, 33))
    path = _write(
        tmp_path, [_trace("trace_0001", [_request(0, 1024, 1, first), _request(11, 2048, 1, second, think=10)])]
    )
    workload = load_agentx(path)
    simulation = FleetSimulation(workload, "round-robin", 1, profile_by_name("h100-tp1"), 1)
    metrics = simulation.run()
    ttft_first, ttft_second = _prefill_ms(1024, 0) / 1e3, _prefill_ms(1024, 1024) / 1e3
    assert simulation.recorder.ttfts == pytest.approx([ttft_first, ttft_second], rel=1e-9)
    assert metrics.tool_end_to_first_token_mean_s == pytest.approx(ttft_second, rel=1e-9)
    # the second prompt finds the first one's 1,024 tokens cached: 1,024 of 3,072 prompt tokens were hits
    assert metrics.prefix_hit_rate == pytest.approx(1024 / 3072)
    # one output token each: the session lasts both prefills plus the tool
    assert metrics.latency_mean_s == pytest.approx(ttft_first + 10.0 + ttft_second, rel=1e-9)
    assert metrics.preemptions == 0


@pytest.mark.parametrize("nodes, recomputed", [(1, 0), (2, 1024)])
def test_a_prefix_computed_again_elsewhere_counts_as_recomputed_and_new_tokens_never_do(tmp_path, nodes, recomputed):
    # the second prompt extends the first's 1,024 tokens (64 node blocks; one output token, which never enters the
    # KV) by 1,024 new ones: on one node it finds them cached; round-robin on two sends it to the other node, which
    # computes them again. The first prompt and the new half are new tokens either way.
    first = list(range(1, 17))
    second = first + list(range(17, 33))
    path = _write(tmp_path, [_trace("trace_0001", [_request(0, 1024, 1, first), _request(11, 2048, 1, second)])])
    metrics = FleetSimulation(load_agentx(path), "round-robin", 1, TP1, nodes).run()
    assert metrics.recomputed_tokens == recomputed
    assert metrics.prefix_hit_rate == pytest.approx((1024 - recomputed) / 3072)
    assert metrics.interruptions == metrics.recomputed_after_interruption_tokens == 0


def test_the_interruptions_a_run_reports_are_the_ones_its_plans_applied():
    workload = generate("swe-agent", sessions=6, seed=1, max_context=40_000)
    peak = max(script.peak_context_tokens for script in workload.scripts)
    simulation = FleetSimulation(workload, "tao", 4, NodeProfile("tight", TP1.step, num_gpu_blocks=2 * (peak // 16)), 1)
    applied = []
    on_event = simulation.coordinator.on_event

    def spy(event, now):
        actions = on_event(event, now)
        applied.extend(action for action in actions if isinstance(action, Interrupt))
        return actions

    simulation.coordinator.on_event = spy
    metrics = simulation.run(timing=False)
    assert metrics.interruptions == len(applied) > 0
    # two contexts fill the node: interrupted sessions come back to a node that evicted some of theirs
    assert 0 < metrics.recomputed_after_interruption_tokens <= metrics.recomputed_tokens


def test_tiny_trace_preemption_count_by_hand(tmp_path):
    # A node of 10 usable 16-token blocks. Two sessions arrive together, each 64 prompt tokens (4 blocks) and 64
    # output tokens (127 computed tokens at the end: 8 blocks, 16 for both — more than the node has). Both prompts fit
    # and are admitted; each first decode fills a 5th block (10 held, none free). When the first has computed 80
    # tokens it needs a 6th block: the last admitted request is preempted by recompute and its blocks freed —
    # 1 preemption. To come back it needs 6 blocks (prompt + 17 generated), more than the first leaves free until it
    # finishes, so it re-runs alone and nothing is preempted again. No prompt shares a block: hit rate 0.
    profile = NodeProfile("tiny", TP1.step, num_gpu_blocks=11)
    traces = [_trace(f"trace_{k:04d}", [_request(0, 64, 64, [10 * k + 1])]) for k in (1, 2)]
    workload = load_agentx(_write(tmp_path, traces))
    simulation = FleetSimulation(workload, "round-robin", 2, profile, 1)
    metrics = simulation.run()
    assert metrics.preemptions == 1
    assert metrics.requests == 2 and metrics.rejected_requests == 0
    assert metrics.prefix_hit_rate == 0
    assert metrics.decode_throughput_tok_s == pytest.approx(128 / metrics.makespan_s)


def test_calls_that_reach_an_idle_node_at_one_instant_share_its_first_step():
    # two sessions start together at t=0 on one TP1 node, 1,024 new tokens each: vLLM's scheduler takes both into
    # one step of 2,048 tokens (within the 8,192-token budget), so both see the same TTFT — that step, by hand
    linear = max(23.4, 0.099 * 2048) + 0.15 * min(23.4, 0.099 * 2048)
    attention = 2.097e6 * 2 * 1024 * (1024 / 2) / 4e14 * 1e3
    step = (linear + attention + 1.5 + 1.556e9 / 2.8e12 * 1e3) / 1e3
    scripts = [_script(f"s{k}", _spec(1024, 10_000 * k)) for k in range(2)]
    simulation = FleetSimulation(_workload(*scripts), "round-robin", 2, TP1, 1)
    simulation.run()
    assert simulation.recorder.ttfts == pytest.approx([step, step], rel=1e-9)


def test_a_finished_session_is_replaced_by_the_next_script_until_none_is_left():
    # concurrency 1: three one-step sessions run back to back, each starting when the previous answer arrives
    scripts = [_script(f"s{k}", _spec(1024, 10_000 * k)) for k in range(3)]
    metrics = FleetSimulation(_workload(*scripts), "round-robin", 1, TP1, 1).run()
    step = _prefill_ms(1024, 0) / 1e3
    assert metrics.requests == 3
    assert metrics.latency_p50_s == pytest.approx(step, rel=1e-9) and metrics.ttft_p99_s == pytest.approx(step)
    assert metrics.makespan_s == pytest.approx(3 * step, rel=1e-9)


@pytest.mark.parametrize("blocks_parent", (True, False))
def test_a_subagent_runs_as_a_child_session_and_a_blocking_one_holds_its_parent(blocks_parent):
    # parent: 1,024 tokens; then a child starts 2 s after that answer (512 tokens of its own); the parent's next
    # request (its first 1,024 tokens cached, 1,024 new) leaves 5 s after the child's answer if the child blocks it,
    # else 5 s after its own answer. Concurrency 1: the child does not take the parent's place.
    child = _script("child", _spec(512, 50_000))
    parent = _script(
        "parent",
        _spec(1024, 0),
        _spec(2048, 0, gap=5.0),
        subagents=(SubagentLaunch(0, 2.0, child, blocks_parent),),
    )
    simulation = FleetSimulation(_workload(parent), "round-robin", 1, TP1, 1)
    metrics = simulation.run()
    first, child_step, second = _prefill_ms(1024, 0) / 1e3, _prefill_ms(512, 0) / 1e3, _prefill_ms(1024, 1024) / 1e3
    assert simulation.recorder.ttfts == pytest.approx([first, child_step, second], rel=1e-9)
    before_second = 2.0 + child_step + 5.0 if blocks_parent else 5.0
    assert simulation.recorder.task_latencies == pytest.approx([first + before_second + second], rel=1e-9)
    assert metrics.prefix_hit_rate == pytest.approx(1024 / (1024 + 512 + 2048))


@pytest.mark.parametrize("policy", ("round-robin", "tao"))
def test_a_request_no_node_can_take_ends_its_call_with_an_error_and_the_run_goes_on(policy):
    # 10 usable blocks (160 tokens); no context cap was applied, so the second request (320 tokens) is rejected
    small = NodeProfile("tiny", TP1.step, num_gpu_blocks=11)
    scripts = (
        _script("a", _spec(64, 0), _spec(320, 1000, gap=1.0), _spec(64, 0, gap=1.0)),
        _script("b", _spec(64, 2000)),
    )
    metrics = FleetSimulation(_workload(*scripts), policy, 1, small, 1).run()
    assert (metrics.requests, metrics.rejected_requests) == (3, 1)
    assert metrics.makespan_s > 2.0


def test_same_seed_gives_byte_identical_json(tmp_path):
    outputs = []
    for name in ("a.json", "b.json"):
        path = tmp_path / name
        code = tao(
            [
                "sim",
                "--trace",
                "synthetic:swe-agent",
                "--sessions",
                "12",
                "--policy",
                "tao,tao-no-dp,round-robin",
                "--concurrency",
                "4,8",
                "--nodes",
                "2",
                "--seed",
                "7",
                "--no-timing",
                "--json",
                str(path),
            ]
        )
        assert code == 0
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1]
    document = json.loads(outputs[0])
    assert [(run["policy"], run["concurrency"]) for run in document["runs"]] == [
        ("tao", 4),
        ("tao", 8),
        ("tao-no-dp", 4),
        ("tao-no-dp", 8),
        ("round-robin", 4),
        ("round-robin", 8),
    ]
    for run in document["runs"]:
        metrics = run["metrics"]
        assert run["seed"] == 7 and set(metrics) >= JSON_METRICS
        assert metrics["requests"] == document["workload"]["requests"]
        assert 0 < metrics["prefix_hit_rate"] <= 1
        assert metrics["latency_p50_s"] <= metrics["latency_p99_s"]
        assert metrics["plan_mean_ms"] is None


def test_timing_is_reported_when_asked_and_plots_are_written(tmp_path, capsys):
    code = tao(
        [
            "sim",
            "--sessions",
            "6",
            "--concurrency",
            "3",
            "--nodes",
            "2",
            "--json",
            str(tmp_path / "r.json"),
            "--plots",
            str(tmp_path / "plots"),
        ]
    )
    assert code == 0
    runs = {run["policy"]: run["metrics"] for run in json.loads((tmp_path / "r.json").read_text())["runs"]}
    tao_run = runs["tao"]
    assert tao_run["plans"] > 0
    assert tao_run["plans"] == tao_run["plans_applied"] + tao_run["plans_cut"] + tao_run["plans_dropped"]
    assert 0 < tao_run["plan_mean_ms"] <= 1_000 and 0 < tao_run["plan_p95_ms"] <= 1_000
    assert runs["round-robin"]["plans"] == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "hit_rate.png",
        "latency.png",
        "throughput.png",
        "ttft.png",
    ]
    assert "tao" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("options", "fit", "prior"), ((["--credit-half-life", "7"], False, 7.0), (["--credit-half-life-fit"], True, 10.0))
)
def test_each_node_s_credit_half_life_at_the_end_is_written_and_printed(tmp_path, capsys, options, fit, prior):
    path = tmp_path / "r.json"
    common = ["sim", "--sessions", "6", "--concurrency", "3", "--nodes", "2", "--no-timing", "--json", str(path)]
    assert tao([*common, "--policy", "tao", *options]) == 0
    document = json.loads(path.read_text())
    assert document["credit"] == {"half_life_s": prior, "fit": fit, "kv_events": False}
    metrics = document["runs"][0]["metrics"]
    nodes = {"node-00", "node-01"}
    assert set(metrics["credit_half_life_s"]) == set(metrics["credit_half_life_fit_s"]) == nodes
    assert set(metrics["retention_observations"]) == nodes
    if not fit:
        assert set(metrics["credit_half_life_s"].values()) == {7.0}
    out = capsys.readouterr().out
    assert "tao × 3: credit half-life at the end, s: node-00 " in out


def test_every_plan_is_timed_once_and_its_placements_fit_the_snapshot_it_was_made_from():
    snapshots = []
    workload = generate("claude-code", sessions=12, seed=5, max_context=TP1.model_len_limit)
    simulation = FleetSimulation(workload, "tao", 6, TP1, 2, plan_timing="measured", on_snapshot=snapshots.append)
    simulation.run()
    stats, plan_ms = simulation.coordinator.plan_stats, simulation.recorder.plan_ms
    assert len(snapshots) == len(plan_ms) == stats.started > 5
    assert stats.started == stats.applied + stats.cut + stats.dropped
    assert all(0 < ms < 1_000 for ms in plan_ms)
    planner = make_policy("tao")  # pure: it makes the plan the simulation's own planner made from each snapshot
    for snapshot in snapshots:
        plan = planner.plan(snapshot)
        assert_fits(snapshot, {p.session_id: p for p in plan.placements})


def assert_fits(snapshot, changes):
    """Per healthy node, the cells of the candidates placed there after `changes` fit what its in-call sessions
    leave of its plannable capacity (candidates larger than every node are charged the largest capacity)."""
    settings, quantum = snapshot.settings, snapshot.settings.capacity_quantum_tokens
    healthy = {node.id: capacity_cells(node, settings) for node in snapshot.nodes if node.healthy}
    largest = max(healthy.values()) * quantum
    used = dict.fromkeys(healthy, 0)
    free = dict(healthy)
    for session in snapshot.sessions:
        tokens = footprint_tokens(session, settings)
        if session.phase is Phase.IN_LLM:
            assert session.id not in changes, f"{session.id} is inside a call and was moved"
            if session.node in free:
                free[session.node] -= -(-tokens // quantum)
        elif session.is_candidate:
            change = changes.get(session.id)
            node = session.node if change is None else change.node
            if node is not None:
                assert node in healthy, f"{session.id} placed on {node}, not a healthy node"
                used[node] += -(-min(tokens, largest) // quantum)
    for node, cells in used.items():
        assert cells <= max(0, free[node]), f"{node}: {cells} cells placed, {max(0, free[node])} free"


def test_context_cap_removes_what_cannot_fit_and_says_so(capsys):
    workload = generate("claude-code", sessions=8, seed=3)
    peak = max(script.peak_context_tokens for script in workload.scripts)
    assert (
        tao(
            [
                "sim",
                "--sessions",
                "8",
                "--seed",
                "3",
                "--max-context",
                str(peak - 1),
                "--concurrency",
                "2",
                "--no-plots",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "the context cap of" in out and "removed" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--concurrency", "0"], "--concurrency: '0'"),
        (["--concurrency", "x"], "--concurrency: 'x'"),
        (["--node-profile", "a100"], "h100-tp2"),
        (["--trace", "/no/such/file"], "--trace"),
        (["--trace", "synthetic:nope"], "unknown synthetic preset"),
        (["--nodes", "0"], "--nodes"),
        (["--plan-delay-ms", "-1"], "--plan-delay-ms"),
        (["--no-timing", "--plan-timing", "measured"], "--no-timing needs --plan-timing fixed"),
        (["--credit-half-life", "0"], "--credit-half-life"),
    ],
)
def test_bad_arguments_are_named_and_write_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "never.json"
    assert tao(["sim", *args, "--json", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
