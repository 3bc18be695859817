"""The latency run of `tao bench coordinator --ha`: what Redis costs an acquire.

One probe session times `samples` acquire round trips (each followed by an untimed `llm_end`, so the next acquire
finds it admitted again) under the raw load of `Scale.sessions` sessions in a process of its own: first against a
single coordinator with SQLite, then against the leader of two replicas on Redis, where every acquire answered has
been written to Redis first.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from ..fakevllm import FakeNodeConfig, ThreadedFleet
from ..local_coordinator import coordinator_process
from ..percentile import percentile
from ..progress import Progress
from .ha_cluster import CLUSTER_NODE_CAPACITY, Scale, bed, wait_leader
from .ha_load import LoadProcess


async def _probe(urls: list[str], samples: int, progress: Progress) -> list[float]:
    """`samples` acquire round trips of one session (each followed by an untimed `llm_end`), in ms."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        url = urls[0]
        async with http.post(url + "/v1/sessions", json={"session_id": "probe"}) as response:
            assert response.status == 201, await response.text()
        timings = []
        for _ in range(samples):
            started = time.perf_counter()
            async with http.post(url + "/v1/sessions/probe/acquire", json={}) as response:
                grant = await response.json()
            timings.append((time.perf_counter() - started) * 1e3)
            end = {"node": grant["node"], "prompt_tokens": 2000, "completion_tokens": 50}
            async with http.post(url + "/v1/sessions/probe/llm_end", json=end) as response:
                await response.read()
            progress.advance()
    return sorted(timings)


def _timed(urls: list[str], scale: Scale, label: str) -> dict[str, float]:
    async def run() -> list[float]:
        load = LoadProcess(urls, scale.sessions, scale.cycle_s, "lat")
        await load.start()
        await asyncio.sleep(1.0)
        timings = await _probe(urls, scale.samples, progress)
        await load.stop()
        return timings

    progress = Progress(scale.samples, f"acquire latency, {label}")
    timings = asyncio.run(run())
    progress.close()
    return {
        "acquire_p50_ms": round(percentile(timings, 0.5, method="nearest"), 3),
        "acquire_p99_ms": round(percentile(timings, 0.99, method="nearest"), 3),
        "acquire_mean_ms": round(statistics.fmean(timings), 3),
    }


def latency(scale: Scale, work: Path) -> dict[str, Any]:
    with ThreadedFleet(2, FakeNodeConfig(time_scale=100), kv_events=False) as fleet:
        nodes = [f"node-{k}={url},{CLUSTER_NODE_CAPACITY}" for k, url in enumerate(fleet.urls)]
        with coordinator_process(nodes) as single:
            sqlite = _timed([single.url], scale, "single process, SQLite")
    with bed(2, work) as (_, running):
        leader = wait_leader(running)
        redis = _timed([leader.url], scale, "leader of 2, Redis")
    return {"samples": scale.samples, "sessions": scale.sessions, "sqlite_single": sqlite, "redis_leader_of_2": redis}
