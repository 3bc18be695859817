"""Continuum's released rules through the coordinator: 2 s pins for short or unknown tools of text-format harnesses,
release when the pin runs out, job-FCFS admission with head-of-line blocking per node. A session needs its prompt:
vLLM admits a request when its prompt's blocks fit."""

from tao_coordinator.baselines.continuum import ContinuumPolicy
from tao_coordinator.core.actions import Admit, Interrupt, Route
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import Acquire, LlmEnd, NodeUpdate, Register, Tick, ToolEnd, ToolStart
from tao_coordinator.core.model import AgentProfile
from tao_coordinator.core.settings import CoreSettings

MINI = AgentProfile(harness="mini-swe-agent")


def fleet(capacity=25_000, nodes=("a",)):
    c = Coordinator(ContinuumPolicy(), CoreSettings(lease_ttl_s=1e9))
    for node in nodes:
        c.on_event(NodeUpdate(node, capacity), 0.0)
    return c


def start(c, sid, now, tokens=10_000, context=MINI):
    """Register and ask for a first call (a registered session counts as waiting: it admits at registration)."""
    admitted = c.on_event(Register(sid, context, expected_input_tokens=tokens), now)
    return admitted + c.on_event(Acquire(sid, expected_input_tokens=tokens), now)


def call_then_tool(c, sid, now, tool="pytest", tokens=10_000):
    c.on_event(LlmEnd(sid, "a", tokens, 0, 100), now)
    return c.on_event(ToolStart(sid, f"{sid}-{now}", tool), now)


def test_a_short_or_unknown_tool_keeps_its_place_for_two_seconds():
    c = fleet()
    assert start(c, "s1", 0.0) == [Admit("s1", "a"), Route("s1", "a")]
    start(c, "s2", 0.0)
    assert start(c, "s3", 0.0) == []  # 3 × 10,000 > 25,000: s3 waits
    assert c.next_wakeup() == 0.0 and c.on_event(Tick(), 0.0) == []  # its request is considered: it does not fit
    assert call_then_tool(c, "s1", 1.0) == []  # pytest has no history: pinned until 3.0
    assert c.next_wakeup() == 3.0
    assert c.on_event(Tick(), 3.0) == [Interrupt("s1", "a"), Admit("s3", "a"), Route("s3", "a")]


def test_a_pinned_session_back_from_its_tool_in_time_calls_at_once():
    c = fleet()
    start(c, "s1", 0.0)
    start(c, "s2", 0.0)
    start(c, "s3", 0.0)
    call_then_tool(c, "s1", 1.0)
    c.on_event(ToolEnd("s1", "s1-1.0"), 2.0)
    assert c.on_event(Acquire("s1", expected_input_tokens=10_200), 2.0) == [Route("s1", "a")]


def test_a_tool_whose_mean_gap_passes_two_seconds_or_a_tool_call_harness_is_not_pinned():
    c = fleet()
    start(c, "s1", 0.0)
    start(c, "s2", 0.0)
    for k in range(2):  # pytest gaps of 5 s: mean 5 > 2
        t = 1.0 + 10 * k
        call_then_tool(c, "s1", t)
        c.on_event(ToolEnd("s1", f"s1-{t}"), t + 5)
        c.on_event(Acquire("s1", expected_input_tokens=10_000), t + 5)
    start(c, "s3", 30.0)
    assert call_then_tool(c, "s1", 31.0) == [Interrupt("s1", "a"), Admit("s3", "a"), Route("s3", "a")]
    c2 = fleet()
    claude = AgentProfile(harness="agentx")
    start(c2, "c1", 0.0, context=claude)
    start(c2, "c2", 0.0, context=claude)
    start(c2, "c3", 0.0, context=claude)
    assert call_then_tool(c2, "c1", 1.0, tool="<tool>") == [Interrupt("c1", "a"), Admit("c3", "a"), Route("c3", "a")]


def test_a_known_tool_whose_mean_gap_is_within_two_seconds_is_pinned():
    c = fleet()
    start(c, "s1", 0.0)
    start(c, "s2", 0.0)
    for k in range(2):  # pytest gaps of 1 s: mean 1 ≤ 2
        t = 1.0 + 10 * k
        call_then_tool(c, "s1", t)
        c.on_event(ToolEnd("s1", f"s1-{t}"), t + 1)
        c.on_event(Acquire("s1", expected_input_tokens=10_000), t + 1)
    start(c, "s3", 30.0)
    assert call_then_tool(c, "s1", 31.0) == []  # pinned: s1 keeps its place, s3 waits
    assert c.on_event(Tick(), 31.0) == []  # s3's request is considered: it does not fit
    assert c.next_wakeup() == 33.0


def test_waiting_jobs_are_admitted_in_first_arrival_order_and_a_head_that_does_not_fit_blocks_the_rest():
    c = fleet(capacity=40_000)
    start(c, "s1", 0.0, tokens=20_000)
    start(c, "s2", 0.0, tokens=10_000)
    assert start(c, "big", 1.0, tokens=25_000) == []
    assert start(c, "small", 2.0, tokens=1_000) == []  # it would fit, but big is first in line
    # s2 ends its call with an unknown harness tool → not pinned → released; 20,000 + 25,000 > 40,000: big still waits
    c.on_event(LlmEnd("s2", "a", 10_000, 0, 100), 3.0)
    actions = c.on_event(ToolStart("s2", "x", "<format-error>"), 3.0)
    assert Interrupt("s2", "a") in actions and not any(isinstance(a, Admit) for a in actions)


def test_a_head_that_fits_nowhere_blocks_only_the_node_it_queues_at():
    c = fleet(capacity=30_000, nodes=("a", "b"))
    assert start(c, "s1", 0.0, tokens=20_000) == [Admit("s1", "a"), Route("s1", "a")]  # a tie: name order
    assert start(c, "s2", 0.0, tokens=20_000) == [Admit("s2", "b"), Route("s2", "b")]  # the most room
    assert start(c, "big", 1.0, tokens=15_000) == []  # 10,000 free on each: it queues at a (a tie again)
    # a later, smaller job still starts on b, whose queue big is not in …
    assert start(c, "small", 2.0, tokens=5_000) == [Admit("small", "b"), Route("small", "b")]
    # … but not on a, even with room there: big heads a's queue
    assert start(c, "tiny", 3.0, tokens=6_000) == []


def test_a_session_released_between_calls_is_not_admitted_again_until_it_asks():
    c = fleet()
    start(c, "s1", 0.0)
    start(c, "s2", 0.0)
    start(c, "s3", 0.0)
    # s1's call ends and it asks for nothing (a parent waiting for its sub-agents): it holds KV it does not need
    c.on_event(LlmEnd("s1", "a", 10_000, 0, 100), 1.0)
    actions = c.on_event(Tick(), 1.0)
    assert actions == [Interrupt("s1", "a"), Admit("s3", "a"), Route("s3", "a")]
    assert c.on_event(Tick(), 2.0) == []  # no admission back and forth
    c.on_event(LlmEnd("s3", "a", 10_000, 0, 100), 3.0)
    c.on_event(ToolStart("s3", "x", "<format-error>"), 3.0)  # s3 released: room for s1 once it asks
    assert c.on_event(Acquire("s1", expected_input_tokens=10_100), 4.0) == []  # already in the pool: no plan
    assert c.next_wakeup() <= 4.0  # but its request asks for one: the driver ticks at once
    assert c.on_event(Tick(), 4.0) == [Admit("s1", "a"), Route("s1", "a")]
