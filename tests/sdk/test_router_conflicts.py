"""The router when its calls overlap, or when the coordinator's view of the session disagrees with the client's
(what harness integrations run into: OpenCode's title request overlaps its first step; a hook's report can be lost).
"""

import asyncio
import time

import pytest

from tao_coordinator.core.model import Phase
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_sdk import protocol
from tao_sdk.router import AsyncRouter, SessionConfig, SyncRouter
from tao_sdk.usage import Usage


@pytest.fixture(scope="module")
def fleet():
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50)) as running:
        yield running


def config(coordinator, session_id):
    return SessionConfig(coordinator=coordinator.url, token=coordinator.token, session_id=session_id, max_wait_s=20.0)


def phase(coordinator, session_id):
    return coordinator.service.coordinator.sessions[session_id].phase


def test_overlapping_calls_both_end(coordinator_factory, fleet):
    coordinator = coordinator_factory(fleet.urls)
    router = AsyncRouter(config(coordinator, "overlap-1"))

    async def overlap():
        first = await router.acquire(100)
        second = await router.acquire(120)  # joins the running call on the same node
        await router.llm_end(first, Usage(prompt_tokens=100, completion_tokens=1), 0.1)
        await router.llm_end(second, Usage(prompt_tokens=120, completion_tokens=1), 0.1)
        await router.flush()
        return first, second

    loop = asyncio.new_event_loop()
    first, second = loop.run_until_complete(overlap())
    assert first.node == second.node
    session = coordinator.service.coordinator.sessions["overlap-1"]
    assert (session.phase, session.completed_calls) == (Phase.ADMITTED, 2)  # before: the first call never ended
    loop.run_until_complete(router.close())
    loop.close()


def test_an_acquire_the_coordinator_refuses_is_routed_at_once(coordinator_factory, fleet):
    coordinator = coordinator_factory(fleet.urls)
    router = SyncRouter(config(coordinator, "lost-tool-end"))
    grant = router.acquire(100)
    router.llm_end(grant, Usage(prompt_tokens=100, completion_tokens=1), 0.1)
    router.tool_start("call-1", "bash", protocol.ToolHints(timeout_s=60))
    router.flush()
    assert phase(coordinator, "lost-tool-end") is Phase.IN_TOOL  # its tool_end never comes
    started = time.monotonic()
    again = router.acquire(120)
    assert time.monotonic() - started < 2.0  # before: 409s in a tight loop for max_wait_s
    assert (again.node, again.detached) == (grant.node, True)
    router.close()
