"""Token time: a waiting session's next call priced by the KV token-time it would hold on each node."""

import math
from dataclasses import replace

import pytest

from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import Acquire, EngineCounters, NodeUpdate, Register
from tao_coordinator.core.model import AgentProfile, AgentSession, Node, Phase
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals import SignalContext, TokenTime
from tao_coordinator.core.signals.token_time import HALVING_UNITS, call_token_steps, coarse_step_s

SETTINGS = CoreSettings()


def waiting(context_tokens: int, calls: int = 1, output_per_call: int = 100, **changes: object) -> AgentSession:
    session = AgentSession(
        id="s",
        context=AgentProfile(),
        registered_at=0.0,
        lease_expires_at=1e9,
        phase=Phase.WAITING,
        context_tokens=context_tokens,
        completed_calls=calls,
        output_tokens_total=calls * output_per_call,
    )
    return replace(session, **changes)


def values(session: AgentSession, **steps: float) -> dict[str, int]:
    nodes = {name: Node(name, 100_000, decode_step_s=step) for name, step in steps.items()}
    return dict(TokenTime().on_nodes(session, SignalContext(0.0, SETTINGS, nodes)))


def test_a_call_holds_its_prompt_and_half_its_decode_through_every_step() -> None:
    # p·d + d²/2: 10,000 tokens of context decoding 100 tokens
    assert call_token_steps(waiting(10_000), SETTINGS) == 10_000 * 100 + 100 * 100 / 2
    fresh = waiting(0, calls=0)
    expected = SETTINGS.default_output_tokens
    assert call_token_steps(fresh, SETTINGS) == SETTINGS.default_session_tokens * expected + expected**2 / 2
    announced = waiting(1_000, expected_input_tokens=5_000)  # the acquire announced a longer prompt
    assert call_token_steps(announced, SETTINGS) == 5_000 * 100 + 100 * 100 / 2


def test_the_faster_node_is_worth_more_by_levels_per_halving() -> None:
    got = values(waiting(10_000), fast=0.02, slow=0.04, unmeasured=0.0)
    assert set(got) == {"fast", "slow"}  # a node whose steps are not measured yet prices nothing
    assert got["fast"] - got["slow"] == HALVING_UNITS


def test_a_shorter_call_is_worth_more_on_the_same_node() -> None:
    short, long = values(waiting(5_000), a=0.03)["a"], values(waiting(20_000), a=0.03)["a"]
    assert short > long
    # a quarter of the memory-time (about: the d²/2 term is small here) is two halvings
    assert short - long in (2 * HALVING_UNITS - 1, 2 * HALVING_UNITS, 2 * HALVING_UNITS + 1)


@pytest.mark.parametrize(
    "changes",
    [{"node": "a"}, {"phase": Phase.IN_TOOL}, {"phase": Phase.IN_LLM}, {"phase": Phase.ADMITTED}],
    ids=["holder", "in-tool", "in-call", "admitted"],
)
def test_only_a_session_that_asks_for_a_call_without_a_place_is_priced(changes: dict[str, object]) -> None:
    assert values(waiting(10_000, **changes), a=0.03) == {}


def test_the_step_is_coarse_so_that_values_are_not_recomputed_at_every_scrape() -> None:
    assert coarse_step_s(0.0) == 0.0
    assert coarse_step_s(0.0300) == coarse_step_s(0.0301)
    assert coarse_step_s(0.03) == pytest.approx(0.03, rel=2 ** (1 / (2 * HALVING_UNITS)) - 1)
    assert math.log2(coarse_step_s(0.03)) * HALVING_UNITS == pytest.approx(round(math.log2(0.03) * HALVING_UNITS))


def measured(core: Coordinator, node: str, step_s: float) -> None:
    """Two scrapes of `node` whose counters say its decode steps took `step_s` each."""
    core.on_event(NodeUpdate(node, 200_000, counters=EngineCounters()), 0.0)
    decode = EngineCounters(decode_tokens=1_000, decode_seconds=1_000 * step_s)
    core.on_event(NodeUpdate(node, 200_000, counters=decode), 1.0)


def test_tao_plans_new_sessions_onto_the_node_whose_steps_are_faster() -> None:
    core = Coordinator(make_policy("tao"), SETTINGS, inline_planning=True)
    measured(core, "a", 0.08)  # first by name: where a tie would go
    measured(core, "b", 0.02)
    assert core.nodes["b"].decode_step_s == coarse_step_s(0.02)
    for k in range(4):
        core.on_event(Register(f"s{k}", AgentProfile()), 2.0)
        core.on_event(Acquire(f"s{k}", 5_000), 2.0)
    assert [core.sessions[f"s{k}"].node for k in range(4)] == ["b"] * 4
    assert core.plan_stats.placements_applied == 4  # placed by plans, not by fast admission
