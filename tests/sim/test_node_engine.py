"""NodeEngine behaviour against vLLM v1 semantics: prefix reuse, LRU eviction, preemption, head-of-line blocking,
chunked prefill, counters, rejection, abort, reset, real-time streaming."""

import pytest

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
    RequestRejected,
    StepCoefficients,
    StepTimeModel,
    profile_by_name,
)
from tao_coordinator.sim.prompt import Prompt


def tiny(num_gpu_blocks: int) -> NodeProfile:
    step = StepCoefficients(tp=1, linear_floor_s=0.02, linear_per_token_s=1e-4)
    return NodeProfile(name="tiny", step=step, num_gpu_blocks=num_gpu_blocks)


def request(request_id: str, tokens: int, runs: tuple[tuple[int, int], ...], output: int, **fields) -> NodeRequest:
    return NodeRequest(request_id, Prompt(tokens, runs), output, **fields)


def drain(engine: NodeEngine) -> list[NodeEvent]:
    events: list[NodeEvent] = []
    while (time := engine.next_event_time()) is not None:
        events += engine.advance(time)
    return events


def run(engine: NodeEngine, *arrivals: tuple[float, NodeRequest]) -> list[NodeEvent]:
    events: list[NodeEvent] = []
    for time, item in arrivals:
        events += engine.advance(time)
        engine.submit(item, time)
    return events + drain(engine)


def finished(events: list[NodeEvent]) -> dict[str, Finished]:
    return {e.request_id: e for e in events if isinstance(e, Finished)}


def test_second_turn_hits_the_shared_full_blocks_but_never_the_last_token():
    engine = NodeEngine(profile_by_name("h100-tp2"))
    turn1 = request("t1", 100, ((0, 6),), 40, session_id="s", output_block_runs=((6, 10),))
    turn2 = request("t2", 170, ((0, 8), (1000, 2)), 20, session_id="s")  # prompt + answer + 30 new tokens
    turn3 = request("t3", 160, ((0, 8), (1000, 2)), 20, session_id="s")  # 10 full blocks, all cached
    done = finished(run(engine, (0.0, turn1), (10.0, turn2), (20.0, turn3)))
    assert done["t1"].cached_tokens == 0
    assert done["t2"].cached_tokens == 8 * 16  # 6 prompt blocks + 2 blocks filled by the answer
    assert done["t3"].cached_tokens == 9 * 16  # the block holding the last prompt token is recomputed
    counters = engine.counters()
    assert counters.prefix_cache_queries == 100 + 170 + 160
    assert counters.prefix_cache_hits == 128 + 144


def test_generated_blocks_without_ids_are_cached_under_fresh_ids_nobody_hits():
    engine = NodeEngine(profile_by_name("h100-tp2"))
    events = run(engine, (0.0, request("t1", 100, ((0, 6),), 40)), (10.0, request("t2", 170, ((0, 8), (50, 2)), 5)))
    stored = [e for e in events if isinstance(e, BlockStored) and e.request_id == "t1"]
    assert stored[-1].block_runs[0][0] < 0 and stored[-1].first_block_index == 6
    assert finished(events)["t2"].cached_tokens == 6 * 16


def test_eviction_takes_the_oldest_freed_blocks_deepest_first_and_spares_a_recent_prefix():
    engine = NodeEngine(tiny(num_gpu_blocks=9))  # 8 usable blocks
    a, b = request("a", 64, ((10, 4),), 1), request("b", 64, ((20, 4),), 1)
    a_again, fresh = request("a2", 64, ((10, 4),), 1), request("c", 48, ((30, 3),), 1)
    events = run(engine, (0.0, a), (1.0, b), (2.0, a_again), (3.0, fresh))
    removed = [e.block_runs for e in events if isinstance(e, BlockRemoved)]
    assert removed == [((13, 1),), ((21, 3),)]  # a2 evicts a's deepest block itself; c evicts b but its root
    assert finished(events)["a2"].cached_tokens == 48
    cached = {first + i for first, count in engine.cached_block_runs() for i in range(count)}
    assert cached == {10, 11, 12, 13, 20, 30, 31, 32}
    assert finished(run(engine, (4.0, request("a3", 64, ((10, 4),), 1))))["a3"].cached_tokens == 48
    engine.check_invariants()


def test_preemption_requeues_the_victim_in_front_and_its_surviving_blocks_hit():
    engine = NodeEngine(tiny(num_gpu_blocks=11))  # 10 usable blocks; a and b each grow to 8
    a, b = request("a", 64, ((100, 4),), 60), request("b", 64, ((200, 4),), 60)
    c = request("c", 96, ((300, 6),), 2)  # needs 6 blocks: never fits next to a running request
    events = run(engine, (0.0, a), (0.0, b), (0.001, c))
    preempted = [e for e in events if isinstance(e, Preempted)]
    assert [(e.request_id, e.generated_tokens) for e in preempted] == [("b", 17)]
    assert engine.counters().num_preemptions == 1
    done = finished(events)
    assert sorted(done, key=lambda rid: done[rid].time) == ["a", "b", "c"]  # b went back in front of c
    assert (done["a"].num_preemptions, done["b"].num_preemptions, done["b"].completion_tokens) == (0, 1, 60)
    restored = [e for e in events if isinstance(e, BlockStored) and e.request_id == "b" and e.time > preempted[0].time]
    assert restored[0].first_block_index == 2  # a's growth evicted b's deepest blocks; 200 and 201 were hits
    assert restored[0].block_runs[0] == (202, 2)
    assert engine.counters().prefix_cache_queries == 64 + 64 + 96  # the re-admission is not counted


def test_head_of_line_blocking_under_fcfs_and_priority_lets_the_small_request_go_first():
    def scenario(policy: str) -> dict[str, Finished]:
        engine = NodeEngine(tiny(num_gpu_blocks=11), policy=policy)  # type: ignore[arg-type]
        big = request("a", 96, ((100, 6),), 40)
        blocked = request("b", 96, ((200, 6),), 2)
        small = request("c", 16, ((300, 1),), 2, priority=-1)
        return finished(run(engine, (0.0, big), (0.001, blocked), (0.002, small)))

    fcfs = scenario("fcfs")
    assert fcfs["c"].first_token_time is not None and fcfs["c"].first_token_time > fcfs["a"].time
    by_priority = scenario("priority")
    assert by_priority["c"].time < by_priority["a"].time


def test_a_long_prompt_is_prefilled_in_budget_sized_chunks():
    engine = NodeEngine(profile_by_name("h100-tp2"))
    events = run(engine, (0.0, request("long", 20_000, ((0, 1250),), 1)))
    stored = [(e.first_block_index, e.block_count) for e in events if isinstance(e, BlockStored)]
    assert stored == [(0, 512), (512, 512), (1024, 226)]  # 8192 + 8192 + 3616 tokens
    ttft = next(e.ttft for e in events if isinstance(e, FirstToken))
    assert ttft == pytest.approx(StepTimeModel(engine.profile.step).prefill_seconds(20_000), rel=1e-12)


def test_a_chunk_shares_the_budget_with_running_decodes():
    engine = NodeEngine(profile_by_name("h100-tp2"))
    events = run(engine, (0.0, request("d", 32, ((0, 2),), 200)), (0.5, request("long", 20_000, ((10_000, 1250),), 1)))
    stored = [
        (e.first_block_index, e.block_count) for e in events if isinstance(e, BlockStored) and e.request_id == "long"
    ]
    assert stored[:2] == [(0, 511), (511, 512)]  # first chunk 8191 tokens, second 8191 (slots 16382)


def test_counters_move_as_vllm_reports_them():
    engine = NodeEngine(profile_by_name("h100-tp2"))
    engine.submit(request("x", 4000, ((0, 250),), 30), 0.0)
    engine.submit(request("y", 4100, ((0, 200), (5000, 56)), 30), 0.0)
    engine.advance(0.0)
    assert (engine.counters().num_requests_running, engine.counters().num_requests_waiting) == (0, 2)
    engine.advance(engine.next_event_time() or 0.0)
    during = engine.counters()
    assert during.num_requests_running == 2 and during.kv_cache_usage_perc > 0
    drain(engine)
    after = engine.counters()
    assert (after.num_requests_running, after.kv_cache_usage_perc) == (0, 0.0)  # cached free blocks count as free
    assert after.cached_blocks == 250 + 56 + 1 + 2  # answers completed 1 (x) and 2 (y) more blocks
    assert after.prompt_tokens == 8100 and after.generation_tokens == 60
    assert (after.prefix_cache_queries, after.prefix_cache_hits) == (8100, 200 * 16)  # y hit x's first 200 blocks
    assert after.request_success == {"stop": 2, "length": 0, "abort": 0}


def test_a_request_that_can_never_fit_is_rejected_at_submit():
    engine = NodeEngine(profile_by_name("h100-tp1"))
    capacity = engine.profile.capacity_tokens
    with pytest.raises(RequestRejected, match=f"exceeds max_model_len {capacity}"):
        engine.submit(request("huge", capacity - 100, (), 101), 0.0)
    with pytest.raises(RequestRejected, match="name 3"):
        engine.submit(request("ids", 40, ((0, 3),), 1), 0.0)
    with pytest.raises(ValueError, match="output_tokens"):
        request("empty", 40, (), 0)
    engine.submit(request("exact", capacity - 100, (), 100), 0.0)  # fills the node to the last slot
    assert finished(drain(engine))["exact"].completion_tokens == 100
    with pytest.raises(RequestRejected, match="already live"):
        engine.submit(request("dup", 10, (), 5), 1000.0)
        engine.submit(request("dup", 10, (), 5), 1000.0)


def test_abort_takes_effect_at_the_next_step_boundary_and_frees_the_blocks():
    engine = NodeEngine(profile_by_name("h100-tp2"))
    engine.submit(request("r", 2048, ((0, 128),), 500), 0.0)
    engine.submit(request("w", 64, ((900, 4),), 5), 0.0)
    engine.advance(1.0)
    assert engine.abort("r", 1.0) and not engine.abort("nobody", 1.0)
    events = drain(engine)
    aborted = finished(events)["r"]
    assert aborted.reason == "abort" and aborted.time > 1.0 and 0 < aborted.completion_tokens < 500
    assert engine.counters().request_success["abort"] == 1 and engine.counters().kv_cache_usage_perc == 0.0
    with pytest.raises(KeyError, match="not live"):
        engine.generated_tokens("r")


def test_reset_prefix_cache_is_refused_while_busy_then_clears_everything():
    engine = NodeEngine(profile_by_name("h100-tp2"))
    engine.submit(request("a", 1600, ((0, 100),), 10), 0.0)
    assert not engine.reset_prefix_cache(0.01)
    drain(engine)
    assert engine.reset_prefix_cache(100.0)
    assert any(isinstance(e, AllBlocksCleared) for e in engine.advance(100.0))
    assert finished(run(engine, (101.0, request("b", 1600, ((0, 100),), 10))))["b"].cached_tokens == 0


def test_a_real_time_driver_streams_tokens_progressively_with_the_same_outcome():
    def submit_both(engine: NodeEngine) -> None:
        engine.submit(request("a", 3000, ((0, 187),), 120), 0.0)
        engine.submit(request("b", 1000, ((0, 62),), 80), 0.0)

    reference = NodeEngine(profile_by_name("h100-tp4"))
    submit_both(reference)
    expected = finished(drain(reference))
    engine = NodeEngine(profile_by_name("h100-tp4"))
    submit_both(engine)
    seen, events, now = [], [], 0.0
    while engine.is_live("a"):
        now += 0.01
        events += engine.advance(now)
        if engine.is_live("a"):
            seen.append(engine.generated_tokens("a"))
    assert seen == sorted(seen) and len(set(seen)) > 50  # tokens arrive a few per tick, not all at the end
    got = finished(events + drain(engine))
    assert got.keys() == expected.keys()
    for request_id, done in expected.items():
        assert got[request_id].time == pytest.approx(done.time, abs=1e-9)


def test_kv_events_after_a_preemption_never_repeat_a_block():
    # a commit that spans two adjacent runs of one sequence (prompt then output, re-prefilled after a preemption)
    # once made the block table merge into the very pieces the KV-event log was about to publish
    from tao_coordinator.sim.node import StepCoefficients, cacheable_blocks

    step = StepCoefficients(tp=1, linear_floor_s=0.01, linear_per_token_s=0.0001)
    engine = NodeEngine(NodeProfile(name="t", step=step, num_gpu_blocks=74))
    next_id = 0
    for i, (prompt, output, at) in enumerate(
        [
            (157, 283, 3.4275),
            (25, 149, 3.4720),
            (203, 253, 3.5095),
            (96, 73, 3.5925),
            (283, 309, 3.6389),
            (125, 73, 3.6536),
        ]
    ):
        blocks, full = cacheable_blocks(prompt, output), prompt // 16
        runs = ((next_id + full, blocks - full),)
        engine.submit(NodeRequest(f"r{i}", Prompt(prompt, ((next_id, full),)), output, output_block_runs=runs), at)
        next_id += blocks
    events = 0
    while (t := engine.next_event_time()) is not None:
        for event in engine.advance(t):
            if isinstance(event, BlockStored):
                ids = [b for first, n in event.block_runs for b in range(first, first + n)]
                assert len(ids) == len(set(ids)) == event.block_count, event
                events += 1
    assert events > 6
