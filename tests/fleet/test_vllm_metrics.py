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


def test_kv_cache_size_tokens_wins_when_present():
    text = EXPOSITION.replace('num_gpu_blocks="17726"', 'kv_cache_size_tokens="283616",num_gpu_blocks="17726"')
    assert parse_metrics(text).capacity_tokens == 283616


def test_without_cache_config_info_capacity_is_unknown():
    assert parse_metrics("vllm:num_requests_running 1\n").capacity_tokens is None


def test_garbage_is_named():
    with pytest.raises(MetricsFormatError, match="unparseable"):
        parse_metrics("vllm:num_requests_running{engine= 1\n")


def test_a_size_of_zero_is_unknown_and_a_bad_block_size_is_named():
    assert parse_metrics(EXPOSITION.replace('num_gpu_blocks="17726"', 'num_gpu_blocks="0"')).capacity_tokens is None
    with pytest.raises(MetricsFormatError, match="block_size"):
        parse_metrics(EXPOSITION.replace('block_size="16"', 'block_size="0"'))
