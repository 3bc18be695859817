"""`/metrics` parses with prometheus_client's parser, carries vLLM's names, labels and types, and moves with load."""

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

MODEL = "Qwen/Qwen3-32B"


def scrape(node):
    with urllib.request.urlopen(node.url + "/metrics") as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(families, name, sample_name=None, **labels):
    family = families[name]
    target = sample_name or family.name
    matches = [s.value for s in family.samples if s.name == target and labels.items() <= s.labels.items()]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def test_names_types_and_labels(node):
    families = scrape(node)
    expected_types = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:cache_config_info": "gauge",
    }
    for name, kind in expected_types.items():
        assert families[name].type == kind, name
    running = families["vllm:num_requests_running"].samples[0]
    assert running.labels == {"model_name": MODEL, "engine": "0"}
    assert {s.name for s in families["vllm:prompt_tokens"].samples} >= {"vllm:prompt_tokens_total"}
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    buckets = [
        s.labels["le"] for s in families["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_bucket")
    ]
    assert buckets[:3] == ["0.001", "0.005", "0.01"] and buckets[-2:] == ["2560.0", "+Inf"]


def test_cache_config_info_carries_capacity(node):
    info = scrape(node)["vllm:cache_config_info"].samples[0]
    profile = node.service.profile
    assert info.value == 1.0
    assert info.labels["num_gpu_blocks"] == str(profile.num_gpu_blocks)
    assert info.labels["block_size"] == "16"
    assert info.labels["engine"] == "0" and "model_name" not in info.labels
    assert info.labels["enable_prefix_caching"] == "True"


def test_counters_move_as_requests_run(node, oai, unique_text):
    before = scrape(node)
    system = unique_text(300)
    for question in ("a", "b"):
        oai.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
            max_tokens=5,
        )
    time.sleep(0.1)  # counters refresh on the engine's next tick
    after = scrape(node)
    for name in ("vllm:prompt_tokens", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
        assert value(after, name, name + "_total") - value(before, name, name + "_total") >= 300, name
    generated = value(after, "vllm:generation_tokens", "vllm:generation_tokens_total")
    assert generated - value(before, "vllm:generation_tokens", "vllm:generation_tokens_total") == 10
    length_total = "vllm:request_success_total"
    assert (
        value(after, "vllm:request_success", length_total, finished_reason="length")
        - value(before, "vllm:request_success", length_total, finished_reason="length")
        == 2
    )
    ttft_count = "vllm:time_to_first_token_seconds_count"
    assert (
        value(after, "vllm:time_to_first_token_seconds", ttft_count)
        - value(before, "vllm:time_to_first_token_seconds", ttft_count)
        == 2
    )


def test_gauges_show_a_running_request(node, oai, unique_text):
    stream = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": unique_text(10)}], max_tokens=2000, stream=True
    )
    next(iter(stream))
    time.sleep(0.05)
    families = scrape(node)
    stream.close()
    assert value(families, "vllm:num_requests_running") >= 1
    assert value(families, "vllm:kv_cache_usage_perc") > 0
