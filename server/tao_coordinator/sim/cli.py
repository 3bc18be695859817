"""`tao sim`: replay a workload through every policy × concurrency on a simulated fleet and compare them."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.settings import CoreSettings
from .limit import LimitOptionError, add_limit_arguments, limit_policy_names
from .node import BUILTIN_PROFILES, NodeProfile, UnknownProfile, profile_by_name
from .node.profile import with_cpu_tier
from .plan_timing import PLAN_TIMINGS, PlanTiming
from .runs import Replay, ReplaySetup, replay_grid, run_replays
from .small_nodes import SmallNodes, small_model_calls, small_nodes
from .workloads import (
    DEFAULT_CHAT_SHARE,
    MIXED,
    PRESETS,
    Workload,
    generate,
    generate_mixed,
    load_agentx,
    load_mini_swe,
)
from .workloads.files import read_records
from .workloads.rules import GapRule

if TYPE_CHECKING:
    from .limit import Limit
    from .report import RunResult


class UsageError(ValueError):
    """A command-line value is wrong; the message names it."""


SYNTHETIC_WORKLOADS = (*PRESETS, MIXED)
"""What `--trace synthetic:NAME` accepts: a preset of `synthetic.py`, or the mixed workload of `mixed.py`."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace",
        default="synthetic",
        help="a trace file (AgentX .jsonl[.gz]/.json, or mini-swe-agent steps .jsonl.gz), or synthetic[:PRESET] "
        f"with PRESET one of {', '.join(SYNTHETIC_WORKLOADS)} (default: synthetic:claude-code); {MIXED}: the "
        "claude-code-side-calls agents with chat requests between them (needs --small-nodes)",
    )
    parser.add_argument("--policy", default="tao,round-robin", help="comma-separated policies")
    parser.add_argument("--concurrency", default="16", help="comma-separated concurrent sessions")
    parser.add_argument("--nodes", type=int, default=4, help="nodes in the fleet")
    parser.add_argument("--node-profile", default="h100-tp2", help=f"one of {', '.join(BUILTIN_PROFILES)}")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the synthetic workload and of policies' random choices"
    )
    parser.add_argument(
        "--cpu-kv-gib",
        type=float,
        default=0.0,
        help="a CPU KV tier of this many GiB on every node, as vLLM's --kv-offloading-size (0: none)",
    )
    parser.add_argument("--sessions", type=int, default=64, help="synthetic sessions to generate")
    parser.add_argument(
        "--chat-share",
        type=float,
        help=f"synthetic:{MIXED} only: the fraction of sessions that are chat requests, in [0, 1] "
        f"(default {DEFAULT_CHAT_SHARE:g})",
    )
    parser.add_argument("--limit-traces", type=int, help="replay only the first N traces")
    parser.add_argument(
        "--max-context",
        type=int,
        help="drop traces whose peak context (prompt + output) passes this many tokens (default: the node's limit)",
    )
    parser.add_argument(
        "--plan-timing",
        choices=PLAN_TIMINGS,
        help="what a plan costs in virtual time: measured = the wall-clock time its solve took, plus --plan-delay-ms; "
        "fixed = --plan-delay-ms alone, reproducible (default: measured, fixed with --no-timing)",
    )
    parser.add_argument(
        "--plan-delay-ms",
        default="0",
        help="fixed virtual time added to every plan's delivery, ms; several, comma-separated, run each policy × "
        "concurrency at each and report the median over them (decisions are chaotic in small perturbations)",
    )
    parser.add_argument(
        "--credit-half-life",
        type=float,
        help=f"half-life of snapshot cache credit, s: the fixed value, or the prior of the fit "
        f"(default {CoreSettings().credit_half_life_s:g})",
    )
    parser.add_argument(
        "--credit-half-life-fit",
        action=argparse.BooleanOptionalAction,
        help=f"fit the credit half-life per node from observed retention "
        f"(default: {'on' if CoreSettings().credit_half_life_fit else 'off'})",
    )
    parser.add_argument(
        "--kv-events",
        action="store_true",
        help="the nodes publish KV events with session ids (vLLM >= 0.30 with --kv-events-config) and the "
        "coordinator's cache credit reads the exact residency they give, as the live one does when the fleet "
        "configuration names their endpoints (default: credit from usage at the end of each call)",
    )
    parser.add_argument(
        "--never-evict",
        action="store_true",
        help="replay on nodes that tell schedulers their real KV capacity but never evict a cached block: against "
        "the same run without it, what vLLM's eviction costs each policy (not with --cpu-kv-gib)",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="replays run in this many worker processes at once (same figures)"
    )
    parser.add_argument("--json", type=Path, help="write the figures as JSON to this file")
    parser.add_argument(
        "--plots",
        type=Path,
        help="write the PNG charts into this directory (default: beside --json as NAME-plots/, else a new "
        "directory under the system's temporary directory; the output says where)",
    )
    parser.add_argument("--no-plots", action="store_true", help="write no charts")
    parser.add_argument(
        "--no-timing",
        action="store_true",
        help="leave out wall-clock planner times and charge plans a fixed delay (JSON identical across runs)",
    )
    from . import small_nodes as two_model

    two_model.add_arguments(parser)
    add_limit_arguments(parser)


def positive_numbers(text: str, name: str) -> list[int]:
    values = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) < 1:
            raise UsageError(f"--{name}: {part!r} is not a positive whole number")
        values.append(int(part))
    return values


def _policies(text: str) -> list[str]:
    from ..core.policies import POLICIES, make_policy

    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        make_policy(name)
    if not names:
        raise UsageError(f"--policy: name at least one of {', '.join(POLICIES)}")
    return names


def plan_timing(args: argparse.Namespace) -> PlanTiming:
    """Measured unless `--no-timing` asks for a reproducible run; asking for both is a usage error."""
    if args.no_timing and args.plan_timing == "measured":
        raise UsageError("--plan-timing measured varies between runs; --no-timing needs --plan-timing fixed")
    chosen: PlanTiming | None = args.plan_timing
    if chosen is not None:
        return chosen
    return "fixed" if args.no_timing else "measured"


def plan_delays(args: argparse.Namespace) -> list[float]:
    """`--plan-delay-ms`: the charges to run at, in ms (`sweep.parse_delays`)."""
    from .sweep import parse_delays

    try:
        return parse_delays(args.plan_delay_ms)
    except ValueError as error:
        raise UsageError(str(error)) from None


def core_settings(args: argparse.Namespace) -> CoreSettings:
    """The simulator's core settings (leases never expire: a replayed session always answers in time), with the
    credit half-life options applied."""
    chosen: dict[str, object] = {"lease_ttl_s": 1e12}
    if args.credit_half_life is not None:
        if args.credit_half_life <= 0:
            raise UsageError("--credit-half-life: must be more than 0 seconds")
        chosen["credit_half_life_s"] = args.credit_half_life
    if args.credit_half_life_fit is not None:
        chosen["credit_half_life_fit"] = args.credit_half_life_fit
    return CoreSettings.model_validate(chosen)


def load_workload(
    spec: str,
    max_context: int,
    limit: int | None,
    seed: int,
    sessions: int,
    side_call_rate: float = 1.0,
    chat_share: float | None = None,
) -> Workload:
    """The workload `--trace` names; `chat_share` (`--chat-share`) only for the mixed one."""
    synthetic = spec == "synthetic" or spec.startswith("synthetic:")
    preset = (spec.partition(":")[2] or "claude-code") if synthetic else ""
    if chat_share is not None and preset != MIXED:
        raise UsageError(f"--chat-share: only the synthetic:{MIXED} workload has chats; --trace is {spec!r}")
    if chat_share is not None and not 0 <= chat_share <= 1:
        raise UsageError(f"--chat-share: the fraction of sessions that are chats, in [0, 1]; got {chat_share:g}")
    if preset == MIXED:
        share = DEFAULT_CHAT_SHARE if chat_share is None else chat_share
        count = limit or sessions
        rate = side_call_rate
        return generate_mixed(sessions=count, seed=seed, chat_share=share, max_context=max_context, side_call_rate=rate)
    if synthetic:
        if preset not in PRESETS:
            raise UsageError(f"--trace: unknown synthetic preset {preset!r}; known: {', '.join(SYNTHETIC_WORKLOADS)}")
        rate = side_call_rate
        return generate(preset, sessions=limit or sessions, seed=seed, max_context=max_context, side_call_rate=rate)
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"--trace: {spec!r} is neither a file nor synthetic[:PRESET]")
    try:
        first = next(iter(read_records(path)), None)
        if isinstance(first, dict) and "requests" in first:
            return load_agentx(path, max_context=max_context, limit=limit)
        if isinstance(first, dict) and "steps" in first:
            return load_mini_swe(path, max_context=max_context, limit=limit)
    except json.JSONDecodeError as error:
        raise UsageError(f"--trace: {spec!r} is not JSON: {error.msg}") from None
    except (UnicodeDecodeError, EOFError, OSError) as error:  # not UTF-8 text, a broken or truncated gzip file
        raise UsageError(f"--trace: {spec!r} could not be read: {error}") from None
    raise UsageError(f"--trace: {spec!r} is not an AgentX trace file nor a mini-swe-agent steps table")


def describe(workload: Workload) -> str:
    """The workload in a line, and what its rules changed (`sim/workloads/rules.py`) in a line each."""
    report = workload.report
    lines = [
        f"workload {workload.name}: {report.traces_kept} sessions, {report.requests:,} requests, "
        f"{report.prompt_tokens / 1e6:,.1f}M prompt tokens"
    ]
    if report.traces_removed:
        lines.append(
            f"  the context cap of {report.max_context:,} tokens (--max-context) removed {report.traces_removed} "
            f"traces ({report.requests_removed:,} requests): their peak context passes it, and a session is kept "
            "whole or not at all"
        )
    if report.gaps_capped:
        rule = GapRule()
        lines.append(
            f"  {report.gaps_capped} gaps capped ({report.user_gaps_capped} user, {report.tool_gaps_capped} tool): "
            f"idle time in the traces cut to {rule.user_cap_s:g} s before a user message and {rule.tool_cap_s:g} s "
            "for a tool, the same for every policy"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ..core.policies import UnknownPolicy
    from .limit import render_excess, with_limits_json
    from .report import render_table, to_json
    from .sweep import median_runs, render_spread, with_medians_json

    try:
        policies = _policies(args.policy)
        limit_names = limit_policy_names(args, policies)
        limit_policies = _policies(",".join(limit_names)) if limit_names else []
        concurrencies = positive_numbers(args.concurrency, "concurrency")
        timing = plan_timing(args)
        delays = plan_delays(args)
        settings = core_settings(args)
        if args.nodes < 1:
            raise UsageError("--nodes: must be at least 1")
        if args.jobs < 1:
            raise UsageError(f"--jobs: must be at least 1, got {args.jobs}")
        profile = profile_by_name(args.node_profile)
        if not 0 <= args.cpu_kv_gib < math.inf:
            raise UsageError("--cpu-kv-gib: must be a finite number of GiB, at least 0")
        if args.cpu_kv_gib:
            if args.never_evict:
                raise UsageError("--never-evict: nodes that never evict have no use for a CPU tier; drop --cpu-kv-gib")
            profile = with_cpu_tier(profile, args.cpu_kv_gib)
        small = _small_nodes(args)
        max_context = args.max_context or profile.model_len_limit
        workload = load_workload(
            args.trace, max_context, args.limit_traces, args.seed, args.sessions, small.side_call_rate, args.chat_share
        )
        if small.nodes == 0 and small_model_calls(workload):
            raise UsageError(
                f"--small-nodes: the workload has {small_model_calls(workload):,} calls for the small model; "
                "give the fleet small-model nodes to serve them"
            )
    except (UsageError, UnknownPolicy, UnknownProfile, LimitOptionError) as error:
        print(f"tao sim: {error}", file=sys.stderr)
        return 2
    if not workload.scripts:
        print("tao sim: the workload has no session left to replay", file=sys.stderr)
        return 2
    real_profile, real_small = profile, small
    if args.never_evict:
        profile, small = _never_evict(profile, small, workload)
    print(describe(workload))
    print(
        f"fleet: {args.nodes} × {profile.name} ({profile.reported_capacity_tokens:,} KV tokens each{_tier(profile)}"
        f"{', never evicted' if args.never_evict else ''})" + small.fleet_line()
    )
    print(f"planning: each plan is delivered {_charged(timing, delays)} after it starts")
    print(f"credit half-life: {_half_life(settings)}")
    if args.kv_events:
        print("cache credit: the nodes' KV events (call-end usage only where they say nothing)")
    sweep = len(delays) > 1
    setup = ReplaySetup(
        profile, small, args.nodes, settings, timing, args.seed, args.kv_events, not args.no_timing, sweep
    )
    results = run_replays(workload, setup, replay_grid(policies, concurrencies, delays), args.jobs)
    print(render_table(results))
    medians = median_runs(results) if sweep else results
    if sweep:
        print(render_spread(results))
    limit_replays = replay_grid(limit_policies, concurrencies, delays)
    limits, limit_runs = _limits(workload, limit_replays, replace(setup, profile=real_profile, small=real_small), args)
    if limits:
        if sweep:
            print("the median runs against the limit (the best over the policies and charges rerun there):")
        print(render_excess(medians, limits))
    if args.json:
        fleet = {
            "nodes": args.nodes,
            "node_profile": profile.name,
            "capacity_tokens": profile.reported_capacity_tokens,
            "cpu_kv_gib": args.cpu_kv_gib,
            "never_evict": args.never_evict,
            **small.fleet_json(),
        }
        planning = {"timing": timing, **({"delays_ms": delays} if sweep else {"delay_ms": delays[0]})}
        credit = {
            "half_life_s": settings.credit_half_life_s,
            "fit": settings.credit_half_life_fit,
            "kv_events": args.kv_events,
        }
        text = to_json(results, workload.report, fleet, planning, credit)
        text = with_limits_json(text, results, limits, limit_runs) if limits else text
        args.json.write_text(with_medians_json(text, medians, limits) if sweep else text)
        print(f"wrote {args.json}")
    if not args.no_plots:
        from .plots import write_plots

        directory = plots_directory(args)
        written = write_plots(medians, directory, limits={c: limit.values for c, limit in limits.items()})
        print(f"plots: {', '.join(p.name for p in written)} in {directory} (--no-plots skips them)")
    return 0


def _never_evict(profile: NodeProfile, small: SmallNodes, workload: Workload) -> tuple[NodeProfile, SmallNodes]:
    """The fleet of `--never-evict`: every node, small ones included, keeps all it computes and advertises its real
    blocks (`limit_fleet.never_evict_profile`)."""
    from .limit_fleet import never_evict_profile

    if small.profile is not None:
        small = replace(small, profile=never_evict_profile(small.profile, workload))
    return never_evict_profile(profile, workload), small


def _small_nodes(args: argparse.Namespace) -> SmallNodes:
    try:
        return small_nodes(args, args.cpu_kv_gib)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _limits(
    workload: Workload, replays: list[Replay], real: ReplaySetup, args: argparse.Namespace
) -> tuple[dict[int, Limit], list[RunResult]]:
    """With `--limit`: `replays` on the limit fleet of `real`'s, and the limit per concurrency (the best over the
    policies and charges rerun there); nothing without it."""
    if not replays:
        return {}, []
    from .limit import limits_of
    from .limit_fleet import limit_profile

    unbounded = limit_profile(real.profile, workload)
    print(f"limit fleet: {args.nodes} × {unbounded.name} ({unbounded.capacity_tokens:,} KV tokens each, no CPU tier)")
    small = real.small
    if small.profile is not None:
        small = replace(small, profile=limit_profile(small.profile, workload))
    runs = run_replays(workload, replace(real, profile=unbounded, small=small), replays, args.jobs)
    return limits_of(runs), runs


def plots_directory(args: argparse.Namespace) -> Path:
    """`--plots`, else `NAME-plots/` beside `--json NAME.json`, else a new directory under the temporary directory."""
    if args.plots:
        return Path(args.plots)
    if args.json:
        json_path: Path = args.json
        return json_path.with_name(f"{json_path.stem}-plots")
    return Path(tempfile.mkdtemp(prefix=f"tao-sim-{time.strftime('%Y%m%d-%H%M%S')}-"))


def _tier(profile: NodeProfile) -> str:
    tier = profile.cpu_tier
    if tier is None:
        return ""
    return f", and {tier.num_blocks * profile.block_size:,} in a CPU tier"


def _half_life(settings: CoreSettings) -> str:
    if settings.credit_half_life_s is None:
        return "none (no decay)"
    fixed = f"{settings.credit_half_life_s:g} s"
    return f"fitted per node from observed retention, {fixed} until then" if settings.credit_half_life_fit else fixed


def _charged(timing: PlanTiming, delays_ms: list[float]) -> str:
    fixed = f"{', '.join(f'{delay:g}' for delay in delays_ms)} ms"
    if len(delays_ms) > 1:
        fixed += " (a sweep: each run at one of them)"
    return f"its solve's wall-clock time + {fixed}" if timing == "measured" else fixed
