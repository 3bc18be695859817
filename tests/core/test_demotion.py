"""Node demotion on the pure core: refused calls move a session's place and its call, demote the node after a few in a
row, and only a probe that finds it serving restores it
(docs/coordinator.md#every-fault-in-one-table-tao-bench-faults)."""

import pytest

from tao_coordinator.core.actions import NodeDemoted, NodeRestored, ProbeNode, Route
from tao_coordinator.core.errors import IllegalTransition, InvalidEvent
from tao_coordinator.core.events import Acquire, Close, LlmEnd, NodeProbed, NodeUpdate, Register
from tao_coordinator.core.model import Phase

from .test_coordinator import PROMPT, fleet


def on_a(coordinator, session_id, now=0.0):
    """A session whose call runs on node a (TAO admits on the least loaded node, a before b)."""
    coordinator.on_event(Register(session_id, expected_input_tokens=PROMPT), now)
    actions = coordinator.on_event(Acquire(session_id), now)
    assert Route(session_id, "a") in actions
    return actions


def refuse(coordinator, session_id, now, how="HTTP 503"):
    return coordinator.on_event(LlmEnd(session_id, "a", error=how, refused=True), now)


def refused_then_retried(coordinator, session_id, now, how="HTTP 503"):
    """The client's way: the refusal reported, the call sent again away from a (which frees its place there)."""
    actions = refuse(coordinator, session_id, now, how)
    retried = coordinator.on_event(Acquire(session_id, avoid_nodes=("a",)), now)
    assert any(isinstance(action, Route) and action.node != "a" for action in retried)
    return actions


def test_a_refused_call_moves_the_session_and_its_retry_to_another_node():
    coordinator = fleet()
    on_a(coordinator, "s")
    assert refuse(coordinator, "s", 1.0) == []
    session = coordinator.session("s")
    assert not any(e.node == "a" for e in session.evidence)
    assert session.last_node is None  # a refused call was not served
    actions = coordinator.on_event(Acquire("s", avoid_nodes=("a",)), 1.0)
    assert Route("s", "b") in actions
    assert (coordinator.session("s").phase, coordinator.session("s").node) == (Phase.IN_LLM, "b")


def test_a_retry_moves_a_place_the_planner_gave_back_to_the_refuser():
    coordinator = fleet()
    on_a(coordinator, "s")
    refuse(coordinator, "s", 1.0)
    coordinator.on_event(Acquire("s"), 1.0)  # no avoid: the session may be placed on a again
    coordinator.on_event(LlmEnd("s", coordinator.session("s").node, PROMPT, 0, 10), 1.5)
    held = coordinator.session("s").node
    actions = coordinator.on_event(Acquire("s", avoid_nodes=(held,)), 2.0)
    other = "b" if held == "a" else "a"
    assert Route("s", other) in actions


def test_the_node_is_demoted_at_the_third_refusal_in_a_row_and_a_served_call_starts_the_count_again():
    coordinator = fleet(nodes=("a", "b", "c"), capacity=1_000_000)
    for k in range(2):
        on_a(coordinator, f"s{k}", now=float(k))
        assert refused_then_retried(coordinator, f"s{k}", float(k)) == []
    on_a(coordinator, "ok", now=2.0)
    coordinator.on_event(LlmEnd("ok", "a", PROMPT, 0, 5), 2.0)  # served: the next two do not demote
    coordinator.on_event(Close("ok"), 2.0)
    for k in range(2, 4):
        on_a(coordinator, f"s{k}", now=3.0)
        assert refused_then_retried(coordinator, f"s{k}", 3.0) == []
    on_a(coordinator, "s4", now=4.0)
    actions = refuse(coordinator, "s4", 4.0, how="ConnectError: [Errno 111] Connection refused")
    reason = "3 calls refused in a row (last: ConnectError: [Errno 111] Connection refused)"
    assert [a for a in actions if isinstance(a, NodeDemoted)] == [NodeDemoted("a", reason)]
    assert not coordinator.nodes["a"].healthy
    assert coordinator.demotion("a").demoted_total == 1 and coordinator.demotion("a").refused_total == 5
    coordinator.on_event(Register("new", expected_input_tokens=PROMPT), 5.0)
    assert Route("new", "a") not in coordinator.on_event(Acquire("new"), 5.0)
    assert all(s.node != "a" for s in coordinator.sessions.values())  # its holders were re-planned


def demoted(probe_interval_s=2.0):
    coordinator = fleet(node_probe_interval_s=probe_interval_s, node_demote_after=1)
    on_a(coordinator, "s")
    assert NodeDemoted("a", "1 calls refused in a row (last: HTTP 503)") in refuse(coordinator, "s", 10.0)
    return coordinator


def test_a_demoted_node_is_probed_every_interval_and_a_scrape_does_not_restore_it():
    coordinator = demoted()
    assert coordinator.next_wakeup() == 12.0
    coordinator.on_event(NodeUpdate("a", 70_000, healthy=True), 11.0)  # /health 200: still demoted
    assert not coordinator.nodes["a"].healthy
    assert ProbeNode("a") in coordinator.on_event(NodeUpdate("b", 70_000), 12.0)
    assert coordinator.next_wakeup() == 14.0  # asked again if no answer comes
    assert coordinator.on_event(NodeProbed("a", serves=False, detail="HTTP 503"), 12.5) == []
    assert not coordinator.nodes["a"].healthy
    actions = coordinator.on_event(NodeProbed("a", serves=True), 13.0)
    assert NodeRestored("a", 3.0) in actions
    assert coordinator.nodes["a"].healthy and not coordinator.demotion("a").demoted
    assert coordinator.next_wakeup() != 14.0 and coordinator.demotion("a").restored_total == 1
    assert coordinator.on_event(NodeProbed("a", serves=True), 14.0) == []  # once restored, a late answer is nothing


def test_a_restored_node_keeps_what_its_scrapes_say():
    coordinator = demoted()
    coordinator.on_event(NodeUpdate("a", 70_000, healthy=False), 11.0)
    coordinator.on_event(NodeProbed("a", serves=True), 12.0)
    assert not coordinator.demotion("a").demoted and not coordinator.nodes["a"].healthy


def test_no_other_node_is_said_and_changes_nothing():
    coordinator = fleet(nodes=("a",))
    on_a(coordinator, "s")
    before = coordinator.session("s")
    with pytest.raises(IllegalTransition, match="another call of the session runs on a"):
        coordinator.on_event(Acquire("s", avoid_nodes=("a",)), 0.5)  # an overlapping call runs there
    refuse(coordinator, "s", 1.0)
    assert coordinator.cannot_avoid(coordinator.session("s"), {"a"}) == "no usable node other than a"
    with pytest.raises(IllegalTransition, match="no usable node other than a"):
        coordinator.on_event(Acquire("s", avoid_nodes=("a",)), 1.0)
    assert coordinator.session("s").version == before.version + 1  # the refusal, nothing more


def test_bad_refusal_reports_are_refused_by_name_and_change_nothing():
    with pytest.raises(InvalidEvent, match="error: a refused call must say how"):
        LlmEnd("s", "a", refused=True)
    with pytest.raises(InvalidEvent, match="avoid_nodes"):
        Acquire("s", avoid_nodes=("",))
    coordinator = fleet()
    on_a(coordinator, "s")
    before = coordinator.session("s")
    with pytest.raises(IllegalTransition, match="runs on a, not on b"):
        coordinator.on_event(LlmEnd("s", "b", error="HTTP 503", refused=True), 1.0)
    assert coordinator.session("s") == before and coordinator.demotion("b").refused_total == 0
    # a name the fleet does not have is avoided by construction
    refuse(coordinator, "s", 1.0)
    assert Route("s", "b") in coordinator.on_event(Acquire("s", avoid_nodes=("a", "gone")), 1.0)
