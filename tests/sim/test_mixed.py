"""The mixed workload (`synthetic:mixed`): the side-call preset's agents unchanged with chat requests between them,
the chat share honoured, bad shares refused, every chat answered and the chat figures reported by `tao sim`."""

import json
from collections import Counter

import pytest

from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.node import profile_by_name
from tao_coordinator.sim.workloads import MAIN_MODEL, TOOL_START, generate, generate_mixed
from tao_coordinator.sim.workloads.blocks import CHAT, LOCAL_BITS, SLOT_BITS
from tao_coordinator.sim.workloads.mixed import CHAT_SYSTEM_PROMPT_TOKENS, is_chat
from tao_sdk.cli import main as tao

CHAT_FIELDS = {"chats", "chat_ttft_mean_s", "chat_ttft_p99_s", "chat_latency_mean_s"}
SMALL = {"scale": 0.05, "turn_scale": 0.2, "time_scale": 0.1}


def _chats(workload):
    return [script for script in workload.scripts if script.meta.chat]


def test_the_chat_share_is_honoured():
    for share in (0.0, 0.2, 0.5, 1.0):
        chats = sum(is_chat(3, index, share) for index in range(2000))
        assert abs(chats - 2000 * share) <= 4 * (2000 * share * (1 - share)) ** 0.5
    workload = generate_mixed(sessions=40, seed=3, chat_share=0.5, **SMALL)
    assert len(_chats(workload)) == sum(is_chat(3, index, 0.5) for index in range(40))


def _sources(runs):
    return {first >> (SLOT_BITS + LOCAL_BITS) for first, _ in runs}


def test_a_chat_is_one_main_model_request_with_no_tool_and_its_own_ids():
    workload = generate_mixed(sessions=40, seed=1, chat_share=0.5)
    chats = _chats(workload)
    assert len(chats) >= 10
    agent_runs = [r.prompt.block_runs for s in workload.scripts if not s.meta.chat for r in s.all_requests()]
    assert CHAT not in set().union(*map(_sources, agent_runs))
    chat_ids = [set(chat.requests[0].prompt.block_ids()) for chat in chats]
    seen = Counter(block for ids in chat_ids for block in ids)
    shared = {block for block, chats_with_it in seen.items() if chats_with_it > 1}
    assert len(shared) == CHAT_SYSTEM_PROMPT_TOKENS // 16
    for chat, ids in zip(chats, chat_ids, strict=True):
        (request,) = chat.requests
        assert chat.subagents == ()
        assert (request.model, request.gap_kind, request.tool, request.gap_before_s) == (
            MAIN_MODEL,
            "start",
            TOOL_START,
            0,
        )
        assert request.output_tokens >= 1 and request.output_block_runs == ()
        assert _sources(request.prompt.block_runs) <= {CHAT}
        assert chat.meta.shared_prefix_tokens == len(ids & shared) * 16


def test_the_agents_are_the_side_call_presets_sessions_and_a_session_does_not_depend_on_the_count():
    mixed = generate_mixed(sessions=30, seed=5, chat_share=0.4, **SMALL)
    agents = [script for script in mixed.scripts if not script.meta.chat]
    reference = generate("claude-code-side-calls", sessions=len(agents), seed=5, **SMALL)
    assert tuple(agents) == reference.scripts
    longer = generate_mixed(sessions=45, seed=5, chat_share=0.4, **SMALL)
    assert longer.scripts[:30] == mixed.scripts
    assert mixed.report.traces_kept == 30
    assert mixed.report.requests == sum(len(s.all_requests()) for s in mixed.scripts)


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), float("inf")])
def test_a_bad_chat_share_is_refused(share):
    with pytest.raises(ValueError, match="chat_share"):
        generate_mixed(sessions=4, chat_share=share)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "synthetic:mixed", "--chat-share", "1.5"], "--chat-share"),
        (["--trace", "synthetic:mixed", "--chat-share", "nan"], "--chat-share"),
        (["--trace", "synthetic:claude-code", "--chat-share", "0.5"], "--chat-share"),
    ],
)
def test_bad_mixed_arguments_are_named(tmp_path, capsys, args, message):
    out = tmp_path / "never.json"
    assert tao(["sim", "--sessions", "4", "--no-plots", *args, "--json", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("policy", ["tao", "thunderagent", "continuum", "dynamo", "llm-d"])
def test_every_chat_is_answered_and_closed_on_a_contended_fleet(policy):
    # one node whose KV the largest agents fill alone (prompts up to its limit), so that calls and chats wait
    small, main = profile_by_name("h100-tp1-8b"), profile_by_name("h100-tp2")
    cap = main.model_len_limit
    workload = generate_mixed(
        sessions=24, seed=2, chat_share=0.5, scale=0.5, turn_scale=0.2, time_scale=0.1, max_context=cap
    )
    chats = len(_chats(workload))
    simulation = FleetSimulation(workload, policy, 12, main, 1, small_profile=small, small_nodes=1)
    metrics = simulation.run(timing=False)
    assert metrics.chats == chats and metrics.rejected_requests == 0
    assert len(simulation.recorder.chat_ttfts) == chats and len(simulation.recorder.chat_latencies) == chats
    assert len(simulation.recorder.task_latencies) == len(workload.scripts) - chats
    assert 0 < metrics.chat_ttft_mean_s <= metrics.chat_ttft_p99_s
    assert metrics.chat_latency_mean_s > metrics.chat_ttft_mean_s
    core = simulation.coordinator
    assert (dict(core.sessions), dict(core.holders), core.waiting) == ({}, {}, frozenset())


def test_tao_sim_reports_the_chat_figures_only_for_a_workload_with_chats(tmp_path, capsys):
    common = ["sim", "--sessions", "8", "--concurrency", "4", "--nodes", "1", "--small-nodes", "1", "--no-timing"]
    common += ["--no-plots", "--policy", "tao,dynamo"]
    mixed, agents = tmp_path / "mixed.json", tmp_path / "agents.json"
    assert tao([*common, "--trace", "synthetic:mixed", "--chat-share", "0.6", "--json", str(mixed)]) == 0
    out = capsys.readouterr().out
    assert tao([*common, "--trace", "synthetic:claude-code-side-calls", "--json", str(agents)]) == 0
    assert "chats answered" not in capsys.readouterr().out
    chats = sum(is_chat(0, index, 0.6) for index in range(8))
    for run in json.loads(mixed.read_text())["runs"]:
        assert run["metrics"]["chats"] == chats and set(run["metrics"]) >= CHAT_FIELDS
        assert f"{run['policy']} × 4: {chats} chats answered" in out
    assert all(CHAT_FIELDS.isdisjoint(run["metrics"]) for run in json.loads(agents.read_text())["runs"])
