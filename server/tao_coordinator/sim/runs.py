"""The replays of one `tao sim` invocation: each policy × concurrency × plan charge on one fleet, one after another
or in worker processes (`--jobs`).

Each replay is deterministic in its inputs (with `--no-timing`, and measured planning aside), and workers share
nothing else: the workload reaches each worker once, when it starts, and every replay carries its own fleet, policy
and charge. So the runs, and their order in the result, are the same with any number of workers; only what is shown
while they run differs (a progress bar per replay in turn, or a bar over replays with a line per finished one).
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from ..core.settings import CoreSettings
from ..progress import Progress
from .node import NodeProfile
from .plan_timing import PlanTiming
from .report import RunResult, run_label
from .small_nodes import SmallNodes
from .workloads import Workload


@dataclass(frozen=True)
class Replay:
    policy: str
    concurrency: int
    delay_ms: float


def replay_grid(policies: list[str], concurrencies: list[int], delays_ms: list[float]) -> list[Replay]:
    """Every policy × concurrency × charge, in the order `tao sim` reports them."""
    return [Replay(p, c, d) for p in policies for c in concurrencies for d in delays_ms]


@dataclass(frozen=True)
class ReplaySetup:
    """What every replay of one fleet shares."""

    profile: NodeProfile
    small: SmallNodes
    nodes: int
    settings: CoreSettings
    timing: PlanTiming
    seed: int
    kv_events: bool
    measure_planning: bool
    """False with `--no-timing`: planner wall-clock times are left out, so the figures are reproducible."""
    sweep: bool
    """Several charges: each replay's label names its own."""


def run_replays(workload: Workload, setup: ReplaySetup, replays: list[Replay], jobs: int) -> list[RunResult]:
    """Every replay of `replays` on `setup`'s fleet, in `jobs` worker processes when more than one; the results in
    the order of `replays`."""
    if jobs <= 1 or len(replays) <= 1:
        return [run_replay(workload, setup, replay) for replay in replays]
    workers = min(jobs, len(replays))
    print(f"{len(replays)} replays in {workers} worker processes", file=sys.stderr)
    progress = Progress(len(replays), "replays")
    # spawned, not forked: the parent may run a progress bar's thread, whose locks a fork would copy held
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, spawn, initializer=_keep_workload, initargs=(workload,)) as pool:
        futures = [pool.submit(_replay_in_worker, setup, replay) for replay in replays]
        for future in as_completed(futures):
            result = future.result()
            progress.log(f"{_label(setup, result.policy, result.concurrency, result.plan_delay_ms)}: done")
            progress.advance()
    progress.close()
    return [future.result() for future in futures]


def run_replay(workload: Workload, setup: ReplaySetup, replay: Replay, show_progress: bool = True) -> RunResult:
    from .driver import FleetSimulation

    label = _label(setup, replay.policy, replay.concurrency, replay.delay_ms)
    progress = Progress(workload.report.requests, label) if show_progress else None
    simulation = FleetSimulation(
        workload,
        replay.policy,
        replay.concurrency,
        setup.profile,
        setup.nodes,
        settings=setup.settings,
        plan_timing=setup.timing,
        plan_delay_s=replay.delay_ms / 1e3,
        progress=progress.advance if progress is not None else None,
        seed=setup.seed,
        kv_evidence=setup.kv_events,
        **setup.small.simulation_kwargs(),
    )
    started = time.perf_counter()
    metrics = simulation.run(timing=setup.measure_planning)
    wall = time.perf_counter() - started
    if progress is not None:
        progress.close()
    print(
        f"{label}: {metrics.makespan_s:,.0f} s simulated in {wall:.1f} s "
        f"({metrics.makespan_s / wall:,.0f}× real time, {simulation.events / wall:,.0f} events/s)",
        file=sys.stderr,
    )
    return RunResult(replay.policy, replay.concurrency, setup.seed, metrics, replay.delay_ms)


def _label(setup: ReplaySetup, policy: str, concurrency: int, delay_ms: float | None) -> str:
    return run_label(policy, concurrency, delay_ms if setup.sweep else None)


_workload: Workload | None = None
"""The workload of a worker process, set once when it starts."""


def _keep_workload(workload: Workload) -> None:
    global _workload
    _workload = workload


def _replay_in_worker(setup: ReplaySetup, replay: Replay) -> RunResult:
    assert _workload is not None, "a worker runs replays only after its initializer"
    return run_replay(_workload, setup, replay, show_progress=False)
