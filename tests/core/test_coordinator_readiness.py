"""Readiness in the live core: forecasts on tool start, wake-ups at each readiness step, the adaptive horizon."""

import pytest

from tao_coordinator.core.actions import Interrupt
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import Acquire, Close, LlmEnd, NodeUpdate, Register, Tick, ToolEnd, ToolStart
from tao_coordinator.core.model import Phase
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals.readiness import readiness_level

PROMPT = 30_000  # two such sessions fill a 70,000-token node (see test_coordinator.py)


def fleet(policy="tao", nodes=("a",), **settings):
    settings.setdefault("lease_ttl_s", 1e6)
    coordinator = Coordinator(make_policy(policy), CoreSettings(**settings))
    for node in nodes:
        coordinator.on_event(NodeUpdate(node, 70_000), 0.0)
    return coordinator


def call(coordinator, session_id, now):
    if session_id not in coordinator.sessions:
        coordinator.on_event(Register(session_id, expected_input_tokens=PROMPT), now)
    coordinator.on_event(Acquire(session_id), now)
    node = coordinator.session(session_id).node
    if coordinator.session(session_id).phase is Phase.IN_LLM:
        coordinator.on_event(LlmEnd(session_id, node, PROMPT, 0, 500), now)


def teach(coordinator, session_id, durations, program="pytest", at=0.0):
    for k, duration in enumerate(durations):
        coordinator.on_event(ToolStart(session_id, f"learn-{at}-{k}", "bash", program=program), at)
        coordinator.on_event(ToolEnd(session_id, f"learn-{at}-{k}", duration_s=duration), at)


def test_the_coordinator_wakes_at_each_readiness_step_and_the_level_is_what_the_forecast_says():
    c = fleet()
    call(c, "s", 0.0)
    teach(c, "s", [5.0] * 20)
    c.on_event(ToolStart("s", "t", "bash", program="pytest"), 10.0)
    tool = c.session("s").tools[0]
    steps = tool.readiness.times
    assert steps and steps[0] == pytest.approx(14.0)  # a 5 s tool is back within H = 1 s from 4 s on
    assert c.next_wakeup() == pytest.approx(steps[0])
    session = c.session("s")
    assert readiness_level(session, 13.9, c.settings.readiness_levels) == 0
    assert readiness_level(session, 14.0, c.settings.readiness_levels) == c.settings.readiness_levels
    c.on_event(Tick(), steps[0])
    assert c.next_wakeup() == pytest.approx(steps[1])  # the next step is still scheduled


def test_a_policy_that_reads_no_readiness_gets_no_readiness_wake_ups():
    c = fleet("tao-no-readiness")
    call(c, "s", 0.0)
    teach(c, "s", [5.0] * 20)
    c.on_event(ToolStart("s", "t", "bash", program="pytest"), 10.0)
    assert c.session("s").tools[0].readiness.times == ()
    assert c.next_wakeup() > 14.5  # not at 14 s, where `tao`'s readiness for this tool steps up


def test_the_paper_rule_is_binary_with_a_one_second_horizon_whatever_the_settings():
    c = fleet("tao-paper", readiness_horizon_s=5.0)
    call(c, "s", 0.0)
    teach(c, "s", [5.0] * 20)
    c.on_event(ToolStart("s", "t", "bash", program="pytest"), 10.0)
    tool = c.session("s").tools[0]
    assert tool.readiness.horizon_s == 1.0
    assert tool.readiness.times == (pytest.approx(tool.predicted_end - 1.0),)
    assert tool.readiness.levels == (c.settings.readiness_levels,)


def test_sessions_served_from_the_pool_after_a_wait_lengthen_the_horizon():
    c = fleet("tao[horizon=adaptive]")
    for s in ("s0", "s1"):
        call(c, s, 0.0)  # they fill the node
    c.on_event(Acquire("s0"), 1.0)
    c.on_event(Acquire("s1"), 1.0)
    for k in range(2):  # two newcomers find it full
        c.on_event(Register(f"w{k}", expected_input_tokens=PROMPT), 2.0)
        c.on_event(Acquire(f"w{k}"), 2.0)
    assert {s.id for s in c.sessions.values() if s.phase is Phase.WAITING} == {"w0", "w1"}
    assert c.horizon_s == 1.0
    c.on_event(Close("s0"), 10.0)
    c.on_event(Close("s1"), 10.0)  # the plan serves both, 8 s after they asked
    assert {c.session(f"w{k}").phase for k in range(2)} == {Phase.IN_LLM}
    assert c.horizon_s == pytest.approx(8.0)


def test_a_change_of_horizon_reforecasts_every_running_tool():
    c = fleet("tao[horizon=adaptive]")
    call(c, "s0", 0.0)
    teach(c, "s0", [20.0] * 20)
    c.on_event(ToolStart("s0", "t", "bash", program="pytest"), 1.0)
    before = c.session("s0").tools[0].readiness
    for _ in range(40):
        c._observe_wait(8.0, 2.0)
    after = c.session("s0").tools[0].readiness
    assert before.horizon_s == 1.0 and after.horizon_s == pytest.approx(8.0)
    assert after.times[0] == pytest.approx(1.0 + 20.0 - 8.0)  # back within 8 s from 12 s after its start


def test_the_default_horizon_never_moves():
    c = fleet()
    call(c, "s0", 0.0)
    for _ in range(40):
        c._observe_wait(8.0, 2.0)
    assert c.horizon_s == 1.0


def test_a_session_about_to_return_keeps_its_place_over_one_that_will_not():
    c = fleet()
    for s in ("s0", "s1", "s2"):
        call(c, s, 0.0)
    teach(c, "s0", [300.0] * 20, program="cargo", at=0.0)
    teach(c, "s1", [0.3] * 20, program="ls", at=0.0)
    # at 100 s both credits have decayed: s1, about to call, keeps its place; s0, gone for minutes, yields to s2
    assert Interrupt("s0", "a") in c.on_event(ToolStart("s0", "t", "bash", program="cargo"), 100.0)
    assert c.on_event(ToolStart("s1", "t", "bash", program="ls"), 100.0) == []
    assert (c.session("s1").node, c.session("s2").node) == ("a", "a")
