import time
from itertools import pairwise

import numpy as np
import pytest

from tao_coordinator.core.model import shared_prefix_blocks
from tao_coordinator.sim.workloads import TOOL_SUBAGENT, load_agentx, traces_dir
from tao_coordinator.sim.workloads.blocks import LOCAL_BITS
from tao_coordinator.sim.workloads.files import AGENTX_DEV, AGENTX_EXAMPLE, read_records

TRACES = traces_dir()
pytestmark = pytest.mark.skipif(not (TRACES / AGENTX_DEV).is_file(), reason=f"no AgentX traces under {TRACES}")


@pytest.fixture(scope="module")
def raw():
    return {trace["id"]: trace for trace in read_records(TRACES / AGENTX_DEV)}


@pytest.fixture(scope="module")
def dev():
    return load_agentx(TRACES / AGENTX_DEV)


def agents(trace):
    """Request entries per agent: the main agent first, then sub-agents by agent id."""
    main = [entry for entry in trace["requests"] if entry["type"] != "subagent"]
    children = sorted((e for e in trace["requests"] if e["type"] == "subagent"), key=lambda e: e["agent_id"])
    return [main] + [child["requests"] for child in children]


def script_agents(script):
    children = sorted(script.subagents, key=lambda launch: launch.script.id)
    return [script.requests] + [launch.script.requests for launch in children]


def test_dev_file_loads_in_a_few_seconds():
    started = time.perf_counter()
    load_agentx(TRACES / AGENTX_DEV)
    assert time.perf_counter() - started < 5.0


def test_reproduces_the_readme_dev_statistics(dev):
    report = dev.report
    assert (report.traces_read, report.traces_kept) == (348, 348)
    assert (report.requests, report.subagent_requests, report.subagents) == (24_669, 328, 31)
    assert round(report.prompt_tokens / report.requests) == 118_514
    outputs = [r.output_tokens for s in dev.scripts for r in s.all_requests()]
    assert round(float(np.mean(outputs)), 1) == 440.7
    main_steps = [len(s.requests) for s in dev.scripts]
    assert (round(float(np.mean(main_steps)), 1), float(np.median(main_steps))) == (69.9, 46.5)


def test_every_request_has_in_div_64_times_4_node_blocks(dev, raw):
    for script in dev.scripts:
        for requests, entries in zip(script_agents(script), agents(raw[script.id]), strict=True):
            assert [r.prompt.tokens for r in requests] == [e["in"] for e in entries]
            assert [r.prompt.block_count for r in requests] == [e["in"] // 64 * 4 for e in entries]


def test_consecutive_requests_share_exactly_the_blocks_their_hash_ids_share(dev, raw):
    for script in dev.scripts:
        for requests, entries in zip(script_agents(script), agents(raw[script.id]), strict=True):
            for (a, b), (ea, eb) in zip(pairwise(requests), pairwise(entries), strict=True):
                trace_shared = shared_prefix_blocks(
                    tuple(map(tuple, ea["hash_runs"])), tuple(map(tuple, eb["hash_runs"]))
                )
                assert shared_prefix_blocks(a.prompt.block_runs, b.prompt.block_runs) == 4 * trace_shared


def test_traces_use_disjoint_id_namespaces(dev):
    slot_of = {}
    for script in dev.scripts:
        for request in script.all_requests():
            for first, count in request.prompt.block_runs:
                slot = first >> LOCAL_BITS
                assert (first + count - 1) >> LOCAL_BITS == slot
                assert slot_of.setdefault(slot, script.id) == script.id


def test_hash_runs_and_hash_ids_forms_give_identical_scripts(dev):
    example = load_agentx(TRACES / AGENTX_EXAMPLE)
    (script,) = example.scripts
    assert len(script.requests) == 182 and len(script.subagents) == 2
    assert script == next(s for s in dev.scripts if s.id == "trace_0004")


def test_output_blocks_continue_the_prompt_into_the_next_one(dev):
    for script in dev.scripts:
        for requests in script_agents(script):
            for a, b in pairwise(requests):
                own = a.prompt.block_count
                if shared_prefix_blocks(a.prompt.block_runs, b.prompt.block_runs) < own:
                    assert a.output_block_runs == ()
                    continue
                produced = sum(count for _, count in a.output_block_runs)
                assert produced == max(0, min(b.prompt.block_count, a.context_tokens // 16) - own)
                joined = a.prompt.block_runs + a.output_block_runs
                assert shared_prefix_blocks(joined, b.prompt.block_runs) == own + produced


def test_gaps_follow_think_time_capped_by_kind(dev, raw):
    script = next(s for s in dev.scripts if s.id == "trace_0001")
    entries = agents(raw["trace_0001"])[0]
    assert (script.requests[0].gap_kind, script.requests[0].gap_before_s) == ("start", 0.0)
    for request, entry in zip(script.requests[1:], entries[1:], strict=True):
        kind = "tool" if "tool_result" in entry["input_types"] else "user"
        assert request.gap_kind == kind
        assert request.gap_before_s == min(entry["think_time"], 600.0 if kind == "tool" else 30.0)


def test_gap_report_counts_capped_gaps(dev):
    assert dev.report.user_gaps_capped > 2_000
    assert 150 < dev.report.tool_gaps_capped < 500
    gaps = [r.gap_before_s for s in dev.scripts for r in s.all_requests()]
    assert max(gaps) == 600.0


def test_completed_subagents_start_after_their_parent_call_and_block_it(dev):
    script = next(s for s in dev.scripts if s.id == "trace_0010")
    launches = [
        (launch.after_request, launch.blocks_parent, len(launch.script.requests)) for launch in script.subagents
    ]
    assert sorted(launches) == [(0, True, 7), (8, True, 5), (8, True, 14), (8, True, 24)]
    assert all(0 <= launch.delay_s < 1.5 for launch in script.subagents)
    # The parent's next call came 11.9 s after the last of its three children ended (t = 760.1 → 772).
    assert script.requests[9].tool == TOOL_SUBAGENT
    assert script.requests[9].gap_before_s == pytest.approx(11.9, abs=0.01)


def test_async_subagents_do_not_block_their_parent(dev):
    script = next(s for s in dev.scripts if s.id == "trace_0295")
    asynchronous = [launch for launch in script.subagents if not launch.blocks_parent]
    assert len(asynchronous) == 4
    assert {launch.after_request for launch in asynchronous} == {64, 65}


def test_context_cap_removes_traces_whose_peak_passes_it(raw):
    cap = 200_000
    peaks = {
        trace_id: max(e["in"] + e["out"] for agent in agents(trace) for e in agent) for trace_id, trace in raw.items()
    }
    too_large = {trace_id for trace_id, peak in peaks.items() if peak > cap}

    capped = load_agentx(TRACES / AGENTX_DEV, max_context=cap)

    assert {removed.id for removed in capped.report.removed} == too_large
    assert len(too_large) == 74
    assert capped.report.requests_removed == sum(sum(len(a) for a in agents(raw[i])) for i in too_large)
    assert capped.report.requests + capped.report.requests_removed == 24_669
    assert max(s.peak_context_tokens for s in capped.scripts) <= cap
