"""Fault modes of a live fake node (`fakevllm/faults.py`): `/metrics` turned bad and back through `PUT /fake/faults`,
an engine restart through `POST /fake/restart`, and vLLM 0.33's late `kv_offload_config_info`."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.faults import HUGE_BLOCKS
from tao_coordinator.fakevllm.fleet import FakeNode

from .conftest import MODEL, KvBatch, Subscriber, decode_batch, tiny_profile


@pytest.fixture(scope="module")
def pair() -> Iterator[list[FakeNode]]:
    """A plain node with KV events, and a node with a CPU tier."""
    configs = [
        FakeNodeConfig(profile=tiny_profile(name="plain"), time_scale=50.0),
        FakeNodeConfig(profile=tiny_profile(num_gpu_blocks=40, name="cpu"), time_scale=50.0, cpu_kv_gib=0.16),
    ]
    with ThreadedFleet(configs) as fleet:
        yield fleet.nodes


def request(url: str, method: str = "GET", body: Any = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def families(node: FakeNode) -> dict[str, list]:
    status, body = request(node.url + "/metrics")
    assert status == 200
    return {family.name: family.samples for family in text_string_to_metric_families(body.decode())}


def set_faults(node: FakeNode, **faults: Any) -> dict:
    status, body = request(node.url + "/fake/faults", "PUT", faults)
    assert status == 200, body
    return json.loads(body)


def chat(node: FakeNode, text: str, session: str | None = None) -> None:
    with openai.OpenAI(base_url=node.openai_base_url, api_key="x", max_retries=0) as client:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": text}],
            max_tokens=4,
            extra_body={"session_id": session} if session else None,
        )


def test_metrics_modes_flip_a_live_node_and_back(pair):
    node = pair[0]
    try:
        set_faults(node, metrics="nan", metrics_series="vllm:kv_cache_usage_perc")
        usage = families(node)["vllm:kv_cache_usage_perc"]
        assert usage and all(math.isnan(sample.value) for sample in usage)
        set_faults(node, metrics="inf")
        assert all(math.isinf(s.value) and s.value > 0 for s in families(node)["vllm:num_requests_waiting"])
        set_faults(node, metrics="huge_capacity")
        labels = families(node)["vllm:cache_config_info"][0].labels
        assert (labels["num_gpu_blocks"], labels["kv_cache_size_tokens"]) == (str(HUGE_BLOCKS), str(HUGE_BLOCKS * 16))
        assert labels["num_gpu_blocks_override"] == "None"
        set_faults(node, metrics="zero_capacity")
        labels = families(node)["vllm:cache_config_info"][0].labels
        assert (labels["num_gpu_blocks"], labels["kv_cache_size_tokens"]) == ("0", "0")
        set_faults(node, metrics="empty")
        assert request(node.url + "/metrics") == (200, b"")
        set_faults(node, metrics_delay_s=0.3)
        started = time.monotonic()
        assert families(node)["vllm:cache_config_info"][0].labels["num_gpu_blocks"] == "64"
        assert time.monotonic() - started >= 0.3
        assert json.loads(request(node.url + "/fake/faults")[1])["metrics_delay_s"] == 0.3
    finally:
        set_faults(node)


@pytest.mark.parametrize(
    ("faults", "named"),
    [({"metrics": "sideways"}, "metrics"), ({"metrics_delay_s": -1}, "metrics_delay_s"), ({"nan": True}, "nan")],
)
def test_invalid_faults_are_refused_naming_the_field_and_change_nothing(pair, faults, named):
    node = pair[0]
    status, body = request(node.url + "/fake/faults", "PUT", faults)
    assert status == 400 and named in json.loads(body)["error"]["message"]
    assert json.loads(request(node.url + "/fake/faults")[1])["metrics"] == "ok"


def test_a_cpu_tiers_config_info_appears_only_after_the_first_engine_step():
    """vLLM 0.33 registers `kv_offload_config_info` at the engine's first scheduler step: a fresh node has none."""
    config = FakeNodeConfig(profile=tiny_profile(num_gpu_blocks=40, name="fresh"), time_scale=50.0, cpu_kv_gib=0.16)
    with ThreadedFleet([config], kv_events=False) as fleet:
        node = fleet.nodes[0]
        assert "vllm:kv_offload_config_info" not in families(node)
        assert "vllm:kv_offload_total_bytes" in families(node)  # the deprecated families exist from the start
        chat(node, "first step " * 20)
        assert families(node)["vllm:kv_offload_config_info"][0].labels["cpu_num_chunks"] == "40"


def drain(subscriber: Subscriber, quiet_s: float = 0.5) -> list[KvBatch]:
    """Every batch received until the stream is quiet for `quiet_s`."""
    received = []
    while subscriber.socket.poll(int(quiet_s * 1000)):
        received.append(decode_batch(*subscriber.socket.recv_multipart()))
    return received


def test_a_restart_numbers_kv_events_from_zero_and_empties_the_caches_silently(pair, subscribe):
    node, cpu_node = pair
    subscriber = subscribe(node)
    chat(node, "before the restart " * 20, "s-old")
    chat(cpu_node, "before the restart " * 20)
    assert drain(subscriber)
    assert node.service.driver.engine.cached_block_runs()
    assert "vllm:kv_offload_config_info" in families(cpu_node)

    for restarted in pair:
        assert request(restarted.url + "/fake/restart", "POST") == (200, b"")
    assert drain(subscriber, 0.3) == []  # a restart publishes nothing: the new process knows nothing
    assert node.service.driver.engine.cached_block_runs() == []
    assert cpu_node.service.driver.engine.cpu_block_runs() == []
    assert families(node)["vllm:prompt_tokens"][0].value == 0  # counters start again
    assert "vllm:kv_offload_config_info" not in families(cpu_node)

    chat(node, "after the restart " * 20, "s-new")
    after = drain(subscriber)
    assert [batch.seq for batch in after] == list(range(len(after))) and after  # numbered from 0 again
    stored = [e for batch in after for e in batch.events if e["type"] == "BlockStored"]
    assert stored and {e["session_id"] for e in stored} == {"s-new"}
    assert replay_from(node, 0) == [batch.seq for batch in after]  # the replay buffer holds the new process's only
    chat(cpu_node, "after the restart " * 20)
    assert "vllm:kv_offload_config_info" in families(cpu_node)


def replay_from(node: FakeNode, start: int) -> list[int]:
    """The sequence numbers a replay from `start` returns."""
    assert node.kv_replay_endpoint is not None
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(node.kv_replay_endpoint)
    try:
        dealer.send_multipart([b"", start.to_bytes(8, "big", signed=True)])
        got = []
        while dealer.poll(2000):
            frames = dealer.recv_multipart()
            seq = int.from_bytes(frames[-2], "big", signed=True)
            if seq == -1:
                return got
            got.append(seq)
        raise AssertionError("no end of replay")
    finally:
        dealer.close()


def test_the_command_starts_a_node_with_faults_and_refuses_bad_ones():
    command = [sys.executable, "-m", "tao_sdk.cli", "fake-vllm", "--port", "0", "--fault-metrics", "empty"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"on (http://127\.0\.0\.1:\d+)", process.stdout.readline() if process.stdout else "")
        assert url is not None
        assert request(url.group(1) + "/metrics") == (200, b"")
        assert json.loads(request(url.group(1) + "/fake/faults")[1])["metrics"] == "empty"
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    refused = subprocess.run([*command[:-2], "--fault-metrics-delay", "-1"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "metrics_delay_s" in refused.stderr
