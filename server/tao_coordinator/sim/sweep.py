"""A sweep over plan charges: the same replays with every plan charged D ms for several D, and the median over D.

A `--no-timing` replay is deterministic, but a policy's decisions are chaotic in small perturbations: charging every
plan 1 ms instead of 0 moves a cell's mean TTFT by several per cent (docs/benchmarks.md, distance to the limit). One
run can thus flip a comparison of a few per cent; the median over a handful of charges cannot be flipped by one of
them. `tao sim --plan-delay-ms 0,1,2,3,4,5` runs each policy × concurrency at each charge and reports, per policy ×
concurrency, the median run.

The median run's every numeric figure is the median of that figure over the charges, each on its own (so its mean
latency and its TTFT may come from different runs); whole numbers stay whole (the median rounded, halves to even).
Figures that are not numbers (the per-node half-lives) are the run's whose mean latency is the lower median. A figure
missing from any run (None) is missing from the median run.

Invariants: one median run per (policy, concurrency, seed), in the order the runs came; a sweep of one charge is
that run itself.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from typing import Any

from .limit import Limit, beats_limit_on, excess
from .metrics import RunMetrics
from .report import RunResult, aligned_line, dump_json, run_json


def parse_delays(text: str) -> list[float]:
    """`--plan-delay-ms`: one charge or several, comma-separated, in ms; each at least 0, none twice."""
    delays: list[float] = []
    for part in text.split(","):
        part = part.strip()
        try:
            delay = float(part)
        except ValueError:
            raise ValueError(f"--plan-delay-ms: {part!r} is not a number of milliseconds") from None
        if not 0 <= delay < float("inf"):
            raise ValueError(f"--plan-delay-ms: must be at least 0 and finite, got {part}")
        if delay in delays:
            raise ValueError(f"--plan-delay-ms: {part} is given twice")
        delays.append(delay)
    return delays


def median_runs(results: Iterable[RunResult]) -> list[RunResult]:
    """Per (policy, concurrency, seed) of `results`, the median run over its charges (module docstring)."""
    return [_median(runs) for runs in _by_cell(results).values()]


def _by_cell(results: Iterable[RunResult]) -> dict[tuple[str, int, int], list[RunResult]]:
    """The runs of each (policy, concurrency, seed), in the order the runs came."""
    cells: dict[tuple[str, int, int], list[RunResult]] = {}
    for result in results:
        cells.setdefault((result.policy, result.concurrency, result.seed), []).append(result)
    return cells


def _median(runs: list[RunResult]) -> RunResult:
    if len(runs) == 1:
        return runs[0]
    middle = statistics.median_low(run.metrics.latency_mean_s for run in runs)
    pattern = next(run.metrics for run in runs if run.metrics.latency_mean_s == middle)
    changes: dict[str, Any] = {}
    for field in fields(RunMetrics):
        values = [getattr(run.metrics, field.name) for run in runs]
        if any(value is None for value in values):
            changes[field.name] = None
        elif all(isinstance(value, bool) or not isinstance(value, int | float) for value in values):
            continue  # not a number: the pattern run's
        elif all(isinstance(value, int) for value in values):
            changes[field.name] = round(statistics.median(values))
        else:
            changes[field.name] = statistics.median(values)
    return replace(runs[0], metrics=replace(pattern, **changes), plan_delay_ms=None)


def delays_of(runs: Iterable[RunResult]) -> list[float]:
    """The distinct charges of `runs`, in the order they first appear."""
    return list(dict.fromkeys(run.plan_delay_ms for run in runs if run.plan_delay_ms is not None))


def with_medians_json(text: str, medians: list[RunResult], limits: Mapping[int, Limit]) -> str:
    """`report.to_json`'s text of a sweep with its `medians` added (each with its excess over the limit when its
    concurrency has one), rounded as that text is."""
    document = json.loads(text)
    rows = []
    for median in medians:
        row = run_json(median)
        limit = limits.get(median.concurrency)
        if limit is not None:
            row["excess_over_limit"] = excess(median.metrics, limit)
            row["beats_limit_on"] = beats_limit_on(median.metrics, limit)
        rows.append(row)
    document["medians"] = rows
    return dump_json(document)


def render_spread(results: list[RunResult]) -> str:
    """Per policy × concurrency of a sweep: the median of the headline figures and their range over the charges."""
    delays = ", ".join(f"{delay:g}" for delay in delays_of(results))
    lines = [f"median over plan charges D = {delays} ms (each figure its own median; min–max over D in brackets):"]
    rows = [["policy", "conc", "latency mean, s", "TTFT mean, s", "tok/s", "interrupts"]]
    for (policy, concurrency, _), runs in _by_cell(results).items():
        rows.append(
            [
                policy,
                str(concurrency),
                _spread([r.metrics.latency_mean_s for r in runs], "{:,.0f}"),
                _spread([r.metrics.ttft_mean_s for r in runs], "{:.2f}"),
                _spread([r.metrics.decode_throughput_tok_s for r in runs], "{:,.0f}"),
                _spread([r.metrics.interruptions for r in runs], "{:,.0f}"),
            ]
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines += [aligned_line(row, widths) for row in rows]
    return "\n".join(lines)


def _spread(values: list[float | int | None], fmt: str) -> str:
    known = [value for value in values if value is not None]
    if not known:
        return "–"
    middle, low, high = statistics.median(known), min(known), max(known)
    return f"{fmt.format(middle)} ({fmt.format(low)}–{fmt.format(high)})"
