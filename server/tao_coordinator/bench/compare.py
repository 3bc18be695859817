"""`tao bench compare`: TAO, its ablations and every baseline, side by side on the dev traces — the published table.

A cell is (workload, policy, concurrency, seed); each runs `FleetSimulation` as `tao sim` would and is written to
`OUT/runs/<cell>.json` as soon as it finishes, so an interrupted benchmark resumes where it stopped (`--fresh` starts
over). Cells run in `--jobs` worker processes. When all cells are done, `OUT/results.json` holds every run and
`OUT/results.md` the tables (see `compare_report.py`) — of this invocation's cells, or with `--report` of every run
in `OUT/runs` without running anything (how the published table joins seed 0 everywhere with extra seeds where
results are close: docs/benchmarks.md gives the commands); `--plots` draws `tao sim --plots` charts per workload (TAO,
its variants and the baselines; the ablations are in the tables only).

Workloads and fleets (docs/benchmarks.md says why):

| name  | trace                                  | fleet             | KV tokens |
|-------|----------------------------------------|-------------------|-----------|
| agentx| agentx_cc/dev.jsonl.gz (348 sessions)  | 8 × h100-tp4      | 7.16 M    |
| swe   | mini_swe_agent/steps_dev.jsonl.gz (246)| 4 × h100-tp2      | 1.29 M    |

Planning is charged (`--plan-timing measured`, the default): each plan reaches the coordinator after the wall-clock
time its solve took in the worker, plus `--plan-delay-ms`, so a slow plan goes stale, is cut or dropped, and its cost
shows in latency and TTFT; every run records its planner counters. `--plan-timing fixed` charges the fixed delay
alone (reproducible). A cached run counts as done only if it was made with the requested planning charge; run files
from before it was recorded count as uncharged ("fixed", 0 ms).

Seeds: seed 0 replays the sessions in file order; seed k > 0 replays them in an order shuffled by `Random(k)` (which
sessions run together changes) and seeds the policies' random choices. `--quick` runs TAO and the baselines at
concurrency 64 on the swe workload and the first 100 AgentX sessions, seed 0 (a few minutes).

`--limit` adds limit cells: each of `--limit-policies` (default: TAO and the baselines among the policies) replayed
at every workload, seed and concurrency on the limit fleet (`sim/limit_fleet.py`: KV that never runs out, no CPU
tier), written as `<cell>__limit.json`; the tables then show the limit and each policy's excess over it
(`compare_limit.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..progress import Progress
from ..sim.metrics import RunMetrics
from ..sim.node import NodeProfile, profile_by_name
from ..sim.node.profile import with_cpu_tier
from ..sim.plan_timing import PLAN_TIMINGS
from ..sim.report import RunResult
from ..sim.workloads import Workload, load_agentx, load_mini_swe, traces_dir

if TYPE_CHECKING:
    from .compare_report import Planning


@dataclass(frozen=True)
class Bench:
    name: str
    trace: str
    nodes: int
    profile: str
    limit: int | None = None
    cpu_kv_gib: float = 0.0
    """Host memory for KV per node (vLLM's `--kv-offloading-size`); 0: no CPU tier."""

    @property
    def workload(self) -> str:
        """The workload this bench replays (its name without the CPU tier's suffix)."""
        return self.name.partition("+cpu")[0]

    def with_cpu_tier(self, gib: float) -> Bench:
        """The same bench with a CPU tier on every node, under a name of its own (`agentx+cpu512`)."""
        if gib <= 0:
            return self
        return replace(self, name=f"{self.name}+cpu{gib:g}", cpu_kv_gib=gib)

    def node_profile(self) -> NodeProfile:
        profile = profile_by_name(self.profile)
        return with_cpu_tier(profile, self.cpu_kv_gib) if self.cpu_kv_gib else profile

    def fleet(self) -> tuple[int, str]:
        tier = f" with a {self.cpu_kv_gib:g} GiB CPU tier" if self.cpu_kv_gib else ""
        return self.nodes, f"{self.profile}{tier}"


BENCHES = {
    "agentx": Bench("agentx", "agentx_cc/dev.jsonl.gz", 8, "h100-tp4"),
    "swe": Bench("swe", "mini_swe_agent/steps_dev.jsonl.gz", 4, "h100-tp2"),
}
QUICK_LIMITS = {"agentx": 100, "swe": None}


@dataclass(frozen=True)
class Cell:
    bench: Bench
    policy: str
    concurrency: int
    seed: int
    planning: Planning
    limit: bool = False
    """Replayed on the limit fleet (KV that never runs out) instead of the bench's."""

    @property
    def key(self) -> str:
        safe = self.policy.replace("[", "(").replace("]", ")").replace(";", ",")
        return f"{self.bench.name}__{safe}__c{self.concurrency}__s{self.seed}{'__limit' if self.limit else ''}"


_WORKLOADS: dict[tuple[str, int | None, int], Workload] = {}


def load_bench(bench: Bench, seed: int) -> Workload:
    """The bench's workload (cached per process), in file order for seed 0, shuffled by `Random(seed)` otherwise."""
    cache_key = (bench.trace, bench.limit, seed)
    if cache_key not in _WORKLOADS:
        path = traces_dir() / bench.trace
        max_context = profile_by_name(bench.profile).model_len_limit
        loader = load_agentx if bench.workload == "agentx" else load_mini_swe
        workload = loader(path, max_context=max_context, limit=bench.limit)
        if seed:
            scripts = list(workload.scripts)
            random.Random(seed).shuffle(scripts)
            workload = replace(workload, scripts=tuple(scripts))
        _WORKLOADS[cache_key] = workload
    return _WORKLOADS[cache_key]


def run_cell(cell: Cell) -> dict[str, Any]:
    from ..sim.driver import FleetSimulation

    workload = load_bench(cell.bench, cell.seed)
    profile = cell.bench.node_profile()
    if cell.limit:
        from ..sim.limit_fleet import limit_profile

        profile = limit_profile(profile, workload)
    simulation = FleetSimulation(
        workload,
        cell.policy,
        cell.concurrency,
        profile,
        cell.bench.nodes,
        seed=cell.seed,
        plan_timing=cell.planning.timing,
        plan_delay_s=cell.planning.delay_ms / 1e3,
    )
    started = time.perf_counter()
    metrics = simulation.run()
    return {
        "workload": cell.bench.name,
        "policy": cell.policy,
        "concurrency": cell.concurrency,
        "seed": cell.seed,
        **cell.planning.as_record(),
        "wall_s": round(time.perf_counter() - started, 2),
        "metrics": asdict(metrics),
        **({"limit": True} if cell.limit else {}),
    }


def is_done(path: Path, planning: Planning) -> bool:
    """A cell is done if its run file exists and was made with the planning charge asked for now."""
    from .compare_report import planning_of

    return path.exists() and planning_of(json.loads(path.read_text())) == planning


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="results directory")
    parser.add_argument("--workloads", default="agentx,swe", help=f"comma-separated, of {', '.join(BENCHES)}")
    parser.add_argument("--policies", help="comma-separated (default: tao, its ablations and every baseline)")
    parser.add_argument("--concurrency", default="16,32,64,128", help="comma-separated")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (0 = file order)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--plan-timing",
        choices=PLAN_TIMINGS,
        default="measured",
        help="measured: a plan arrives after its solve's wall-clock time + --plan-delay-ms; fixed: the delay alone",
    )
    parser.add_argument("--plan-delay-ms", type=float, default=0.0, help="fixed virtual time added to every plan")
    parser.add_argument(
        "--cpu-kv-gib",
        type=float,
        default=0.0,
        help="give every node a CPU KV tier of this many GiB (vLLM's --kv-offloading-size); runs are kept apart "
        "under the workload name + cpuGIB (0: none)",
    )
    parser.add_argument(
        "--limit",
        action="store_true",
        help="also replay --limit-policies on the limit fleet (KV that never runs out, no CPU tier) and report every "
        "policy's excess over the best of them",
    )
    parser.add_argument(
        "--limit-policies", help="comma-separated, with --limit (default: tao and the baselines among --policies)"
    )
    parser.add_argument("--quick", action="store_true", help="TAO and the baselines at 64, swe + 100 AgentX sessions")
    parser.add_argument("--fresh", action="store_true", help="ignore runs already in OUT/runs")
    parser.add_argument("--plots", action="store_true", help="write PNG charts under OUT/img/<workload>/")
    parser.add_argument(
        "--report", action="store_true", help="only write the tables (and plots) of every run in OUT/runs"
    )


def plan_cells(args: argparse.Namespace) -> list[Cell]:
    from ..core.policies import ABLATIONS, BASELINES, VARIANTS, make_policy
    from .compare_report import Planning

    if args.quick:
        benches = [replace(BENCHES[name], limit=QUICK_LIMITS[name]) for name in BENCHES]
        policies, concurrencies, seeds = ["tao", *VARIANTS, *BASELINES], [64], [0]
    else:
        benches = [BENCHES[name.strip()].with_cpu_tier(args.cpu_kv_gib) for name in args.workloads.split(",")]
        policies = args.policies.split(",") if args.policies else ["tao", *ABLATIONS, *VARIANTS, *BASELINES]
        concurrencies = [int(c) for c in args.concurrency.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
    for policy in policies:
        make_policy(policy)
    if args.plan_delay_ms < 0:
        raise ValueError("--plan-delay-ms: must be at least 0")
    if not 0 <= args.cpu_kv_gib < math.inf:
        raise ValueError("--cpu-kv-gib: must be a finite number of GiB, at least 0")
    planning = Planning(args.plan_timing, args.plan_delay_ms)
    cells = [Cell(b, p, c, s, planning) for b in benches for s in seeds for c in concurrencies for p in policies]
    limited = _limit_policies(args, policies)
    cells += [
        Cell(b, p, c, s, planning, limit=True) for b in benches for s in seeds for c in concurrencies for p in limited
    ]
    return sorted(cells, key=lambda cell: cell.bench.workload != "agentx")


def _limit_policies(args: argparse.Namespace, policies: list[str]) -> list[str]:
    """The policies replayed on the limit fleet: none without `--limit`."""
    from ..core.policies import BASELINES, make_policy

    if args.limit_policies is not None and not args.limit:
        raise ValueError("--limit-policies: only means something with --limit")
    if not args.limit:
        return []
    if args.limit_policies is None:
        return [p for p in policies if p == "tao" or p in BASELINES]
    chosen = [p.strip() for p in args.limit_policies.split(",") if p.strip()]
    if not chosen:
        raise ValueError("--limit-policies: name at least one policy")
    for policy in chosen:
        make_policy(policy)
    return chosen


def run(args: argparse.Namespace) -> int:
    if args.report:
        return report_all(args)
    try:
        cells = plan_cells(args)
    except (KeyError, ValueError) as error:
        print(f"tao bench compare: {error}", file=sys.stderr)
        return 2
    runs_dir = args.out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = [cell for cell in cells if args.fresh or not is_done(runs_dir / f"{cell.key}.json", cell.planning)]
    print(f"{len(cells)} cells, {len(cells) - len(todo)} already done, {args.jobs} workers", file=sys.stderr)
    started = time.perf_counter()
    progress = Progress(len(todo), "cells")
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_cell, cell): cell for cell in todo}
        for done, future in enumerate(as_completed(futures), 1):
            cell, record = futures[future], future.result()
            (runs_dir / f"{cell.key}.json").write_text(json.dumps(record) + "\n")
            elapsed = time.perf_counter() - started
            progress.log(f"[{done}/{len(todo)} {elapsed:6.0f} s] {cell.key}: {record['wall_s']} s")
            progress.advance()
    progress.close()
    write_results([json.loads((runs_dir / f"{cell.key}.json").read_text()) for cell in cells], args)
    return 0


def report_all(args: argparse.Namespace) -> int:
    from ..core.policies import ABLATIONS, BASELINES, VARIANTS

    files = sorted((args.out / "runs").glob("*.json"))
    if not files:
        print(f"tao bench compare: no runs in {args.out / 'runs'} to report", file=sys.stderr)
        return 2
    records = [json.loads(path.read_text()) for path in files]
    benches = {name: k for k, name in enumerate(BENCHES)}  # tiered workloads after the plain ones
    policies = {name: k for k, name in enumerate(["tao", *VARIANTS, *ABLATIONS, *BASELINES])}
    records.sort(
        key=lambda r: (
            benches.get(r["workload"], len(benches)),
            r["seed"],
            r["concurrency"],
            policies.get(r["policy"], len(policies)),
            r["policy"],
        )
    )
    write_results(records, args)
    return 0


def write_results(records: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from .compare_limit import results_fields, split
    from .compare_report import render_report

    runs, limit_runs = split(records)
    document = {"runs": runs, **results_fields(runs, limit_runs)}
    (args.out / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    report = render_report(runs, {r["workload"]: fleet_of(r) for r in runs}, limit_runs)
    (args.out / "results.md").write_text(report)
    print(report)
    if args.plots:
        _plots(runs, limit_runs, args.out / "img")


def fleet_of(record: dict[str, Any]) -> tuple[int, str]:
    """The fleet a run file's workload ran on: its bench's, with the CPU tier its name says."""
    name, _, tier = record["workload"].partition("+cpu")
    bench = BENCHES[name]
    return bench.with_cpu_tier(float(tier)).fleet() if tier else bench.fleet()


def _plots(records: list[dict[str, Any]], limit_records: list[dict[str, Any]], directory: Path) -> None:
    from ..core.policies import ABLATIONS
    from ..sim.plots import write_plots
    from .compare_limit import limits_by_cell, plot_limits

    limits = limits_by_cell(limit_records)

    for workload in sorted({r["workload"] for r in records}):
        results = [
            RunResult(r["policy"], r["concurrency"], r["seed"], RunMetrics(**r["metrics"]))
            for r in records
            if r["workload"] == workload and r["seed"] == 0 and r["policy"] not in ABLATIONS
        ]
        for path in write_plots(results, directory / workload, plot_limits(limits, workload)):
            print(f"wrote {path}")
