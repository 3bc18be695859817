"""A real coordinator (loopback, 0.1 s scrapes) beside a fake vLLM node whose `/metrics` turns bad while it runs
(`PUT /fake/faults`): a NaN or ±Inf figure, an absurd or zero capacity, an empty body, a scrape that times out. Each
fault is detected and named in `GET /v1/nodes`, logged once (no traceback), counted, and undone when the node
reports sane figures again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tests.fakevllm.conftest import tiny_profile
from tests.web.conftest import API_TOKEN, Running, eventually, running_coordinator

CAPACITY = (64 - 1) * 16  # the tiny profile's 64 blocks, less the null block


@asynccontextmanager
async def watched(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Running]:
    caplog.set_level(logging.DEBUG, logger="tao")
    config = FakeNodeConfig(profile=tiny_profile(), time_scale=50.0)
    async with FakeFleet(1, config, kv_events=False) as fleet, running_coordinator(tmp_path, fleet) as c:
        await until(c, lambda n: n["healthy"])
        yield c
    tracebacks = [record for record in caplog.records if record.exc_info]
    assert tracebacks == [], [record.getMessage() for record in tracebacks]


def node_of(c: Running) -> dict:
    """`GET /v1/nodes`' entry for the node, as of the last call (refreshed by `view`)."""
    return getattr(c, "_node_view", {"healthy": False})


async def view(c: Running) -> dict:
    status, body = await c.call("GET", "/v1/nodes", token=API_TOKEN)
    assert status == 200
    c._node_view = body["nodes"][0]  # type: ignore[attr-defined]
    return c._node_view  # type: ignore[attr-defined]


async def until(c: Running, check: Any, timeout: float = 5.0) -> dict:
    async def seen() -> bool:
        return bool(check(await view(c)))

    await eventually(seen, timeout)
    return node_of(c)


async def set_faults(c: Running, **faults: Any) -> None:
    await put_faults(c.fleet.nodes[0].url, **faults)


async def put_faults(url: str, **faults: Any) -> None:
    async with aiohttp.ClientSession() as http, http.put(url + "/fake/faults", json=faults) as response:
        assert response.status == 200, await response.text()


def lines(caplog: pytest.LogCaptureFixture, fragment: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if fragment in r.getMessage() and r.levelno >= logging.INFO]


@pytest.mark.parametrize(
    ("mode", "series", "shown"),
    [
        ("nan", "vllm:kv_cache_usage_perc", "NaN"),  # was read as 0.0: the node stayed healthy on a made-up figure
        ("inf", "vllm:num_requests_waiting", "+Inf"),  # was an OverflowError, a traceback every scrape
        ("-inf", "vllm:prefix_cache_hits_total", "-Inf"),  # was a hit rate of 0, believed
    ],
)
async def test_a_non_finite_figure_fails_the_scrape_naming_it_once(tmp_path, caplog, mode, series, shown):
    async with watched(tmp_path, caplog) as c:
        await set_faults(c, metrics=mode, metrics_series=series)
        node = await until(c, lambda n: not n["healthy"])
        assert node["unhealthy_reason"] == f"{series} is {shown}" and not node["quarantined"]
        await asyncio.sleep(0.5)  # five more bad scrapes
        assert len(lines(caplog, "unreachable or unhealthy")) == 1
        assert await c.metric("tao_node_scrape_failures_total", node="node-0", kind="bad_figure") >= 2
        await set_faults(c)
        node = await until(c, lambda n: n["healthy"])
        assert node["unhealthy_reason"] is None and node["capacity_tokens"] == CAPACITY
        assert len(lines(caplog, "healthy again")) == 1


async def test_an_absurd_or_zero_capacity_quarantines_the_node_and_its_capacity_is_kept(tmp_path, caplog):
    async with watched(tmp_path, caplog) as c:
        assert (await view(c))["capacity_tokens"] == CAPACITY
        await set_faults(c, metrics="huge_capacity")
        node = await until(c, lambda n: n["quarantined"])
        assert not node["healthy"] and node["capacity_tokens"] == CAPACITY  # 1.6e31 is never believed
        assert node["unhealthy_reason"] == "reports 1.6e+31 KV tokens, above fleet.max_capacity_tokens = 1000000000"
        await set_faults(c, metrics="zero_capacity")
        node = await until(c, lambda n: "capacity of 0" in (n["unhealthy_reason"] or ""))
        assert node["quarantined"] and node["capacity_tokens"] == CAPACITY
        await asyncio.sleep(0.3)
        assert len(lines(caplog, "quarantined")) == 2  # one line per change of state, not per scrape
        assert await c.metric("tao_node_quarantines_total", node="node-0", kind="above_ceiling") == 1
        assert await c.metric("tao_node_quarantined", node="node-0") == 1
        await set_faults(c)
        node = await until(c, lambda n: n["healthy"])
        assert not node["quarantined"] and node["capacity_tokens"] == CAPACITY
        assert c.service.coordinator.nodes["node-0"].capacity_tokens == CAPACITY


async def test_a_node_that_starts_with_an_absurd_capacity_is_never_placed_on(tmp_path, caplog):
    config = FakeNodeConfig(profile=tiny_profile(), time_scale=50.0)
    async with FakeFleet(1, config, kv_events=False) as fleet:
        await put_faults(fleet.nodes[0].url, metrics="huge_capacity")
        async with running_coordinator(tmp_path, fleet) as c:
            node = await until(c, lambda n: n["quarantined"])
            assert node["capacity_tokens"] == 0 and not node["healthy"]
            session, token = await c.register(expected=800_000)
            status, body = await c.call("POST", f"/v1/sessions/{session}/acquire", {"wait_s": 0.2}, token)
            assert (status, body["code"]) == (503, "no_healthy_node")


async def test_an_empty_metrics_makes_the_node_unhealthy_with_its_reason(tmp_path, caplog):
    async with watched(tmp_path, caplog) as c:
        await set_faults(c, metrics="empty")
        node = await until(c, lambda n: not n["healthy"])
        assert node["unhealthy_reason"] == "empty /metrics" and not node["quarantined"]
        assert await c.metric("tao_node_scrape_failures_total", node="node-0", kind="empty") >= 2
        await set_faults(c)
        await until(c, lambda n: n["healthy"])


async def test_a_scrape_that_times_out_names_its_reason(tmp_path, caplog):
    async with watched(tmp_path, caplog) as c:
        await set_faults(c, metrics_delay_s=1.0)  # the test coordinator gives a scrape 0.5 s
        node = await until(c, lambda n: not n["healthy"])
        reason = "no answer within the scrape timeout (0.5 s)"
        assert lines(caplog, "unreachable or unhealthy") == [f"node node-0 unreachable or unhealthy: {reason}"]
        assert node["unhealthy_reason"] == reason
        await set_faults(c)
        await until(c, lambda n: n["healthy"], timeout=8.0)
