"""`tao bench fake-vllm`: how fast `tao fake-vllm` starts, and how it holds up under concurrent streaming requests.

1. Startup: spawn `tao fake-vllm` on a free loopback port `--startup-trials` times; the startup time is from the
   spawn to the first `200` of `GET /health` (so it includes interpreter start and imports).
2. Load: one more server; `--requests` streaming chat requests (`stream_options.include_usage`), at most
   `--concurrency` in flight, each with a shared system prompt and its own user message. A request counts as an error
   unless it answers 200, streams every chunk of its `max_tokens` and ends with a usage chunk and `data: [DONE]`.
Prints requests/s (wall), latency and time-to-first-token percentiles (wall seconds; × time scale = engine seconds),
errors and the share of prompt tokens served from the prefix cache; `--json PATH` also writes the same figures to
PATH as one JSON object (a figure without samples is null), like the other `tao bench` commands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..local_coordinator import free_port
from ..percentile import percentile
from ..sim.node import UnknownProfile, profile_by_name
from .tokenizer import filler_pieces

if TYPE_CHECKING:
    import aiohttp

HEALTH_TIMEOUT_S = 30.0


@dataclass
class RequestOutcome:
    latency: float
    ttft: float
    chunks: int
    prompt_tokens: int
    cached_tokens: int


@dataclass
class Report:
    time_scale: float
    profile: str
    startup_s: list[float]
    requests: int
    concurrency: int
    errors: int
    wall_s: float
    requests_per_s: float
    latency_p50_s: float
    latency_p99_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    cached_share: float
    error_samples: list[str] = field(default_factory=list)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=1000, help="streaming requests sent in the load phase")
    parser.add_argument("--concurrency", type=int, default=200, help="requests in flight at most")
    parser.add_argument("--time-scale", type=float, default=10.0, help="the server's --time-scale")
    parser.add_argument("--profile", default="h100-tp2", help="the server's node profile")
    parser.add_argument("--system-tokens", type=int, default=1000, help="length of the shared system prompt")
    parser.add_argument("--user-tokens", type=int, default=200, help="length of each request's own message")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens per request")
    parser.add_argument("--startup-trials", type=int, default=3, help="servers spawned to time startup")
    parser.add_argument("--json", type=Path, help="write the figures as JSON to this file")


def spawn_server(port: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tao_sdk.cli", "fake-vllm", "--port", str(port), "--profile", args.profile]
    command += ["--time-scale", str(args.time_scale)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    import aiohttp

    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                stderr = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"tao fake-vllm exited with {process.returncode}: {stderr}")
            try:
                async with session.get(url + "/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.005)
    raise TimeoutError(f"tao fake-vllm did not answer /health within {HEALTH_TIMEOUT_S} s")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def measure_startup(args: argparse.Namespace) -> list[float]:
    times = []
    for _ in range(args.startup_trials):
        port = free_port()
        started = time.monotonic()
        process = spawn_server(port, args)
        try:
            await wait_healthy(f"http://127.0.0.1:{port}", process)
            times.append(time.monotonic() - started)
        finally:
            stop_server(process)
    return times


async def one_request(
    session: aiohttp.ClientSession, url: str, body: dict[str, object], max_tokens: int
) -> RequestOutcome:
    started = time.monotonic()
    ttft: float | None = None
    chunks, usage, done = 0, None, False
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:200]}")
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            if line.strip() == b"data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                chunks += 1
                ttft = time.monotonic() - started if ttft is None else ttft
    if not done or usage is None or chunks != max_tokens or ttft is None:
        raise RuntimeError(f"incomplete stream: done={done} usage={usage is not None} chunks={chunks}/{max_tokens}")
    details = usage.get("prompt_tokens_details") or {}
    return RequestOutcome(
        time.monotonic() - started, ttft, chunks, usage["prompt_tokens"], details.get("cached_tokens", 0)
    )


def request_body(index: int, args: argparse.Namespace, system: str) -> dict[str, object]:
    user = f"Request {index}:" + "".join(filler_pieces(args.user_tokens))
    return {
        "model": "Qwen/Qwen3-32B",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": args.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def run_load(url: str, args: argparse.Namespace) -> tuple[list[RequestOutcome], list[str], float]:
    import aiohttp

    system = "".join(filler_pieces(args.system_tokens))
    gate = asyncio.Semaphore(args.concurrency)
    outcomes: list[RequestOutcome] = []
    errors: list[str] = []
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker(index: int) -> None:
            async with gate:
                try:
                    outcomes.append(await one_request(session, url, request_body(index, args, system), args.max_tokens))
                except Exception as error:  # counted and reported, the benchmark goes on
                    errors.append(f"{type(error).__name__}: {error}")

        started = time.monotonic()
        await asyncio.gather(*(worker(i) for i in range(args.requests)))
        return outcomes, errors, time.monotonic() - started


async def bench(args: argparse.Namespace) -> Report:
    startup = await measure_startup(args)
    port = free_port()
    process = spawn_server(port, args)
    try:
        url = f"http://127.0.0.1:{port}"
        await wait_healthy(url, process)
        outcomes, errors, wall = await run_load(url, args)
    finally:
        stop_server(process)
    latencies = [o.latency for o in outcomes]
    ttfts = [o.ttft for o in outcomes]
    prompt = sum(o.prompt_tokens for o in outcomes)
    return Report(
        time_scale=args.time_scale,
        profile=args.profile,
        startup_s=[round(s, 3) for s in startup],
        requests=args.requests,
        concurrency=args.concurrency,
        errors=len(errors),
        wall_s=round(wall, 3),
        requests_per_s=round(len(outcomes) / wall, 1) if wall else 0.0,
        latency_p50_s=round(percentile(latencies, 0.5, method="nearest"), 4),
        latency_p99_s=round(percentile(latencies, 0.99, method="nearest"), 4),
        ttft_p50_s=round(percentile(ttfts, 0.5, method="nearest"), 4),
        ttft_p99_s=round(percentile(ttfts, 0.99, method="nearest"), 4),
        cached_share=round(sum(o.cached_tokens for o in outcomes) / prompt, 3) if prompt else 0.0,
        error_samples=errors[:5],
    )


def print_report(report: Report) -> None:
    startup, scale = report.startup_s, report.time_scale
    lines = [
        f"fake vLLM benchmark: profile {report.profile}, time scale {scale:g}",
        f"  startup of `tao fake-vllm` (spawn to /health 200): max {max(startup):.3f} s, "
        f"median {statistics.median(startup):.3f} s over {len(startup)} runs",
        f"  {report.requests} streaming requests, {report.concurrency} concurrent: "
        f"{report.errors} errors in {report.wall_s:.2f} s, {report.requests_per_s:.1f} requests/s",
        f"  latency p50 {report.latency_p50_s:.3f} s, p99 {report.latency_p99_s:.3f} s "
        f"(wall seconds; x{scale:g} = engine seconds)",
        f"  TTFT p50 {report.ttft_p50_s:.3f} s, p99 {report.ttft_p99_s:.3f} s; "
        f"prompt tokens served from the prefix cache {report.cached_share:.1%}",
    ]
    lines += [f"  error: {sample}" for sample in report.error_samples]
    print("\n".join(lines))


def report_json(report: Report) -> str:
    figures = {
        key: None if isinstance(value, float) and math.isnan(value) else value for key, value in asdict(report).items()
    }
    return json.dumps(figures, indent=2) + "\n"


def run(args: argparse.Namespace) -> int:
    if min(args.requests, args.concurrency, args.startup_trials) < 1 or args.time_scale <= 0:
        print(
            "tao bench fake-vllm: --requests, --concurrency, --startup-trials and --time-scale must be positive",
            file=sys.stderr,
        )
        return 2
    try:
        profile_by_name(args.profile)
    except UnknownProfile as error:
        print(f"tao bench fake-vllm: {error}", file=sys.stderr)
        return 2
    report = asyncio.run(bench(args))
    print_report(report)
    if args.json:
        args.json.write_text(report_json(report))
        print(f"wrote {args.json}")
    return 1 if report.errors else 0
