"""Markdown tables of `tao bench compare`: every policy per concurrency, TAO against the best baseline per metric,
TAO's ablations against TAO — all from seed 0, one consistent run — and, where other seeds were run, the spread over
seeds, how often TAO beat each baseline seed by seed, and a verdict per metric: TAO's paired change against the
baseline best on average, with a 95 % interval over the seeds — "tie" where the seeds cannot tell the two apart.

Relative change is `(TAO − best) / best`; for latency, TTFT and tool-end→first-token lower is better, for
throughput and hit rate higher is better, and "best" is the best baseline on that metric alone at that concurrency
(so the best latency and the best throughput may come from different baselines).

Each workload's section says what planning was charged in its runs (a `--report` may join runs made differently);
the policy tables show per run how many plans were cut and dropped, "–" for run files older than those counters.
With limit runs (`--limit`, `compare_limit.py`) each policy table gets a *limit* row and each workload a table of
every policy's excess over the limit.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from scipy.stats import t as t_dist

from ..core.policies import ABLATIONS, BASELINES, VARIANTS
from ..sim.limit import Limit
from ..sim.plan_timing import PlanTiming
from .compare_limit import LimitKey, Record, excess_table, limit_row, limits_by_cell

METRICS = (
    ("latency", "latency_mean_s", "lower", "{:,.0f} s"),
    ("TTFT", "ttft_mean_s", "lower", "{:.2f} s"),
    ("throughput", "decode_throughput_tok_s", "higher", "{:,.0f} tok/s"),
    ("tool→1st token", "tool_end_to_first_token_mean_s", "lower", "{:.2f} s"),
    ("hit rate", "prefix_hit_rate", "higher", "{:.1%}"),
)
COMPARE_COLUMNS = (
    ("lat mean", "latency_mean_s", "{:,.0f}"),
    ("lat p99", "latency_p99_s", "{:,.0f}"),
    ("TTFT mean", "ttft_mean_s", "{:.2f}"),
    ("TTFT p99", "ttft_p99_s", "{:.1f}"),
    ("tok/s", "decode_throughput_tok_s", "{:,.0f}"),
    ("tool→1st", "tool_end_to_first_token_mean_s", "{:.2f}"),
    ("hit", "prefix_hit_rate", "{:.1%}"),
    ("preempt", "preemptions", "{:,.0f}"),
    ("interrupts", "interruptions", "{:,.0f}"),
    ("recomputed", "recomputed_tokens", "{:,.0f}"),
    ("makespan", "makespan_s", "{:,.0f}"),
    ("cut", "plans_cut", "{:,.0f}"),
    ("dropped", "plans_dropped", "{:,.0f}"),
)
TIER_COLUMNS = (
    ("CPU hits", "cpu_hit_tokens", "{:,.0f}"),
    ("PCIe load s", "pcie_load_s", "{:,.0f}"),
)
"""Shown for a workload whose fleet has a CPU tier: prompt tokens loaded from it, and the link time those loads took."""


@dataclass(frozen=True)
class Planning:
    """What each plan of a run was charged in virtual time (see `sim/driver.py`)."""

    timing: PlanTiming
    delay_ms: float

    def as_record(self) -> dict[str, Any]:
        return {"plan_timing": self.timing, "plan_delay_ms": self.delay_ms}

    def describe(self) -> str:
        fixed = f"{self.delay_ms:g} ms"
        return f"each solve's wall-clock time + {fixed}" if self.timing == "measured" else f"a fixed {fixed}"


UNCHARGED = Planning("fixed", 0.0)
"""How every run was made before the planning charge was recorded."""


def planning_of(record: Record) -> Planning:
    return Planning(record.get("plan_timing", UNCHARGED.timing), record.get("plan_delay_ms", UNCHARGED.delay_ms))


Table = dict[tuple[str, str, int], dict[str, Any]]
"""(workload, policy, concurrency) → the metrics of its seed-0 run."""


def seed_zero(records: list[Record]) -> Table:
    return {(r["workload"], r["policy"], r["concurrency"]): r["metrics"] for r in records if r["seed"] == 0}


def change(tao: float, best: float) -> float:
    return (tao - best) / best if best else math.nan


def better(direction: str, a: float, b: float) -> bool:
    return a < b if direction == "lower" else a > b


def render_report(
    records: list[Record], fleets: dict[str, tuple[int, str]], limit_records: list[Record] | None = None
) -> str:
    """The tables of every workload; with `limit_records` (limit-fleet runs, `compare_limit.py`) the policy tables
    get a limit row and each workload a table of excess over the limit."""
    table = seed_zero(records)
    limits = limits_by_cell(limit_records or [])
    lines: list[str] = []
    for workload in sorted({key[0] for key in table}):
        nodes, profile = fleets.get(workload, (0, "?"))
        lines += [f"## {workload} — {nodes} × {profile}", ""]
        lines += _planning([r for r in records if r["workload"] == workload])
        shown = ["tao", *VARIANTS, *BASELINES]
        lines += _policy_table(table, workload, shown, limits)
        lines += excess_table(table, limits, workload, shown)
        lines += _versus_best(table, workload)
        lines += _ablations(table, workload)
        lines += _seed_check([r for r in records if r["workload"] == workload])
        lines += _seed_verdict([r for r in records if r["workload"] == workload])
    return "\n".join(lines)


def _planning(records: list[Record]) -> list[str]:
    counts = Counter(planning_of(record) for record in records)
    charges = sorted(counts.items(), key=lambda item: (-item[1], item[0].timing, item[0].delay_ms))
    text = "; ".join(f"{planning.describe()} ({n} run{'s' * (n != 1)})" for planning, n in charges)
    return [f"Planning charged per plan: {text}.", ""]


def _by_seed(records: list[Record]) -> dict[tuple[int, str], dict[int, dict[str, Any]]]:
    """(concurrency, policy) → seed → metrics."""
    runs: dict[tuple[int, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for record in records:
        runs[(record["concurrency"], record["policy"])][record["seed"]] = record["metrics"]
    return runs


def _seed_check(records: list[Record]) -> list[str]:
    """Per concurrency with several seeds: mean (min–max) of the headline metrics, and TAO's wins seed by seed."""
    runs = _by_seed(records)
    several = sorted(key for key, by_seed in runs.items() if len(by_seed) > 1)
    if not several:
        return []
    headline = METRICS[:3]
    lines = [
        "Seeds (mean, min–max over seeds; wins: seeds in which TAO is at least as good as that policy):",
        "",
        "| conc | policy | seeds | " + " | ".join(title for title, *_ in headline) + " | TAO wins |",
        "|" + "---|" * (len(headline) + 4),
    ]
    for concurrency, policy in several:
        by_seed = runs[(concurrency, policy)]
        tao = runs.get((concurrency, "tao"), {})
        cells = []
        wins = []
        for _, field, direction, fmt in headline:
            values = [m[field] for m in by_seed.values()]
            cells.append(f"{_fmt(fmt, statistics.fmean(values))} ({_fmt(fmt, min(values))}–{_fmt(fmt, max(values))})")
            common = [seed for seed in by_seed if seed in tao]
            won = sum(not better(direction, by_seed[seed][field], tao[seed][field]) for seed in common)
            wins.append(f"{won}/{len(common)}")
        label = "**tao**" if policy == "tao" else policy
        win_text = "–" if policy == "tao" else " · ".join(wins)
        lines.append(f"| {concurrency} | {label} | {len(by_seed)} | " + " | ".join(cells) + f" | {win_text} |")
    return [*lines, ""]


VERDICT_MIN_SEEDS = 3
"""Fewer paired seeds than this give no interval worth printing."""


@dataclass(frozen=True)
class PairedChange:
    """TAO against one policy over the seeds both ran: the mean of the per-seed relative changes and the half-width
    of its 95 % Student-t interval (the seeds' orders are independent draws; a seed pairs two runs of one order)."""

    seeds: int
    mean: float
    half_width: float

    def verdict(self, direction: str) -> str:
        """ "better" or "worse" when the interval excludes 0, else "tie" (no difference the seeds can show)."""
        low, high = self.mean - self.half_width, self.mean + self.half_width
        good_low = direction == "lower"
        if (high < 0) if good_low else (low > 0):
            return "better"
        if (low > 0) if good_low else (high < 0):
            return "worse"
        return "tie"


def paired_change(tao: dict[int, float], other: dict[int, float]) -> PairedChange | None:
    common = sorted(seed for seed in tao if other.get(seed))
    if len(common) < VERDICT_MIN_SEEDS:
        return None
    changes = [(tao[seed] - other[seed]) / other[seed] for seed in common]
    spread = statistics.stdev(changes) / math.sqrt(len(changes))
    return PairedChange(len(changes), statistics.fmean(changes), float(t_dist.ppf(0.975, len(changes) - 1)) * spread)


def _seed_verdict(records: list[Record]) -> list[str]:
    """Per concurrency where TAO ran several seeds: TAO against the baseline best on each headline metric's mean over
    the common seeds, as a paired mean change with its 95 % interval and a verdict."""
    runs = _by_seed(records)
    headline = METRICS[:3]
    rows = []
    for concurrency in sorted({c for c, p in runs if p == "tao"}):
        tao = runs[(concurrency, "tao")]
        cells = []
        for _, field, direction, _fmt_text in headline:
            ours = {seed: m[field] for seed, m in tao.items()}
            compared = []
            for policy in BASELINES:
                theirs = {seed: m[field] for seed, m in runs.get((concurrency, policy), {}).items() if seed in ours}
                paired = paired_change(ours, theirs)
                if paired is not None:
                    compared.append((statistics.fmean(theirs.values()), policy, paired))
            if not compared:
                cells.append("")
                continue
            _, policy, paired = min(compared, key=lambda c: c[0] if direction == "lower" else -c[0])
            cells.append(
                f"{paired.mean:+.1%} ± {paired.half_width:.1%} vs {policy} ({paired.seeds} seeds): "
                f"{paired.verdict(direction)}"
            )
        if any(cells):
            rows.append(f"| {concurrency} | " + " | ".join(cell or "–" for cell in cells) + " |")
    if not rows:
        return []
    return [
        "TAO against the baseline best on average over seeds, per metric: the mean of the per-seed changes "
        "(TAO − baseline) / baseline with its 95 % interval; *tie* where the interval holds 0:",
        "",
        "| conc | " + " | ".join(title for title, *_ in headline) + " |",
        "|" + "---|" * (len(headline) + 1),
        *rows,
        "",
    ]


def _concurrencies(table: Table, workload: str) -> list[int]:
    return sorted({key[2] for key in table if key[0] == workload})


def _policy_table(
    table: Table, workload: str, policies: list[str], limits: dict[LimitKey, Limit] | None = None
) -> list[str]:
    tiered = any(key[0] == workload and entry.get("cpu_hit_tokens") for key, entry in table.items())
    columns = (*COMPARE_COLUMNS, *TIER_COLUMNS) if tiered else COMPARE_COLUMNS
    header = "| conc | policy | " + " | ".join(title for title, _, _ in columns) + " |"
    lines = [header, "|" + "---|" * (len(columns) + 2)]
    for concurrency in _concurrencies(table, workload):
        for policy in policies:
            entry = table.get((workload, policy, concurrency))
            if entry is None:
                continue
            cells = [_fmt(fmt, entry.get(field, math.nan)) for _, field, fmt in columns]
            label = f"**{policy}**" if policy == "tao" else policy
            lines.append(f"| {concurrency} | {label} | " + " | ".join(cells) + " |")
        limit = (limits or {}).get((workload, 0, concurrency))
        if limit is not None:
            lines.append(f"| {concurrency} | *limit* | " + " | ".join(limit_row(limit, columns)) + " |")
    return [*lines, ""]


def _versus_best(table: Table, workload: str) -> list[str]:
    lines = [
        "TAO against the best baseline on each metric (Δ = (TAO − best) / best; ✓ = TAO at least as good):",
        "",
        "| conc | " + " | ".join(title for title, *_ in METRICS) + " |",
        "|" + "---|" * (len(METRICS) + 1),
    ]
    for concurrency in _concurrencies(table, workload):
        tao = table.get((workload, "tao", concurrency))
        if tao is None:
            continue
        cells = []
        for _, field, direction, fmt in METRICS:
            candidates = [
                (p, table[(workload, p, concurrency)][field]) for p in BASELINES if (workload, p, concurrency) in table
            ]
            if not candidates:
                cells.append("–")
                continue
            name, best = min(candidates, key=lambda c: c[1] if direction == "lower" else -c[1])
            ours = tao[field]
            mark = "✓" if not better(direction, best, ours) else "✗"
            cells.append(f"{_fmt(fmt, ours)} vs {_fmt(fmt, best)} {name}: {change(ours, best):+.1%} {mark}")
        lines.append(f"| {concurrency} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _ablations(table: Table, workload: str) -> list[str]:
    present = [p for p in ABLATIONS if any(key[0] == workload and key[1] == p for key in table)]
    if not present:
        return []
    lines = [
        "Ablations against TAO (Δ = (variant − tao) / tao):",
        "",
        "| conc | variant | " + " | ".join(title for title, *_ in METRICS) + " |",
        "|" + "---|" * (len(METRICS) + 2),
    ]
    for concurrency in _concurrencies(table, workload):
        tao = table.get((workload, "tao", concurrency))
        for policy in present:
            entry = table.get((workload, policy, concurrency))
            if tao is None or entry is None:
                continue
            cells = [
                f"{_fmt(fmt, entry[field])} ({change(entry[field], tao[field]):+.1%})" for _, field, _, fmt in METRICS
            ]
            lines.append(f"| {concurrency} | {policy} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _fmt(fmt: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt.format(value)
