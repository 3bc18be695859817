"""TAO's admission beside the plan, against a real coordinator: the fast path for a ready session, the utilisation
target that follows the caches vLLM keeps, and the planner's capacity accounting under both."""

import random

import pytest

from tao_coordinator.core.actions import Interrupt, Route, StartPlan
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import (
    Acquire,
    CacheResidency,
    Close,
    LlmEnd,
    NodeUpdate,
    Register,
    Tick,
    ToolEnd,
    ToolStart,
)
from tao_coordinator.core.model import DurationHints, NodeLoad, Phase
from tao_coordinator.core.plan import PlanFinished
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.policies.tao import TaoPolicy
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.state import capacity_cells

# 30,000-token prompts + 512 expected output = 1,907 cells of 16 tokens; a 70,000-token node at 0.9 holds 3,937
# cells: exactly two such sessions per node.
PROMPT = 30_000
BIG = 1_000_000


def fleet(policy="tao", nodes=("a",), capacity=70_000, inline=True):
    coordinator = Coordinator(make_policy(policy), CoreSettings(lease_ttl_s=1e6), inline_planning=inline)
    for node in nodes:
        coordinator.on_event(NodeUpdate(node, capacity), 0.0)
    return coordinator


def assert_within_capacity(coordinator):
    used = coordinator.used_cells()
    for node_id, node in coordinator.nodes.items():
        assert used.get(node_id, 0) <= capacity_cells(node, coordinator.settings), node_id


def target(coordinator, node="a"):
    return coordinator.nodes[node].utilization_target


def test_tao_admits_adaptively_and_the_static_ablation_keeps_the_old_rule():
    assert make_policy("tao").admission == "adaptive"
    assert make_policy("tao-static-admit").admission == "static"


def test_a_ready_session_whose_node_has_room_is_routed_at_once_without_waiting_for_the_plan():
    c = fleet(inline=False)
    [start] = c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0)
    assert isinstance(start, StartPlan)
    assert c.on_event(Acquire("s0"), 0.0) == [Route("s0", "a")]
    assert c.plan_in_flight is start.job  # the plan has not come back yet
    assert c.on_event(PlanFinished(start.job.id, start.job.solve()), 0.01) == []  # its admission is stale now
    assert (c.session("s0").phase, c.session("s0").node) == (Phase.IN_LLM, "a")
    assert_within_capacity(c)


def test_under_the_static_rule_the_same_session_waits_for_the_plan():
    c = fleet("tao-static-admit", inline=False)
    [start] = c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0)
    assert c.on_event(Acquire("s0"), 0.0) == []
    assert c.session("s0").phase is Phase.WAITING
    # the plan started at registration is stale by now (the acquire changed the session): a new one follows
    [again] = c.on_event(PlanFinished(start.job.id, start.job.solve()), 0.01)
    assert Route("s0", "a") in c.on_event(PlanFinished(again.job.id, again.job.solve()), 0.02)


def test_a_session_waits_when_no_node_has_room_for_its_whole_footprint():
    c = fleet(inline=False)
    for s in ("s0", "s1", "s2"):
        c.on_event(Register(s, expected_input_tokens=PROMPT), 0.0)
    assert c.on_event(Acquire("s0"), 0.0) == [Route("s0", "a")]
    assert c.on_event(Acquire("s1"), 0.0) == [Route("s1", "a")]
    assert c.on_event(Acquire("s2"), 0.0) == []  # 1,907 cells do not fit in the 123 left
    assert c.session("s2").phase is Phase.WAITING
    assert_within_capacity(c)


def test_a_cached_session_goes_to_the_node_with_its_cache_and_waits_when_that_node_is_full():
    c = fleet(nodes=("a", "b"), capacity=BIG, inline=False)
    c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0)
    c.on_event(CacheResidency("a", "s0", PROMPT), 0.0)
    assert c.on_event(Acquire("s0"), 0.0) == [Route("s0", "a")]  # b has as much room, a has the cache
    c = fleet(nodes=("a", "b"), inline=False)
    for s in ("x0", "x1", "s0"):
        c.on_event(Register(s, expected_input_tokens=PROMPT), 0.0)
        c.on_event(CacheResidency("a", s, PROMPT), 0.0)
    assert c.on_event(Acquire("x0"), 0.0) == [Route("x0", "a")]
    assert c.on_event(Acquire("x1"), 0.0) == [Route("x1", "a")]
    # a is full; b has room but not the cache: the plan decides whether s0 goes there or someone yields on a
    assert c.on_event(Acquire("s0"), 0.0) == []


def test_a_session_without_credit_goes_to_the_least_loaded_node_with_room_and_the_room_rule_to_the_most_room():
    def first_place(policy):
        c = fleet(policy, nodes=("a", "b", "c"), capacity=BIG, inline=False)
        c.on_event(NodeUpdate("a", BIG, load=NodeLoad(running=1, waiting=0)), 0.0)
        c.on_event(NodeUpdate("b", BIG, load=NodeLoad(running=3, waiting=1)), 0.0)
        c.on_event(NodeUpdate("c", BIG, load=NodeLoad(running=1, waiting=2)), 0.0)
        c.on_event(Register("held", expected_input_tokens=PROMPT), 0.0)
        c.on_event(CacheResidency("a", "held", PROMPT), 0.0)
        assert c.on_event(Acquire("held"), 0.0) == [Route("held", "a")]  # a now has the least room
        c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0)
        [route] = c.on_event(Acquire("s0"), 0.0)
        return route

    # a: 1 request and less room; b: 4; c: 3 → the least loaded, a, though b and c have more room
    assert first_place("tao") == Route("s0", "a")
    # the room rule: b and c tie on room, the higher name wins the tie
    assert first_place("tao[place=room]") == Route("s0", "c")
    with pytest.raises(ValueError, match="place"):
        make_policy("tao[place=nowhere]")


def turn(c, session, now, prompt, cached, preemptions=0, waiting=0):
    """One turn of a session holding its place on `a`: the call ends, a short tool runs, a scrape, the next call."""
    c.on_event(LlmEnd(session, "a", prompt, cached, 500), now)
    c.on_event(ToolStart(session, f"t{now}", "bash", DurationHints(timeout_s=5)), now)
    c.on_event(ToolEnd(session, f"t{now}", 0.1), now + 0.1)
    c.on_event(NodeUpdate("a", BIG, load=NodeLoad(preemptions=preemptions, waiting=waiting)), now + 0.1)
    assert c.on_event(Acquire(session), now + 0.1) == [Route(session, "a")]  # it holds its place


def kept_turns(c, count, now, prompt, **scrape):
    for _ in range(count):
        now, prompt = now + 1, prompt + 1_000
        turn(c, "s0", now, prompt, prompt - 1, **scrape)  # everything but the prompt's last token was cached
    return now, prompt


def one_session(policy="tao"):
    c = fleet(policy, capacity=BIG)
    c.on_event(Register("s0", expected_input_tokens=PROMPT), 0.0)
    c.on_event(Acquire("s0"), 0.0)
    turn(c, "s0", 1.0, PROMPT, 0)  # nothing was reserved before the first call: no evidence either way
    return c


def test_the_target_rises_while_vllm_keeps_reserved_caches_and_falls_after_a_preemption_or_an_eviction():
    c = one_session()
    assert target(c) == 0.9
    # each kept cache adds 0.02 · 0.01 / 0.99: a quantum per 50 kept caches
    now, prompt = kept_turns(c, 100, 1.0, PROMPT)
    assert target(c) == 0.92
    turn(c, "s0", now + 1, prompt + 1_000, prompt + 999, preemptions=1)  # a preemption: two quanta down
    assert target(c) == 0.90
    now, prompt = kept_turns(c, 100, now + 1, prompt + 1_000, preemptions=1)
    assert target(c) == 0.92
    turn(c, "s0", now + 1, prompt + 1_000, 4_096, preemptions=1)  # an eviction: most of the reserved cache is gone
    assert target(c) == 0.90
    turn(c, "s0", now + 2, prompt + 2_000, 0, preemptions=1)
    assert target(c) == 0.9  # never below the configured target


def test_a_queue_inside_vllm_holds_the_target_and_the_static_rule_never_moves_it():
    c = one_session()
    kept_turns(c, 200, 1.0, PROMPT, waiting=2)
    assert target(c) == 0.9
    c = one_session("tao-static-admit")
    kept_turns(c, 200, 1.0, PROMPT)
    assert target(c) is None  # the settings' target
    assert capacity_cells(c.nodes["a"], c.settings) == int(BIG * 0.9) // 16


def test_the_target_holds_while_more_waits_than_the_headroom_of_the_fleet_could_take():
    c = one_session()
    # a session larger than the last tenth of the node: raising the target would change who waits, not whether
    c.on_event(Register("q", expected_input_tokens=2 * BIG), 1.0)
    assert c.on_event(Acquire("q"), 1.0) == []
    now, prompt = kept_turns(c, 100, 1.0, PROMPT)
    assert target(c) == 0.9
    c.on_event(Close("q"), now)
    kept_turns(c, 100, now, prompt)
    assert target(c) == 0.92


class KeptRecorder(TaoPolicy):
    """TAO that remembers every reserved-cache outcome the coordinator reports."""

    def __init__(self):
        super().__init__("tao", list(make_policy("tao").values.signals), admission="adaptive")
        self.outcomes = []

    def cache_kept(self, node_id, asked_tokens, kept_tokens, now):
        self.outcomes.append((node_id, asked_tokens, kept_tokens))
        super().cache_kept(node_id, asked_tokens, kept_tokens, now)


def test_only_a_session_that_kept_its_place_since_its_last_call_reports_what_the_node_kept():
    policy = KeptRecorder()
    c = Coordinator(policy, CoreSettings(lease_ttl_s=1e6))
    c.on_event(NodeUpdate("a", 72_000), 0.0)  # 4,050 cells: s0 and s1 after their first calls, not s2 as well
    for s in ("s0", "s1"):
        c.on_event(Register(s, expected_input_tokens=PROMPT), 0.0)
        c.on_event(Acquire(s), 0.0)
    c.on_event(LlmEnd("s0", "a", PROMPT, 0, 500), 1.0)
    c.on_event(LlmEnd("s1", "a", PROMPT, 0, 500), 1.0)
    assert policy.outcomes == []  # nothing was reserved before the first calls
    c.on_event(ToolStart("s1", "t", "bash", DurationHints(sleep_s=300)), 1.0)
    c.on_event(Register("s2", expected_input_tokens=PROMPT), 1.0)
    assert c.on_event(Acquire("s2"), 1.0) == []  # no room: s2 waits
    c.on_event(ToolStart("s0", "t", "bash", DurationHints(timeout_s=5)), 1.0)
    c.on_event(ToolEnd("s0", "t", 0.5), 1.5)
    c.on_event(Acquire("s0", expected_input_tokens=31_000), 1.5)
    c.on_event(LlmEnd("s0", "a", 31_000, 30_480, 500), 2.0)
    # of 30,500 tokens of context, vLLM can hit the whole blocks before the new prompt's last token
    assert policy.outcomes == [("a", 30_496, 30_480)]
    c.on_event(ToolStart("s0", "t2", "bash", DurationHints(timeout_s=5)), 2.0)
    c.on_event(ToolEnd("s0", "t2", 0.5), 2.5)
    c.on_event(Acquire("s0"), 2.5)  # s0 stays in this call to the end
    # s1's credit has decayed during its long tool: it yields its place to the ready s2, and gets one back later
    actions = c.on_event(Tick(), 52.0)
    assert Interrupt("s1", "a") in actions and Route("s2", "a") in actions
    c.on_event(LlmEnd("s2", "a", PROMPT, 0, 500), 53.0)
    c.on_event(Close("s2"), 53.0)
    c.on_event(ToolEnd("s1", "t", 300), 301.0)
    assert c.on_event(Acquire("s1"), 301.0) == [Route("s1", "a")]
    c.on_event(LlmEnd("s1", "a", 31_000, 0, 500), 302.0)
    assert len(policy.outcomes) == 1  # s1 held no place through its tool: its cache was not vLLM's to keep


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_no_node_holders_pass_its_capacity_when_sessions_come_and_go_through_the_fast_path(seed):
    rng = random.Random(seed)
    c = fleet(nodes=("a", "b", "c"))
    live, sizes = [], {}
    for step in range(600):
        now = float(step)
        if len(live) < 12 and rng.random() < 0.3:
            session = f"s{len(sizes)}"
            sizes[session] = rng.choice((8_000, 20_000, PROMPT))
            c.on_event(Register(session, expected_input_tokens=sizes[session]), now)
            c.on_event(Acquire(session), now)
            live.append(session)
        elif live:
            session = rng.choice(live)
            state = c.session(session)
            if state.phase is Phase.IN_LLM:
                node = state.node
                # the context never outgrows the footprint admitted: prompt + completion ≤ announced + expected output
                c.on_event(LlmEnd(session, node, sizes[session] - 600, 0, 500), now)
                c.on_event(ToolStart(session, f"t{step}", "bash", DurationHints(sleep_s=rng.choice((1, 30, 120)))), now)
            elif state.phase is Phase.IN_TOOL:
                c.on_event(ToolEnd(session, state.tools[0].call_id), now)
                if rng.random() < 0.2:
                    c.on_event(Close(session), now)
                    live.remove(session)
                else:
                    c.on_event(Acquire(session), now)
        assert_within_capacity(c)
        for s in c.sessions.values():
            s.check()
    assert len(sizes) > 20


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_holders_whose_contexts_grow_never_stay_over_capacity_outside_a_call(seed):
    rng = random.Random(seed)
    c = fleet(nodes=("a", "b"))
    context = {f"s{k}": 8_000 for k in range(4)}
    for session, tokens in context.items():  # all four fit at once: nobody waits
        c.on_event(Register(session, expected_input_tokens=tokens), 0.0)
        assert c.on_event(Acquire(session), 0.0)[0] == Route(session, c.session(session).node)
    interrupted = 0
    for step in range(1, 400):
        now = float(step)
        session = rng.choice(sorted(context))
        state = c.session(session)
        if state.phase is Phase.IN_LLM:
            context[session] += rng.choice((1_000, 4_000))  # a tool's output and the answer: the context grows
            c.on_event(LlmEnd(session, state.node, context[session] - 500, 0, 500), now)
            actions = c.on_event(ToolStart(session, f"t{step}", "bash", DurationHints(sleep_s=30)), now)
            interrupted += sum(isinstance(a, Interrupt) for a in actions)
        elif state.phase is Phase.IN_TOOL and context[session] < 45_000:
            c.on_event(ToolEnd(session, state.tools[0].call_id), now)
            c.on_event(Acquire(session), now)
        used = c.used_cells()
        for node_id, node in c.nodes.items():
            if used.get(node_id, 0) > capacity_cells(node, c.settings):
                assert all(s.phase is Phase.IN_LLM for s in c.sessions.values() if s.node == node_id), (step, node_id)
    assert interrupted > 0
