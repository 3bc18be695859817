"""`tao demo`: the embedded default — TAO against a simple baseline on a small fake fleet, in about a minute.

For each policy, from cold: two fake vLLM nodes (H100 TP2 profile for a 32B model: 322,256 KV tokens each, engine
sped up `--time-scale` times), a real coordinator in its own process (loopback, no auth), and `--sessions` synthetic
Claude-Code-like agents running at once through the SDK. The workload (`sim.workloads.generate`) keeps a quarter of
the real prompt sizes (about 33k tokens per call on average; the 32 sessions' peak contexts add up to 1.5 times the
fleet's KV capacity, and a cache miss costs a real prefill) but only 8% of the turns and 8% of the tool time, so a
run lasts seconds. Then: task latency, time to first token and throughput as the agents measured them, and the nodes'
own prefix-cache hit rate from their `/metrics`.

Units and spread, as the output states them: every time is wall-clock seconds of this run, on nodes and tools both
sped up `--time-scale` times (so about that many times longer on real H100s). The figures come from real processes
sharing one machine's cores, so they vary from run to run with the same seed, and with what else the machine runs:
`tao demo --repeats 3` on the same 2-core machine gave task latency −26.8 % to −33.0 % on 2026-12-02 and −41.3 % to
−44.0 % on 2026-12-07, round-robin moving most. `--repeats N` runs the policies N times, alternating, and shows each
figure's range; a single run says so rather than quote a range measured elsewhere.
A progress bar per run (plain lines on a pipe) shows the calls done.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx2
from prometheus_client.parser import text_string_to_metric_families

import tao_sdk

from ..fakevllm.config import FakeNodeConfig
from ..local_coordinator import local_coordinator
from ..percentile import percentile
from ..progress import Progress
from ..sim.metrics import mean
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
    sessions: int = 0
    """Agent sessions run: the same workload for every policy."""
    repeat: int = 0
    """Which of the `--repeats` runs (0 first)."""
    errors: tuple[str, ...] = ()
    """Distinct errors of the agents that failed."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", default="tao,round-robin", help="policies to compare")
    parser.add_argument("--sessions", type=int, default=32, help="agent sessions, all running at once")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic workload")
    parser.add_argument("--time-scale", type=float, default=16.0, help="how much faster than an H100 the nodes run")
    parser.add_argument(
        "--repeats", type=int, default=1, help="run the policies this many times, alternating, and show the range"
    )
    parser.add_argument("--json", type=Path, help="write the results as JSON to this file (one entry per run)")


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


def run_policy(policy: str, workload: Workload, time_scale: float, progress: Progress, repeat: int = 0) -> DemoResult:
    from ..fakevllm.fleet import ThreadedFleet

    config = FakeNodeConfig(profile=PROFILE, time_scale=time_scale)
    with ThreadedFleet(2, config, kv_events=False) as fleet:
        nodes = [f"node-{k}={url}" for k, url in enumerate(fleet.urls)]
        with local_coordinator(nodes, policy) as coordinator:
            records = asyncio.run(_run_agents(workload, coordinator, time_scale, progress))
        hit_rate = _hit_rate(fleet.urls)
    return replace(_summarize(policy, records, hit_rate), repeat=repeat)


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
        latency_p90_s=percentile(latencies, 0.9, method="linear"),
        ttft_mean_s=mean(ttfts),
        ttft_p90_s=percentile(ttfts, 0.9, method="linear"),
        throughput_tok_s=tokens / (end - start) if end > start else 0.0,
        prefix_hit_rate=hit_rate,
        calls=len(calls),
        failed_agents=sum(r.error is not None for r in records),
        makespan_s=end - start,
        sessions=len(records),
        errors=tuple(sorted({r.error for r in records if r.error is not None})),
    )


def render(results: list[DemoResult], time_scale: float = 16.0) -> str:
    """The table (one row per policy: the mean over repeats, and with several repeats a row of ranges beneath it),
    the comparison of the first policy with the second, and what the units and the spread are."""
    policies = list(dict.fromkeys(r.policy for r in results))
    runs = {policy: [r for r in results if r.policy == policy] for policy in policies}
    repeats = max(len(group) for group in runs.values())
    lines = [
        f"{'policy':<14}{'task latency':>22}{'time to first token':>24}{'throughput':>14}{'prefix hits':>13}",
        f"{'':<14}{'mean / p90 (s)':>22}{'mean / p90 (s)':>24}{'(tokens/s)':>14}{'':>13}",
    ]
    for policy, group in runs.items():
        r = _average(group)
        lines.append(
            f"{policy:<14}{r.latency_mean_s:>13.1f} / {r.latency_p90_s:<6.1f}{r.ttft_mean_s:>15.2f} / "
            f"{r.ttft_p90_s:<6.2f}{r.throughput_tok_s:>14.0f}{r.prefix_hit_rate:>12.1%}"
        )
        if len(group) > 1:
            latency, ttft = _span(group, "latency_mean_s", "{:.1f}"), _span(group, "ttft_mean_s", "{:.2f}")
            throughput, hits = _span(group, "throughput_tok_s", "{:.0f}"), _span(group, "prefix_hit_rate", "{:.1%}")
            lines.append(f"{'  range':<14}{latency:>13}{'':9}{ttft:>15}{'':9}{throughput:>14}{hits:>13}")
    if len(policies) >= 2:
        ours, other = policies[0], policies[1]
        a, b = _average(runs[ours]), _average(runs[other])
        lines.append("")
        lines.append(
            f"{ours} against {other}: task latency {_change(a.latency_mean_s, b.latency_mean_s)}, "
            f"TTFT {_change(a.ttft_mean_s, b.ttft_mean_s)}, throughput "
            f"{_change(a.throughput_tok_s, b.throughput_tok_s)}, prefix hit rate "
            f"{(a.prefix_hit_rate - b.prefix_hit_rate) * 100:+.1f} points"
        )
        pairs = [(x, y) for x, y in zip(runs[ours], runs[other], strict=False) if y.latency_mean_s]
        changes = sorted((x.latency_mean_s - y.latency_mean_s) / y.latency_mean_s for x, y in pairs)
        if len(changes) > 1:
            lines.append(f"task latency change over {len(pairs)} repeats: from {changes[0]:+.1%} to {changes[-1]:+.1%}")
    lines.append("")
    lines.append(
        f"units: wall-clock seconds of this run, with the nodes' engine and the agents' tools sped up "
        f"{time_scale:g}× (about {time_scale:g}× longer on real GPUs); figures of {repeats} run(s) per policy."
    )
    if repeats == 1:
        lines.append(
            "spread: they vary between runs of the same seed by several points, and more with what else the machine "
            "runs (round-robin most); --repeats 3 shows the range on this machine."
        )
    failed = sum(r.failed_agents for r in results)
    if failed:
        errors = sorted({error for r in results for error in r.errors})
        lines.append(f"warning: {failed} agent(s) failed: " + "; ".join(errors[:3]))
    return "\n".join(lines)


FIGURES = ("latency_mean_s", "latency_p90_s", "ttft_mean_s", "ttft_p90_s", "throughput_tok_s", "prefix_hit_rate")


def _average(group: list[DemoResult]) -> DemoResult:
    averages: dict[str, Any] = {name: mean([getattr(r, name) for r in group]) for name in FIGURES}
    return replace(group[0], **averages)


def _span(group: list[DemoResult], name: str, fmt: str) -> str:
    values = [getattr(r, name) for r in group]
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}"


def _change(new: float, old: float) -> str:
    return f"{(new - old) / old:+.1%}" if old else "n/a"


def run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.sessions < 1 or args.time_scale <= 0 or args.repeats < 1 or not policies:
        print(
            "tao demo: --sessions ≥ 1, --time-scale > 0, --repeats ≥ 1 and at least one policy are needed",
            file=sys.stderr,
        )
        return 2
    workload = demo_workload(args.sessions, args.seed)
    requests = sum(len(s.requests) for s in workload.scripts)
    capacity = FakeNodeConfig(profile=PROFILE).node_profile().capacity_tokens
    print(
        f"TAO demo: 2 fake vLLM nodes ({PROFILE}, {capacity:,} KV tokens each, {args.time_scale:g}× faster than the "
        f"real GPU), {len(workload.scripts)} agent sessions at once, {requests} LLM calls per policy (the same "
        f"workload for each), {args.repeats} run(s) per policy"
    )
    results = []
    for repeat in range(args.repeats):
        for policy in policies:
            label = f"{policy}" + (f" #{repeat + 1}" if args.repeats > 1 else "")
            progress = Progress(requests, f"{label:>14}", every_s=5.0)
            started = time.monotonic()
            results.append(run_policy(policy, workload, args.time_scale, progress, repeat))
            progress.close()
            print(f"{label}: {results[-1].calls} calls in {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(render(results, args.time_scale))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(r.failed_agents == 0 for r in results) else 1
