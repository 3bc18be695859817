"""The coordinator end to end on the pure core: admission, interruption, routing, failures, leases, bad input."""

import math
from collections import Counter

import pytest

from tao_coordinator.core.actions import Admit, Expired, Interrupt, Route
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.errors import DuplicateSession, IllegalTransition, InvalidEvent, UnknownNode, UnknownSession
from tao_coordinator.core.events import (
    Acquire,
    CacheResidency,
    Close,
    Heartbeat,
    LlmEnd,
    NodeRemoved,
    NodeUpdate,
    Register,
    Tick,
    ToolEnd,
    ToolStart,
)
from tao_coordinator.core.forecast import ToolHistory
from tao_coordinator.core.model import DurationHints, Phase
from tao_coordinator.core.policies import UnknownPolicy, make_policy
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.state import capacity_cells

# 30,000-token prompts + 512 expected output = 1,907 cells of 16 tokens; a 70,000-token node at 0.9 holds 3,937
# cells: exactly two such sessions per node.
PROMPT = 30_000


def fleet(policy="tao", nodes=("a", "b"), capacity=70_000, history=None, **settings):
    settings.setdefault("lease_ttl_s", 1e6)  # these clients never heartbeat; lease tests set their own TTL
    coordinator = Coordinator(make_policy(policy), CoreSettings(**settings), history=history)
    for node in nodes:
        coordinator.on_event(NodeUpdate(node, capacity), 0.0)
    return coordinator


def start(coordinator, session_id, now=0.0):
    coordinator.on_event(Register(session_id, expected_input_tokens=PROMPT), now)
    return coordinator.on_event(Acquire(session_id), now)


def finish_call(coordinator, session_id, now, node=None):
    node = node or coordinator.session(session_id).node
    return coordinator.on_event(LlmEnd(session_id, node, PROMPT, 0, 500), now)


def phases(coordinator):
    return {s.id: (s.phase, s.node) for s in coordinator.sessions.values()}


def assert_capacity_respected(coordinator):
    holders = Counter(s.node for s in coordinator.sessions.values() if s.node is not None)
    assert coordinator.holders == holders
    used = coordinator.used_cells()
    for node_id, node in coordinator.nodes.items():
        assert used.get(node_id, 0) <= capacity_cells(node, coordinator.settings)


def test_admission_fills_capacity_and_the_rest_waits():
    c = fleet()
    routed = [start(c, f"s{i}") for i in range(6)]
    assert [len(r) for r in routed] == [1, 1, 1, 1, 0, 0]
    assert all(isinstance(r[0], Route) for r in routed[:4])
    assert [p for p, _ in phases(c).values()].count(Phase.WAITING) == 2
    assert_capacity_respected(c)
    for session in c.sessions.values():
        session.check()


def test_a_finished_session_frees_its_place_for_a_waiting_one():
    c = fleet()
    for i in range(5):
        start(c, f"s{i}")
    finish_call(c, "s0", 5.0)
    actions = c.on_event(Close("s0"), 5.0)
    assert Admit("s4", "a") in actions and Route("s4", "a") in actions
    assert_capacity_respected(c)


def test_holders_that_outgrow_their_node_are_planned_even_when_nobody_waits():
    c = fleet(nodes=("a",))
    for s in ("s0", "s1"):  # 20,000-token prompts: both admitted at once, and nobody is left waiting
        c.on_event(Register(s, expected_input_tokens=20_000), 0.0)
        assert c.on_event(Acquire(s), 0.0) == [Route(s, "a")]
    c.on_event(LlmEnd("s0", "a", 20_000, 0, 10_000), 1.0)  # s0's context grew to 30,000 tokens
    c.on_event(ToolStart("s0", "t", "bash", DurationHints(sleep_s=300)), 1.0)
    assert phases(c)["s0"] == (Phase.IN_TOOL, "a")  # both still fit
    c.on_event(LlmEnd("s1", "a", 20_000, 0, 10_000), 2.0)  # and now s1's: together past what node a may hold
    actions = c.on_event(ToolStart("s1", "t", "bash", DurationHints(sleep_s=300)), 2.0)
    assert len([a for a in actions if isinstance(a, Interrupt)]) == 1
    assert Counter(phases(c).values()) == Counter({(Phase.IN_TOOL, None): 1, (Phase.IN_TOOL, "a"): 1})
    assert_capacity_respected(c)


def test_fresh_cache_credit_keeps_a_long_tool_resident_until_it_decays():
    c = fleet(nodes=("a",))
    start(c, "s0")
    start(c, "s1")
    start(c, "s2")
    assert c.session("s2").phase is Phase.WAITING
    finish_call(c, "s0", 2.0)
    c.on_event(ToolStart("s0", "t1", "bash", DurationHints(sleep_s=300)), 2.0)
    assert c.session("s0").node == "a"  # 30k tokens of fresh credit outrank a ready newcomer
    # credit of 30,500 tokens falls below one unit (1,024) after 10·log2(29.8) ≈ 49 s: time alone changes the
    # decision then, so the coordinator asks to be woken just after
    assert c.next_wakeup() == pytest.approx(2.0 + 10 * math.log2(30_500 / 1024), abs=1e-3)
    assert c.on_event(Tick(), 40.0) == []
    actions = c.on_event(Tick(), 52.0)
    assert actions[:3] == [Interrupt("s0", "a"), Admit("s2", "a"), Route("s2", "a")]
    assert phases(c)["s0"] == (Phase.IN_TOOL, None)


def test_a_tool_about_to_return_keeps_its_place_over_a_stale_one():
    c = fleet(nodes=("a",))
    for s in ("s0", "s1", "s2"):
        start(c, s)
    for s in ("s0", "s1"):
        finish_call(c, s, 1.0)
    for k in range(20):  # what `bash` takes beyond its sleeps: half a second
        c.on_event(ToolStart("s0", f"learn-{k}", "bash"), 1.0)
        c.on_event(ToolEnd("s0", f"learn-{k}", duration_s=0.5), 1.0)
    c.on_event(ToolStart("s0", "t", "bash", DurationHints(sleep_s=200)), 1.0)
    c.on_event(ToolStart("s1", "t", "bash", DurationHints(sleep_s=70)), 1.0)
    # at 70.5 s both credits are gone and s1's sleep is nearly over, so it is about to return; s0 sleeps on: s0 yields
    actions = c.on_event(Tick(), 70.5)
    assert Interrupt("s0", "a") in actions and Admit("s2", "a") in actions
    assert phases(c)["s1"] == (Phase.IN_TOOL, "a")


def test_paused_session_is_readmitted_when_its_tool_returns_and_room_frees():
    c = fleet(nodes=("a",))
    for s in ("s0", "s1", "s2"):
        start(c, s)
    finish_call(c, "s0", 1.0)
    c.on_event(ToolStart("s0", "t", "bash", DurationHints(sleep_s=300)), 1.0)
    c.on_event(Tick(), 60.0)
    assert phases(c)["s0"] == (Phase.IN_TOOL, None)
    c.on_event(ToolEnd("s0", "t", 300.0), 301.0)
    assert c.on_event(Acquire("s0"), 301.0) == []
    finish_call(c, "s1", 302.0)
    actions = c.on_event(Close("s1"), 302.0)
    assert Route("s0", "a") in actions


def test_unhealthy_node_loses_its_idle_holders_to_the_healthy_one():
    c = fleet(capacity=140_000)
    for i in range(4):
        start(c, f"s{i}")
    on_a = [s for s, (_, node) in phases(c).items() if node == "a"]
    for s in on_a:
        finish_call(c, s, 1.0)
    actions = c.on_event(NodeUpdate("a", 140_000, healthy=False), 2.0)
    moved = {a.session_id for a in actions if isinstance(a, Admit) and a.node == "b"}
    assert moved == set(on_a)
    assert all(node == "b" for _, node in phases(c).values())
    assert_capacity_respected(c)


def test_calls_in_flight_are_never_moved_even_off_a_failing_node():
    c = fleet()
    start(c, "s0")
    node = c.session("s0").node
    c.on_event(NodeUpdate(node, 70_000, healthy=False), 1.0)
    assert phases(c)["s0"] == (Phase.IN_LLM, node)
    c.on_event(LlmEnd("s0", node, error="connection reset"), 2.0)
    assert phases(c)["s0"][1] != node


def test_removed_node_and_unknown_node():
    c = fleet()
    c.on_event(NodeRemoved("b"), 1.0)
    assert set(c.nodes) == {"a"}
    with pytest.raises(UnknownNode):
        c.on_event(NodeRemoved("b"), 1.0)


def test_router_policy_routes_every_call_at_once_and_never_plans():
    c = fleet(policy="round-robin")
    nodes = [start(c, f"s{i}")[0].node for i in range(6)]
    assert nodes == ["a", "b", "a", "b", "a", "b"]
    assert c.plan_stats.started == 0
    finish_call(c, "s0", 1.0)
    assert c.on_event(Acquire("s0"), 2.0) == [Route("s0", "a")]  # the seventh call


def test_lease_expires_without_events_and_heartbeats_renew_it():
    c = fleet(lease_ttl_s=30.0)
    start(c, "s0")
    start(c, "s1")
    c.on_event(Heartbeat("s1"), 20.0)
    assert c.next_wakeup() == 30.0
    assert c.on_event(Tick(), 31.0) == [Expired("s0")]
    assert set(c.sessions) == {"s1"}
    with pytest.raises(UnknownSession):
        c.on_event(Acquire("s0"), 32.0)


def test_tool_timeout_hint_extends_the_lease():
    c = fleet(lease_ttl_s=30.0)
    start(c, "s0")
    finish_call(c, "s0", 1.0)
    c.on_event(ToolStart("s0", "t", "bash", DurationHints(timeout_s=600)), 1.0)
    assert c.on_event(Tick(), 300.0) == []
    assert "s0" in c.sessions


def test_tool_durations_are_learned_and_predict_the_next_call():
    history = ToolHistory.from_settings(CoreSettings())  # the caller's to read: the core adds every tool end to it
    c = fleet(history=history)
    start(c, "s0")
    finish_call(c, "s0", 1.0)
    for k in range(16):
        c.on_event(ToolStart("s0", f"t{k}", "Bash", program="pytest"), 10.0 * k)
        c.on_event(ToolEnd("s0", f"t{k}", duration_s=2.0), 10.0 * k + 2)
    assert list(history.shared("bash:pytest").values()) == [2.0] * 16
    c.on_event(ToolStart("s0", "t99", "bash", program="pytest"), 200.0)  # another harness's spelling: one key
    running = c.session("s0").tools[0]
    assert running.source == "forecast"
    assert running.predicted_end == pytest.approx(202.0)
    # not back within H = 1 s at first; then likely, as 2 s nears; then not, when it has run past what was seen
    assert running.readiness.level_at(200.0) == 0
    assert running.readiness.level_at(201.5) == c.settings.readiness_levels
    assert running.readiness.level_at(203.0) == 0


def test_the_bound_rule_predicts_todays_empirical_bernstein_bound():
    c = fleet("tao-bound")
    start(c, "s0")
    finish_call(c, "s0", 1.0)
    for k in range(4):
        c.on_event(ToolStart("s0", f"t{k}", "pytest"), 10.0 * k)
        c.on_event(ToolEnd("s0", f"t{k}", duration_s=2.0), 10.0 * k + 2)
    c.on_event(ToolStart("s0", "t9", "pytest"), 100.0)
    running = c.session("s0").tools[0]
    # the bound: mean 2 s, no variance, range term 3 · 2 s · ln(3/0.2) / 4
    assert running.source == "tool"
    end = 100.0 + 2.0 + 3 * 2.0 * math.log(15) / 4
    assert running.predicted_end == pytest.approx(end)
    assert running.readiness.times == (pytest.approx(end - 1.0),)


def test_expired_prediction_is_reestimated_at_most_every_interval():
    c = fleet("tao-bound", reestimate_interval_s=30.0)
    start(c, "s0")
    finish_call(c, "s0", 0.0)
    c.on_event(ToolStart("s0", "t", "bash"), 0.0)  # default 5 s
    c.on_event(Tick(), 10.0)
    assert c.session("s0").tools[0].predicted_end == 5.0  # expired, but not yet 30 s old
    assert c.next_wakeup() == 30.0
    c.on_event(Tick(), 30.0)
    tool = c.session("s0").tools[0]
    assert (tool.source, tool.predicted_at, tool.predicted_end) == ("reestimate", 30.0, 35.0)


def test_kv_event_evidence_reaches_the_session():
    c = fleet()
    start(c, "s0")
    version = c.session("s0").version
    c.on_event(CacheResidency("a", "s0", 4096), 1.0)
    session = c.session("s0")
    assert session.version == version + 1
    assert [(e.node, e.tokens) for e in session.evidence] == [("a", 4096)]


@pytest.mark.parametrize(
    ("event", "error"),
    [
        (lambda: Register(""), InvalidEvent),
        (lambda: Register("x", expected_input_tokens=-1), InvalidEvent),
        (lambda: LlmEnd("s0", "a", prompt_tokens=10, cached_tokens=20), InvalidEvent),
        (lambda: ToolStart("s0", "t", "bash", DurationHints(timeout_s=float("nan"))), InvalidEvent),
        (lambda: ToolEnd("s0", "t", status="weird"), InvalidEvent),
        (lambda: NodeUpdate("n", 10, prefix_hit_rate=1.5), InvalidEvent),
        (lambda: Register("s0"), DuplicateSession),
        (lambda: Acquire("nobody"), UnknownSession),
        (lambda: ToolEnd("s0", "never-started"), IllegalTransition),
        (lambda: ToolStart("s0", "t", "bash"), IllegalTransition),  # s0 is inside an LLM call
    ],
)
def test_bad_input_raises_a_named_error_and_changes_nothing(event, error):
    c = fleet()
    start(c, "s0")
    before = (dict(c.sessions), dict(c.nodes), set(c.waiting), c.plan_stats.started)
    with pytest.raises(error) as raised:
        c.on_event(event(), 1.0)
    assert str(raised.value)
    assert (dict(c.sessions), dict(c.nodes), set(c.waiting), c.plan_stats.started) == before


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(UnknownPolicy, match="tao-no-dp"):
        make_policy("nope")
    assert make_policy("tao_coordinator.baselines.round_robin:RoundRobinPolicy").name == "round-robin"


def test_a_session_larger_than_any_node_is_still_admitted_alone():
    c = fleet(nodes=("a",), capacity=70_000)
    c.on_event(Register("big", expected_input_tokens=68_000), 0.0)  # more than 0.9 × 70,000
    assert c.on_event(Acquire("big"), 0.0) == [Route("big", "a")]
