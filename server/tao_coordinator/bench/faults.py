"""The fault runs of `tao bench coordinator`: what clients see when a node dies, when the coordinator is killed, and
when it stalls. Each run starts its own `tao coordinator` process (loopback, default fleet settings) beside fake
vLLM nodes, and measures from outside, as a client would:

- node killed: sessions admitted over two nodes, one node stopped; the time until `GET /v1/nodes` shows it
  unhealthy, and how many of its idle sessions the planner moved to the other node (and when the last one moved);
- coordinator killed -9 under load: concurrent clients send tool_start/tool_end pairs; SIGKILL; the tool ends that
  were acknowledged (204) against the rows in the SQLite file afterwards, its integrity check, and a restart on it;
- stall: SDK sessions in a loop of `with s.tool("bash", command="true")` and one model call every 0.25 s; the
  coordinator SIGSTOPped for the stall, then resumed. The longest model call during the stall against the SDK's
  bound (`connect_timeout_s + request_timeout_s`, + 0.5 s), and per session the time from the resume to its first
  call the coordinator placed again, against one lease renewal (the SDK renews every `lease_ttl_s / 3`); at the end,
  no session may be left in a phase its client is not in.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx2

import tao_sdk
from tao_sdk.router import SessionConfig

from ..core.settings import CoreSettings
from ..fakevllm import FakeNodeConfig, ThreadedFleet
from ..fakevllm.config import DEFAULT_MODEL
from ..local_coordinator import coordinator_process
from ..progress import Progress
from ..store import STORE_FILE

CAPACITY = 10_000_000
SLACK_S = 0.5


@dataclass
class NodeKill:
    sessions: int
    on_killed_node: int
    notice_s: float
    """From the node's stop to `GET /v1/nodes` showing it unhealthy."""
    moved: int
    """Sessions that held a place on the killed node and hold one on the other node at the end."""
    last_moved_s: float | None
    """From the node's stop to the last of them placed elsewhere."""


@dataclass
class CoordinatorKill:
    load_s: float
    acknowledged: int
    """tool_end reports answered 204 before the kill."""
    rows_after_kill: int
    """Rows in `tool_calls` after SIGKILL, read from the SQLite file (WAL replayed)."""
    lost: int
    """Acknowledged tool ends not in the file: max(0, acknowledged − rows)."""
    integrity: str
    restarted: bool
    """A new coordinator started on the same state directory and served requests."""
    restart_s: float = 0.0
    """From the restart's launch to its first answer with a healthy node."""


@dataclass
class Stall:
    stall_s: float
    sessions: int
    calls: int
    calls_during_stall: int
    longest_call_during_stall_s: float
    call_bound_s: float
    """The SDK's documented bound on a call facing a coordinator that does not answer, + 0.5 s."""
    rescheduled_s: list[float] = field(default_factory=list)
    """Per session: from the resume to the end of its first model call the coordinator placed."""
    renewal_s: float = 0.0
    """One lease renewal: the SDK renews its lease every `lease_ttl_s / 3`."""
    stuck_at_end: int = 0
    """Sessions whose phase at the coordinator disagrees with their client's at the end (in a tool, or in a call)."""
    failed: int = 0
    """Model calls that raised."""
    durations_during_s: list[float] = field(default_factory=list)
    """Each model call that overlapped the stall: its duration."""
    durations_outside_s: list[float] = field(default_factory=list)
    """Each other model call: its duration."""

    @property
    def within_target(self) -> bool:
        rescheduled = len(self.rescheduled_s) == self.sessions and max(self.rescheduled_s) <= self.renewal_s
        return rescheduled and self.longest_call_during_stall_s <= self.call_bound_s and self.stuck_at_end == 0


def _nodes(urls: list[str]) -> list[str]:
    return [f"node-{k}={url},{CAPACITY}" for k, url in enumerate(urls)]


def _get(url: str, path: str) -> Any:
    return httpx2.get(url + path, timeout=5).json()


def node_kill(sessions: int = 40, log_path: Path | None = None) -> NodeKill:
    """Sessions register, make one call and sit idle holding their place; then one node stops."""
    with (
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as first,
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as second,
        coordinator_process(_nodes([first.urls[0], second.urls[0]]), log_path=log_path) as coordinator,
    ):
        url = coordinator.url
        with httpx2.Client(base_url=url, timeout=10) as http:
            for k in range(sessions):
                session = f"kill-{k}"
                http.post("/v1/sessions", json={"session_id": session, "expected_input_tokens": 2000})
                grant = http.post(f"/v1/sessions/{session}/acquire", json={}).json()
                end = {"node": grant["node"], "prompt_tokens": 2000, "completion_tokens": 10}
                http.post(f"/v1/sessions/{session}/llm_end", json=end)
        held = {s["session_id"]: s["node"] for s in _get(url, "/v1/sessions")["sessions"]}
        victim = max(("node-0", "node-1"), key=lambda node: sum(n == node for n in held.values()))
        on_victim = {session for session, node in held.items() if node == victim}
        stopped = time.monotonic()
        (first if victim == "node-0" else second).stop()
        notice_s = until(lambda: not _healthy(url, victim), stopped, 30.0)
        last_moved_s = until(lambda: _moved(url, on_victim, victim) == len(on_victim), stopped, 30.0)
        moved = _moved(url, on_victim, victim)
    return NodeKill(sessions, len(on_victim), notice_s or float("nan"), moved, last_moved_s)


def _healthy(url: str, node: str) -> bool:
    return bool(next(n["healthy"] for n in _get(url, "/v1/nodes")["nodes"] if n["name"] == node))


def _moved(url: str, sessions: set[str], victim: str) -> int:
    now = {s["session_id"]: s["node"] for s in _get(url, "/v1/sessions")["sessions"]}
    return sum(now.get(session) not in (None, victim) for session in sessions)


def until(check: Any, since: float, timeout: float) -> float | None:
    """Seconds from `since` until `check()` holds, polled every 20 ms; None if it never did within `timeout`."""
    while time.monotonic() - since < timeout:
        if check():
            return time.monotonic() - since
        time.sleep(0.02)
    return None


def coordinator_kill(load_s: float = 3.0, clients: int = 16, log_path: Path | None = None) -> CoordinatorKill:
    with (
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
        tempfile.TemporaryDirectory() as state,
    ):
        state_dir = Path(state)
        with coordinator_process(_nodes(fleet.urls), state_dir, log_path=log_path) as coordinator:
            acknowledged = asyncio.run(_tool_load(coordinator.url, load_s, clients, coordinator.kill))
        rows, integrity = _read_store(state_dir)
        started = time.monotonic()
        with coordinator_process(_nodes(fleet.urls), state_dir, log_path=log_path) as again:
            restarted = _get(again.url, "/healthz")["status"] == "ok"
            restart_s = time.monotonic() - started
    return CoordinatorKill(load_s, acknowledged, rows, max(0, acknowledged - rows), integrity, restarted, restart_s)


async def _tool_load(url: str, load_s: float, clients: int, kill: Any) -> int:
    acknowledged = 0
    deadline = time.monotonic() + load_s

    async def client(k: int, http: aiohttp.ClientSession) -> None:
        nonlocal acknowledged
        session = f"load-{k}"
        await http.post(f"{url}/v1/sessions", json={"session_id": session})
        call = 0
        try:
            while True:
                call += 1
                body = {"call_id": f"c{call}", "tool": "bash", "program": "true"}
                async with http.post(f"{url}/v1/sessions/{session}/tool_start", json=body) as started:
                    if started.status != 204:
                        return
                end = {"call_id": f"c{call}", "duration_s": 0.01}
                async with http.post(f"{url}/v1/sessions/{session}/tool_end", json=end) as ended:
                    if ended.status == 204:
                        acknowledged += 1
        except (aiohttp.ClientError, TimeoutError):
            return  # the coordinator is gone

    async def killer() -> None:
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        await asyncio.to_thread(kill)

    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await asyncio.gather(killer(), *(client(k, http) for k in range(clients)))
    return acknowledged


def _read_store(state_dir: Path) -> tuple[int, str]:
    with sqlite3.connect(state_dir / STORE_FILE) as connection:
        rows = int(connection.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0])
        integrity = str(connection.execute("PRAGMA integrity_check").fetchone()[0])
    return rows, integrity


@dataclass
class _Call:
    started: float
    ended: float
    scheduled: bool
    failed: bool = False


def stall(
    stall_s: float, sessions: int = 8, before_s: float = 3.0, after_s: float = 25.0, log_path: Path | None = None
) -> Stall:
    """`sessions` SDK sessions with default timeouts loop over a tool and a model call; the coordinator is stopped
    for `stall_s` after `before_s`, and the run goes on for `after_s` after the resume."""
    config = SessionConfig()
    bound = config.connect_timeout_s + config.request_timeout_s + SLACK_S
    with (
        ThreadedFleet(2, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
        coordinator_process(_nodes(fleet.urls), log_path=log_path) as coordinator,
    ):
        stop, release = threading.Event(), threading.Event()
        stopped = threading.Semaphore(0)
        calls: list[list[_Call]] = [[] for _ in range(sessions)]
        ids: list[str] = [""] * sessions
        agents = [
            threading.Thread(
                target=_agent, args=(coordinator.url, calls[k], ids, k, (stop, stopped, release)), daemon=True
            )
            for k in range(sessions)
        ]
        for agent in agents:
            agent.start()
        progress = Progress(int(before_s + stall_s + after_s), f"stall {stall_s:g} s")
        _tick(progress, before_s)
        paused = time.monotonic()
        coordinator.pause()
        _tick(progress, stall_s)
        coordinator.resume()
        resumed = time.monotonic()
        _tick(progress, after_s)
        stop.set()
        for _ in agents:
            stopped.acquire(timeout=30)
        phases = {s["session_id"]: s["phase"] for s in _get(coordinator.url, "/v1/sessions")["sessions"]}
        release.set()
        for agent in agents:
            agent.join(30)
        progress.close()
    every = [c for mine in calls for c in mine]
    during = [c for c in every if c.ended > paused and c.started < resumed]
    rescheduled = [
        min((c.ended - resumed for c in mine if c.scheduled and c.ended > resumed), default=float("inf"))
        for mine in calls
    ]
    return Stall(
        stall_s=stall_s,
        sessions=sessions,
        calls=sum(len(mine) for mine in calls),
        calls_during_stall=len(during),
        longest_call_during_stall_s=max((c.ended - max(c.started, paused) for c in during), default=0.0),
        call_bound_s=bound,
        rescheduled_s=[r for r in rescheduled if r != float("inf")],
        renewal_s=CoreSettings().lease_ttl_s / 3,
        stuck_at_end=sum(phases.get(session) not in ("ready", "admitted", "waiting") for session in ids),
        failed=sum(c.failed for mine in calls for c in mine),
        durations_during_s=[c.ended - c.started for c in during],
        durations_outside_s=[c.ended - c.started for c in every if not (c.ended > paused and c.started < resumed)],
    )


def _tick(progress: Progress, seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        progress.advance()


def _agent(
    url: str,
    calls: list[_Call],
    ids: list[str],
    k: int,
    signals: tuple[threading.Event, threading.Semaphore, threading.Event],
) -> None:
    """Each session's loop under a stall: a tool, then one model call, every 0.25 s; each call recorded with whether the
    coordinator placed it (the session's grant changed) or the SDK routed it on its own. Once stopped, it says so and
    keeps its session open until released, so that the coordinator's view of it can be read."""
    stop, stopped, release = signals
    with tao_sdk.session(url, context=tao_sdk.AgentContext(harness="bench-stall")) as s:
        ids[k] = s.id
        client = s.openai(max_retries=0)
        turn = 0
        while not stop.is_set():
            begun = time.monotonic()
            with s.tool("bash", command="true"):
                pass
            before = s.state.last
            started = time.monotonic()
            messages = [{"role": "user", "content": f"turn {turn} of a looping agent"}]
            try:
                client.chat.completions.create(model=DEFAULT_MODEL, messages=messages, max_tokens=2)
            except Exception:  # counted: a call the agent saw fail
                calls.append(_Call(started, time.monotonic(), False, failed=True))
            else:
                calls.append(_Call(started, time.monotonic(), s.state.last is not before))
            turn += 1
            stop.wait(max(0.0, 0.25 - (time.monotonic() - begun)))
        s.flush()
        stopped.release()
        release.wait(60)
