"""Shared fixtures: real fake-vLLM servers on loopback ports (one per encoding), real clients, a ZMQ subscriber.

The servers run on a background event loop (`ThreadedFleet`), so tests use the synchronous `openai`, `anthropic`
and `pyzmq` clients. Tests share a node's prefix cache: each one makes its prompts unique (`unique_text`) unless
it wants a hit.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import msgpack
import openai
import pytest
import zmq

from tao_coordinator.fakevllm import FakeNodeConfig, KvEventsConfig, ThreadedFleet
from tao_coordinator.fakevllm.fleet import FakeNode
from tao_coordinator.sim.node import NodeProfile, StepCoefficients

MODEL = "Qwen/Qwen3-32B"
SCALE = 50.0


def tiny_profile(num_gpu_blocks: int = 64, max_num_seqs: int = 1024, name: str = "tiny") -> NodeProfile:
    """A small node: few KV blocks (evictions come quickly) and, optionally, one sequence at a time."""
    step = StepCoefficients(tp=1, linear_floor_s=0.01, linear_per_token_s=0.0001)
    return NodeProfile(name=name, step=step, num_gpu_blocks=num_gpu_blocks, max_num_seqs=max_num_seqs)


@pytest.fixture(scope="session")
def make_profile() -> Callable[..., NodeProfile]:
    return tiny_profile


@pytest.fixture(scope="session")
def fleet() -> Iterator[ThreadedFleet]:
    configs = [
        FakeNodeConfig(time_scale=SCALE),
        FakeNodeConfig(time_scale=SCALE, kv_events_encoding="array", kv_events=_legacy_events()),
        FakeNodeConfig(profile=tiny_profile(max_num_seqs=1), time_scale=5.0, scheduling_policy="priority"),
        FakeNodeConfig(profile=tiny_profile(num_gpu_blocks=40, name="small"), time_scale=SCALE),
    ]
    with ThreadedFleet(configs) as running:
        yield running


def _legacy_events() -> KvEventsConfig:
    return KvEventsConfig(
        endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*", topic="legacy", replay_topic=False
    )


@pytest.fixture(scope="session")
def node(fleet: ThreadedFleet) -> FakeNode:
    """The default node: h100-tp2, map-encoded KV events with a replay socket."""
    return fleet.nodes[0]


@pytest.fixture(scope="session")
def array_node(fleet: ThreadedFleet) -> FakeNode:
    """KV events in the ≤0.23 array encoding, replay framing without the topic frame."""
    return fleet.nodes[1]


@pytest.fixture(scope="session")
def priority_node(fleet: ThreadedFleet) -> FakeNode:
    """One sequence at a time under --scheduling-policy priority, so the waiting order is visible."""
    return fleet.nodes[2]


@pytest.fixture(scope="session")
def small_node(fleet: ThreadedFleet) -> FakeNode:
    """39 usable KV blocks (624 tokens): every few requests evict older blocks."""
    return fleet.nodes[3]


@pytest.fixture
def openai_for() -> Iterator[Callable[[FakeNode], openai.OpenAI]]:
    """Real `openai` clients for given nodes, closed after the test."""
    clients: list[openai.OpenAI] = []

    def make(target: FakeNode) -> openai.OpenAI:
        clients.append(openai.OpenAI(base_url=target.openai_base_url, api_key="sk-fake", max_retries=0))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def anthropic_for() -> Iterator[Callable[[FakeNode], anthropic.Anthropic]]:
    """Real `anthropic` clients for given nodes, closed after the test."""
    clients: list[anthropic.Anthropic] = []

    def make(target: FakeNode) -> anthropic.Anthropic:
        clients.append(anthropic.Anthropic(base_url=target.url, api_key="sk-fake", max_retries=0))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def oai(node: FakeNode, openai_for: Callable[[FakeNode], openai.OpenAI]) -> openai.OpenAI:
    return openai_for(node)


@pytest.fixture
def claude(node: FakeNode, anthropic_for: Callable[[FakeNode], anthropic.Anthropic]) -> anthropic.Anthropic:
    return anthropic_for(node)


@pytest.fixture
def unique_text() -> Callable[[int], str]:
    """Text of about `words` tokens that no other test uses."""

    def make(words: int = 200) -> str:
        tag = uuid.uuid4().hex[:8]
        return f"[{tag}] " + " ".join(f"word{i % 97}" for i in range(words))

    return make


@dataclass
class KvBatch:
    topic: bytes
    seq: int
    ts: float
    events: list[Any]
    dp_rank: int | None


class Subscriber:
    """A ZMQ SUB socket on a node's KV-event endpoint that decodes batches with plain msgpack."""

    def __init__(self, endpoint: str) -> None:
        self.socket = zmq.Context.instance().socket(zmq.SUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.2)  # PUB drops everything until the subscription has reached it

    def batches(self, until: Callable[[list[KvBatch]], bool], timeout: float = 10.0) -> list[KvBatch]:
        received: list[KvBatch] = []
        deadline = time.monotonic() + timeout
        while not until(received):
            left = deadline - time.monotonic()
            if left <= 0 or not self.socket.poll(int(left * 1000)):
                raise TimeoutError(f"KV events did not arrive; got {len(received)} batches")
            topic, seq, payload = self.socket.recv_multipart()
            received.append(decode_batch(topic, seq, payload))
        return received

    def close(self) -> None:
        self.socket.close()


def decode_batch(topic: bytes, seq: bytes, payload: bytes) -> KvBatch:
    batch = msgpack.unpackb(payload)
    return KvBatch(topic, int.from_bytes(seq, "big"), batch[0], batch[1], batch[2] if len(batch) > 2 else None)


@pytest.fixture
def subscribe() -> Iterator[Callable[[FakeNode], Subscriber]]:
    opened: list[Subscriber] = []

    def make(target: FakeNode) -> Subscriber:
        assert target.kv_endpoint is not None
        subscriber = Subscriber(target.kv_endpoint)
        opened.append(subscriber)
        return subscriber

    yield make
    for subscriber in opened:
        subscriber.close()
