"""The CPU KV tier of the node model (vLLM 0.33 native offloading), driven through the real engine."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tao_coordinator.sim.node import (
    BlockRemoved,
    BlockStored,
    Finished,
    FirstToken,
    NodeEngine,
    NodeEvent,
    NodeProfile,
    NodeRequest,
    StepCoefficients,
    profile_from_mapping,
)
from tao_coordinator.sim.node.cpu_tier import CpuTier
from tao_coordinator.sim.node.profile import with_cpu_tier
from tao_coordinator.sim.node.step_time import StepTimeModel
from tao_coordinator.sim.prompt import Prompt

STEP = StepCoefficients(tp=1, linear_floor_s=0.0234, linear_per_token_s=0.099e-3)
BLOCK_BYTES = 16 * STEP.kv_bytes_per_token


def profile(gpu_blocks: int = 65, cpu_blocks: int | None = 128, link: float = 50e9) -> NodeProfile:
    tier = None if cpu_blocks is None else CpuTier(cpu_blocks, link)
    return NodeProfile("small", STEP, num_gpu_blocks=gpu_blocks, cpu_tier=tier)


def request(rid: str, first_id: int, blocks: int, output: int = 1) -> NodeRequest:
    return NodeRequest(rid, Prompt(blocks * 16, ((first_id, blocks),)), output)


def run(engine: NodeEngine, *requests: NodeRequest) -> list[NodeEvent]:
    """Submit `requests` at the engine's current time and run until idle, checking invariants at every event."""
    for item in requests:
        engine.submit(item, engine.now)
    events: list[NodeEvent] = []
    while (wake := engine.next_event_time()) is not None:
        events += engine.advance(wake)
        engine.check_invariants()
    return events


def merged(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, count in sorted(runs):
        if out and out[-1][0] + out[-1][1] == first:
            out[-1] = (out[-1][0], out[-1][1] + count)
        else:
            out.append((first, count))
    return out


def ttft(events: list[NodeEvent], rid: str) -> float:
    return next(e.ttft for e in events if isinstance(e, FirstToken) and e.request_id == rid)


def finished(events: list[NodeEvent], rid: str) -> Finished:
    return next(e for e in events if isinstance(e, Finished) and e.request_id == rid)


def test_a_prefix_evicted_from_hbm_is_loaded_from_cpu_between_a_gpu_hit_and_a_recompute():
    def third_turn(cpu_blocks: int | None, flush: bool) -> tuple[NodeEngine, list[NodeEvent]]:
        engine = NodeEngine(profile(cpu_blocks=cpu_blocks))
        run(engine, request("a", 0, 32))
        if flush:
            run(engine, request("flush", 1000, 60))  # 60 of 64 GPU blocks: all but 4 of a's blocks are evicted
        before = engine.counters()
        return engine, [before, *run(engine, request("again", 0, 32))]  # type: ignore[list-item]

    engine, (before, *events) = third_turn(128, flush=True)
    _, (_, *gpu_events) = third_turn(128, flush=False)
    _, (_, *recompute_events) = third_turn(None, flush=True)
    assert ttft(gpu_events, "again") < ttft(events, "again") < ttft(recompute_events, "again")

    after = engine.counters()
    gpu_hit, loaded = 4 * 16, 28 * 16
    assert finished(events, "again").cached_tokens == 32 * 16  # a CPU hit may cover the whole prompt
    assert finished(recompute_events, "again").cached_tokens == gpu_hit
    assert after.prefix_cache_hits - before.prefix_cache_hits == gpu_hit
    assert after.external_prefix_cache_queries - before.external_prefix_cache_queries == 32 * 16 - gpu_hit
    assert after.external_prefix_cache_hits - before.external_prefix_cache_hits == loaded
    assert after.prompt_tokens_cached_by_source["host"] - before.prompt_tokens_cached_by_source["host"] == loaded
    by_source, was = after.prompt_tokens_by_source, before.prompt_tokens_by_source
    assert by_source["external_kv_transfer"] - was["external_kv_transfer"] == loaded
    assert by_source["local_cache_hit"] - was["local_cache_hit"] == gpu_hit
    assert by_source["local_compute"] - was["local_compute"] == 0
    assert after.kv_offload_load_bytes - before.kv_offload_load_bytes == 28 * BLOCK_BYTES
    assert after.kv_offload_load_seconds - before.kv_offload_load_seconds == pytest.approx(28 * BLOCK_BYTES / 50e9)
    assert after.num_requests_kv_fetch == 0 and after.cpu_kv_blocks == 128
    # the loaded blocks join the GPU prefix cache; the CPU copies were not offered again
    stored = [e for e in events if isinstance(e, BlockStored)]
    assert [(e.medium, e.block_runs, e.first_block_index, e.parent_block_id) for e in stored] == [
        ("GPU", ((4, 28),), 4, 3)
    ]
    assert (0, 32) in merged(engine.cached_block_runs())


def test_stores_are_write_through_prompt_only_and_deduplicated():
    engine = NodeEngine(profile())
    events = run(engine, request("a", 0, 32, output=40))
    cpu = [e for e in events if isinstance(e, BlockStored) and e.medium == "CPU"]
    assert [(e.block_runs, e.first_block_index, e.request_id) for e in cpu] == [(((0, 32),), 0, "a")]
    gpu = [e for e in events if isinstance(e, BlockStored) and e.medium == "GPU"]
    assert sum(e.block_count for e in gpu) == (32 * 16 + 40 - 1) // 16  # decode blocks reach the GPU cache only
    assert engine.counters().kv_offload_store_bytes == 32 * BLOCK_BYTES
    again = run(engine, request("b", 0, 32))  # a GPU hit: offered again, already in the CPU pool
    assert not [e for e in again if isinstance(e, BlockStored) and e.medium == "CPU"]
    assert engine.counters().kv_offload_store_bytes == 32 * BLOCK_BYTES


def test_cpu_pool_evicts_least_recently_used_tail_first_and_reports_cpu_removals():
    engine = NodeEngine(profile(gpu_blocks=200, cpu_blocks=64))
    run(engine, request("a", 0, 32), request("b", 100, 32))
    run(engine, request("a-again", 0, 32))  # a GPU hit refreshes a's CPU copy: b is now the oldest
    events = run(engine, request("c", 200, 32))
    removed = [e for e in events if isinstance(e, BlockRemoved)]
    assert [(e.medium, e.block_runs) for e in removed] == [("CPU", ((100, 32),))]
    assert merged(engine.cpu_block_runs()) == [(0, 32), (200, 32)]
    events = run(engine, request("d", 300, 16))
    removed_runs = [run for e in events if isinstance(e, BlockRemoved) for run in e.block_runs]
    assert merged(removed_runs) == [(16, 16)]  # a is older than c; its deepest blocks go first
    assert engine.counters().cpu_cached_blocks == 64


def _loads_after_gpu_reset(n: int, link: float) -> list[NodeEvent]:
    engine = NodeEngine(profile(gpu_blocks=34 * n + 1, cpu_blocks=32 * n, link=link))
    for i in range(n):
        run(engine, request(f"p{i}", 1000 * i, 32))
    assert engine.reset_prefix_cache(engine.now)  # the GPU forgets, the CPU keeps every prefix
    assert engine.counters().cpu_cached_blocks == 32 * n
    return run(engine, *[request(f"q{i}", 1000 * i, 32) for i in range(n)])


def test_concurrent_loads_share_the_link_one_after_another():
    link = 1e9  # a slow link, so loads dominate the one-token step that follows each
    load_s = 32 * BLOCK_BYTES / link
    events = _loads_after_gpu_reset(4, link)
    one_token_step = StepTimeModel(STEP).step_seconds(1, prefill_token_pairs=511.5)
    ttfts = [ttft(events, f"q{i}") for i in range(4)]
    assert ttfts == pytest.approx([(i + 1) * load_s + one_token_step for i in range(4)], rel=1e-6)
    assert ttfts[3] - one_token_step == pytest.approx(4 * (ttfts[0] - one_token_step))


def test_with_enough_loads_in_flight_a_load_is_slower_than_recomputing():
    recompute = StepTimeModel(STEP).prefill_seconds(32 * 16)
    load_s = 32 * BLOCK_BYTES / 50e9
    assert load_s < recompute / 10  # alone, a load is an order of magnitude faster
    n = int(recompute / load_s) + 4
    events = _loads_after_gpu_reset(n, 50e9)
    assert ttft(events, "q0") < recompute < ttft(events, f"q{n - 1}")


def test_reset_prefix_cache_keeps_the_cpu_tier_unless_external_is_reset():
    engine = NodeEngine(profile())
    run(engine, request("a", 0, 32))
    assert engine.reset_prefix_cache(engine.now)
    assert merged(engine.cpu_block_runs()) == [(0, 32)]
    assert engine.reset_prefix_cache(engine.now, reset_external=True)
    assert engine.cpu_block_runs() == [] and engine.cached_block_runs() == []
    events = engine.advance(engine.now)
    assert [type(e).__name__ for e in events] == ["AllBlocksCleared", "AllBlocksCleared"]


def test_without_a_tier_nothing_is_offloaded_and_events_stay_gpu():
    engine = NodeEngine(profile(cpu_blocks=None))
    events = run(engine, request("a", 0, 32, output=8), request("flush", 1000, 60), request("b", 0, 32))
    counters = engine.counters()
    assert counters.external_prefix_cache_queries == counters.kv_offload_load_bytes == counters.cpu_kv_blocks == 0
    assert counters.kv_offload_store_bytes == counters.num_requests_kv_fetch == 0
    assert counters.prompt_tokens_cached_by_source == {"device": counters.prefix_cache_hits, "host": 0}
    assert counters.inter_tokens == 7 and counters.inter_token_seconds > 0 and counters.request_prefill_seconds > 0
    assert {e.medium for e in events if isinstance(e, BlockStored | BlockRemoved)} == {"GPU"}
    assert engine.cpu_block_runs() == []


def test_cpu_tier_sizing_and_mapping():
    from tao_coordinator.sim.node import profile_by_name

    tp4 = profile_by_name("h100-tp4")
    tiered = with_cpu_tier(tp4, 256)
    assert tiered.cpu_tier == CpuTier(num_blocks=65536)  # 256 GiB / (16 tokens × 256 KiB)
    assert tp4.cpu_tier is None and tiered.num_gpu_blocks == tp4.num_gpu_blocks
    table = {"step": {"tp": 2, "linear_floor_s": 0.01, "linear_per_token_s": 5e-5}, "num_gpu_blocks": 1000}
    mapped = profile_from_mapping("x", {**table, "cpu_tier": {"cpu_kv_gib": 4, "link_bytes_per_s": 25e9}})
    assert mapped.cpu_tier == CpuTier(1024, 25e9)
    with pytest.raises(ValueError):
        profile_from_mapping("x", {**table, "cpu_tier": {"cpu_kv_gib": 4, "num_blocks": 3}})
    with pytest.raises(TypeError):
        profile_from_mapping("x", {**table, "cpu_tier": {"size": 4}})


@st.composite
def workloads(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    prefixes = [(rng.randrange(10) * 1000, rng.randint(1, 12)) for _ in range(4)]
    arrivals = []
    time = 0.0
    for index in range(draw(st.integers(1, 14))):
        time += rng.expovariate(20)
        base, blocks = rng.choice(prefixes)
        extra = rng.randint(0, 6)
        runs = ((base, blocks), (50_000 + index * 100, extra)) if extra else ((base, blocks),)
        tokens = (blocks + extra) * 16 + rng.randrange(16)
        arrivals.append((time, NodeRequest(f"r{index}", Prompt(tokens, runs), rng.randint(1, 40))))
    aborts = [(t + rng.random() * 0.3, r.request_id) for t, r in arrivals if rng.random() < 0.2]
    resets = [(rng.random() * time, rng.random() < 0.5) for _ in range(rng.randint(0, 2))]
    gpu_blocks = draw(st.integers(24, 60))
    return gpu_blocks, draw(st.integers(4, 40)), draw(st.sampled_from((2e8, 1e9, 50e9))), arrivals, aborts, resets


def replay(case, closed_form: bool, ticks=()):
    gpu_blocks, cpu_blocks, link, arrivals, aborts, resets = case
    engine = NodeEngine(profile(gpu_blocks, cpu_blocks, link), closed_form_decode=closed_form)
    moments = [(t, 0, r) for t, r in arrivals] + [(t, 1, a) for t, a in aborts]
    moments += [(t, 2, external) for t, external in resets] + [(t, 3, None) for t in ticks]
    events: list[NodeEvent] = []
    for time, kind, what in sorted(moments, key=lambda m: m[:2]):
        events += engine.advance(time)
        if kind == 0:
            engine.submit(what, time)
        elif kind == 1:
            engine.abort(what, time)
        elif kind == 2:
            engine.reset_prefix_cache(time, reset_external=what)
        engine.check_invariants()
    while (wake := engine.next_event_time()) is not None:
        events += engine.advance(wake)
        engine.check_invariants()
    return engine, events


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.lists(st.floats(0.0, 2.0), max_size=20))
def test_invariants_hold_and_every_request_finishes_under_random_workloads(case, ticks):
    engine, events = replay(case, closed_form=True, ticks=tuple(ticks))
    assert sorted(e.request_id for e in events if isinstance(e, Finished)) == sorted(r.request_id for _, r in case[3])
    assert [e.time for e in events] == sorted(e.time for e in events)
    counters = engine.counters()
    assert counters.num_requests_kv_fetch == counters.num_requests_running == counters.num_requests_waiting == 0
    assert counters.external_prefix_cache_hits <= counters.external_prefix_cache_queries
    _, stepped = replay(case, closed_form=False)

    def milestones(items):
        return [(type(e).__name__, e.request_id) for e in items if isinstance(e, FirstToken | Finished)]

    assert milestones(events) == milestones(stepped)
