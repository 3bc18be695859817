"""`tao demo`: the embedded default — TAO against a simple baseline on a small fake fleet, in about a minute.

For each policy, from cold: two fake vLLM nodes (H100 TP2 profile for a 32B model: 322,256 KV tokens each, engine
sped up `--time-scale` times), a real coordinator in its own process (loopback, no auth), and `--sessions` synthetic
Claude-Code-like agents running at once through the SDK. The workload (`sim.workloads.generate`) keeps a quarter of
the real prompt sizes (about 33k tokens per call on average; the 32 sessions' peak contexts add up to 1.5 times the
fleet's KV capacity, and a cache miss costs a real prefill) but only 8% of the turns and 8% of the tool time, so a
run lasts seconds. Then: task latency, time to first token and throughput as the agents measured them (wall-clock
seconds of the demo), and the nodes' own prefix-cache hit rate from their `/metrics`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx2
from prometheus_client.parser import text_string_to_metric_families

import tao_sdk

from ..fakevllm import FakeNodeConfig, ThreadedFleet
from ..local_coordinator import local_coordinator
from ..progress import Progress
from ..sim.metrics import mean, percentile
from ..sim.workloads import SessionScript, Workload, generate
from .agents import AgentRecord, run_agent

PROFILE = "h100-tp2"


@dataclass(frozen=True)
class DemoResult:
    policy: str
    latency_mean_s: float
    latency_p90_s: float
    ttft_mean_s: float
    ttft_p90_s: float
    throughput_tok_s: float
    prefix_hit_rate: float
    calls: int
    failed_agents: int
    makespan_s: float
    errors: tuple[str, ...] = ()
    """Distinct errors of the agents that failed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", default="tao,round-robin", help="policies to compare (tao,round-robin)")
    parser.add_argument("--sessions", type=int, default=32, help="agent sessions, all running at once (32)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic workload (0)")
    parser.add_argument(
        "--time-scale", type=float, default=16.0, help="how much faster than an H100 the nodes run (16)"
    )
    parser.add_argument("--json", type=Path, help="write the results as JSON to this file")


def demo_workload(sessions: int, seed: int) -> Workload:
    return generate(
        "claude-code", sessions=sessions, seed=seed, scale=0.25, turn_scale=0.08, time_scale=0.08, max_context=250_000
    )


def _hit_rate(urls: list[str]) -> float:
    hits = queries = 0.0
    for url in urls:
        for family in text_string_to_metric_families(httpx2.get(url + "/metrics").text):
            for sample in family.samples:
                if sample.name == "vllm:prefix_cache_hits_total":
                    hits += sample.value
                elif sample.name == "vllm:prefix_cache_queries_total":
                    queries += sample.value
    return hits / queries if queries else 0.0


def run_policy(policy: str, workload: Workload, time_scale: float, progress: Progress) -> DemoResult:
    config = FakeNodeConfig(profile=PROFILE, time_scale=time_scale)
    with ThreadedFleet(2, config, kv_events=False) as fleet:
        nodes = [f"node-{k}={url}" for k, url in enumerate(fleet.urls)]
        with local_coordinator(nodes, policy) as coordinator:
            records = asyncio.run(_run_agents(workload, coordinator, time_scale, progress))
        hit_rate = _hit_rate(fleet.urls)
    return _summarize(policy, records, hit_rate)


async def _run_agents(workload: Workload, coordinator: str, time_scale: float, progress: Progress) -> list[AgentRecord]:
    def open_session(script: SessionScript) -> tao_sdk.Session:
        context = tao_sdk.AgentContext(harness="demo", shared_prefix_tokens=script.meta.shared_prefix_tokens)
        return tao_sdk.session(
            coordinator, context=context, session_id=script.id, max_wait_s=120, connect_timeout_s=2.0
        )

    records = [AgentRecord(time.monotonic()) for _ in workload.scripts]
    await asyncio.gather(
        *(
            run_agent(script, open_session, time_scale, record, progress.advance)
            for script, record in zip(workload.scripts, records, strict=True)
        )
    )
    return records


def _summarize(policy: str, records: list[AgentRecord], hit_rate: float) -> DemoResult:
    latencies = [r.finished_at - r.started_at for r in records if r.finished_at and r.error is None]
    calls = [c for r in records for c in r.calls if c.first_token_at is not None]
    ttfts = [c.first_token_at - c.wanted_at for c in calls if c.first_token_at is not None]
    start = min(r.started_at for r in records)
    end = max(r.finished_at or start for r in records)
    tokens = sum(c.completion_tokens for c in calls)
    return DemoResult(
        policy=policy,
        latency_mean_s=mean(latencies),
        latency_p90_s=percentile(latencies, 0.9),
        ttft_mean_s=mean(ttfts),
        ttft_p90_s=percentile(ttfts, 0.9),
        throughput_tok_s=tokens / (end - start) if end > start else 0.0,
        prefix_hit_rate=hit_rate,
        calls=len(calls),
        failed_agents=sum(r.error is not None for r in records),
        makespan_s=end - start,
        errors=tuple(sorted({r.error for r in records if r.error is not None})),
    )


def render(results: list[DemoResult]) -> str:
    lines = [
        f"{'policy':<14}{'task latency':>22}{'time to first token':>24}{'throughput':>14}{'prefix hits':>13}",
        f"{'':<14}{'mean / p90 (s)':>22}{'mean / p90 (s)':>24}{'(tokens/s)':>14}{'':>13}",
    ]
    for r in results:
        lines.append(
            f"{r.policy:<14}{r.latency_mean_s:>13.1f} / {r.latency_p90_s:<6.1f}{r.ttft_mean_s:>15.2f} / "
            f"{r.ttft_p90_s:<6.2f}{r.throughput_tok_s:>14.0f}{r.prefix_hit_rate:>12.1%}"
        )
    if len(results) >= 2:
        ours, other = results[0], results[1]
        lines.append("")
        lines.append(
            f"{ours.policy} against {other.policy}: task latency {_change(ours.latency_mean_s, other.latency_mean_s)}, "
            f"TTFT {_change(ours.ttft_mean_s, other.ttft_mean_s)}, throughput "
            f"{_change(ours.throughput_tok_s, other.throughput_tok_s)}, prefix hit rate "
            f"{(ours.prefix_hit_rate - other.prefix_hit_rate) * 100:+.1f} points"
        )
    failed = sum(r.failed_agents for r in results)
    if failed:
        errors = sorted({error for r in results for error in r.errors})
        lines.append(f"warning: {failed} agent(s) failed: " + "; ".join(errors[:3]))
    return "\n".join(lines)


def _change(new: float, old: float) -> str:
    return f"{(new - old) / old:+.1%}" if old else "n/a"


def run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.sessions < 1 or args.time_scale <= 0 or not policies:
        print("tao demo: --sessions ≥ 1, --time-scale > 0 and at least one policy are needed", file=sys.stderr)
        return 2
    workload = demo_workload(args.sessions, args.seed)
    requests = sum(len(s.requests) for s in workload.scripts)
    capacity = FakeNodeConfig(profile=PROFILE).node_profile().capacity_tokens
    print(
        f"TAO demo: 2 fake vLLM nodes ({PROFILE}, {capacity:,} KV tokens each, {args.time_scale:g}× faster than the "
        f"real GPU), {len(workload.scripts)} agent sessions at once, {requests} LLM calls per policy"
    )
    results = []
    for policy in policies:
        progress = Progress(requests, f"{policy:>12}")
        started = time.monotonic()
        results.append(run_policy(policy, workload, args.time_scale, progress))
        progress.close()
        print(f"{policy}: {results[-1].calls} calls in {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(r.failed_agents == 0 for r in results) else 1
