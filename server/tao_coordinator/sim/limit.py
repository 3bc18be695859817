"""The limit of a comparison, and each policy's excess over it.

The limit at one concurrency is what the fleet could do with memory out of the way: the compared policies are
rerun on the limit fleet (`limit_fleet.py`: same workload, nodes, step times and concurrency, KV that never runs
out, no CPU tier), and per metric the best of those runs is the limit. No scheduler on the real fleet should beat
it: unbounded memory takes nothing away from any policy, and the best over policies covers the placement and
ordering choices the compared policies make. A run that does beat it on a metric is flagged (`beats_limit_on`),
since then the limit is not a bound there.

It bounds means and throughput — `LIMIT_METRICS` — not medians or p99s: over a few hundred sessions a tail
percentile moves with which sessions happen to run together, and a constrained run can land below the limit's.

Excess is relative and signed so that positive is always worse: `(value − limit) / limit` for a metric where lower
is better, `(limit − value) / limit` where higher is better (a throughput 10 % below the limit's is +10 %).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .report import aligned_line, dump_json, run_json

if TYPE_CHECKING:
    from .report import RunResult

Direction = Literal["lower", "higher"]

LIMIT_METRICS: tuple[tuple[str, str, Direction, str], ...] = (
    ("latency", "latency_mean_s", "lower", "{:,.0f} s"),
    ("TTFT", "ttft_mean_s", "lower", "{:.3f} s"),
    ("throughput", "decode_throughput_tok_s", "higher", "{:,.0f} tok/s"),
)
"""(title, RunMetrics field, which way is better, format): the figures the limit bounds."""

TOLERANCE = 1e-9
"""A run beats the limit only by more than this relative margin (float noise is not a broken bound)."""


@dataclass(frozen=True)
class Limit:
    """The limit at one concurrency: per metric the best value over the limit-fleet runs, and which policy set it."""

    concurrency: int
    values: Mapping[str, float]
    set_by: Mapping[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "metrics": dict(self.values), "set_by": dict(self.set_by)}


def _metric(metrics: Any, field: str) -> float:
    value = metrics[field] if isinstance(metrics, Mapping) else getattr(metrics, field)
    return math.nan if value is None else float(value)


def _better(direction: Direction, a: float, b: float) -> bool:
    return a < b if direction == "lower" else a > b


def limit_of(concurrency: int, runs: Iterable[tuple[str, Any]]) -> Limit:
    """The limit from `(policy, metrics)` pairs of limit-fleet runs at `concurrency` (metrics: a `RunMetrics` or its
    dict); a metric no run measured (NaN) is left out."""
    values: dict[str, float] = {}
    set_by: dict[str, str] = {}
    for policy, metrics in runs:
        for _, field, direction, _ in LIMIT_METRICS:
            value = _metric(metrics, field)
            if math.isnan(value):
                continue
            if field not in values or _better(direction, value, values[field]):
                values[field], set_by[field] = value, policy
    return Limit(concurrency, values, set_by)


def limits_of(results: Iterable[RunResult]) -> dict[int, Limit]:
    """One limit per concurrency from the limit-fleet runs `results`."""
    by_concurrency: dict[int, list[tuple[str, Any]]] = {}
    for result in results:
        by_concurrency.setdefault(result.concurrency, []).append((result.policy, result.metrics))
    return {c: limit_of(c, runs) for c, runs in sorted(by_concurrency.items())}


def excess(metrics: Any, limit: Limit) -> dict[str, float]:
    """Per bounded metric, how much worse than the limit `metrics` is, relative (positive = worse; see above)."""
    shown: dict[str, float] = {}
    for _, field, direction, _ in LIMIT_METRICS:
        bound = limit.values.get(field)
        value = _metric(metrics, field)
        if bound is None or not bound or math.isnan(value):
            continue
        shown[field] = (value - bound) / bound if direction == "lower" else (bound - value) / bound
    return shown


def beats_limit_on(metrics: Any, limit: Limit) -> list[str]:
    """The bounded metrics on which `metrics` is better than the limit by more than `TOLERANCE`: where the limit
    failed to bound (empty when it holds)."""
    return [field for field, change in excess(metrics, limit).items() if change < -TOLERANCE]


def annotate(
    document: dict[str, Any], results: list[RunResult], limits: Mapping[int, Limit], limit_runs: list[RunResult]
) -> None:
    """Add the limit to a `tao sim` JSON document (`report.to_json` of `results`, whose runs it lists in order):
    `excess_over_limit` and `beats_limit_on` on every run whose concurrency has a limit — from the unrounded
    metrics — and top-level `limits` with the limit-fleet runs they came from."""
    for run, result in zip(document["runs"], results, strict=True):
        limit = limits.get(result.concurrency)
        if limit is not None:
            run["excess_over_limit"] = excess(result.metrics, limit)
            run["beats_limit_on"] = beats_limit_on(result.metrics, limit)
    document["limits"] = {
        "bounds": [limit.as_json() for limit in limits.values()],
        "runs": [run_json(r) for r in limit_runs],
    }


def render_excess(results: list[RunResult], limits: Mapping[int, Limit]) -> str:
    """The limit per concurrency and every run's excess over it, as a text table for `tao sim`."""
    lines = ["limit (best per metric over the policies rerun with KV that never runs out, no CPU tier):"]
    for bound in limits.values():
        cells = [
            f"{title} {_fmt(fmt, bound.values[field])} ({bound.set_by[field]})"
            for title, field, _, fmt in LIMIT_METRICS
            if field in bound.values
        ]
        lines.append(f"  × {bound.concurrency}: " + ", ".join(cells))
    headers = ["policy", "conc", *(f"{title} excess" for title, *_ in LIMIT_METRICS), "beats limit on"]
    rows = []
    for result in results:
        limit = limits.get(result.concurrency)
        if limit is None:
            continue
        shown = excess(result.metrics, limit)
        beaten = beats_limit_on(result.metrics, limit)
        rows.append(
            [
                result.policy,
                str(result.concurrency),
                *(f"{shown[field]:+.1%}" if field in shown else "–" for _, field, _, _ in LIMIT_METRICS),
                ", ".join(beaten) or "–",
            ]
        )
    widths = [max(len(h), *(len(row[k]) for row in rows)) if rows else len(h) for k, h in enumerate(headers)]
    lines += [aligned_line(cells, widths) for cells in (headers, *rows)]
    lines.append(
        "excess: how much worse than the limit, relative (latency, TTFT: (run − limit) / limit; throughput: "
        "(limit − run) / limit); the limit bounds means and throughput, not medians or p99s"
    )
    return "\n".join(lines)


def _fmt(fmt: str, value: float) -> str:
    return fmt.format(value)


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        action="store_true",
        help="also rerun the policies on the limit fleet (the same nodes and step times, KV that never runs out, no "
        "CPU tier) and report each run's excess over the best of those runs on mean latency, mean TTFT and throughput",
    )
    parser.add_argument(
        "--limit-policies", help="comma-separated policies rerun for the limit, with --limit (default: --policy's)"
    )


class LimitOptionError(ValueError):
    """`--limit-policies` is used wrongly; the message names it."""


def limit_policy_names(args: argparse.Namespace, policies: list[str]) -> list[str]:
    """The policies rerun on the limit fleet: `--limit-policies`, else the compared ones; none without `--limit`.
    Raises LimitOptionError naming the option when `--limit-policies` comes without `--limit` or names nothing."""
    if args.limit_policies is not None and not args.limit:
        raise LimitOptionError("--limit-policies: only means something with --limit")
    if not args.limit:
        return []
    if args.limit_policies is None:
        return policies
    names = [part.strip() for part in args.limit_policies.split(",") if part.strip()]
    if not names:
        raise LimitOptionError("--limit-policies: name at least one policy")
    return names


def with_limits_json(
    text: str, results: list[RunResult], limits: Mapping[int, Limit], limit_runs: list[RunResult]
) -> str:
    """`report.to_json(results, …)`'s text with the limit added (`annotate`), rounded as that text is."""
    document = json.loads(text)
    annotate(document, results, limits, limit_runs)
    return dump_json(document)
