"""Two-model fleets: small-model nodes beside main ones, side calls and small-model sub-agents placed only on nodes
serving their model by every policy, the two-model figures, the calibrated preset and the 8B node profile."""

import json
from dataclasses import replace

import pytest

from tao_coordinator.core.policies import POLICIES
from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.node import profile_by_name
from tao_coordinator.sim.node.profile import QWEN3_8B_KV_BYTES_PER_TOKEN
from tao_coordinator.sim.workloads import (
    CLAUDE_CODE,
    CLAUDE_CODE_SIDE_CALLS,
    MAIN_MODEL,
    SMALL_MODEL,
    generate,
    traces_dir,
)
from tao_coordinator.sim.workloads.calibration import claude_code_side_calls_preset, side_call_statistics
from tao_coordinator.sim.workloads.files import AGENTX_DEV
from tao_sdk.cli import main as tao

TRACES = traces_dir()
MAIN = profile_by_name("h100-tp2")
SMALL = profile_by_name("h100-tp1-8b")
TWO_MODEL_FIELDS = {"side_calls", "side_ttft_mean_s", "side_ttft_p99_s", "small_model_calls"}
# more side calls and sub-agents than measured, so that a small workload has many of both
BUSY = replace(CLAUDE_CODE_SIDE_CALLS, side_call_share=0.3, subagent_share=0.1, small_subagent_share=0.6)


@pytest.fixture(scope="module")
def busy():
    return generate(BUSY, sessions=8, seed=3, scale=0.05, turn_scale=0.2, time_scale=0.1)


def _small_calls(workload):
    return sum(r.model == SMALL_MODEL for s in workload.scripts for r in s.all_requests())


def _side_calls(workload):
    def side(script):
        own = sum(script.is_side_call(k) for k in range(len(script.requests)))
        return own + sum(side(launch.script) for launch in script.subagents)

    return sum(side(script) for script in workload.scripts)


def test_the_busy_workload_has_side_calls_and_small_model_subagents(busy):
    children = [launch.script for s in busy.scripts for launch in s.subagents]
    assert _side_calls(busy) >= 10
    assert any(child.model == SMALL_MODEL for child in children)
    assert any(child.model == MAIN_MODEL for child in children)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_places_every_call_on_a_node_serving_its_model(busy, policy):
    simulation = FleetSimulation(busy, policy, 4, MAIN, 2, small_profile=SMALL, small_nodes=2)
    metrics = simulation.run(timing=False)
    placed = simulation.recorder.calls_by_node_model
    assert {(node, model) for node, model in placed if simulation.node_models[node] != model} == set()
    assert {node for node, model in placed if model == SMALL_MODEL} <= {"small-00", "small-01"}
    assert metrics.requests == sum(len(s.all_requests()) for s in busy.scripts)
    assert metrics.rejected_requests == 0
    assert metrics.side_calls == _side_calls(busy)
    assert metrics.small_model_calls == _small_calls(busy)
    assert metrics.side_ttft_mean_s > 0 and metrics.side_ttft_p99_s >= metrics.side_ttft_mean_s


def test_a_one_model_run_has_no_two_model_figures():
    workload = generate("claude-code", sessions=3, seed=1, scale=0.05, turn_scale=0.2, time_scale=0.1)
    metrics = FleetSimulation(workload, "tao", 2, MAIN, 1).run(timing=False)
    assert {getattr(metrics, name) for name in TWO_MODEL_FIELDS} == {None}


def test_a_workload_with_small_model_calls_needs_small_nodes(busy):
    with pytest.raises(ValueError, match="no node serves"):
        FleetSimulation(busy, "tao", 4, MAIN, 2)


def test_side_calls_come_between_main_calls_inside_the_next_tool_phase(busy):
    for script in busy.scripts:
        requests = script.requests
        assert script.model == MAIN_MODEL and not script.is_side_call(0) and not script.is_side_call(len(requests) - 1)
        for index in range(1, len(requests) - 1):
            if script.is_side_call(index):
                side, following = requests[index], requests[index + 1]
                assert not script.is_side_call(index + 1)
                assert side.gap_before_s == 0.0
                assert (side.gap_kind, side.tool, side.hints) == (following.gap_kind, following.tool, following.hints)
        for launch in script.subagents:
            assert not script.is_side_call(launch.after_request)


def test_side_call_prompts_share_no_block_with_the_main_prompts(busy):
    for script in busy.scripts:
        main = {b for k, r in enumerate(script.requests) if not script.is_side_call(k) for b in r.prompt.block_ids()}
        for k, request in enumerate(script.requests):
            if script.is_side_call(k):
                assert main.isdisjoint(request.prompt.block_ids())


def test_the_preset_draws_side_calls_at_its_share_and_the_rate_multiplies_it():
    workload = generate("claude-code-side-calls", sessions=200, seed=4, side_call_rate=10)
    points = sum(len([r for r in s.requests if r.model == MAIN_MODEL]) - 1 for s in workload.scripts)
    expected = 10 * CLAUDE_CODE_SIDE_CALLS.side_call_share * points
    assert abs(_side_calls(workload) - expected) < 4 * expected**0.5


def test_presets_without_side_calls_draw_none():
    workload = generate("claude-code", sessions=30, seed=2, side_call_rate=50)
    assert _small_calls(workload) == 0


def test_two_model_json_fields_only_in_two_model_runs(tmp_path, capsys):
    common = ["sim", "--sessions", "4", "--concurrency", "2", "--policy", "tao", "--nodes", "1", "--no-timing"]
    common += ["--no-plots"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert tao([*common, "--trace", "synthetic:claude-code", "--json", str(one)]) == 0
    rate = ["--side-call-rate", "40", "--small-nodes", "1"]
    assert tao([*common, "--trace", "synthetic:claude-code-side-calls", *rate, "--json", str(two)]) == 0
    one_run, two_run = json.loads(one.read_text()), json.loads(two.read_text())
    assert TWO_MODEL_FIELDS.isdisjoint(one_run["runs"][0]["metrics"])
    assert "small_nodes" not in one_run["fleet"]
    assert set(two_run["runs"][0]["metrics"]) >= TWO_MODEL_FIELDS
    assert two_run["fleet"]["small_nodes"] == 1 and two_run["fleet"]["small_node_profile"] == "h100-tp1-8b"
    assert "side calls" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "synthetic:claude-code-side-calls", "--side-call-rate", "40"], "--small-nodes"),
        (["--small-nodes", "-1"], "--small-nodes"),
        (["--side-call-rate", "-1"], "--side-call-rate"),
        (["--small-nodes", "1", "--small-node-profile", "a100"], "h100-tp1-8b"),
    ],
)
def test_bad_two_model_arguments_are_named(tmp_path, capsys, args, message):
    out = tmp_path / "never.json"
    assert tao(["sim", "--sessions", "4", *args, "--json", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_8b_profile_has_the_qwen3_8b_shape():
    assert QWEN3_8B_KV_BYTES_PER_TOKEN == 2 * 36 * 8 * 128 * 2
    assert SMALL.step.tp == 1 and SMALL.step.kv_bytes_per_token == QWEN3_8B_KV_BYTES_PER_TOKEN
    assert SMALL.capacity_tokens > profile_by_name("h100-tp1").capacity_tokens * 10
    assert SMALL.step.linear_floor_s < profile_by_name("h100-tp1").step.linear_floor_s / 3


@pytest.mark.skipif(not (TRACES / AGENTX_DEV).is_file(), reason=f"no AgentX traces under {TRACES}")
def test_side_call_statistics_of_the_dev_traces():
    stats = side_call_statistics(TRACES / AGENTX_DEV)
    assert (stats.side_calls, stats.main_calls, stats.side_call_share) == (133, 24_202, 0.0055)
    assert (stats.side_call_prompt_tokens.median, stats.side_call_prompt_tokens.at(0.9)) == (45_975, 69_589)
    assert (stats.side_call_output_tokens.median, stats.side_call_output_tokens.at(0.9)) == (161, 1_543)
    assert stats.side_call_shared_blocks == 0
    assert (stats.small_subagents, stats.subagents, stats.small_subagent_calls) == (26, 31, 275)
    assert stats.small_subagent_types == (("Explore", 26),) and stats.small_subagent_share == 0.839
    assert stats.small_model == CLAUDE_CODE_SIDE_CALLS.small_model


@pytest.mark.skipif(not (TRACES / AGENTX_DEV).is_file(), reason=f"no AgentX traces under {TRACES}")
def test_side_call_preset_is_what_calibration_derives_from_the_dev_traces():
    preset = claude_code_side_calls_preset(TRACES / AGENTX_DEV)
    assert preset == CLAUDE_CODE_SIDE_CALLS
    assert replace(preset, name=CLAUDE_CODE.name) == replace(
        CLAUDE_CODE,
        small_model=preset.small_model,
        side_call_share=preset.side_call_share,
        side_call_prompt_tokens=preset.side_call_prompt_tokens,
        side_call_output_tokens=preset.side_call_output_tokens,
        small_subagent_share=preset.small_subagent_share,
    )
