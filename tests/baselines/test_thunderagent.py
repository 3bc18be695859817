"""ThunderAgent's released rules on hand-made snapshots: pause smallest ACTING first, the marking quirk, resume order
with worst-fit placement, new-program queueing, decay variants, forced resume."""

from tao_coordinator.baselines.options import ThunderAgentOptions
from tao_coordinator.baselines.thunderagent import ThunderAgentPolicy
from tao_coordinator.core.model import AgentProfile, AgentSession, DurationHints, Node, Phase, RunningTool
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.snapshot import Snapshot

C = 100_000  # a node of capacity_tokens 99,984 has num_gpu_blocks × block_size = 100,000 tokens


def prog(sid, tokens, phase, node=None, since=0.0, calls=1, registered=0.0):
    fields = {"phase": phase, "node": node, "phase_since": since, "context_tokens": tokens, "completed_calls": calls}
    if phase is Phase.IN_TOOL:
        fields["tools"] = (RunningTool("c", "t", since, DurationHints(), since + 5, since, "default"),)
    if phase is Phase.IN_LLM:
        fields["llm_calls"] = 1
    if phase is Phase.WAITING:
        fields["acquire_pending"] = True
    session = AgentSession(sid, AgentProfile(), registered, 1e9, **fields)
    session.check()
    return session


def plan(policy, now, *sessions, nodes=("a",)):
    snapshot = Snapshot(now, sessions, tuple(Node(n, C - 16) for n in nodes), CoreSettings())
    return {p.session_id: p.node for p in policy.plan(snapshot).placements}


def test_pause_takes_the_smallest_acting_program_and_only_as_many_as_needed():
    on_a = [
        prog("r1", 40_000, Phase.IN_LLM, "a"),
        prog("a1", 30_000, Phase.IN_TOOL, "a"),
        prog("a2", 20_000, Phase.IN_TOOL, "a"),
        prog("a3", 25_000, Phase.IN_TOOL, "a"),
    ]
    # 115,000 + 4 × 100 > 100,000; without a2: 95,000 + 300 fits
    assert plan(ThunderAgentPolicy(), 0.0, *on_a) == {"a2": None}


def test_once_no_program_acts_every_reasoning_one_is_marked_and_paused_when_its_call_returns():
    policy = ThunderAgentPolicy()
    assert plan(policy, 0.0, prog("r1", 60_000, Phase.IN_LLM, "a"), prog("r2", 50_000, Phase.IN_LLM, "a")) == {}
    assert policy.marked == {"r1", "r2"}  # marking never brings rem back above 0, so the loop marks both
    # r2's call returned (it acts now): paused at the next plan, even between ticks
    after = plan(policy, 1.0, prog("r1", 60_000, Phase.IN_LLM, "a"), prog("r2", 50_000, Phase.IN_TOOL, "a", 1.0))
    assert after == {"r2": None}
    assert policy.marked == {"r1"}


def test_resume_order_and_worst_fit_placement():
    pool = [
        prog("p1", 30_000, Phase.WAITING),  # paused, its request pending
        prog("p3", 70_000, Phase.WAITING),
        prog("n1", 10_000, Phase.WAITING, calls=0),  # new
        prog("p2", 40_000, Phase.IN_TOOL),  # paused while acting
    ]
    held = prog("h", 50_000, Phase.IN_LLM, "b")
    # room: a 100,000, b 49,900 → 149,900; p1 + p3 + n1 fit with their buffers (110,300), p2 would not (150,400)
    # largest first on the most room: p3 → a (29,900 left), p1 → b (19,800 left), n1 → a (worst fit; best fit: b)
    assert plan(ThunderAgentPolicy(), 0.0, held, *pool, nodes=("a", "b")) == {"p3": "a", "p1": "b", "n1": "a"}


def test_a_program_too_large_to_resume_is_skipped_and_the_next_one_still_resumes():
    # the paused program with a request comes first in resume order but 120,100 > 100,000; the new one fits
    pool = [prog("big", 120_000, Phase.WAITING), prog("n", 10_000, Phase.WAITING, calls=0)]
    assert plan(ThunderAgentPolicy(), 0.0, *pool) == {"n": "a"}


def test_a_new_program_goes_to_the_least_active_backend_unless_the_queue_is_busy():
    policy = ThunderAgentPolicy()
    plan(policy, 0.0)  # the first plan is a tick; the next ones, within 5 s, are not
    held = [prog("x", 50_000, Phase.IN_LLM, "a"), prog("y", 20_000, Phase.IN_LLM, "b")]
    assert plan(policy, 1.0, *held, prog("n", 10_000, Phase.WAITING, calls=0), nodes=("a", "b")) == {"n": "b"}
    queued = prog("p", 5_000, Phase.WAITING)  # a paused program waits in the global queue
    assert plan(policy, 2.0, *held, queued, prog("m", 10_000, Phase.WAITING, calls=0), nodes=("a", "b")) == {}
    assert "m" in policy.queued


def test_decay_off_counts_acting_tokens_in_full_the_paper_halves_them_every_second():
    sessions = (prog("r", 60_000, Phase.IN_LLM, "a"), prog("t", 45_000, Phase.IN_TOOL, "a", since=0.0))
    assert plan(ThunderAgentPolicy(), 3.0, *sessions) == {"t": None}
    resume_only = ThunderAgentPolicy(ThunderAgentOptions(decay="resume"))  # the code's flag
    assert plan(resume_only, 3.0, *sessions) == {"t": None}
    assert plan(ThunderAgentPolicy(ThunderAgentOptions(decay="paper")), 3.0, *sessions) == {}  # 45,000 / 8 fits


def test_a_request_that_waited_1800_s_is_forced_onto_the_least_active_backend():
    policy = ThunderAgentPolicy()
    held = [prog("x", 90_000, Phase.IN_LLM, "a"), prog("y", 95_000, Phase.IN_LLM, "b")]
    waiting = prog("w", 30_000, Phase.WAITING, since=0.0)
    assert plan(policy, 1799.0, *held, waiting, nodes=("a", "b")) == {}
    assert plan(policy, 1800.0, *held, waiting, nodes=("a", "b")) == {"w": "a"}
