"""`tao bench memory --sessions N`: the resident memory one live session costs the coordinator, by kind of session.

Each kind runs against a `tao coordinator` process of its own (no auth, loopback, a fresh state directory) beside
one fake vLLM node: a few sessions of the kind warm every code path up, then the coordinator's VmRSS is read, the
kind's sessions are made, and VmRSS is read again once the planner is idle. The growth over the sessions made is
the cost of one:

- `registered`: a usual agent context (harness, workflow, model, two labels, two expected tools), nothing else —
  what a flood of registrations costs (N sessions);
- `active`: the same context, then model calls and tool calls until the session's timeline is full
  (`timeline.ENTRIES` entries) — a usual session that has been busy for a while (N / 5 sessions);
- `limits`: every limit a client can reach at once (the defaults of `core/settings.py`), every string in 4-byte
  characters: the context at `max_context_bytes`, a timeline full of model calls with the longest error, a learned
  level of its own for each of 64 tools, and 64 tools running whose ids and names fill `max_running_tool_bytes`
  (N / 5 sessions).

Resident memory includes what the allocators keep (pymalloc arenas, glibc heaps); `limits.SESSION_BYTES_BOUND`
states the bound as tracemalloc counts it (`tests/web/test_adversarial.py`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from ..core.settings import CoreSettings
from ..fakevllm import FakeNodeConfig, ThreadedFleet
from ..local_coordinator import coordinator_process
from ..web.limits import SESSION_BYTES_BOUND
from ..web.timeline import ENTRIES
from .memory import rss_bytes

LIMITS = CoreSettings()
"""The limits a session can reach at once: the coordinator's defaults."""
MAX_CONTEXT_BYTES = LIMITS.max_context_bytes
MAX_RUNNING_TOOLS = LIMITS.max_running_tools
WIDE = "\U0001f600"
TOOL_NAMES = [f"{k:02d}" + WIDE * 14 for k in range(MAX_RUNNING_TOOLS)]
WARMUP = 5
DRIVERS = 8
"""Sessions made at once."""


@dataclass
class KindFigures:
    kind: str
    sessions: int
    rss_before_bytes: int
    rss_after_bytes: int
    per_session_bytes: float
    seconds: float


def usual_context(k: int) -> dict[str, Any]:
    return {
        "harness": "claude-code",
        "workflow_id": f"wf-{k:06d}",
        "model": "Qwen/Qwen3-32B",
        "labels": {"team": "agents", "repo": "tao"},
        "expected_next_tools": ["Bash", "Read"],
    }


def largest_context() -> dict[str, Any]:
    """Every string of the context present, in 4-byte characters, their UTF-8 exactly `MAX_CONTEXT_BYTES`."""
    context: dict[str, Any] = {name: WIDE * 13 for name in ("harness", "workflow_id", "parent_session_id", "model")}
    context["client_session_id"] = WIDE * 13
    context["labels"] = {f"{k:02d}" + WIDE * 12: WIDE * 13 for k in range(50)}
    context["expected_next_tools"] = [f"{k:02d}" + WIDE * 12 for k in range(50)]
    left = MAX_CONTEXT_BYTES - (5 * 52 + 50 * 50 + 50 * 52 + 50 * 50)
    for name, room in (("harness", 87), ("model", 187), ("workflow_id", 187)):
        context[name] += "x" * min(room, left)
        left -= min(room, left)
    return context


class _Client:
    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.url = http, url

    async def post(self, path: str, body: Any, token: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.post(self.url + path, json=body, headers=headers) as answer:
            if answer.status >= 300:
                raise RuntimeError(f"{path}: {answer.status} {await answer.text()}")
            return await answer.json() if answer.status != 204 else None

    async def events(self, events: list[dict[str, Any]]) -> None:
        answer = await self.post("/v1/events", {"events": events})
        refused = [r for r in answer["results"] if not r["ok"]]
        if refused:
            raise RuntimeError(f"/v1/events refused {len(refused)} events: {refused[0]}")

    async def call(self, session: str, token: str, error: str | None = None) -> None:
        grant = await self.post(f"/v1/sessions/{session}/acquire", {"wait_s": 30}, token)
        end = {"node": grant["node"], "lease_id": grant["lease_id"], "prompt_tokens": 2000, "completion_tokens": 50}
        await self.post(f"/v1/sessions/{session}/llm_end", {**end, **({"error": error} if error else {})}, token)


def _tool(session: str, token: str, kind: str, call_id: str, tool: str = "") -> dict[str, Any]:
    part = {"call_id": call_id, "tool": tool} if kind == "tool_start" else {"call_id": call_id, "duration_s": 0.2}
    return {"kind": kind, "session_id": session, "session_token": token, kind: part}


async def _active(client: _Client, k: int) -> None:
    registered = await client.post("/v1/sessions", {"context": usual_context(k), "expected_input_tokens": 2000})
    session, token = registered["session_id"], registered["session_token"]
    for turn in range(ENTRIES // 5 + 1):  # each turn: in_llm, its call, admitted, the tool, in_tool, ready
        await client.call(session, token)
        call_id = f"toolu_{turn:024d}"
        await client.events(
            [_tool(session, token, "tool_start", call_id, "Bash"), _tool(session, token, "tool_end", call_id)]
        )


async def _limits(client: _Client, k: int) -> None:
    registered = await client.post("/v1/sessions", {"context": largest_context(), "expected_input_tokens": 2000})
    session, token = registered["session_id"], registered["session_token"]
    for _ in range((ENTRIES - 2 * MAX_RUNNING_TOOLS) // 3):
        await client.call(session, token, error=WIDE * 2_000)
    ended = [f"L{k:02d}" + WIDE * 15 for k in range(MAX_RUNNING_TOOLS)]
    await client.events([_tool(session, token, "tool_start", i, TOOL_NAMES[k]) for k, i in enumerate(ended)])
    await client.events([_tool(session, token, "tool_end", i) for i in ended])
    running = [f"{k:02d}" + WIDE * 17 for k in range(MAX_RUNNING_TOOLS)]
    await client.events([_tool(session, token, "tool_start", i, TOOL_NAMES[k]) for k, i in enumerate(running)])


async def _registered_batch(client: _Client, first: int, count: int) -> None:
    events = [
        {"kind": "register", "session_id": f"mem-{k:07d}", "registration": {"context": usual_context(k)}}
        for k in range(first, first + count)
    ]
    await client.events(events)


async def _make(url: str, kind: str, count: int, first: int) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        client = _Client(http, url)
        if kind == "registered":
            for start in range(first, first + count, 500):
                await _registered_batch(client, start, min(500, first + count - start))
            return
        make: Callable[[_Client, int], Awaitable[None]] = _active if kind == "active" else _limits
        numbers = iter(range(first, first + count))

        async def driver() -> None:
            for k in numbers:
                await make(client, k)

        await asyncio.gather(*(driver() for _ in range(DRIVERS)))


def measure_kind(kind: str, count: int) -> KindFigures:
    with (
        tempfile.TemporaryDirectory(prefix="tao-session-memory-") as scratch,
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
    ):
        config = Path(scratch) / "memory.toml"
        config.write_text(f"[limits]\nmax_live_sessions = {count + WARMUP}\nregistration_burst = {count + WARMUP}\n")
        extra = ["--config", str(config), "--log-level", "warning"]
        with coordinator_process([f"node-0={fleet.urls[0]},100000000"], extra_args=extra) as coordinator:
            asyncio.run(_make(coordinator.url, kind, WARMUP, 0))
            time.sleep(0.5)
            before = rss_bytes(coordinator.process.pid)
            started = time.perf_counter()
            asyncio.run(_make(coordinator.url, kind, count, WARMUP))
            seconds = time.perf_counter() - started
            time.sleep(1.0)  # the planner and the store go idle
            after = rss_bytes(coordinator.process.pid)
    return KindFigures(kind, count, before, after, (after - before) / count, round(seconds, 1))


def run(sessions: int, json_path: Path | None) -> int:
    kinds = [("registered", sessions), ("active", max(1, sessions // 5)), ("limits", max(1, sessions // 5))]
    figures = []
    for kind, count in kinds:
        print(f"{kind}: making {count:,} sessions …", file=sys.stderr, flush=True)
        figures.append(measure_kind(kind, count))
    print(f"{'kind':<11} {'sessions':>9} {'RSS before':>11} {'RSS after':>10} {'per session':>12} {'seconds':>8}")
    for f in figures:
        before, after = f.rss_before_bytes / 2**20, f.rss_after_bytes / 2**20
        print(
            f"{f.kind:<11} {f.sessions:>9,} {before:>7.1f} MiB {after:>6.1f} MiB"
            f" {f.per_session_bytes / 1024:>8.1f} KiB {f.seconds:>8.1f}"
        )
    print(f"bound per session (tracemalloc, limits.SESSION_BYTES_BOUND): {SESSION_BYTES_BOUND / 1024:.0f} KiB")
    if json_path:
        json_path.write_text(json.dumps([asdict(f) for f in figures], indent=2) + "\n")
        print(f"wrote {json_path}")
    return 0
