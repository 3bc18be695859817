import numpy as np
import pytest

from tao_coordinator.sim.workloads import CLAUDE_CODE, SWE_AGENT, TOOL_SUBAGENT, generate, traces_dir
from tao_coordinator.sim.workloads.calibration import claude_code_preset, swe_agent_preset
from tao_coordinator.sim.workloads.files import AGENTX_DEV, MINI_SWE_DEV

TRACES = traces_dir()


@pytest.fixture(scope="module")
def swe():
    return generate("swe-agent", sessions=1500, seed=7)


@pytest.fixture(scope="module")
def claude():
    return generate("claude-code", sessions=600, seed=7)


def close(sample, target, tolerance):
    return abs(sample - target) <= tolerance * max(abs(target), 1.0)


def is_quantile(sample, level, target, sigmas=4.0):
    """`target` is a `level`-quantile of the sample's distribution: F(target−) ≤ level ≤ F(target), up to noise.

    The tolerance is `sigmas` standard errors of an empirical CDF value, sqrt(level · (1 − level) / n).
    """
    values = np.asarray(sample, dtype=float)
    tolerance = sigmas * (level * (1 - level) / len(values)) ** 0.5
    return np.mean(values < target) <= level + tolerance and np.mean(values <= target) >= level - tolerance


def test_same_seed_gives_the_same_workload_and_another_seed_does_not():
    assert generate("claude-code", sessions=20, seed=3) == generate("claude-code", sessions=20, seed=3)
    assert generate("claude-code", sessions=20, seed=3) != generate("claude-code", sessions=20, seed=4)


def test_earlier_sessions_do_not_depend_on_how_many_are_asked_for():
    assert generate("swe-agent", sessions=10, seed=1).scripts == generate("swe-agent", sessions=25, seed=1).scripts[:10]


@pytest.mark.parametrize("level", [0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
def test_swe_agent_samples_match_their_calibrated_quantiles(swe, level):
    requests = [r for s in swe.scripts for r in s.requests]
    assert is_quantile([len(s.requests) for s in swe.scripts], level, SWE_AGENT.turns.at(level))
    assert is_quantile(
        [s.requests[0].prompt.tokens for s in swe.scripts], level, SWE_AGENT.initial_prompt_tokens.at(level)
    )
    assert is_quantile([r.output_tokens for r in requests], level, round(SWE_AGENT.output_tokens.at(level)))
    gaps = [r.gap_before_s for r in requests if r.gap_kind == "tool"]
    assert is_quantile(gaps, level, SWE_AGENT.tool_gap_s.at(level))


def test_swe_agent_tool_mix_and_hints_match_the_preset(swe):
    tools = [r.tool for s in swe.scripts for r in s.requests[1:]]
    assert close(tools.count("cat") / len(tools), dict(SWE_AGENT.tools)["cat"], 0.05)
    assert all(r.hints.timeout_s == 60.0 for s in swe.scripts for r in s.requests[1:] if r.tool == "cat")


def test_claude_code_samples_match_their_calibrated_targets(claude):
    requests = [r for s in claude.scripts for r in s.requests]
    later = [r for r in requests if r.gap_kind != "start"]
    assert close(sum(r.gap_kind == "user" for r in later) / len(later), CLAUDE_CODE.user_turn_share, 0.05)
    for level in (0.25, 0.5, 0.9):
        assert is_quantile([len(s.requests) for s in claude.scripts], level, CLAUDE_CODE.turns.at(level))
        assert is_quantile([r.output_tokens for r in requests], level, round(CLAUDE_CODE.output_tokens.at(level)))
    tool_gaps = [r.gap_before_s for r in later if r.gap_kind == "tool" and r.tool != TOOL_SUBAGENT]
    assert is_quantile(tool_gaps, 0.5, CLAUDE_CODE.tool_gap_s.median)
    assert max(tool_gaps) == 600.0 and claude.report.tool_gaps_capped > 0


def test_claude_code_sessions_launch_subagents_at_the_calibrated_rate(claude):
    launch_points = sum(len(s.requests) - 1 for s in claude.scripts)
    launches = [launch for s in claude.scripts for launch in s.subagents]
    expected = CLAUDE_CODE.subagent_share * launch_points
    assert abs(len(launches) - expected) < 4 * expected**0.5
    for script in claude.scripts:
        for launch in script.subagents:
            following = script.requests[launch.after_request + 1]
            assert not launch.blocks_parent or following.tool in (TOOL_SUBAGENT, "<user>")


def test_prompt_ids_are_prefix_chained_across_the_whole_workload():
    workload = generate("claude-code", sessions=40, seed=2, scale=0.05)
    place: dict[int, tuple[int, int]] = {}
    for script in workload.scripts:
        for request in script.all_requests():
            ids = list(request.prompt.block_ids())
            for position, block in enumerate(ids):
                parent = ids[position - 1] if position else -1
                assert place.setdefault(block, (position, parent)) == (position, parent)


def test_scale_knobs_shrink_a_workload_for_a_small_fleet():
    workload = generate(
        "claude-code", sessions=12, seed=5, scale=0.02, turn_scale=0.25, time_scale=0.1, max_context=8_192
    )
    requests = [r for s in workload.scripts for r in s.all_requests()]
    assert len(workload.scripts) == workload.report.traces_kept == 12
    assert workload.report.traces_read == 12 + workload.report.traces_removed
    assert max(r.context_tokens for r in requests) <= 8_192
    assert max(r.gap_before_s for r in requests) <= 60.0
    assert workload.scripts[0].meta.shared_prefix_tokens == 12262 * 0.02 // 16 * 16


def test_an_impossible_cap_is_refused():
    with pytest.raises(ValueError, match="too small"):
        generate("swe-agent", sessions=2, max_context=100)


@pytest.mark.skipif(not (TRACES / AGENTX_DEV).is_file(), reason=f"no AgentX traces under {TRACES}")
def test_claude_code_preset_is_what_calibration_derives_from_the_dev_traces():
    assert claude_code_preset(TRACES / AGENTX_DEV) == CLAUDE_CODE


@pytest.mark.skipif(not (TRACES / MINI_SWE_DEV).is_file(), reason=f"no mini-swe-agent steps under {TRACES}")
def test_swe_agent_preset_is_what_calibration_derives_from_the_dev_traces():
    assert swe_agent_preset(TRACES / MINI_SWE_DEV) == SWE_AGENT
