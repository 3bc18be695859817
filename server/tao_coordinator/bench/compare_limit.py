"""The limit in `tao bench compare --limit`: limit-fleet run files, the limit per cell, and every policy's excess.

Limit runs are ordinary run files marked `"limit": true` (file names end in `__limit.json`): the policy replayed the
same workload, seed and concurrency on the limit fleet (`sim/limit_fleet.py`). The limit of a (workload, seed,
concurrency) is the best per bounded metric over its limit runs (`sim/limit.py`); a policy's excess is relative and
positive when worse. It bounds means and throughput, not medians or p99s.

`results.json` gains `limit_runs` (the limit run files), `limits` (one entry per workload, seed and concurrency) and
`excess` (one entry per ordinary run that has a limit); `results.md` gains a limit row in each policy table and a
table of excess per concurrency and policy.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ..sim.limit import LIMIT_METRICS, Limit, beats_limit_on, excess, limit_of

Record = dict[str, Any]
LimitKey = tuple[str, int, int]
"""(workload, seed, concurrency)."""


def is_limit(record: Record) -> bool:
    return bool(record.get("limit"))


def split(records: list[Record]) -> tuple[list[Record], list[Record]]:
    """(ordinary runs, limit runs)."""
    return [r for r in records if not is_limit(r)], [r for r in records if is_limit(r)]


def limits_by_cell(limit_records: list[Record]) -> dict[LimitKey, Limit]:
    grouped: dict[LimitKey, list[tuple[str, Any]]] = defaultdict(list)
    for record in limit_records:
        grouped[(record["workload"], record["seed"], record["concurrency"])].append(
            (record["policy"], record["metrics"])
        )
    return {key: limit_of(key[2], runs) for key, runs in sorted(grouped.items())}


def results_fields(records: list[Record], limit_records: list[Record]) -> dict[str, Any]:
    """What `results.json` gains: the limit runs, the limits and every ordinary run's excess (empty without limits)."""
    if not limit_records:
        return {}
    limits = limits_by_cell(limit_records)
    rows = []
    for record in records:
        limit = limits.get((record["workload"], record["seed"], record["concurrency"]))
        if limit is not None:
            rows.append(
                {
                    "workload": record["workload"],
                    "policy": record["policy"],
                    "concurrency": record["concurrency"],
                    "seed": record["seed"],
                    "excess": excess(record["metrics"], limit),
                    "beats_limit_on": beats_limit_on(record["metrics"], limit),
                }
            )
    return {
        "limit_runs": limit_records,
        "limits": [{"workload": w, "seed": s, **limit.as_json()} for (w, s, _), limit in limits.items()],
        "excess": rows,
    }


def limit_row(limit: Limit, columns: tuple[tuple[str, str, str], ...]) -> list[str]:
    """The cells of a policy table's limit row: the bounded metrics, "–" elsewhere."""
    return [_fmt(fmt, limit.values[field]) if field in limit.values else "–" for _, field, fmt in columns]


def excess_table(
    table: dict[tuple[str, str, int], dict[str, Any]], limits: dict[LimitKey, Limit], workload: str, policies: list[str]
) -> list[str]:
    """Markdown: the seed-0 limit per concurrency (and which policy set it), and each policy's excess over it."""
    concurrencies = sorted(c for (w, s, c) in limits if w == workload and s == 0)
    if not concurrencies:
        return []
    titles = [title for title, *_ in LIMIT_METRICS]
    lines = [
        "Excess over the limit (the same fleet, workload and concurrency with KV that never runs out and no CPU "
        "tier; per metric the best of the policies rerun there): (run − limit) / limit for latency and TTFT, "
        "(limit − run) / limit for throughput, so + is worse. It bounds means and throughput, not medians or p99s.",
        "",
        "| conc | policy | " + " | ".join(f"{title} excess" for title in titles) + " | beats limit on |",
        "|" + "---|" * (len(titles) + 3),
    ]
    for concurrency in concurrencies:
        limit = limits[(workload, 0, concurrency)]
        bounds = [
            f"{_fmt(fmt, limit.values[field])} ({limit.set_by[field]})" if field in limit.values else "–"
            for _, field, _, fmt in LIMIT_METRICS
        ]
        lines.append(f"| {concurrency} | *limit* | " + " | ".join(bounds) + " | |")
        for policy in policies:
            entry = table.get((workload, policy, concurrency))
            if entry is None:
                continue
            shown = excess(entry, limit)
            cells = [f"{shown[field]:+.1%}" if field in shown else "–" for _, field, _, _ in LIMIT_METRICS]
            label = f"**{policy}**" if policy == "tao" else policy
            beaten = ", ".join(beats_limit_on(entry, limit)) or "–"
            lines.append(f"| {concurrency} | {label} | " + " | ".join(cells) + f" | {beaten} |")
    return [*lines, ""]


def plot_limits(limits: dict[LimitKey, Limit], workload: str) -> dict[int, dict[str, float]]:
    """The seed-0 limits of `workload` as `write_plots` takes them."""
    return {c: dict(limit.values) for (w, s, c), limit in limits.items() if w == workload and s == 0}


def _fmt(fmt: str, value: float) -> str:
    return "–" if math.isnan(value) else fmt.format(value)
