"""`tao bench memory`: the live coordinator's learned state stays bounded, however many distinct tools clients name.

A real coordinator runs in its own process (`tao coordinator`, no auth, loopback) on a fresh state directory beside
one fake vLLM node. The benchmark registers one session, warms the coordinator up with `--warmup` calls of a single
tool, then reports `--tools` calls of distinct tools (start and end pairs, `--batch` pairs per `POST /v1/events`)
while it samples the coordinator's resident memory (VmRSS of /proc/PID/status). Every name is a new learned level;
past `forecast_max_levels` each one evicts the least recently used. The peak growth over the warmed-up figure must
stay within

    forecast_max_levels × (one-sample level + its name) + ALLOWANCE_BYTES

A one-sample level is `history.py`'s model at one sample (two 8-byte numbers plus about 0.4 KiB of objects) and its
name a str of 49 bytes plus its length; the benchmark also measures it in-process with tracemalloc. ALLOWANCE_BYTES
is what the traffic itself may keep resident once (see its docstring).

Then it stops the coordinator (SIGTERM: the store flushes), starts another on the same state directory and reads
how many levels it loaded (its start-up log line) and how many rows the database keeps after the start-up prune.

`--sessions N` measures instead the resident memory one live session costs, for usual sessions and for one at
every limit a client can reach (`session_memory.py`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from ..core.settings import CoreSettings
from ..fakevllm.config import FakeNodeConfig
from ..local_coordinator import free_port, wait_ready
from ..progress import Progress

ONE_SAMPLE_LEVEL_BYTES = 2 * 8 + 400
"""`history.py`'s per-level model (two arrays of 8-byte numbers plus about 0.4 KiB of objects) at one sample."""

ALLOWANCE_BYTES = 16 << 20
"""Resident memory the traffic may add once, whatever the number of tools: the writer thread's SQLite page cache
(2 MiB at SQLite's default `cache_size`; its prunes stay in SQLite), one batch in flight (a 1,000-event request of
100 KB peaks at 2.8 MiB parsed and answered, by tracemalloc) and the rows it queues for the writer, and what the
allocators keep of such peaks (pymalloc arenas of 1 MiB and glibc heaps return memory only when wholly free)."""

_LOADED = re.compile(r"loaded (\d+) tool durations into (\d+) learned levels")


@dataclass
class MemoryFigures:
    tools: int
    max_levels: int
    window: int
    level_bytes_stated: int
    """One one-sample level with its name, as the bound counts it."""
    level_bytes_measured: float
    """The same, measured with tracemalloc on a `ToolHistory` in this process."""
    allowance_bytes: int
    bound_bytes: int
    rss_before_bytes: int
    rss_peak_bytes: int
    rss_after_bytes: int
    growth_bytes: int
    within_bound: bool
    seconds: float
    pairs_per_s: float
    db_rows_before_restart: int
    db_bytes_before_restart: int
    durations_loaded: int
    levels_loaded: int
    db_rows_after_prune: int
    db_bytes_after_prune: int
    rss_samples: list[tuple[int, int]] = field(default_factory=list)
    """(distinct tools reported, VmRSS bytes)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", type=int, default=100_000, help="distinct tool names reported")
    parser.add_argument(
        "--max-levels",
        type=int,
        default=CoreSettings().forecast_max_levels,
        help="the coordinator's forecast_max_levels",
    )
    parser.add_argument("--batch", type=int, default=500, help="start/end pairs per /v1/events request")
    parser.add_argument("--warmup", type=int, default=2_000, help="calls of one tool before the first sample")
    parser.add_argument("--samples", type=int, default=50, help="memory samples during the run")
    parser.add_argument(
        "--sessions",
        type=int,
        default=0,
        metavar="N",
        help="measure the memory per live session instead: N registered, N/5 active and N/5 at every limit",
    )
    parser.add_argument("--json", type=Path, help="write the figures as JSON to this file")


def tool_name(k: int) -> str:
    return f"bench-tool-{k:06d}"


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS line")


def measured_level_bytes(names: int = 4096) -> float:
    """Bytes per one-sample level (name included) that a `ToolHistory` holds, by tracemalloc."""
    from ..core.forecast import ToolHistory, ToolKey

    history = ToolHistory(max_levels=names)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(2 * names):
            history.add(ToolKey.of(tool_name(k)), 1.0)
        return (tracemalloc.get_traced_memory()[0] - before) / names
    finally:
        tracemalloc.stop()


@dataclass
class _Process:
    url: str
    pid: int
    log: Path


@contextmanager
def _coordinator(state: Path, node: str, max_levels: int, log: Path) -> Iterator[_Process]:
    """`tao coordinator` on a free loopback port; stopped with SIGTERM (a graceful, flushing shutdown)."""
    config = state.parent / "memory-bench.toml"
    config.write_text(f"[core]\nforecast_max_levels = {max_levels}\n")
    port = free_port()
    command = [sys.executable, "-m", "tao_sdk.cli", "coordinator", "--insecure-no-auth", "--port", str(port)]
    command += ["--config", str(config), "--state-dir", str(state), "--log-format", "json", "--node", node]
    with log.open("w") as errors:
        server = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=errors)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, server)
            yield _Process(url, server.pid, log)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)


def _loaded(log: Path) -> tuple[int, int]:
    for line in log.read_text().splitlines():
        found = _LOADED.search(line)
        if found:
            return int(found[1]), int(found[2])
    raise RuntimeError(f"{log}: the coordinator logged no `loaded … learned levels` line")


def _database(state: Path) -> tuple[int, int]:
    from ..store import STORE_FILE

    path = state / STORE_FILE
    with sqlite3.connect(path) as db:
        rows = int(db.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0])
    size = sum(p.stat().st_size for p in state.glob(STORE_FILE + "*"))
    return rows, size


def _pairs(session: str, first_call: int, tools: list[str]) -> dict[str, Any]:
    events = []
    for k, tool in enumerate(tools, first_call):
        call = f"c{k}"
        events.append({"kind": "tool_start", "session_id": session, "tool_start": {"call_id": call, "tool": tool}})
        events.append({"kind": "tool_end", "session_id": session, "tool_end": {"call_id": call, "duration_s": 0.5}})
    return {"events": events}


def _post(http: httpx2.Client, path: str, body: Any) -> Any:
    response = http.post(path, json=body)
    if response.status_code >= 300:
        raise RuntimeError(f"{path}: {response.status_code} {response.text}")
    answer: Any = response.json() if response.status_code != 204 else None
    if path == "/v1/events" and not all(result["ok"] for result in answer["results"]):
        raise RuntimeError(f"/v1/events refused an event: {answer['results']}")
    return answer


def _report(process: _Process, args: argparse.Namespace) -> tuple[int, int, list[tuple[int, int]], float]:
    """Warm up, then report the distinct tools; returns RSS before and after, the samples and the seconds taken."""
    every = max(1, args.tools // max(1, args.samples))
    with httpx2.Client(base_url=process.url, timeout=120) as http:
        session = "memory-bench"
        _post(http, "/v1/sessions", {"session_id": session, "expected_input_tokens": 2000})
        for start in range(0, args.warmup, args.batch):
            _post(http, "/v1/events", _pairs(session, start, ["warmup"] * min(args.batch, args.warmup - start)))
        time.sleep(0.5)  # let the writer thread and the planner go idle before the baseline
        before = rss_bytes(process.pid)
        samples = [(0, before)]
        progress = Progress(args.tools, "tools")
        started = time.perf_counter()
        for start in range(0, args.tools, args.batch):
            tools = [tool_name(k) for k in range(start, min(args.tools, start + args.batch))]
            _post(http, "/v1/events", _pairs(session, args.warmup + start, tools))
            progress.advance(len(tools))
            sent = start + len(tools)
            if sent // every != start // every or sent == args.tools:
                samples.append((sent, rss_bytes(process.pid)))
        seconds = time.perf_counter() - started
        progress.close()
        time.sleep(0.5)
        after = rss_bytes(process.pid)
    return before, after, samples, seconds


def measure_memory(args: argparse.Namespace) -> MemoryFigures:
    from ..core.forecast import ToolKey
    from ..fakevllm.fleet import ThreadedFleet

    with (
        tempfile.TemporaryDirectory() as scratch,
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
    ):
        state = Path(scratch) / "state"
        node = f"node-0={fleet.urls[0]},10000000"
        with _coordinator(state, node, args.max_levels, Path(scratch) / "first.log") as first:
            before, after, samples, seconds = _report(first, args)
        rows_before, bytes_before = _database(state)
        with _coordinator(state, node, args.max_levels, Path(scratch) / "second.log") as second:
            durations_loaded, levels_loaded = _loaded(second.log)
        rows_after, bytes_after = _database(state)  # the start-up prune ran: close drains the writer
    level_bytes = ONE_SAMPLE_LEVEL_BYTES + sys.getsizeof(ToolKey.of(tool_name(0)).tool)
    bound = args.max_levels * level_bytes + ALLOWANCE_BYTES
    peak = max(rss for _, rss in [*samples, (0, after)])
    return MemoryFigures(
        tools=args.tools,
        max_levels=args.max_levels,
        window=CoreSettings().forecast_window,
        level_bytes_stated=level_bytes,
        level_bytes_measured=round(measured_level_bytes(), 1),
        allowance_bytes=ALLOWANCE_BYTES,
        bound_bytes=bound,
        rss_before_bytes=before,
        rss_peak_bytes=peak,
        rss_after_bytes=after,
        growth_bytes=peak - before,
        within_bound=peak - before <= bound,
        seconds=round(seconds, 2),
        pairs_per_s=round(args.tools / seconds, 1),
        db_rows_before_restart=rows_before,
        db_bytes_before_restart=bytes_before,
        durations_loaded=durations_loaded,
        levels_loaded=levels_loaded,
        db_rows_after_prune=rows_after,
        db_bytes_after_prune=bytes_after,
        rss_samples=samples,
    )


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def run(args: argparse.Namespace) -> int:
    if args.sessions:
        if args.sessions < 5 or not Path("/proc/self/status").exists():
            print("tao bench memory: --sessions ≥ 5, and it reads VmRSS from /proc (Linux only)", file=sys.stderr)
            return 2
        from . import session_memory  # its kinds of sessions are needed only here

        return session_memory.run(args.sessions, args.json)
    if args.tools < 1 or args.max_levels < 2 or not 1 <= args.batch <= 500 or args.warmup < 0:
        print("tao bench memory: --tools ≥ 1, --max-levels ≥ 2, 1 ≤ --batch ≤ 500, --warmup ≥ 0", file=sys.stderr)
        return 2
    if not Path("/proc/self/status").exists():
        print("tao bench memory: reads VmRSS from /proc, so it runs on Linux only", file=sys.stderr)
        return 2
    f = measure_memory(args)
    print(f"{f.tools:,} distinct tools reported in {f.seconds:.1f} s ({f.pairs_per_s:,.0f} start/end pairs/s)")
    print(
        f"coordinator RSS: {_mib(f.rss_before_bytes)} warmed up, peak {_mib(f.rss_peak_bytes)}, "
        f"after {_mib(f.rss_after_bytes)}; growth {_mib(f.growth_bytes)}"
    )
    print(
        f"bound: {f.max_levels:,} levels × {f.level_bytes_stated} B (measured in-process "
        f"{f.level_bytes_measured:.0f} B) + {_mib(f.allowance_bytes)} allowance = {_mib(f.bound_bytes)}: "
        + ("within" if f.within_bound else "EXCEEDED")
    )
    print(f"database before restart: {f.db_rows_before_restart:,} rows, {f.db_bytes_before_restart:,} bytes")
    print(
        f"restart: loaded {f.durations_loaded:,} durations into {f.levels_loaded:,} levels "
        f"(cap {f.max_levels:,}); database after the start-up prune: {f.db_rows_after_prune:,} rows, "
        f"{f.db_bytes_after_prune:,} bytes"
    )
    if args.json:
        args.json.write_text(json.dumps(asdict(f), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if f.within_bound and f.levels_loaded <= f.max_levels else 1
