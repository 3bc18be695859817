"""A waiting session's position and estimated wait (`core/queue.py`), read through `Coordinator.queue_position`."""

import random

import pytest

from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import Acquire, Close, LlmEnd, NodeUpdate, Register, ToolEnd, ToolStart
from tao_coordinator.core.model import DurationHints
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.settings import CoreSettings

# a 70,000-token node at 0.9 holds exactly two sessions of 30,000-token prompts (tests/core/test_coordinator.py)
PROMPT = 30_000


def one_node(policy="tao"):
    coordinator = Coordinator(make_policy(policy), CoreSettings(lease_ttl_s=1e6))
    coordinator.on_event(NodeUpdate("a", 70_000), 0.0)
    return coordinator


def ask(coordinator, session_id, now):
    coordinator.on_event(Register(session_id, expected_input_tokens=PROMPT), now)
    return coordinator.on_event(Acquire(session_id), now)


def standing(coordinator, now):
    """Each waiting session's (position, waiting, estimate) at `now`."""
    found = {s: coordinator.queue_position(s, now) for s in coordinator.sessions}
    return {s: (p.position, p.waiting, p.estimated_wait_s) for s, p in found.items() if p is not None}


def test_waiting_sessions_stand_in_the_order_they_asked_and_have_no_estimate_before_a_service():
    c = one_node()
    for k, session_id in enumerate(["s0", "s1", "s2", "s3", "s4"]):
        ask(c, session_id, float(k))
    assert c.queue_position("s0", 5.0) is None  # admitted: it does not wait
    assert standing(c, 5.0) == {"s2": (1, 3, None), "s3": (2, 3, None), "s4": (3, 3, None)}


def test_the_estimate_is_the_position_times_the_busy_time_between_services():
    c = one_node()
    for session_id in ["s0", "s1", "s2", "s3", "s4"]:
        ask(c, session_id, 0.0)
    c.on_event(Close("s0"), 10.0)  # its place goes to a waiting session: one service, 10 busy seconds after the last
    (served,) = {"s2", "s3", "s4"} - set(standing(c, 10.0))
    rest = sorted(set(standing(c, 10.0)))
    assert standing(c, 10.0) == {rest[0]: (1, 2, 10.0), rest[1]: (2, 2, 20.0)}
    # a stall longer than the mean counts as one more gap, so the estimate grows with it
    assert standing(c, 25.0)[rest[0]] == (1, 2, pytest.approx(12.5))
    assert standing(c, 15.0)[rest[0]] == (1, 2, 10.0)
    c.on_event(Close("s1"), 30.0)  # a second service, 20 busy seconds after the first
    (last,) = standing(c, 30.0)
    assert standing(c, 30.0) == {last: (1, 1, pytest.approx(15.0))}
    assert served not in standing(c, 30.0)


def test_time_with_nobody_waiting_is_not_counted_as_waiting_for_a_place():
    c = one_node()
    for session_id in ["s0", "s1", "s2"]:
        ask(c, session_id, 0.0)
    c.on_event(Close("s0"), 4.0)  # s2 served after 4 busy seconds; the queue is empty from here
    c.on_event(Close("s2"), 100.0)  # a free place, nobody waits
    ask(c, "s3", 100.0)  # admitted at once: it never waits
    ask(c, "s4", 200.0)
    c.on_event(Close("s1"), 203.0)  # s4 served after 3 busy seconds, not 199
    ask(c, "s5", 203.0)
    ask(c, "s6", 203.0)
    assert standing(c, 203.0) == {"s5": (1, 2, pytest.approx(3.5)), "s6": (2, 2, pytest.approx(7.0))}


def test_a_session_that_leaves_the_queue_moves_those_behind_it_up_without_counting_as_served():
    c = one_node()
    for session_id in ["s0", "s1", "s2", "s3", "s4"]:
        ask(c, session_id, 0.0)
    c.on_event(Close("s2"), 1.0)
    c.on_event(ToolStart("s3", "t1", "bash", hints=DurationHints()), 2.0)  # a harness runs a tool instead of waiting
    assert standing(c, 3.0) == {"s4": (1, 1, None)}


def test_a_position_never_grows_while_a_session_waits():
    rng = random.Random(7)
    c = one_node()
    now, asked, positions = 0.0, 0, {}
    for _ in range(400):
        now += rng.random()
        live = sorted(c.sessions)
        move = rng.random()
        if move < 0.3 or not live:
            ask(c, f"s{asked}", now)
            asked += 1
        else:
            session = c.session(rng.choice(live))
            if session.phase.name == "IN_LLM":
                c.on_event(LlmEnd(session.id, session.node, PROMPT, 0, 500), now)
                if rng.random() < 0.5:
                    c.on_event(ToolStart(session.id, "t", "bash", hints=DurationHints()), now)
            elif session.phase.name == "IN_TOOL":
                c.on_event(ToolEnd(session.id, "t"), now)
                c.on_event(Acquire(session.id), now)
            elif session.phase.name == "ADMITTED":
                c.on_event(Acquire(session.id), now)
            elif rng.random() < 0.2:
                c.on_event(Close(session.id), now)
        pending = {s.id for s in c.sessions.values() if s.acquire_pending}
        found = standing(c, now)
        assert set(found) == pending
        assert sorted(p for p, _, _ in found.values()) == list(range(1, len(pending) + 1))
        for session_id, (position, _, _) in found.items():
            assert position <= positions.get(session_id, position)
        positions = {session_id: position for session_id, (position, _, _) in found.items()}
