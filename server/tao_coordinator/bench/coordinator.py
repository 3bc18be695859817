"""`tao bench coordinator`: what the live coordinator costs a client, on loopback.

A real coordinator runs in its own process (`tao coordinator`, no auth, loopback) beside two fake vLLM nodes large
enough to admit every session. The benchmark registers `--sessions` sessions and admits them all, then measures:

- acquire round trip for an already-admitted session (the call every model request makes): one acquire at a time,
  each followed by an untimed `llm_end` so the next acquire finds the session admitted again;
- events ingested per second: `tool_start`/`tool_end` pairs through `POST /v1/events` batches from several
  concurrent clients (how hook processes report), and through the per-event endpoints;
- the same pairs fed to the scheduling core alone, in this process (no HTTP, no store): what of the ingestion cost
  is the core's.

Then, unless `--no-faults`, the fault runs of `faults.py`: a node killed, the coordinator killed -9 under load, and
a stall of each of `--stalls` seconds under SDK sessions; each prints its figures and its target.

`--ha` runs instead the high-availability runs on Redis (`ha.py`): the leader of `--replicas` replicas killed under
load, a paused leader, Redis costs against SQLite, and Redis restarted under load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fakevllm.config import FakeNodeConfig
from ..local_coordinator import local_coordinator

if TYPE_CHECKING:
    import aiohttp


@dataclass
class CoordinatorFigures:
    sessions: int
    acquire_samples: int
    acquire_p50_ms: float
    acquire_p99_ms: float
    acquire_mean_ms: float
    batched_events_per_s: float
    single_events_per_s: float
    core_events_per_s: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=1000, help="concurrent sessions registered")
    parser.add_argument("--samples", type=int, default=2000, help="acquire round trips timed")
    parser.add_argument("--events", type=int, default=20_000, help="events sent per ingestion test")
    parser.add_argument("--faults", action=argparse.BooleanOptionalAction, default=True, help="the fault runs (on)")
    parser.add_argument("--stalls", default="10,45", help="coordinator stalls to run, in seconds")
    parser.add_argument("--stall-sessions", type=int, default=8, help="SDK sessions during a stall")
    parser.add_argument("--json", type=Path, help="write the figures as JSON to this file")
    parser.add_argument("--ha", action="store_true", help="only the high-availability runs on Redis (bench/ha.py)")
    parser.add_argument("--replicas", default="2,3", help="with --ha: replica counts whose leader is killed")
    parser.add_argument("--ha-sessions", type=int, default=500, help="with --ha: raw sessions under load")
    parser.add_argument("--ha-sdk-sessions", type=int, default=8, help="with --ha: SDK sessions beside them")
    parser.add_argument("--ha-phase-s", type=float, default=4.0, help="with --ha: load before and after a fault")
    parser.add_argument("--ha-cycle-s", type=float, default=5.0, help="with --ha: seconds between calls")


class _Client:
    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url

    async def post(self, path: str, body: Any = None) -> Any:
        async with self.http.post(self.url + path, json=body) as response:
            if response.status >= 300:
                raise RuntimeError(f"{path}: {response.status} {await response.text()}")
            return await response.json() if response.status != 204 else None

    async def wait_ready(self, timeout: float = 20.0) -> None:
        import aiohttp

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                async with self.http.get(self.url + "/healthz") as response:
                    if response.status == 200 and (await response.json())["healthy_nodes"] > 0:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError("the coordinator did not become ready")


async def _measure(url: str, args: argparse.Namespace, core_events_per_s: float) -> CoordinatorFigures:
    import aiohttp

    from ..percentile import percentile

    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as http:
        client = _Client(http, url)
        await client.wait_ready()
        sessions = [f"bench-{k}" for k in range(args.sessions)]
        await _gather(client.post("/v1/sessions", {"session_id": s, "expected_input_tokens": 2000}) for s in sessions)
        grants = await _gather(client.post(f"/v1/sessions/{s}/acquire", {}) for s in sessions)
        await _gather(_end_call(client, s, g["node"]) for s, g in zip(sessions, grants, strict=True))
        timings = []
        for k in range(args.samples):
            session = sessions[k % len(sessions)]
            started = time.perf_counter()
            grant = await client.post(f"/v1/sessions/{session}/acquire", {})
            timings.append((time.perf_counter() - started) * 1e3)
            await _end_call(client, session, grant["node"])
        batched = await _ingest_batched(client, sessions, args.events)
        single = await _ingest_single(client, sessions, args.events // 4)
    return CoordinatorFigures(
        sessions=args.sessions,
        acquire_samples=len(timings),
        acquire_p50_ms=percentile(timings, 0.5, method="nearest"),
        acquire_p99_ms=percentile(timings, 0.99, method="nearest"),
        acquire_mean_ms=statistics.fmean(timings),
        batched_events_per_s=batched,
        single_events_per_s=single,
        core_events_per_s=core_events_per_s,
    )


def _core_events_per_s(sessions: int, events: int, capacity: int) -> float:
    """The ingestion test's pairs fed to a core of its own, on nodes of the live ones' `capacity`, its sessions
    admitted as the live ones are."""
    from ..core.coordinator import Coordinator
    from ..core.events import Acquire, LlmEnd, NodeUpdate, Register, ToolEnd, ToolStart
    from ..core.policies import make_policy
    from ..core.settings import CoreSettings

    core = Coordinator(make_policy("tao"), CoreSettings())
    for node in ("node-0", "node-1"):
        core.on_event(NodeUpdate(node, capacity), 0.0)
    names = [f"bench-{k}" for k in range(sessions)]
    for name in names:
        core.on_event(Register(name, expected_input_tokens=2000), 0.0)
        core.on_event(Acquire(name), 0.0)
    for name in names:
        placed = core.session(name).node
        assert placed is not None, "every session is admitted: the nodes hold them all"
        core.on_event(LlmEnd(name, placed, 2000, 0, 50), 0.0)
    now = 1.0
    started = time.perf_counter()
    for k in range(events // 2):
        name = names[k % sessions]
        now += 1e-4
        core.on_event(ToolStart(name, f"b{k}", "bash"), now)
        core.on_event(ToolEnd(name, f"b{k}", 0.5), now)
    return 2 * (events // 2) / (time.perf_counter() - started)


async def _gather(calls: Any) -> list[Any]:
    return list(await asyncio.gather(*calls))


async def _end_call(client: _Client, session: str, node: str) -> None:
    await client.post(f"/v1/sessions/{session}/llm_end", {"node": node, "prompt_tokens": 2000, "completion_tokens": 50})


async def _ingest_batched(client: _Client, sessions: list[str], events: int, batch: int = 100) -> float:
    def pair(k: int) -> list[dict[str, Any]]:
        session, call = sessions[k % len(sessions)], f"b{k}"
        return [
            {"kind": "tool_start", "session_id": session, "tool_start": {"call_id": call, "tool": "bash"}},
            {"kind": "tool_end", "session_id": session, "tool_end": {"call_id": call, "duration_s": 0.5}},
        ]

    bodies = [
        {"events": [event for k in range(start, start + batch // 2) for event in pair(k)]}
        for start in range(0, events // 2, batch // 2)
    ]
    started = time.perf_counter()
    for chunk in range(0, len(bodies), 8):
        await _gather(client.post("/v1/events", body) for body in bodies[chunk : chunk + 8])
    return sum(len(b["events"]) for b in bodies) / (time.perf_counter() - started)


async def _ingest_single(client: _Client, sessions: list[str], pairs: int) -> float:
    async def one(k: int) -> None:
        session, call = sessions[k % len(sessions)], f"s{k}"
        await client.post(f"/v1/sessions/{session}/tool_start", {"call_id": call, "tool": "bash"})
        await client.post(f"/v1/sessions/{session}/tool_end", {"call_id": call, "duration_s": 0.5})

    started = time.perf_counter()
    for chunk in range(0, pairs, len(sessions)):
        await _gather(one(k) for k in range(chunk, min(pairs, chunk + len(sessions))))
    return 2 * pairs / (time.perf_counter() - started)


def _stalls(text: str) -> list[float] | None:
    try:
        stalls = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return None
    return stalls if all(math.isfinite(s) and 0 < s <= 600 for s in stalls) else None


def run(args: argparse.Namespace) -> int:
    from ..fakevllm.fleet import ThreadedFleet
    from . import ha_report

    if args.ha:
        return ha_report.run(args)
    if args.sessions < 1 or args.samples < 1 or args.events < 200:
        print("tao bench coordinator: --sessions and --samples must be ≥ 1, --events ≥ 200", file=sys.stderr)
        return 2
    stalls = _stalls(args.stalls)
    if stalls is None or args.stall_sessions < 1:
        print("tao bench coordinator: --stalls takes seconds in (0, 600], comma-separated", file=sys.stderr)
        return 2
    capacity = max(10_000_000, args.sessions * 4_000)
    core_events_per_s = _core_events_per_s(args.sessions, args.events, capacity)  # before the fleet's threads start
    with ThreadedFleet(2, FakeNodeConfig(time_scale=50), kv_events=False) as fleet:
        nodes = [f"node-{k}={url},{capacity}" for k, url in enumerate(fleet.urls)]
        with local_coordinator(nodes) as url:
            figures = asyncio.run(_measure(url, args, core_events_per_s))
    print(f"{figures.sessions} sessions registered and admitted; coordinator in its own process, loopback")
    print(
        f"acquire round trip (admitted session): p50 {figures.acquire_p50_ms:.3f} ms, "
        f"p99 {figures.acquire_p99_ms:.3f} ms, mean {figures.acquire_mean_ms:.3f} ms ({figures.acquire_samples})"
    )
    print(
        f"events ingested: {figures.batched_events_per_s:,.0f}/s in /v1/events batches of 100, "
        f"{figures.single_events_per_s:,.0f}/s one request per event; "
        f"{figures.core_events_per_s:,.0f}/s fed to the scheduling core alone"
    )
    report: dict[str, Any] = asdict(figures)
    if args.faults:
        report["faults"] = _fault_runs(stalls, args.stall_sessions)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _fault_runs(stalls: list[float], sessions: int) -> dict[str, Any]:
    from . import faults

    print("fault runs (each with a coordinator process of its own, default settings):", flush=True)
    killed = faults.node_kill()
    moved = "never" if killed.last_moved_s is None else f"{killed.last_moved_s:.2f} s after the stop"
    print(
        f"node killed: noticed after {killed.notice_s:.2f} s; {killed.moved} of the {killed.on_killed_node} sessions "
        f"it held moved to the other node, the last {moved}",
        flush=True,
    )
    crashed = faults.coordinator_kill()
    print(
        f"coordinator killed -9 under load: {crashed.acknowledged:,} tool ends acknowledged in {crashed.load_s:g} s, "
        f"{crashed.rows_after_kill:,} in the SQLite file after the kill ({crashed.lost} lost), integrity "
        f"{crashed.integrity}, restart on it {'served' if crashed.restarted else 'FAILED'}",
        flush=True,
    )
    sdk_log = logging.getLogger("tao_sdk")
    level = sdk_log.level
    sdk_log.setLevel(logging.ERROR)  # every session says once that it detached: expected here, and noise
    try:
        stalled = [faults.stall(stall_s, sessions) for stall_s in stalls]
    finally:
        sdk_log.setLevel(level)
    for run in stalled:
        rescheduled = max(run.rescheduled_s, default=math.inf)
        print(
            f"stall of {run.stall_s:g} s, {run.sessions} SDK sessions: longest model call during it "
            f"{run.longest_call_during_stall_s:.2f} s (bound {run.call_bound_s:g} s; {run.calls_during_stall} calls); "
            f"{len(run.rescheduled_s)}/{run.sessions} sessions scheduled again, the last {rescheduled:.2f} s after "
            f"the resume (one lease renewal: {run.renewal_s:g} s); {run.stuck_at_end} left in a phase their client "
            f"is not in — {'within target' if run.within_target else 'TARGET MISSED'}",
            flush=True,
        )
    return {
        "node_kill": asdict(killed),
        "coordinator_kill": asdict(crashed),
        "stalls": [{**asdict(run), "within_target": run.within_target} for run in stalled],
    }
