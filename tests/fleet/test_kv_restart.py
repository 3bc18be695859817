"""A fake node's engine restarts (`POST /fake/restart`: its KV-event numbers start again at 0, its caches emptied
without an event): the coordinator drops the node's stale credit and credits the new events, within 2 s, with one
log line; a subscriber that missed the new process's first batches replays them from 0."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
import zmq
import zmq.asyncio

from tao_coordinator.core.model import EvidenceSource
from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.fakevllm.fleet import FakeNode
from tao_coordinator.fleet.kv_index import NodeKvIndex
from tao_coordinator.fleet.kv_subscriber import KvEventSubscriber
from tests.fakevllm.conftest import tiny_profile
from tests.web.conftest import Running, eventually, running_coordinator

MODEL = "Qwen/Qwen3-32B"


async def chat(node: FakeNode, session: str, words: int, tag: str = "") -> None:
    text = f"[{session}{tag}] " + " ".join(f"w{i % 89}" for i in range(words))
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    async with (
        aiohttp.ClientSession() as http,
        http.post(node.openai_base_url + "/chat/completions", json=body, headers={"X-Session-ID": session}) as answer,
    ):
        assert answer.status == 200, await answer.text()


async def restart(node: FakeNode) -> None:
    async with aiohttp.ClientSession() as http, http.post(node.url + "/fake/restart") as answer:
        assert answer.status == 200


def credit(c: Running, session: str) -> int:
    evidence = c.service.coordinator.session(session).evidence
    return sum(e.tokens for e in evidence if e.source is EvidenceSource.KV_EVENTS and e.node == "node-0")


async def test_after_a_restart_new_events_give_credit_within_two_seconds_and_stale_credit_goes(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tao")
    config = FakeNodeConfig(profile=tiny_profile(), time_scale=50.0)
    async with FakeFleet(1, config) as fleet, running_coordinator(tmp_path, fleet, kv_events=True) as c:
        node = fleet.nodes[0]
        old, _ = await c.register()
        new, _ = await c.register()
        await asyncio.sleep(0.3)  # the subscriber's connection is up
        await chat(node, old, 300)
        await eventually(lambda: credit(c, old) > 0)

        await restart(node)
        started = time.monotonic()
        await chat(node, new, 100)
        await eventually(lambda: credit(c, new) > 0 and credit(c, old) == 0, timeout=5.0)
        assert time.monotonic() - started <= 2.0
        index = c.service.fleet.kv_index("node-0")
        assert index is not None and index.resets == 1
        restarts = [r.getMessage() for r in caplog.records if "went back" in r.getMessage()]
        assert restarts == ["node node-0 rank 0: KV-event numbers went back to 0: the engine restarted; its index is "
                            "rebuilt from its new events"]  # fmt: skip
        assert await c.metric("tao_node_kv_event_resets_total", node="node-0") == 1
        assert await c.metric("tao_node_kv_credit_tokens", node="node-0", tier="GPU") == credit(c, new)
        assert not [r for r in caplog.records if r.exc_info]


async def test_a_subscriber_that_missed_the_new_processes_first_batches_replays_them_from_zero():
    """Frames read from a real fake node are handed to a subscriber as its socket would: the old process's, then
    only the last batch of the restarted one; the rest comes from the node's replay socket."""
    config = FakeNodeConfig(profile=tiny_profile(), time_scale=50.0)
    context = zmq.asyncio.Context()
    async with FakeFleet(1, config) as fleet:
        node = fleet.nodes[0]
        assert node.kv_endpoint is not None and node.kv_replay_endpoint is not None
        socket = context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(node.kv_endpoint)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        await asyncio.sleep(0.2)
        index = NodeKvIndex()
        subscriber = KvEventSubscriber("n", node.kv_endpoint, node.kv_replay_endpoint, index, context)
        try:
            for k in range(4):  # the old process's batches: more than the new one will publish
                await chat(node, "old", 40, tag=str(k))
            for frames in await drain(socket):
                await subscriber._receive(frames)
            assert index.tokens_of("old") > 0

            await restart(node)
            await chat(node, "new", 120)
            await chat(node, "new", 60, tag="2")  # another prompt: another batch
            fresh = await drain(socket)
            assert 1 < len(fresh) < subscriber.batches
            await subscriber._receive(fresh[-1])  # its first batches were missed
        finally:
            socket.close()
            context.term()
    assert index.tokens_of("old") == 0 and index.resets == 1
    assert index.tokens_of("new") == node.service.driver.engine.counters().cached_blocks * 16 > 0
    assert subscriber.last_seq == len(fresh) - 1


async def drain(socket: zmq.asyncio.Socket) -> list[list[bytes]]:
    received = []
    while await socket.poll(300):
        received.append(await socket.recv_multipart())
    return received
