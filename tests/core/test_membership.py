"""Nodes that join, drain and leave while sessions run: the pure core's membership events."""

import pytest

from tao_coordinator.core.actions import Admit, NodeRetired, Route
from tao_coordinator.core.errors import InvalidEvent, UnknownNode
from tao_coordinator.core.events import Acquire, LlmEnd, NodeDrain, NodeRemoved, NodeUpdate, Register, ToolStart
from tao_coordinator.core.model import Phase

from .test_coordinator import PROMPT, assert_capacity_respected, finish_call, fleet, phases, start


def sessions_on(c, node):
    return sorted(s for s, (_, held) in phases(c).items() if held == node)


def test_a_node_update_of_an_unknown_node_adds_it_and_the_next_waiting_session_is_placed_there():
    c = fleet(nodes=("a",))
    for s in ("s0", "s1", "s2"):
        start(c, s)
    assert phases(c)["s2"] == (Phase.WAITING, None)
    actions = c.on_event(NodeUpdate("b", 70_000), 1.0)
    assert Route("s2", "b") in actions
    assert c.membership("b") == "active"


def test_drain_moves_idle_holders_within_one_plan_and_lets_running_calls_finish():
    c = fleet(capacity=140_000)
    for i in range(4):
        start(c, f"s{i}")
    on_a = sessions_on(c, "a")
    idle, running = on_a[0], on_a[1]
    finish_call(c, idle, 1.0)
    c.on_event(ToolStart(idle, "t", "bash"), 1.0)
    actions = c.on_event(NodeDrain("a"), 2.0)
    assert c.membership("a") == "draining"
    assert Admit(idle, "b") in actions  # the same event's plan moved it
    assert phases(c)[running] == (Phase.IN_LLM, "a")  # never moved inside a call
    assert not c.nodes["a"].healthy
    assert set(c.nodes) == {"a", "b"}
    c.on_event(LlmEnd(running, "a", PROMPT, 0, 500), 3.0)  # accepted; then moved off the draining node
    assert "a" not in {node for _, node in phases(c).values()}
    assert_capacity_respected(c)


def test_a_draining_node_is_never_admitted_on_even_when_it_reports_healthy():
    c = fleet(nodes=("a", "b"))
    c.on_event(NodeDrain("b"), 0.5)
    c.on_event(NodeUpdate("b", 70_000, healthy=True), 1.0)  # a scrape after the drain
    for i in range(4):
        start(c, f"s{i}", now=2.0)
    assert sessions_on(c, "b") == []
    assert len(sessions_on(c, "a")) == 2
    assert c.membership("b") == "draining"


def test_drain_with_remove_retires_the_node_once_its_last_call_ended():
    c = fleet()
    start(c, "s0")
    node = c.session("s0").node
    actions = c.on_event(NodeDrain(node, remove=True), 1.0)
    assert not any(isinstance(a, NodeRetired) for a in actions)
    assert node in c.nodes
    actions = finish_call(c, "s0", 2.0)
    assert NodeRetired(node) in actions
    assert node not in c.nodes
    assert c.membership(node) == "active"  # a node the core no longer has is not draining
    assert phases(c)["s0"][1] not in (node,)
    assert_capacity_respected(c)


def test_drain_with_remove_of_an_empty_node_retires_it_at_once():
    c = fleet()
    assert c.on_event(NodeDrain("b", remove=True), 1.0) == [NodeRetired("b")]
    assert set(c.nodes) == {"a"}


def test_removal_puts_idle_holders_back_in_the_pool_and_still_accepts_the_running_calls_end():
    c = fleet(capacity=140_000)
    for i in range(4):
        start(c, f"s{i}")
    on_a = sessions_on(c, "a")
    idle, running = on_a
    finish_call(c, idle, 1.0)
    c.on_event(ToolStart(idle, "t", "bash"), 1.0)
    c.on_event(NodeRemoved("a"), 2.0)
    assert phases(c)[idle][1] != "a"
    assert phases(c)[running] == (Phase.IN_LLM, "a")  # its lease is kept until its llm_end
    c.on_event(LlmEnd(running, "a", PROMPT, 0, 500), 3.0)
    assert phases(c)[running][1] != "a"
    assert set(c.holders) <= {"b"}
    assert_capacity_respected(c)


def test_a_refused_call_on_a_removed_node_is_accepted_and_demotes_nothing():
    c = fleet()
    start(c, "s0")
    node = c.session("s0").node
    c.on_event(NodeRemoved(node), 1.0)
    c.on_event(LlmEnd("s0", node, error="connection refused", refused=True), 2.0)
    assert phases(c)["s0"][0] is Phase.ADMITTED or phases(c)["s0"] == (Phase.WAITING, None)
    assert phases(c)["s0"][1] != node


def test_a_session_waiting_again_after_removal_is_admitted_on_the_node_that_joins():
    c = fleet(nodes=("a",))
    c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0)
    c.on_event(Acquire("s0"), 0.0)
    finish_call(c, "s0", 1.0)
    c.on_event(ToolStart("s0", "t", "bash"), 1.0)
    c.on_event(NodeRemoved("a"), 2.0)
    assert phases(c)["s0"] == (Phase.IN_TOOL, None)
    actions = c.on_event(NodeUpdate("c", 70_000), 3.0)
    assert Admit("s0", "c") in actions


def test_drain_of_an_unknown_node_or_without_a_name_changes_nothing():
    c = fleet()
    with pytest.raises(UnknownNode):
        c.on_event(NodeDrain("z"), 1.0)
    with pytest.raises(InvalidEvent):
        NodeDrain("")
    assert c.membership("a") == c.membership("b") == "active"
