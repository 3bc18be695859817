"""Parsing vLLM's /metrics exposition (reference §1.4, §1.6)."""

import pytest

from tao_coordinator.fleet.vllm_metrics import MetricsFormatError, parse_metrics

CONFIG_LABELS = 'block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="17726",prefix_caching_hash_algo="sha256"'
EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600.0
# HELP vllm:num_preemptions Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
CACHE_CONFIG_LINE
""".replace("CACHE_CONFIG_LINE", f"vllm:cache_config_info{{{CONFIG_LABELS}}} 1.0")


def test_figures_are_summed_over_engines_and_capacity_follows_the_formula():
    metrics = parse_metrics(EXPOSITION)
    assert metrics.capacity_tokens == (17726 - 1) * 16
    assert (metrics.running, metrics.waiting, metrics.block_size) == (5, 4, 16)
    assert metrics.kv_usage == pytest.approx(0.375)
    assert (metrics.prefix_queries, metrics.prefix_hits, metrics.preemptions) == (1000, 600, 7)


def with_size(tokens: str, blocks: str = "17726") -> str:
    return EXPOSITION.replace('num_gpu_blocks="17726"', f'kv_cache_size_tokens="{tokens}",num_gpu_blocks="{blocks}"')


def test_kv_cache_size_tokens_of_a_plain_model_counts_the_null_block_so_one_block_is_taken_off():
    assert parse_metrics(with_size("283616")).capacity_tokens == (17726 - 1) * 16


@pytest.mark.parametrize(("tokens", "blocks"), [("463459", "17726"), ("283616", "None")])
def test_kv_cache_size_tokens_wins_when_it_is_not_the_plain_block_count(tokens, blocks):
    assert parse_metrics(with_size(tokens, blocks)).capacity_tokens == int(tokens)


def test_without_cache_config_info_capacity_is_unknown():
    assert parse_metrics("vllm:num_requests_running 1\n").capacity_tokens is None


def test_garbage_is_named():
    with pytest.raises(MetricsFormatError, match="unparseable"):
        parse_metrics("vllm:num_requests_running{engine= 1\n")


def test_a_size_of_zero_is_reported_as_zero_and_a_bad_block_size_is_named():
    """Zero is what the node says (the poller quarantines it, `capacity_guard.py`), not "unknown"."""
    assert parse_metrics(EXPOSITION.replace('num_gpu_blocks="17726"', 'num_gpu_blocks="0"')).capacity_tokens == 0
    with pytest.raises(MetricsFormatError, match="block_size"):
        parse_metrics(EXPOSITION.replace('block_size="16"', 'block_size="0"'))


def dp_exposition(blocks: int, tokens: str, ranks: int = 2) -> str:
    """vLLM 0.33 with `ranks` DP engines: one cache_config_info per engine, blocks summed, size one rank's."""
    series = "".join(
        f'vllm:cache_config_info{{block_size="16",engine="{r}",kv_cache_size_tokens="{tokens}",'
        f'num_gpu_blocks="{blocks}"}} 1.0\n'
        for r in range(ranks)
    )
    return EXPOSITION.replace(f"vllm:cache_config_info{{{CONFIG_LABELS}}} 1.0\n", series)


def test_data_parallel_capacity_is_every_ranks_blocks_less_one_null_block_each():
    # two ranks of 17726 blocks: num_gpu_blocks="35452", kv_cache_size_tokens one rank's 17726 × 16
    assert parse_metrics(dp_exposition(2 * 17726, str(17726 * 16))).capacity_tokens == 2 * (17726 - 1) * 16
    assert parse_metrics(dp_exposition(2 * 17726, "None")).capacity_tokens == 2 * (17726 - 1) * 16


def test_data_parallel_hybrid_size_is_one_ranks_and_is_multiplied():
    assert parse_metrics(dp_exposition(2 * 320, "463459")).capacity_tokens == 2 * 463459


def test_ranks_are_counted_from_the_running_gauge_when_cache_config_info_has_no_engine():
    text = EXPOSITION.replace('engine="0",num_gpu_blocks="17726"', 'engine="",num_gpu_blocks="35452"')
    assert parse_metrics(text).capacity_tokens == (35452 - 2) * 16


def test_offload_counters_and_cpu_capacity_are_summed_over_ranks():
    offload = "".join(
        f'vllm:kv_offload_config_info{{cpu_blocks_per_chunk="2",cpu_kv_cache_size_bytes="1",'
        f'cpu_kv_cache_size_tokens="None",cpu_num_chunks="100",engine="{r}",model_name="m"}} 1.0\n'
        f'vllm:kv_offload_load_time_total{{engine="{r}",model_name="m"}} 0.5\n'
        f'vllm:prompt_tokens_by_source_total{{engine="{r}",model_name="m",source="external_kv_transfer"}} 64.0\n'
        f'vllm:prompt_tokens_by_source_total{{engine="{r}",model_name="m",source="local_compute"}} 10.0\n'
        f'vllm:num_requests_kv_fetch_by_stage{{engine="{r}",model_name="m",stage="in_progress"}} 1.0\n'
        f'vllm:num_requests_kv_fetch_by_stage{{engine="{r}",model_name="m",stage="completed_waiting"}} 5.0\n'
        for r in range(2)
    )
    metrics = parse_metrics(dp_exposition(17726, "None") + offload)
    assert metrics.cpu_capacity_tokens == 2 * 100 * 2 * 16  # chunks × blocks per chunk × block size, per rank
    assert (metrics.prompt_loaded, metrics.prompt_computed, metrics.offload_load_seconds) == (128, 20, 1.0)
    assert metrics.kv_fetch_waiting == 2
    assert parse_metrics(EXPOSITION).cpu_capacity_tokens is None  # no series yet: not known, not "no tier"
