import dataclasses
from itertools import pairwise

import numpy as np
import pytest

from tao_coordinator.core.events import PROGRAM_PATTERN
from tao_coordinator.core.model import shared_prefix_blocks
from tao_coordinator.sim.workloads import (
    GEMINI_3_PRO_LLM_TIME,
    TOOL_FORMAT_ERROR,
    load_mini_swe,
    traces_dir,
)
from tao_coordinator.sim.workloads.blocks import MINI_SWE, namespace_base
from tao_coordinator.sim.workloads.calibration import (
    TEMPLATE_PREFIX_CHARS,
    fit_llm_time,
    mini_swe_shared_prefix_tokens,
    template_prefix_chars,
)
from tao_coordinator.sim.workloads.files import MINI_SWE_DEV, read_records
from tao_coordinator.sim.workloads.mini_swe import SHARED_PREFIX_TOKENS, command_hints, command_tool

TRACES = traces_dir()
needs_traces = pytest.mark.skipif(not (TRACES / MINI_SWE_DEV).is_file(), reason=f"no mini-swe-agent steps in {TRACES}")
SHARED_BLOCKS = SHARED_PREFIX_TOKENS // 16


@pytest.fixture(scope="module")
def raw():
    return list(read_records(TRACES / MINI_SWE_DEV))


@pytest.fixture(scope="module")
def dev():
    return load_mini_swe(TRACES / MINI_SWE_DEV)


@pytest.mark.parametrize(
    ("command", "n_actions", "tool"),
    [
        ("cat -n src/a.py", 1, "cat"),
        ("cd /testbed && python reproduce.py", 1, "python"),
        ("PYTHONIOENCODING=utf-8 python3 -m pytest x", 1, "python3"),
        ("/usr/bin/python3 run.py", 1, "python3"),
        ("./tests/runtests.py admin_views", 1, "runtests.py"),
        ("# look at the file first\ngrep -n foo bar.py", 1, "grep"),
        ("cat <<'EOF' > a.py\nimport os; print(1)\nEOF", 1, "cat"),
        ("ls", 2, TOOL_FORMAT_ERROR),
        (None, 1, TOOL_FORMAT_ERROR),
    ],
)
def test_command_tool_is_the_program_the_command_runs(command, n_actions, tool):
    assert command_tool(command, n_actions) == tool


def test_command_hints_carry_the_timeout_and_the_sleeps():
    assert command_hints("sleep 5 && python a.py; sleep 2.5").sleep_s == 7.5
    assert command_hints("ls -la").sleep_s is None
    assert command_hints("ls").timeout_s == 60.0


@needs_traces
def test_reproduces_the_readme_dev_statistics(dev):
    report = dev.report
    assert (report.traces_read, report.requests, report.subagents) == (246, 10_222, 0)
    steps = [len(s.requests) for s in dev.scripts]
    assert (round(float(np.mean(steps)), 1), float(np.median(steps))) == (41.6, 35.5)
    assert round(report.prompt_tokens / report.requests) == 17_055
    growth = [b.prompt.tokens - a.prompt.tokens for s in dev.scripts for a, b in pairwise(s.requests)]
    assert (len(growth), round(float(np.mean(growth))), float(np.median(growth))) == (9_976, 581, 318.0)


@needs_traces
def test_each_prompt_is_the_head_of_one_id_range_behind_a_shared_prefix(dev):
    shared = (namespace_base(MINI_SWE, 0), SHARED_BLOCKS)
    for slot, script in enumerate(dev.scripts, start=1):
        own_first = namespace_base(MINI_SWE, slot) + SHARED_BLOCKS
        for request in script.requests:
            blocks = request.prompt.tokens // 16
            assert request.prompt.block_runs == (shared, (own_first, blocks - SHARED_BLOCKS))
        for a, b in pairwise(script.requests):
            common = shared_prefix_blocks(a.prompt.block_runs, b.prompt.block_runs)
            assert common == min(a.prompt.block_count, b.prompt.block_count)


@needs_traces
def test_different_trajectories_share_only_the_system_prefix(dev):
    first, second = dev.scripts[0].requests[0].prompt, dev.scripts[1].requests[0].prompt
    assert shared_prefix_blocks(first.block_runs, second.block_runs) == SHARED_BLOCKS == 9


@needs_traces
def test_tool_time_is_the_created_gap_minus_the_fitted_llm_time(dev, raw):
    for script, record in zip(dev.scripts, raw, strict=True):
        steps = record["steps"]
        for request, before, after in zip(script.requests[1:], steps[:-1], steps[1:], strict=True):
            llm = GEMINI_3_PRO_LLM_TIME.llm_time_s(before["prompt_tokens"], before["completion_tokens"])
            expected = max(0.3, after["created"] - before["created"] - llm)
            assert request.gap_before_s == pytest.approx(min(expected, 600.0))
            program = command_tool(before["command"], before["n_actions"])
            if program == TOOL_FORMAT_ERROR:
                assert (request.tool, request.program) == (TOOL_FORMAT_ERROR, None)
            else:  # as the live integration reports it: the shell tool, and the program when it is a file name
                assert request.tool == "bash"
                assert request.program == (program if PROGRAM_PATTERN.fullmatch(program) else None)
            assert request.gap_kind == "tool"


@needs_traces
def test_stored_tool_time_model_and_shared_prefix_match_a_fresh_fit():
    fitted = fit_llm_time(TRACES / MINI_SWE_DEV)
    # the quantile regression's last rounded digit moves with the LP solver's build: compare to 0.1 %
    for field in dataclasses.fields(fitted):
        assert getattr(fitted, field.name) == pytest.approx(getattr(GEMINI_3_PRO_LLM_TIME, field.name), rel=1e-3)
    assert mini_swe_shared_prefix_tokens(TRACES / MINI_SWE_DEV) == SHARED_PREFIX_TOKENS


@pytest.mark.skipif(not (TRACES / "mini_swe_agent/trajs.tar.xz").is_file(), reason="no raw trajectories")
def test_the_common_head_of_the_instance_messages_is_what_the_shared_prefix_assumes():
    assert template_prefix_chars(TRACES / "mini_swe_agent/trajs.tar.xz") == TEMPLATE_PREFIX_CHARS


@needs_traces
def test_context_cap_removes_trajectories_whose_peak_passes_it(raw):
    cap = 32_768
    too_large = {
        r["instance_id"] for r in raw if max(s["prompt_tokens"] + s["completion_tokens"] for s in r["steps"]) > cap
    }
    capped = load_mini_swe(TRACES / MINI_SWE_DEV, max_context=cap)
    assert {removed.id for removed in capped.report.removed} == too_large
    assert capped.report.requests + capped.report.requests_removed == 10_222
    assert all(r.context_tokens <= cap for s in capped.scripts for r in s.requests)
