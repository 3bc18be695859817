"""The measurement behind `tao bench planner`: record the snapshots a `tao` replay plans from, time a fresh planner
on each, and solve an evenly spread sample of them with the MILP reference at `mip_rel_gap = 0`.

The replay is `FleetSimulation` as `tao sim --plan-timing fixed` runs it (policy `tao`, plans applied at once): the
recorded decision points are then the same in every run and for every planner timed on them, where a replay
charged each plan's measured solve time would record a different set each time, moved by the planner's own speed
and the machine's load. Its snapshot hook keeps every `every`-th snapshot and, when a case has a snapshot limit,
ends the replay by raising `_Enough` once the limit is reached. Snapshots share the immutable sessions and nodes of
the live state, so keeping all of them is cheap: a whole AgentX dev replay at 64×8 (about 100k plans) peaks below
200 MB.

Figures of one case (`Row`): `exact_share`, the share of plans the planner certified optimal (`Plan.certified`);
the gap of one sampled plan, its relative shortfall against the MILP optimum in the first component of the
lexicographic objective where the two differ (`relative_gap`; 0 when equal: a plan that keeps 2 % less cache credit
has gap 0.02, whatever its other components); `gap_max`, `gap_mean` and `gap_zero_share` over the sample the MILP
solved within its time limit, null when it solved none.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..core.plan import Plan
from ..core.policies.problem import build_problem
from ..core.policies.tao import TaoPolicy, tao, tao_no_dp
from ..core.snapshot import Snapshot
from ..core.solver.problem import relative_gap
from ..percentile import percentile
from ..progress import Progress
from ..sim.driver import FleetSimulation
from ..sim.node import profile_by_name
from ..sim.workloads import Workload

TIMED_PLANNERS: dict[str, Callable[[], TaoPolicy]] = {"tao": tao, "tao-no-dp": tao_no_dp}
"""The planners worth timing: TAO's pipeline, and the paper's best-fit decreasing alone (its gap is the point)."""


@dataclass(frozen=True)
class Case:
    trace: str
    """A trace file, or `synthetic:PRESET`."""
    concurrency: int
    nodes: int
    node_profile: str
    synthetic_sessions: int = 0
    """Sessions a synthetic workload generates (0 for a trace file)."""
    every: int = 1
    snapshots: int | None = None
    """Stop the replay once this many snapshots are recorded (None: replay it all)."""


@dataclass
class Row:
    trace: str
    sessions: int
    """Concurrent sessions of the replay."""
    nodes: int
    node_profile: str
    policy: str
    workload_sessions: int
    replay_plans: int
    """Plans the replay made; every `every`-th of them was recorded, up to `plans`."""
    every: int
    stopped_early: bool
    plans: int
    """Snapshots recorded and timed."""
    candidates_mean: float
    exact_share: float
    """Share of the plans the planner certified optimal."""
    methods: dict[str, int]
    """Plans per solver method."""
    mean_ms: float
    p50_ms: float
    p95_ms: float
    max_ms: float
    milp_sampled: int
    milp_solved: int
    gap_max: float | None
    gap_mean: float | None
    gap_zero_share: float | None
    replay_s: float
    wall_s: float


class _Enough(Exception):
    """Raised from the snapshot hook once every snapshot asked for is recorded: it ends the replay."""


class _Recording:
    def __init__(self, every: int, limit: int | None, progress: Progress | None) -> None:
        self.every, self.limit, self.progress = every, limit, progress
        self.seen = 0
        self.snapshots: list[Snapshot] = []

    def __call__(self, snapshot: Snapshot) -> None:
        self.seen += 1
        if (self.seen - 1) % self.every:
            return
        self.snapshots.append(snapshot)
        if self.progress is not None:
            self.progress.advance()
        if self.limit is not None and len(self.snapshots) >= self.limit:
            raise _Enough


def evenly_spaced(count: int, samples: int) -> list[int]:
    """`samples` distinct indices into `count` items, evenly spread (the middle of equal segments)."""
    samples = min(samples, count)
    return [(2 * k + 1) * count // (2 * samples) for k in range(samples)]


def record(case: Case, workload: Workload, seed: int) -> tuple[_Recording, bool]:
    """Replay `case`; its recording, and whether the replay was stopped early."""
    label = f"replay {case.trace} {case.concurrency}×{case.nodes}"
    if case.snapshots is None:
        progress, recording = Progress(workload.report.requests, label), _Recording(case.every, None, None)
    else:
        progress = Progress(case.snapshots, f"{label} (snapshots)")
        recording = _Recording(case.every, case.snapshots, progress)
    simulation = FleetSimulation(
        workload,
        "tao",
        case.concurrency,
        profile_by_name(case.node_profile),
        case.nodes,
        plan_timing="fixed",
        progress=progress.advance if case.snapshots is None else None,
        seed=seed,
        on_snapshot=recording,
    )
    try:
        simulation.run()
    except _Enough:
        return recording, True
    finally:
        progress.close()
    return recording, False


def time_plans(snapshots: list[Snapshot], policy: TaoPolicy) -> tuple[list[float], list[Plan]]:
    """Wall-clock milliseconds of `policy.plan` on each snapshot, and the plans. The recording is frozen out of
    the garbage collector meanwhile: a full collection walks every object alive, and a plan must not pay for the
    hundred thousand snapshots kept here, which a live coordinator never holds."""
    times, plans = [], []
    progress = Progress(len(snapshots), f"timing {len(snapshots)} plans")
    gc.collect()
    gc.freeze()
    try:
        for snapshot in snapshots:
            started = time.perf_counter()
            plans.append(policy.plan(snapshot))
            times.append((time.perf_counter() - started) * 1e3)
            progress.advance()
    finally:
        gc.unfreeze()
        progress.close()
    return times, plans


def milp_gaps(snapshots: list[Snapshot], plans: list[Plan], policy: TaoPolicy, time_limit_s: float) -> list[float]:
    """The gap of each plan against the MILP optimum of its snapshot, for those the MILP solves in time."""
    from ..core.solver.milp import solve_milp  # SciPy: only the benchmark and tests need it

    gaps = []
    progress = Progress(len(snapshots), "MILP")
    for snapshot, plan in zip(snapshots, plans, strict=True):
        exact = solve_milp(build_problem(snapshot, policy.values).problem, time_limit_s, mip_rel_gap=0.0)
        if exact is not None:
            gaps.append(relative_gap(exact.objective, plan.objective))
        progress.advance()
    progress.close()
    return gaps


def replay_case(
    case: Case, workload: Workload, policy_name: str, milp_samples: int, milp_time_limit_s: float, seed: int
) -> Row:
    started = time.perf_counter()
    recording, stopped = record(case, workload, seed)
    replay_s = time.perf_counter() - started
    snapshots, policy = recording.snapshots, TIMED_PLANNERS[policy_name]()
    times, plans = time_plans(snapshots, policy)
    sample = evenly_spaced(len(snapshots), milp_samples)
    gaps = milp_gaps([snapshots[k] for k in sample], [plans[k] for k in sample], policy, milp_time_limit_s)
    methods = Counter(plan.method for plan in plans)
    times.sort()
    count = len(plans) or 1  # no plans: every figure 0
    return Row(
        trace=case.trace,
        sessions=case.concurrency,
        nodes=case.nodes,
        node_profile=case.node_profile,
        policy=policy_name,
        workload_sessions=len(workload.scripts),
        replay_plans=recording.seen,
        every=case.every,
        stopped_early=stopped,
        plans=len(plans),
        candidates_mean=sum(plan.candidates for plan in plans) / count,
        exact_share=sum(plan.certified for plan in plans) / count,
        methods=dict(sorted(methods.items())),
        mean_ms=sum(times) / count,
        p50_ms=percentile(times, 0.5, method="nearest") if times else 0.0,
        p95_ms=percentile(times, 0.95, method="nearest") if times else 0.0,
        max_ms=times[-1] if times else 0.0,
        milp_sampled=len(sample),
        milp_solved=len(gaps),
        gap_max=max(gaps) if gaps else None,
        gap_mean=statistics.fmean(gaps) if gaps else None,
        gap_zero_share=sum(gap == 0 for gap in gaps) / len(gaps) if gaps else None,
        replay_s=round(replay_s, 2),
        wall_s=round(time.perf_counter() - started, 2),
    )
