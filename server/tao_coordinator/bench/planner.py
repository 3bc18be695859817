"""`tao bench planner`: how long TAO's planner takes on realistic snapshots, and how far from optimal it lands.

For each fleet size the benchmark records planner snapshots from a closed-loop synthetic workload (see
`snapshots.py`), times `policy.plan(snapshot)` on each — building the problem from the signals included, as the
live driver runs it — and solves a sample of them exactly with the MILP reference.

The gap of one plan is the relative shortfall, against the MILP optimum, in the first component of the lexicographic
objective where the two differ (0 when equal): a plan that keeps 2% less cache credit has gap 0.02, whatever its
other components. `gap` is the mean over the MILP-solved sample, null when the MILP solved none in its time limit
(the sample stops at the first snapshot the MILP cannot solve in time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.policies.placement import build_problem
from ..core.policies.tao import TaoPolicy, tao, tao_no_dp
from ..core.snapshot import Snapshot
from ..core.solver.problem import Problem
from ..core.value import Value
from .snapshots import record_snapshots

SIZES = ((64, 8), (256, 16), (1024, 64))
POLICIES = {"tao": tao, "tao-no-dp": tao_no_dp}
"""The planners worth timing: TAO's pipeline, and the paper's best-fit decreasing alone (its gap is the point)."""


@dataclass
class Row:
    sessions: int
    nodes: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    max_ms: float
    fallback_share: float
    gap: float | None
    snapshots: int
    candidates_mean: float
    all_fit_share: float
    dp_share: float
    milp_solved: int
    milp_sampled: int
    exact_share: float | None
    """Share of the MILP-solved sample where TAO's objective equals the optimum."""


def relative_gap(optimum: Value, reached: Value) -> float:
    for best, got in zip(optimum, reached, strict=True):
        if best != got:
            return (best - got) / max(1, abs(best))
    return 0.0


def percentile(sorted_values: list[float], share: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(share * (len(sorted_values) - 1))))
    return sorted_values[index]


def measure(
    sessions: int, nodes: int, count: int, seed: int, milp_samples: int, milp_limit_s: float, policy_name: str = "tao"
) -> Row:
    from ..core.solver.milp import solve_milp  # SciPy: only the benchmark and tests need it

    snapshots = record_snapshots(sessions, nodes, count, seed)
    policy = POLICIES[policy_name]()
    times, methods, candidates = [], Counter[str](), []
    plans = []
    for snapshot in snapshots:
        started = time.perf_counter()
        plan = policy.plan(snapshot)
        times.append((time.perf_counter() - started) * 1e3)
        methods[plan.method] += 1
        candidates.append(plan.candidates)
        plans.append(plan)
    times.sort()

    step = max(1, len(snapshots) // max(1, milp_samples))
    sample = list(range(0, len(snapshots), step))[:milp_samples]
    gaps: list[float] = []
    attempted = 0
    for k in sample:
        attempted += 1
        exact = solve_milp(_problem(snapshots[k], policy), time_limit_s=milp_limit_s)
        if exact is None:
            break  # the MILP could not prove optimality in time: larger samples of this size would not either
        gaps.append(relative_gap(exact.objective, plans[k].objective))
    return Row(
        sessions=sessions,
        nodes=nodes,
        mean_ms=statistics.fmean(times),
        p50_ms=percentile(times, 0.5),
        p95_ms=percentile(times, 0.95),
        max_ms=times[-1],
        fallback_share=methods["fallback"] / len(snapshots),
        gap=statistics.fmean(gaps) if gaps else None,
        snapshots=len(snapshots),
        candidates_mean=statistics.fmean(candidates),
        all_fit_share=methods["all-fit"] / len(snapshots),
        dp_share=methods["dp"] / len(snapshots),
        milp_solved=len(gaps),
        milp_sampled=attempted,
        exact_share=sum(g == 0 for g in gaps) / len(gaps) if gaps else None,
    )


def _problem(snapshot: Snapshot, policy: TaoPolicy) -> Problem:
    return build_problem(snapshot, policy.values).problem


def render(rows: list[Row]) -> str:
    header = (
        f"{'sessions×nodes':>15} {'cand':>5} {'mean ms':>8} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}"
        f" {'all-fit':>7} {'dp':>5} {'fallback':>8} {'MILP':>7} {'exact':>6} {'gap':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        gap = "n/a" if r.gap is None else f"{r.gap:.2%}"
        exact = "n/a" if r.exact_share is None else f"{r.exact_share:.0%}"
        lines.append(
            f"{f'{r.sessions}×{r.nodes}':>15} {r.candidates_mean:5.0f} {r.mean_ms:8.3f} {r.p50_ms:7.3f}"
            f" {r.p95_ms:7.3f} {r.max_ms:7.2f} {r.all_fit_share:7.0%} {r.dp_share:5.0%} {r.fallback_share:8.0%}"
            f" {f'{r.milp_solved}/{r.milp_sampled}':>7} {exact:>6} {gap:>8}"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="write the rows as a JSON list to this file")
    parser.add_argument("--snapshots", type=int, default=200, help="planner snapshots timed per size (200)")
    parser.add_argument("--milp-samples", type=int, default=10, help="snapshots per size solved by the MILP (10)")
    parser.add_argument("--milp-time-limit", type=float, default=5.0, help="seconds per MILP solve (5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", choices=sorted(POLICIES), default="tao", help="the planner to time (tao)")
    parser.add_argument(
        "--sizes", default=",".join(f"{s}x{n}" for s, n in SIZES), help="sessions×nodes list, e.g. 64x8,256x16"
    )


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        sessions, _, nodes = part.strip().partition("x")
        if not (sessions.isdigit() and nodes.isdigit()) or int(sessions) < 1 or int(nodes) < 1:
            raise argparse.ArgumentTypeError(f"--sizes: {part!r} is not SESSIONSxNODES (e.g. 64x8)")
        sizes.append((int(sessions), int(nodes)))
    return sizes


def run(args: argparse.Namespace) -> int:
    rows = []
    for sessions, nodes in parse_sizes(args.sizes):
        print(f"measuring {sessions} sessions × {nodes} nodes …", flush=True)
        rows.append(
            measure(sessions, nodes, args.snapshots, args.seed, args.milp_samples, args.milp_time_limit, args.policy)
        )
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
