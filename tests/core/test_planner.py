"""Planning off the event loop: one plan in flight, coalescing, and revalidation of stale plans
(docs/design.md#planning-without-stopping-the-world)."""

from tao_coordinator.core.actions import Admit, Route, StartPlan
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import Acquire, Close, LlmEnd, NodeUpdate, Register, ToolStart
from tao_coordinator.core.model import Phase
from tao_coordinator.core.plan import Placement, Plan, PlanFinished
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.settings import CoreSettings

PROMPT = 30_000


def async_fleet(nodes=("a",), capacity=70_000):
    # the static rule: a session waits for a plan even when a node has room, which is what these tests exercise
    c = Coordinator(make_policy("tao-static-admit"), CoreSettings(lease_ttl_s=1e6), inline_planning=False)
    for node in nodes:
        assert c.on_event(NodeUpdate(node, capacity), 0.0) == []  # nobody waits: no plan
    return c


def only_job(actions):
    jobs = [a.job for a in actions if isinstance(a, StartPlan)]
    assert len(jobs) == 1
    return jobs[0]


def test_one_plan_in_flight_and_events_meanwhile_coalesce_into_the_next():
    c = async_fleet()
    job = only_job(c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0))
    assert c.on_event(Register("s1", expected_input_tokens=PROMPT), 0.1) == []
    assert c.on_event(Register("s2", expected_input_tokens=PROMPT), 0.2) == []
    assert c.plan_pending and c.plan_in_flight is job
    actions = c.on_event(PlanFinished(job.id, job.solve()), 0.3)
    assert Admit("s0", "a") in actions
    follow_up = only_job(actions)  # the coalesced events get one plan, not two
    actions = c.on_event(PlanFinished(follow_up.id, follow_up.solve()), 0.4)
    assert Admit("s1", "a") in actions
    assert c.session("s2").phase is Phase.WAITING  # no room
    assert c.plan_stats.started == 2


def test_stale_version_ends_the_applied_prefix():
    c = async_fleet(capacity=140_000)
    job = only_job(c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0))
    c.on_event(Register("s1", expected_input_tokens=PROMPT), 0.0)
    c.on_event(PlanFinished(job.id, job.solve()), 0.0)
    job = c.plan_in_flight
    plan = job.solve()
    assert [p.session_id for p in plan.placements] == ["s1"]
    c.on_event(Acquire("s1", expected_input_tokens=PROMPT), 0.1)  # s1 changed after the snapshot
    actions = c.on_event(PlanFinished(job.id, plan), 0.2)
    assert c.plan_stats.dropped == 1
    assert c.session("s1").phase is Phase.WAITING
    retry = only_job(actions)
    assert Route("s1", "a") in c.on_event(PlanFinished(retry.id, retry.solve()), 0.3)


def test_capacity_gone_or_node_unhealthy_cuts_the_plan():
    for change in (NodeUpdate("a", 30_000), NodeUpdate("a", 140_000, healthy=False)):
        c = async_fleet(capacity=140_000)
        job = only_job(c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0))
        c.on_event(change, 0.1)
        c.on_event(PlanFinished(job.id, job.solve()), 0.2)
        assert c.session("s0").node is None
        assert c.plan_stats.dropped == 1


def test_longest_valid_prefix_is_applied_and_the_rest_dropped():
    c = async_fleet(capacity=100_000)  # two 30k sessions
    job = only_job(c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0))
    c.on_event(Register("s1", expected_input_tokens=PROMPT), 0.0)
    c.on_event(Register("s2", expected_input_tokens=PROMPT), 0.0)
    c.on_event(PlanFinished(job.id, job.solve()), 0.0)
    job = c.plan_in_flight
    c.on_event(PlanFinished(job.id, job.solve()), 0.0)
    s0, s1, s2 = (c.session(s) for s in ("s0", "s1", "s2"))
    assert (s0.node, s1.node, s2.node) == ("a", "a", None)
    # a hand-made plan: release s0 (valid), place s2 (valid), then place s1 at a version it no longer has
    plan = Plan(
        (
            Placement("s0", s0.version, None, PROMPT),
            Placement("s2", s2.version, "a", PROMPT),
            Placement("s1", s1.version - 1, "a", PROMPT),
        )
    )
    c.on_event(Register("s3"), 0.1)
    c.on_event(PlanFinished(c.plan_in_flight.id, plan), 0.1)
    assert (c.session("s0").node, c.session("s2").node, c.session("s1").node) == (None, "a", "a")
    assert c.plan_stats.cut == 1


def test_moves_release_their_old_place_before_anything_is_placed():
    c = async_fleet(nodes=("a", "b"), capacity=60_000)  # one 30k session per node
    job = only_job(c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0))
    c.on_event(PlanFinished(job.id, job.solve()), 0.0)
    job = only_job(c.on_event(Register("s1", expected_input_tokens=PROMPT), 0.0))
    c.on_event(PlanFinished(job.id, job.solve()), 0.0)
    s0, s1 = c.session("s0"), c.session("s1")
    # swapping the two sessions only works if both old places are released first, whatever the order of the moves
    swap = Plan((Placement("s0", s0.version, s1.node, PROMPT), Placement("s1", s1.version, s0.node, PROMPT)))
    job = only_job(c.on_event(Register("s2"), 0.1))
    c.on_event(PlanFinished(job.id, swap), 0.1)
    assert (c.session("s0").node, c.session("s1").node) == (s1.node, s0.node)
    assert c.plan_stats.applied >= 3


def test_a_late_result_for_a_finished_job_is_ignored():
    c = async_fleet()
    job = only_job(c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0))
    c.on_event(PlanFinished(job.id, job.solve()), 0.1)
    before = dict(c.sessions)
    assert c.on_event(PlanFinished(job.id, job.solve()), 0.2) == []
    assert dict(c.sessions) == before


def test_sessions_inside_a_call_are_not_candidates():
    c = async_fleet(capacity=60_000)  # room for one 30k session only
    job = only_job(c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0))
    c.on_event(PlanFinished(job.id, job.solve()), 0.0)
    c.on_event(Acquire("s0"), 0.1)
    job = only_job(c.on_event(Register("s1", expected_input_tokens=PROMPT), 0.2))
    plan = job.solve()
    assert (plan.candidates, plan.placements) == (1, ())
    c.on_event(PlanFinished(job.id, plan), 0.3)
    assert c.on_event(LlmEnd("s0", "a", PROMPT, 0, 10), 1.0) == []  # not a decision point: no plan
    job = only_job(c.on_event(ToolStart("s0", "t", "bash"), 1.0))
    plan = job.solve()
    assert (plan.candidates, plan.placements) == (2, ())  # s0 keeps its place on its fresh cache credit
    c.on_event(PlanFinished(job.id, plan), 1.0)
    job = only_job(c.on_event(Close("s0"), 2.0))
    assert Admit("s1", "a") in c.on_event(PlanFinished(job.id, job.solve()), 2.1)
