"""A fake node with a CPU tier (`cpu_kv_gib`): a prefix evicted from HBM comes back from the CPU pool, the KV events
carry both tiers as vLLM 0.33's offloading connector publishes them, and `/metrics` shows its offload series."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import msgpack
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.fleet import FakeNode
from tao_coordinator.fleet.kv_index import NodeKvIndex
from tao_coordinator.kv_wire import decode_batch

from .conftest import MODEL, Subscriber, tiny_profile

# 4 MiB blocks (Qwen3-32B KV, 16 tokens): 0.16 GiB is 40 chunks, so three 15-block prompts overflow it
CPU_GIB = 0.16
CPU_PLACEHOLDER_KEYS = [
    "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
    "group_idx",
]  # fmt: skip


@pytest.fixture(scope="module")
def cpu_node() -> Iterator[FakeNode]:
    profile = tiny_profile(num_gpu_blocks=40, name="cpu")
    with ThreadedFleet([FakeNodeConfig(profile=profile, time_scale=50.0, cpu_kv_gib=CPU_GIB)]) as fleet:
        yield fleet.nodes[0]


def scrape(node: FakeNode) -> dict[str, list]:
    with urllib.request.urlopen(node.url + "/metrics") as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def total(families: dict[str, list], name: str, **labels: str) -> float:
    return sum(s.value for s in families[name] if s.name == name + "_total" and labels.items() <= s.labels.items())


def drain(subscriber: Subscriber) -> list[tuple[bytes, list]]:
    """(raw payload, decoded events) of every batch received until the stream is quiet."""
    batches = []
    while subscriber.socket.poll(300):
        _, _, payload = subscriber.socket.recv_multipart()
        batches.append((payload, msgpack.unpackb(payload)[1]))
    return batches


def test_an_evicted_prefix_loads_from_the_cpu_tier_and_both_tiers_publish(cpu_node, unique_text):
    assert cpu_node.service.profile.cpu_tier is not None and cpu_node.service.profile.cpu_tier.num_blocks == 40
    subscriber = Subscriber(cpu_node.kv_endpoint)
    first = unique_text(120)
    with openai.OpenAI(base_url=cpu_node.openai_base_url, api_key="x", max_retries=0) as client:
        usages = [
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": text}],
                max_tokens=5,
                extra_headers={"X-Session-ID": session},
            ).usage
            for session, text in (("a", first), ("b", unique_text(120)), ("c", unique_text(120)), ("a2", first))
        ]
    time.sleep(0.1)
    batches = drain(subscriber)
    subscriber.close()
    families = scrape(cpu_node)

    host = total(families, "vllm:prompt_tokens_cached_by_source", source="host")
    device = total(families, "vllm:prompt_tokens_cached_by_source", source="device")
    assert host > 0 and host % 16 == 0
    # usage counts CPU-loaded tokens as cached, as vLLM's num_cached_tokens does
    assert usages[-1].prompt_tokens_details.cached_tokens == host + device - sum(
        u.prompt_tokens_details.cached_tokens for u in usages[:-1]
    )
    assert total(families, "vllm:external_prefix_cache_hits") == host
    assert total(families, "vllm:prompt_tokens_by_source", source="external_kv_transfer") == host
    loaded = total(families, "vllm:kv_offload_load_bytes")
    assert loaded == host // 16 * 16 * 262_144  # every loaded block, all TP ranks' bytes
    assert total(families, "vllm:kv_offload_total_bytes", transfer_type="CPU_to_GPU") == loaded
    assert total(families, "vllm:kv_offload_store_time") > 0

    events = [event for _, batch in batches for event in batch]
    gpu_hashes = {h for e in events if e["type"] == "BlockStored" and e["medium"] == "GPU" for h in e["block_hashes"]}
    cpu_stored = [e for e in events if e["type"] == "BlockStored" and e["medium"] == "CPU"]
    cpu_removed = [e for e in events if e["type"] == "BlockRemoved" and e["medium"] == "CPU"]
    assert cpu_stored and cpu_removed
    for event in cpu_stored:
        assert list(event) == CPU_PLACEHOLDER_KEYS
        assert len(event["block_hashes"]) == 1 and event["block_hashes"][0] in gpu_hashes
        assert (event["parent_block_hash"], event["token_ids"], event["block_size"]) == (None, [], 0)
        assert (event["lora_id"], event["lora_name"], event["group_idx"]) == (None, None, 0)
    assert all(list(e) == ["type", "block_hashes", "medium", "group_idx"] for e in cpu_removed)
    for _, batch in batches:  # in a step's batch, the CPU tier's events follow the GPU's
        media = [e.get("medium") for e in batch if e["type"] != "AllBlocksCleared"]
        assert media == sorted(media, key=lambda medium: medium == "CPU")

    index = NodeKvIndex()
    for payload, _ in batches:
        for event in decode_batch(payload):
            index.apply(event)
    resident_cpu = sum(index.tokens_of(s, "CPU") for s in ("a", "b", "c", "a2"))
    assert resident_cpu == 40 * 16  # the pool is full, every chunk owned by the session that computed it
    assert index.tokens_of("a", "CPU") > 0


def test_offload_series_exist_only_with_a_tier(cpu_node, node):
    with_tier, without = scrape(cpu_node), scrape(node)
    info = with_tier["vllm:kv_offload_config_info"][0]
    assert info.labels == {
        "model_name": MODEL,
        "engine": "0",
        "cpu_num_chunks": "40",
        "cpu_blocks_per_chunk": "1",
        "cpu_kv_cache_size_bytes": str(40 * 4 * 2**20),
        # vLLM: chunks × max_model_len // chunks per max_model_len request (624 tokens = 39 chunks here)
        "cpu_kv_cache_size_tokens": str(40 * 624 // 39),
    }
    stages = {s.labels["stage"] for s in with_tier["vllm:num_requests_kv_fetch_by_stage"]}
    assert stages == {"waiting_to_start", "in_progress", "completed_waiting"}
    config = with_tier["vllm:cache_config_info"][0].labels
    assert (config["kv_offloading_size"], config["kv_offloading_backend"], config["num_cpu_blocks"]) == (
        str(CPU_GIB),
        "native",
        "None",
    )
    for name in ("vllm:kv_offload_config_info", "vllm:kv_offload_total_bytes", "vllm:num_requests_kv_fetch_by_stage"):
        assert name not in without
    sources = {s.labels["source"] for s in without["vllm:prompt_tokens_cached_by_source"] if s.name.endswith("_total")}
    assert sources == {"device", "host", "disk", "p2p", "external_unspecified"}
    assert without["vllm:cache_config_info"][0].labels["kv_offloading_size"] == "None"
