"""`tao bench faults`' flood row: one API token floods registrations while another's clients keep working.

A `tao coordinator` process with three API tokens — `default`, `flood` and `normal` — and `max_live_sessions` at
`cap`, beside one fake vLLM node of `CAPACITY` tokens. `clients` clients of the `normal` token loop: register a
session, acquire and end `CALLS_PER_SESSION` model calls, close it; every acquire round trip is timed. First for
`baseline_s` with nothing else going on, then while another process sends `flood` registrations from the `flood`
token over `FLOOD_CONNECTIONS` connections, as fast as the coordinator answers them.

The row: calls = flood registrations tried; failed = the normal token's acquires not answered 200 (or that raised);
added p50/p99 = the normal token's acquire latency during the flood minus its baseline's; detect_s = from the
flood's first request to its first 429. The note gives both phases' p50/p99 (the target is p99 ≤ 50 ms during the
flood at a cap of 1,000), how the flood was answered, and the coordinator's resident memory before and after it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from ...fakevllm import FakeNodeConfig, ThreadedFleet
from ...local_coordinator import coordinator_process
from ...percentile import percentile
from ..faults import CAPACITY
from ..memory import rss_bytes
from . import FaultRow

CALLS_PER_SESSION = 10
FLOOD_CONNECTIONS = 32
TOKENS = {"default": "flood-bench-default-0123456789", "flood": "flood-bench-flood-0123456789"}
NORMAL = "flood-bench-normal-0123456789"


@dataclass
class FloodPhase:
    latencies_ms: list[float] = field(default_factory=list)
    failed: int = 0

    def p(self, share: float) -> float:
        return percentile(self.latencies_ms, share, method="nearest")


async def _flood(url: str, token: str, count: int, connections: int) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    left = iter(range(count))
    first_refusal: float | None = None
    headers = {"Authorization": f"Bearer {token}"}

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal first_refusal
        for _ in left:
            try:
                async with http.post(url + "/v1/sessions", json={"expected_input_tokens": 2000}) as answer:
                    await answer.read()
                    statuses[answer.status] += 1
                    if answer.status == 429 and first_refusal is None:
                        first_refusal = time.monotonic()
            except aiohttp.ClientError:
                statuses[0] += 1

    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
        started = time.monotonic()
        await asyncio.gather(*(worker(http) for _ in range(connections)))
        seconds = time.monotonic() - started
    detect = None if first_refusal is None else first_refusal - started
    return {"statuses": dict(statuses), "detect_s": detect, "seconds": seconds}


async def _flooding(url: str, token: str, count: int) -> dict[str, Any]:
    """The flood, from a process of its own (`python -m` this module), so its work does not slow the measured
    clients' process."""
    command = [sys.executable, "-m", __name__, url, token, str(count), str(FLOOD_CONNECTIONS)]
    child = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    out, _ = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the flood process exited with status {child.returncode}")
    answered: dict[str, Any] = json.loads(out)
    answered["statuses"] = {int(status): n for status, n in answered["statuses"].items()}
    return answered


async def _client(http: aiohttp.ClientSession, url: str, phase: FloodPhase, until: asyncio.Future[Any] | float) -> None:
    """Sessions of the normal token, one after another, until `until` (a deadline, or a future that ends)."""

    def going() -> bool:
        return not until.done() if isinstance(until, asyncio.Future) else time.monotonic() < until

    while going():
        async with http.post(url + "/v1/sessions", json={"expected_input_tokens": 2000}) as answer:
            if answer.status != 201:
                phase.failed += 1
                await asyncio.sleep(0.1)
                continue
            registered = await answer.json()
        session = f"{url}/v1/sessions/{registered['session_id']}"
        auth = {"Authorization": f"Bearer {registered['session_token']}"}
        for _ in range(CALLS_PER_SESSION):
            started = time.perf_counter()
            try:
                async with http.post(session + "/acquire", json={"wait_s": 5}, headers=auth) as answer:
                    grant = await answer.json()
                    status = answer.status
            except aiohttp.ClientError:
                status = 0
            phase.latencies_ms.append((time.perf_counter() - started) * 1000)
            if status != 200:
                phase.failed += 1
                break
            end = {"node": grant["node"], "lease_id": grant["lease_id"], "prompt_tokens": 2000, "completion_tokens": 50}
            async with http.post(session + "/llm_end", json=end, headers=auth) as answer:
                await answer.read()
        async with http.delete(session, headers=auth) as answer:
            await answer.read()


async def _measure(
    url: str, clients: int, baseline_s: float, count: int
) -> tuple[FloodPhase, FloodPhase, dict[str, Any]]:
    baseline, flooded = FloodPhase(), FloodPhase()
    headers = {"Authorization": f"Bearer {NORMAL}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        deadline = time.monotonic() + baseline_s
        await asyncio.gather(*(_client(http, url, baseline, deadline) for _ in range(clients)))
        flooding = asyncio.ensure_future(_flooding(url, TOKENS["flood"], count))
        await asyncio.gather(*(_client(http, url, flooded, flooding) for _ in range(clients)))
        answered = await flooding
    return baseline, flooded, answered


def run(
    flood_size: int = 20_000, cap: int = 1_000, clients: int = 8, baseline_s: float = 3.0, rate: float | None = None
) -> list[FaultRow]:
    """`rate`: `limits.registrations_per_s` (and a burst of `flood_size`) instead of the defaults."""
    with (
        tempfile.TemporaryDirectory(prefix="tao-flood-") as scratch,
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
    ):
        config = Path(scratch) / "flood.toml"
        config.write_text(
            f"[limits]\nmax_live_sessions = {cap}\n"
            + (f"registrations_per_s = {rate}\nregistration_burst = {flood_size}\n" if rate else "")
            + f'\n[[tokens]]\nname = "flood"\ntoken = "{TOKENS["flood"]}"\n\n'
            f'[[tokens]]\nname = "normal"\ntoken = "{NORMAL}"\nregistrations_per_s = 10000\n'
        )
        log = Path(scratch) / "coordinator.log"
        nodes = [f"node-0={fleet.urls[0]},{CAPACITY}"]
        extra = ["--config", str(config)]
        with coordinator_process(nodes, token=TOKENS["default"], log_path=log, extra_args=extra) as coordinator:
            rss_before = rss_bytes(coordinator.process.pid)
            baseline, flooded, answered = asyncio.run(_measure(coordinator.url, clients, baseline_s, flood_size))
            rss_after = rss_bytes(coordinator.process.pid)
            tracebacks = coordinator.tracebacks()
    statuses = answered["statuses"]
    added = [flooded.p(0.5) - baseline.p(0.5), flooded.p(0.99) - baseline.p(0.99)]
    return [
        FaultRow(
            "one token floods registrations",
            calls=flood_size,
            failed=flooded.failed,
            added_p50_ms=round(added[0], 2),
            added_p99_ms=round(added[1], 2),
            detect_s=None if answered["detect_s"] is None else round(answered["detect_s"], 3),
            tracebacks=tracebacks,
            note=(
                f"cap {cap:,}: flood answered 201 ×{statuses.get(201, 0):,}, 429 ×{statuses.get(429, 0):,} in "
                f"{answered['seconds']:.1f} s; other token's acquire p50/p99 {flooded.p(0.5):.1f}/{flooded.p(0.99):.1f}"
                f" ms over {len(flooded.latencies_ms):,} (baseline {baseline.p(0.5):.1f}/{baseline.p(0.99):.1f} ms"
                f" over {len(baseline.latencies_ms):,}, {baseline.failed} failed); coordinator RSS "
                f"{rss_before / 2**20:.0f} → {rss_after / 2**20:.0f} MiB"
            ),
        )
    ]


if __name__ == "__main__":  # the flood's own process: URL TOKEN COUNT CONNECTIONS
    url, token, count, connections = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(_flood(url, token, count, connections))))
