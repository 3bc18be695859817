"""`tao bench planner`: how long TAO's planner takes on the decision points real replays produce, how often it is
certified optimal, and how far from optimal it lands otherwise.

A case is a workload replayed in the simulator with policy `tao`, as `tao sim` replays it: a trace file (`--trace`,
repeatable) at each `--concurrency` on `--nodes` × `--node-profile`, or a synthetic size `SxN` (`--sizes`) —
`synthetic:claude-code` with S sessions, all S concurrent, on N `h100-tp4` nodes. Every `--every`-th snapshot the
coordinator plans from is recorded (all of them for traces, every 5th for sizes); a replay stops once `--snapshots`
are recorded (by default never for traces; at 200 for sizes, so 1024x64 replays for under a minute). Each
recorded snapshot is then solved again by a fresh `--policy` planner and timed — `policy.plan(snapshot)`, building
the problem from the signals included, as the live driver runs it — and `--milp-samples` of them, evenly spread
over the recording, by the MILP reference at `mip_rel_gap = 0`. `planner_replay.py` defines the figures.

Without `--trace` or `--sizes` it runs the cases of docs/algorithm.md#measured: AgentX dev at 64×8 and 128×8
`h100-tp4`, mini-swe-agent dev at 128×4 `h100-tp2` (those whose files are under `$TAO_TRACES`), and 1024x64.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from ..sim.cli import UsageError, load_workload, positive_numbers
from ..sim.node import UnknownProfile, profile_by_name
from ..sim.workloads import Workload, traces_dir

if TYPE_CHECKING:
    from .planner_replay import Case, Row

SYNTHETIC_TRACE = "synthetic:claude-code"
SIZE_PROFILE = "h100-tp4"
SIZE_EVERY = 5
SIZE_SNAPSHOTS = 200
DEFAULT_CASES = (
    ("agentx_cc/dev.jsonl.gz", 64, 8, "h100-tp4"),
    ("agentx_cc/dev.jsonl.gz", 128, 8, "h100-tp4"),
    ("mini_swe_agent/steps_dev.jsonl.gz", 128, 4, "h100-tp2"),
)
DEFAULT_SIZES = "1024x64"
PLANNERS = ("tao", "tao-no-dp")
"""The policies whose planner can be timed (`planner_replay.TIMED_PLANNERS` builds them)."""


def planner_table(rows: list[Row]) -> str:
    header = (
        f"{'workload':<44} {'sess×nodes':>10} {'plans':>6} {'cand':>5} {'mean ms':>8} {'p50 ms':>7} {'p95 ms':>7}"
        f" {'max ms':>7} {'exact':>6} {'MILP':>7} {'gap=0':>6} {'gap max':>8}  methods"
    )
    lines = [header, "-" * (len(header) + 24)]
    for r in rows:
        zero = "n/a" if r.gap_zero_share is None else f"{r.gap_zero_share:.0%}"
        worst = "n/a" if r.gap_max is None else f"{r.gap_max:.2%}"
        methods = ", ".join(f"{method} {count}" for method, count in r.methods.items())
        lines.append(
            f"{_short(r.trace) + ' ' + r.node_profile:<44} {f'{r.sessions}×{r.nodes}':>10} {r.plans:6d}"
            f" {r.candidates_mean:5.0f} {r.mean_ms:8.3f} {r.p50_ms:7.3f} {r.p95_ms:7.3f} {r.max_ms:7.2f}"
            f" {r.exact_share:6.1%} {f'{r.milp_solved}/{r.milp_sampled}':>7} {zero:>6} {worst:>8}  {methods}"
        )
    return "\n".join(lines)


def _short(trace: str) -> str:
    path = Path(trace)
    return trace if trace.startswith("synthetic") else "/".join(path.parts[-2:])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        f"{parser.description}. Without --trace or --sizes: AgentX dev at 64×8 and 128×8 h100-tp4 (about 4 and 6"
        " minutes), mini-swe-agent dev at 128×4 h100-tp2 (about 1 minute) — those whose files are under $TAO_TRACES"
        " (default ../shared/traces) — and --sizes 1024x64 (under a minute, most of it in the MILP): about 11"
        " minutes in all on one quiet core. --every K cuts the timing of a trace K-fold, not its replay."
    )
    parser.add_argument(
        "--trace",
        action="append",
        help="a trace file to replay, as `tao sim --trace` reads it, or synthetic[:PRESET] (as many sessions as the"
        " concurrency); repeat for several; each runs at every --concurrency on --nodes × --node-profile",
    )
    parser.add_argument("--concurrency", help="comma-separated concurrent sessions of the trace replays (16)")
    parser.add_argument("--nodes", type=int, help="nodes of the trace replays (4)")
    parser.add_argument(
        "--node-profile", help=f"node profile of the trace replays (h100-tp2) and of the sizes ({SIZE_PROFILE})"
    )
    parser.add_argument(
        "--sizes",
        help=f"comma-separated SESSIONSxNODES, e.g. 1024x64: {SYNTHETIC_TRACE} with that many sessions, all concurrent,"
        f" on that many {SIZE_PROFILE} nodes",
    )
    parser.add_argument(
        "--every",
        type=int,
        help=f"record every K-th snapshot the replay plans from (1 for traces: all; {SIZE_EVERY} for sizes)",
    )
    parser.add_argument(
        "--snapshots",
        type=int,
        help=f"stop a replay once this many snapshots are recorded (traces: replay it all; sizes: {SIZE_SNAPSHOTS})",
    )
    parser.add_argument("--milp-samples", type=int, default=10, help="snapshots per case solved by the MILP")
    parser.add_argument(
        "--milp-time-limit", type=float, default=5.0, help="seconds per MILP stage (one per value component)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic workload and the replay")
    parser.add_argument("--policy", choices=sorted(PLANNERS), default="tao", help="the planner timed")
    parser.add_argument("--json", type=Path, help="write the rows as a JSON list to this file")


def _positive(value: int | None, name: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"--{name}: must be at least 1")


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        sessions, _, nodes = part.strip().partition("x")
        if not (sessions.isdigit() and nodes.isdigit()) or int(sessions) < 1 or int(nodes) < 1:
            raise UsageError(f"--sizes: {part!r} is not SESSIONSxNODES (e.g. 1024x64)")
        sizes.append((int(sessions), int(nodes)))
    return sizes


def plan_cases(args: argparse.Namespace) -> list[Case]:
    """The cases the arguments ask for; UsageError naming the argument when one is wrong."""
    from .planner_replay import Case

    for name in ("nodes", "every", "snapshots"):
        _positive(getattr(args, name), name)
    if args.milp_samples < 0:
        raise UsageError("--milp-samples: must be at least 0")
    if args.milp_time_limit <= 0:
        raise UsageError("--milp-time-limit: must be positive")
    if not args.trace:
        for name, value in (("concurrency", args.concurrency), ("nodes", args.nodes)):
            if value is not None:
                raise UsageError(f"--{name}: applies to --trace replays; none given")
    if args.node_profile is not None:
        try:
            profile_by_name(args.node_profile)
        except UnknownProfile as error:
            raise UsageError(f"--node-profile: {error}") from None
    cases = []
    for trace in args.trace or ():
        for concurrency in positive_numbers(args.concurrency or "16", "concurrency"):
            profile = args.node_profile or "h100-tp2"
            generated = concurrency if trace.startswith("synthetic") else 0
            cases.append(Case(trace, concurrency, args.nodes or 4, profile, generated, args.every or 1, args.snapshots))
    sizes = args.sizes
    if not args.trace and sizes is None:
        folder = traces_dir()
        for trace, concurrency, nodes, profile in DEFAULT_CASES:
            if (folder / trace).is_file():
                cases.append(Case(str(folder / trace), concurrency, nodes, profile, 0, args.every or 1, args.snapshots))
            else:
                print(f"tao bench planner: skipping {trace}: not under {folder} (set $TAO_TRACES)", file=sys.stderr)
        sizes = DEFAULT_SIZES
    for sessions, nodes in parse_sizes(sizes) if sizes else ():
        profile = args.node_profile or SIZE_PROFILE
        every, limit = args.every or SIZE_EVERY, args.snapshots or SIZE_SNAPSHOTS
        cases.append(Case(SYNTHETIC_TRACE, sessions, nodes, profile, sessions, every, limit))
    return cases


def load_workloads(cases: list[Case], seed: int) -> dict[tuple[str, str, int], Workload]:
    workloads: dict[tuple[str, str, int], Workload] = {}
    for case in cases:
        key = (case.trace, case.node_profile, case.synthetic_sessions)
        if key not in workloads:
            limit = profile_by_name(case.node_profile).model_len_limit
            workloads[key] = load_workload(case.trace, limit, None, seed, case.synthetic_sessions)
            if not workloads[key].scripts:
                raise UsageError(f"--trace: {case.trace!r} has no session left to replay")
    return workloads


def run(args: argparse.Namespace) -> int:
    from .planner_replay import replay_case

    try:
        cases = plan_cases(args)
        workloads = load_workloads(cases, args.seed)
    except UsageError as error:
        print(f"tao bench planner: {error}", file=sys.stderr)
        return 2
    rows = []
    for case in cases:
        workload = workloads[(case.trace, case.node_profile, case.synthetic_sessions)]
        row = replay_case(case, workload, args.policy, args.milp_samples, args.milp_time_limit, args.seed)
        print(
            f"{_short(case.trace)} {case.concurrency}×{case.nodes} {case.node_profile}: {row.replay_plans} plans"
            f" replayed in {row.replay_s:.0f} s{' (stopped early)' if row.stopped_early else ''}, {row.plans}"
            f" timed, {row.milp_solved}/{row.milp_sampled} solved by the MILP; {row.wall_s:.0f} s in all",
            file=sys.stderr,
        )
        rows.append(row)
    print(planner_table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
