"""Profiles and the step-time model against the H100 calibration of the vLLM reference (§8.2 capacity, §8.5 tables)."""

import pytest

from tao_coordinator.sim.node import (
    BUILTIN_PROFILES,
    FirstToken,
    NodeEngine,
    NodeRequest,
    StepTimeModel,
    UnknownProfile,
    profile_by_name,
    profile_from_mapping,
)
from tao_coordinator.sim.prompt import Prompt

BATCHES = (1, 8, 32, 64, 128, 256)
DECODE_MS = {  # §8.5: context (tokens) -> inter-token latency (ms) for the batch sizes above
    1: {2048: (25.7, 27.4, 33.4, 41.3, 57.2, 90.7), 8192: (26.4, 33.0, 55.8, 86.2, 146.9, 269.9),
        32768: (29.2, 55.5, 145.4, 265.4, 505.4, 987.0)},
    2: {2048: (16.2, 17.1, 20.2, 24.4, 32.7, 49.8), 8192: (16.6, 19.9, 31.4, 46.8, 77.5, 139.5),
        32768: (18.0, 31.1, 76.3, 136.4, 256.8, 498.0)},
    4: {2048: (10.6, 11.1, 12.8, 15.0, 19.4, 28.2), 8192: (10.8, 12.5, 18.4, 26.2, 41.8, 73.0),
        32768: (11.5, 18.1, 40.8, 71.0, 131.4, 252.3)},
}  # fmt: skip
PREFILL_LENGTHS = (512, 2048, 8192, 32768, 100_000)
PREFILL_S = {1: (0.057, 0.22, 0.99, 6.1, 36.2), 2: (0.035, 0.13, 0.55, 3.3, 18.8), 4: (0.021, 0.074, 0.32, 1.8, 9.9)}
OFFSETS = (0, 8192, 32768, 98_000)
PREFILL_2048_AFTER_OFFSET_MS = {1: (219, 307, 571, 1272), 2: (126, 170, 302, 652), 4: (74, 96, 162, 337)}


def model(tp: int) -> StepTimeModel:
    return StepTimeModel(profile_by_name(f"h100-tp{tp}").step)


@pytest.mark.parametrize("tp", (1, 2, 4))
def test_decode_step_matches_the_reference_table(tp):
    for context, row in DECODE_MS[tp].items():
        for batch, expected_ms in zip(BATCHES, row, strict=True):
            assert model(tp).decode_step_seconds([context] * batch) * 1e3 == pytest.approx(expected_ms, rel=0.05)


@pytest.mark.parametrize("tp", (1, 2, 4))
def test_prefill_matches_the_reference_tables(tp):
    for tokens, expected_s in zip(PREFILL_LENGTHS, PREFILL_S[tp], strict=True):
        assert model(tp).prefill_seconds(tokens) == pytest.approx(expected_s, rel=0.05)
    for offset, expected_ms in zip(OFFSETS, PREFILL_2048_AFTER_OFFSET_MS[tp], strict=True):
        assert model(tp).prefill_seconds(2048, offset) * 1e3 == pytest.approx(expected_ms, rel=0.05)


@pytest.mark.parametrize(("tp", "tokens"), ((1, 36_000), (2, 320_000), (4, 890_000)))
def test_capacity_follows_the_memory_formula(tp, tokens):
    profile = profile_by_name(f"h100-tp{tp}")
    assert profile.capacity_tokens == pytest.approx(tokens, rel=0.03)
    assert profile.capacity_tokens == (profile.num_gpu_blocks - 1) * 16
    assert (profile.block_size, profile.max_num_batched_tokens, profile.max_num_seqs) == (16, 8192, 1024)


@pytest.mark.parametrize(("tp", "prompt", "expected_s"), ((1, 32768, 6.1), (2, 100_000, 18.8), (4, 100_000, 9.9)))
def test_engine_ttft_of_a_lone_request_is_the_table_prefill_time(tp, prompt, expected_s):
    engine = NodeEngine(profile_by_name(f"h100-tp{tp}"))
    engine.submit(NodeRequest("r", Prompt(prompt), 1), 0.0)
    events = engine.advance(1e6)
    assert next(e.ttft for e in events if isinstance(e, FirstToken)) == pytest.approx(expected_s, rel=0.05)


@pytest.mark.parametrize(("tp", "batch", "expected_ms"), ((1, 8, 27.4), (2, 32, 20.2), (4, 64, 15.0)))
def test_engine_inter_token_latency_matches_the_decode_table(tp, batch, expected_ms):
    engine = NodeEngine(profile_by_name(f"h100-tp{tp}"))
    for index in range(batch):
        engine.submit(NodeRequest(f"r{index}", Prompt(2048, ((index * 1000, 128),)), 2000), 0.0)
    engine.advance(5.0)  # every prompt is prefilled by now (at most 16 chunks of 8192 tokens)
    start = engine.generated_tokens("r0")
    engine.advance(6.0)
    assert engine.counters().num_requests_running == batch
    assert 1000 / (engine.generated_tokens("r0") - start) == pytest.approx(expected_ms, rel=0.05)


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(UnknownProfile, match="known profiles: h100-tp1, h100-tp1-8b, h100-tp2, h100-tp4"):
        profile_by_name("h100-tp3")
    assert set(BUILTIN_PROFILES) >= {"h100-tp1", "h100-tp2", "h100-tp4", "h100-tp1-8b"}


def test_a_user_profile_from_a_toml_like_table():
    table = {
        "max_num_seqs": 256,
        "step": {"tp": 2, "linear_floor_s": 0.0124, "linear_per_token_s": 5.1e-5, "kv_bytes_per_token": 131_072},
        "memory": {"gpu_memory_gib": 79.6, "gpu_memory_utilization": 0.9, "weights_gib_per_gpu": 30.6,
                   "overhead_gib": 1.7},
    }  # fmt: skip
    custom = profile_from_mapping("h100-tp2-fp8kv", table)
    assert custom.capacity_tokens == pytest.approx(2 * profile_by_name("h100-tp2").capacity_tokens, rel=1e-3)
    assert profile_by_name("h100-tp2-fp8kv", {"h100-tp2-fp8kv": custom}).max_num_seqs == 256
    with pytest.raises(TypeError, match="linear_flor_s"):
        profile_from_mapping("typo", {"num_gpu_blocks": 100, "step": {"tp": 1, "linear_flor_s": 0.02}})
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        profile_from_mapping("empty", {"num_gpu_blocks": 1, "step": {"tp": 1, "linear_floor_s": 0.02,
                                                                     "linear_per_token_s": 1e-4}})  # fmt: skip
