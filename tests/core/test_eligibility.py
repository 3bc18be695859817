"""Eligibility against a real coordinator: every decision that puts a session or a call on a node — the plan, fast
admission, the refusal retry and every baseline — keeps to nodes serving its model; side calls go to nodes serving
theirs without moving the session's place; a model no healthy node serves is refused; unknown lists change nothing."""

import pytest

from tao_coordinator.core.actions import Admit, Route
from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.errors import ModelNotServed
from tao_coordinator.core.events import Acquire, LlmEnd, NodeUpdate, Register, Tick, ToolEnd, ToolStart
from tao_coordinator.core.model import AgentProfile, NodeLoad, Phase
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.policies.registry import POLICIES
from tao_coordinator.core.settings import CoreSettings

LARGE, SMALL = "org/large", "org/small"
FLEET = {"large-0": LARGE, "large-1": LARGE, "small-0": SMALL, "small-1": SMALL}


def fleet(policy: str = "tao", models: dict[str, str] | None = None, capacity: int = 400_000) -> Coordinator:
    coordinator = Coordinator(make_policy(policy), CoreSettings(lease_ttl_s=1e6))
    for node, model in (FLEET if models is None else models).items():
        # the small-model nodes are the emptiest and least loaded: a rule blind to models would pick them first
        load = NodeLoad(running=0 if model == SMALL else 3)
        coordinator.on_event(
            NodeUpdate(node, capacity * (2 if model == SMALL else 1), load=load, models=frozenset({model})), 0.0
        )
    return coordinator


def register(coordinator: Coordinator, session_id: str, model: str = LARGE, now: float = 0.0) -> None:
    coordinator.on_event(Register(session_id, AgentProfile(model=model), expected_input_tokens=20_000), now)


def placed_nodes(actions: list) -> list[str]:
    return [action.node for action in actions if isinstance(action, Admit | Route) and not getattr(action, "side", 0)]


def drive(coordinator: Coordinator, sessions: list[str], rounds: int = 4) -> list[str]:
    """Every session calls, runs a tool, calls again, `rounds` times; the nodes every admission and route named."""
    seen: list[str] = []
    now = 0.0
    for r in range(rounds):
        for session_id in sessions:
            now += 0.1
            seen += placed_nodes(coordinator.on_event(Acquire(session_id, 20_000 + 1_000 * r), now))
        for session_id in sessions:
            now += 0.1
            session = coordinator.session(session_id)
            if session.phase is Phase.IN_LLM:
                assert session.node is not None
                seen += placed_nodes(coordinator.on_event(LlmEnd(session_id, session.node, 20_000, 0, 200), now))
                seen += placed_nodes(coordinator.on_event(ToolStart(session_id, f"t{r}", "bash"), now))
        now += 2.0
        seen += placed_nodes(coordinator.on_event(Tick(), now))
        for session_id in sessions:
            if coordinator.session(session_id).phase is Phase.IN_TOOL:
                now += 0.1
                seen += placed_nodes(coordinator.on_event(ToolEnd(session_id, f"t{r}"), now))
    return seen


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_places_sessions_only_on_nodes_serving_their_model(policy):
    coordinator = fleet(policy)
    large = [f"l{i}" for i in range(6)]
    small = [f"s{i}" for i in range(3)]
    for session_id in large:
        register(coordinator, session_id, LARGE)
    for session_id in small:
        register(coordinator, session_id, SMALL)
    seen = drive(coordinator, large + small)
    assert seen, "premise: the policy placed something"
    for session_id in large + small:
        session = coordinator.session(session_id)
        if session.node is not None:
            assert FLEET[session.node] == session.context.model, (session_id, session.node)
    assert set(seen) <= set(FLEET)
    large_nodes = {n for n in seen if FLEET[n] == LARGE}
    assert large_nodes, "premise: sessions of the large model were placed"


@pytest.mark.parametrize("policy", ["tao", "tao-static-admit", "round-robin", "least-loaded"])
def test_the_first_call_that_names_a_model_gives_an_unregistered_model_session_its_place(policy):
    coordinator = fleet(policy)
    coordinator.on_event(Register("s", expected_input_tokens=1_000), 0.0)
    coordinator.on_event(Acquire("s", model=SMALL), 0.1)
    coordinator.on_event(Tick(), 0.2)
    session = coordinator.session("s")
    assert session.model == SMALL
    assert session.node is not None and FLEET[session.node] == SMALL


def test_a_side_call_goes_to_a_node_serving_its_model_and_leaves_the_sessions_place_alone():
    coordinator = fleet("tao")
    register(coordinator, "s")
    [route] = coordinator.on_event(Acquire("s", 20_000), 0.1)
    assert isinstance(route, Route) and FLEET[route.node] == LARGE
    home = route.node
    # a side call while the main call runs, and another while the session is in a tool
    [side] = coordinator.on_event(Acquire("s", 500, model=SMALL), 0.2)
    assert side.side and FLEET[side.node] == SMALL
    before = coordinator.session("s")
    assert before.phase is Phase.IN_LLM and before.node == home and before.llm_calls == 1
    assert coordinator.on_event(LlmEnd("s", side.node, 500, 0, 20), 0.3) == []
    assert coordinator.session("s").phase is Phase.IN_LLM  # the side call's end is not the main call's
    coordinator.on_event(LlmEnd("s", home, 20_000, 0, 200), 0.4)
    coordinator.on_event(ToolStart("s", "t", "bash"), 0.5)
    [side] = coordinator.on_event(Acquire("s", 500, model=SMALL), 0.6)
    assert side.side and FLEET[side.node] == SMALL
    coordinator.on_event(LlmEnd("s", side.node, 500, 0, 20), 0.7)
    after = coordinator.session("s")
    assert after.phase is Phase.IN_TOOL and after.node == home and after.context.model == LARGE


def test_side_calls_go_to_the_least_busy_serving_node_counting_those_in_flight_then_the_most_room():
    coordinator = fleet("tao")
    register(coordinator, "s0", SMALL)
    [held] = coordinator.on_event(Acquire("s0", 20_000), 0.1)  # a session of the small model holds room on one
    register(coordinator, "main")
    coordinator.on_event(Acquire("main", 20_000), 0.2)
    other = next(n for n in FLEET if FLEET[n] == SMALL and n != held.node)
    [first] = coordinator.on_event(Acquire("main", 500, model=SMALL), 0.3)
    assert first.node == other  # equal load: the most room
    [second] = coordinator.on_event(Acquire("main", 500, model=SMALL), 0.4)
    assert second.node == held.node  # the first is still in flight there
    coordinator.on_event(NodeUpdate(held.node, 800_000, load=NodeLoad(running=5), models=frozenset({SMALL})), 0.5)
    coordinator.on_event(LlmEnd("main", first.node, 500, 0, 2), 0.6)
    coordinator.on_event(LlmEnd("main", second.node, 500, 0, 2), 0.7)
    [third] = coordinator.on_event(Acquire("main", 500, model=SMALL), 0.8)
    assert third.node == other  # the other one is busy now


def test_a_model_no_healthy_node_serves_is_refused_and_nothing_changes():
    coordinator = fleet("tao")
    register(coordinator, "s")
    before = coordinator.session("s")
    with pytest.raises(ModelNotServed, match="org/unknown"):
        coordinator.on_event(Acquire("s", 1_000, model="org/unknown"), 0.1)
    assert coordinator.session("s") is before
    register(coordinator, "t")
    coordinator.on_event(Acquire("t", 1_000), 0.1)
    with pytest.raises(ModelNotServed, match="org/other"):
        coordinator.on_event(Acquire("t", 1_000, model="org/other"), 0.2)  # a side call of a model nobody serves


def test_a_refused_call_is_retried_only_on_another_node_serving_its_model():
    coordinator = fleet("tao")
    register(coordinator, "s")
    [route] = coordinator.on_event(Acquire("s", 20_000), 0.1)
    coordinator.on_event(LlmEnd("s", route.node, refused=True, error="503"), 0.2)
    [retry] = coordinator.on_event(Acquire("s", 20_000, avoid_nodes=(route.node,)), 0.3)
    assert retry.node != route.node and FLEET[retry.node] == LARGE


def test_nodes_whose_models_are_unknown_serve_every_model_and_an_update_without_models_keeps_them():
    coordinator = Coordinator(make_policy("tao"), CoreSettings(lease_ttl_s=1e6))
    coordinator.on_event(NodeUpdate("a", 400_000), 0.0)
    register(coordinator, "s", "anything")
    [route] = coordinator.on_event(Acquire("s", 1_000), 0.1)
    assert route.node == "a"
    coordinator.on_event(NodeUpdate("b", 400_000, models=frozenset({LARGE})), 0.2)
    coordinator.on_event(NodeUpdate("b", 400_000), 0.3)
    assert coordinator.nodes["b"].models == frozenset({LARGE})


def test_a_holder_whose_node_stops_serving_its_model_is_moved_by_the_next_plan():
    coordinator = fleet("tao", {"large-0": LARGE, "large-1": LARGE})
    register(coordinator, "s")
    [route] = coordinator.on_event(Acquire("s", 20_000), 0.1)
    coordinator.on_event(LlmEnd("s", route.node, 20_000, 0, 200), 0.2)
    coordinator.on_event(ToolStart("s", "t", "bash"), 0.3)
    assert coordinator.session("s").node == route.node
    coordinator.on_event(NodeUpdate(route.node, 400_000, load=NodeLoad(running=3), models=frozenset({SMALL})), 0.4)
    assert coordinator.session("s").node in (None, *(n for n in ("large-0", "large-1") if n != route.node))


def test_a_registration_label_no_node_serves_constrains_nothing_and_the_first_named_model_becomes_the_main_one():
    coordinator = fleet("tao")
    register(coordinator, "s", "claude-sonnet")  # the harness's own name for its model
    [route] = coordinator.on_event(Acquire("s", 20_000), 0.1)  # names no model: any node
    coordinator.on_event(LlmEnd("s", route.node, 20_000, 0, 200), 0.2)
    [route] = coordinator.on_event(Acquire("s", 20_000, model=LARGE), 0.3)
    assert FLEET[route.node] == LARGE and not route.side
    assert coordinator.session("s").model == LARGE
    coordinator.on_event(LlmEnd("s", route.node, 20_000, 0, 200), 0.4)
    [side] = coordinator.on_event(Acquire("s", 500, model=SMALL), 0.5)
    assert side.side and FLEET[side.node] == SMALL


def test_a_holder_on_a_node_that_does_not_serve_the_model_its_call_names_is_moved_with_the_call():
    coordinator = fleet("tao")
    register(coordinator, "s", "")
    coordinator.on_event(NodeUpdate("small-0", 10_000_000, models=frozenset({SMALL})), 0.0)  # by far the emptiest
    [route] = coordinator.on_event(Acquire("s", 20_000), 0.1)
    coordinator.on_event(LlmEnd("s", route.node, 20_000, 0, 200), 0.2)
    [route] = coordinator.on_event(Acquire("s", 20_000, model=LARGE), 0.3)
    assert FLEET[route.node] == LARGE
    assert coordinator.session("s").node == route.node


@pytest.mark.parametrize("policy", ["tao", "tao-static-admit"])
def test_a_session_larger_than_its_models_nodes_is_charged_their_capacity_not_a_larger_node_of_another_model(policy):
    """Charged the capacity of the largest node serving its model: the small-model node's larger capacity would
    leave a session between the two sizes fitting nowhere it may go, waiting for ever."""
    coordinator = fleet(policy, {"large-0": LARGE, "small-0": SMALL}, capacity=100_000)
    coordinator.on_event(Register("big", AgentProfile(model=LARGE), expected_input_tokens=95_000), 0.0)
    actions = coordinator.on_event(Acquire("big", 95_000, model=LARGE), 0.1)
    actions += coordinator.on_event(Tick(), 0.2)
    session = coordinator.session("big")
    assert (session.phase, session.node) == (Phase.IN_LLM, "large-0"), actions
