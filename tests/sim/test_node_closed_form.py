"""Properties on random small nodes and workloads: closed-form decode stretches reproduce step-by-step scheduling,
KV events describe the cache exactly, and how a driver slices time does not change the outcome."""

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tao_coordinator.sim.node import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Finished,
    FirstToken,
    NodeEngine,
    NodeEvent,
    NodeProfile,
    NodeRequest,
    Preempted,
    StepCoefficients,
)
from tao_coordinator.sim.prompt import Prompt

BLOCK = 4


@dataclass(frozen=True)
class Case:
    profile: NodeProfile
    policy: str
    arrivals: tuple[tuple[float, NodeRequest], ...]
    aborts: tuple[tuple[float, str], ...] = ()


@st.composite
def cases(draw) -> Case:
    blocks = draw(st.integers(8, 40))
    step = StepCoefficients(tp=draw(st.sampled_from((1, 2))), linear_floor_s=0.01, linear_per_token_s=2e-4)
    profile = NodeProfile(
        name="random",
        step=step,
        num_gpu_blocks=blocks,
        block_size=BLOCK,
        max_num_batched_tokens=draw(st.integers(4, 48)),
        max_num_seqs=draw(st.integers(1, 5)),
    )
    capacity = profile.capacity_tokens
    arrivals = []
    time = 0.0
    for index in range(draw(st.integers(1, 9))):
        time += draw(st.floats(0.0, 0.3))
        total = draw(st.integers(2, capacity))
        prompt_tokens = draw(st.integers(1, total - 1))
        family, shared = draw(st.integers(0, 2)), draw(st.integers(0, prompt_tokens // BLOCK))
        runs = tuple(
            r for r in ((family * 1000, shared), (10_000 + index * 1000, prompt_tokens // BLOCK - shared)) if r[1]
        )
        item = NodeRequest(
            f"r{index}", Prompt(prompt_tokens, runs), total - prompt_tokens, priority=draw(st.integers(0, 2))
        )
        arrivals.append((time, item))
    aborts = tuple((t + draw(st.floats(0.0, 1.0)), r.request_id) for t, r in arrivals if draw(st.booleans()))
    return Case(profile, draw(st.sampled_from(("fcfs", "priority"))), tuple(arrivals), aborts)


def replay(case: Case, closed_form: bool, extra_ticks: tuple[float, ...] = ()) -> tuple[NodeEngine, list[NodeEvent]]:
    engine = NodeEngine(case.profile, policy=case.policy, closed_form_decode=closed_form)  # type: ignore[arg-type]
    events: list[NodeEvent] = []
    moments = [(t, 0, item) for t, item in case.arrivals] + [(t, 1, rid) for t, rid in case.aborts]
    for time, _, what in sorted(moments + [(t, 2, None) for t in extra_ticks], key=lambda m: m[:2]):
        events += engine.advance(time)
        if isinstance(what, NodeRequest):
            engine.submit(what, time)
        elif what is not None:
            engine.abort(what, time)
    while (wake := engine.next_event_time()) is not None:
        events += engine.advance(wake)
    return engine, events


def milestones(events: list[NodeEvent]) -> list[tuple[str, str, tuple[int, ...]]]:
    facts: list[tuple[str, str, tuple[int, ...]]] = []
    for event in events:
        if isinstance(event, Finished):
            details = (event.cached_tokens, event.completion_tokens, event.num_preemptions)
            facts.append((f"finished:{event.reason}", event.request_id, details))
        elif isinstance(event, Preempted):
            facts.append(("preempted", event.request_id, (event.generated_tokens,)))
        elif isinstance(event, FirstToken):
            facts.append(("first", event.request_id, ()))
    return facts


def times(events: list[NodeEvent]) -> list[float]:
    return [e.time for e in events if isinstance(e, Finished | Preempted | FirstToken)]


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_closed_form_decode_matches_stepping_one_step_at_a_time(case):
    stepped_engine, stepped = replay(case, closed_form=False)
    jumped_engine, jumped = replay(case, closed_form=True)
    assert milestones(jumped) == milestones(stepped)
    assert times(jumped) == pytest.approx(times(stepped), rel=1e-9, abs=1e-9)
    assert jumped_engine.counters() == stepped_engine.counters()
    assert sum(fact[0].startswith("finished") for fact in milestones(jumped)) == len(case.arrivals)
    jumped_engine.check_invariants()


@SETTINGS
@given(cases(), st.lists(st.floats(0.0, 3.0), max_size=30))
def test_slicing_time_differently_changes_nothing(case, ticks):
    _, reference = replay(case, closed_form=True)
    _, sliced = replay(case, closed_form=True, extra_ticks=tuple(ticks))
    assert milestones(sliced) == milestones(reference)
    assert times(sliced) == pytest.approx(times(reference), rel=1e-9, abs=1e-9)


@SETTINGS
@given(cases())
def test_kv_events_mirror_the_prefix_cache(case):
    engine, events = replay(case, closed_form=True)
    assert [e.time for e in events] == sorted(e.time for e in events)
    resident: set[int] = set()
    for event in events:
        if isinstance(event, BlockStored):
            ids = {first + i for first, count in event.block_runs for i in range(count)}
            assert not ids & resident, "a block was stored twice without being removed"
            resident |= ids
        elif isinstance(event, BlockRemoved):
            ids = {first + i for first, count in event.block_runs for i in range(count)}
            assert ids <= resident, "a block was removed that was never stored"
            resident -= ids
        elif isinstance(event, AllBlocksCleared):
            resident.clear()
    assert resident == {first + i for first, count in engine.cached_block_runs() for i in range(count)}
