"""In-loop fleets (`FakeFleet` inside a running event loop), concurrency, and aborts when a client goes away."""

import asyncio

import openai
import pytest

from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig

MODEL = "Qwen/Qwen3-32B"
pytestmark = pytest.mark.asyncio


def _client(node):
    return openai.AsyncOpenAI(base_url=node.openai_base_url, api_key="x", max_retries=0)


async def test_nodes_have_their_own_ports_kv_endpoints_and_caches():
    async with FakeFleet(2, FakeNodeConfig(time_scale=50)) as fleet:
        assert len(set(fleet.urls)) == 2 and all(url.startswith("http://127.0.0.1:") for url in fleet.urls)
        assert len(set(fleet.kv_endpoints)) == 2
        messages = [{"role": "user", "content": "shared prompt " * 100}]
        async with _client(fleet.nodes[0]) as first, _client(fleet.nodes[1]) as second:
            await first.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
            on_first = await first.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
            on_second = await second.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)
        assert on_first.usage.prompt_tokens_details.cached_tokens > 0
        assert on_second.usage.prompt_tokens_details.cached_tokens == 0


async def test_many_concurrent_streams_complete():
    async with FakeFleet(1, FakeNodeConfig(time_scale=100), kv_events=False) as fleet:
        client = _client(fleet.nodes[0])

        async def one(index: int) -> int:
            messages = [{"role": "system", "content": "common " * 200}, {"role": "user", "content": f"q{index}"}]
            stream = await client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=16, stream=True, stream_options={"include_usage": True}
            )
            chunks = [chunk async for chunk in stream]
            return chunks[-1].usage.completion_tokens

        async with client:
            assert await asyncio.gather(*(one(i) for i in range(100))) == [16] * 100


async def test_a_client_that_goes_away_aborts_its_request():
    async with FakeFleet(1, FakeNodeConfig(time_scale=10), kv_events=False) as fleet:
        node = fleet.nodes[0]
        async with _client(node) as client:
            stream = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5000, stream=True
            )
            await stream.__anext__()
            await stream.close()
        for _ in range(100):
            await asyncio.sleep(0.02)
            if node.service.driver.in_flight == 0:
                break
        assert node.service.driver.in_flight == 0
        assert node.service.driver.engine.counters().request_success["abort"] == 1
