"""`tao sim` output: one table for every policy × concurrency, and the same figures as JSON.

JSON layout: `{"runs": [{"policy", "concurrency", "seed", "plan_delay_ms", "metrics": {...}}], "workload": {...},
"fleet": {...}, "planning": {"timing", "delay_ms"}, "credit": {"half_life_s", "fit"}}` — `planning` says what each
plan was charged in virtual time, `credit` how cache credit decayed (the configured half-life, and whether it was
fitted per node). A sweep over charges (`sweep.py`) lists `delays_ms` in `planning` instead, and adds `medians`.
A run's metrics hold the two-model figures (`metrics.TWO_MODEL_FIELDS`) only when it had small-model nodes, and the
chat figures (`metrics.CHAT_FIELDS`) only when its workload had chats.
Floats are rounded to 6 significant digits so the file is stable and readable; NaN (no sample) becomes null.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from .metrics import OPTIONAL_FIELDS, RunMetrics
from .workloads import LoadReport


@dataclass(frozen=True)
class RunResult:
    policy: str
    concurrency: int
    seed: int
    metrics: RunMetrics
    plan_delay_ms: float | None = None
    """What every plan of the run was charged on top (`--plan-delay-ms`); None: not recorded, or a median over
    several (`sweep.py`)."""


def rounded(value: Any) -> Any:
    """`value` with floats to 6 significant digits and NaN as None, through dicts and lists."""
    if isinstance(value, float):
        return None if math.isnan(value) else float(f"{value:.6g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item) for item in value]
    return value


def to_json(
    results: list[RunResult],
    workload: LoadReport,
    fleet: dict[str, Any],
    planning: dict[str, Any],
    credit: dict[str, Any] | None = None,
) -> str:
    document = {
        "runs": [run_json(r) for r in results],
        "workload": {
            "source": workload.source,
            "traces_read": workload.traces_read,
            "traces_kept": workload.traces_kept,
            "traces_removed": workload.traces_removed,
            "requests": workload.requests,
            "requests_removed": workload.requests_removed,
            "prompt_tokens": workload.prompt_tokens,
            "max_context": workload.max_context,
            "gaps_capped": workload.gaps_capped,
        },
        "fleet": fleet,
        "planning": planning,
        **({"credit": credit} if credit is not None else {}),
    }
    return dump_json(document)


def dump_json(document: dict[str, Any]) -> str:
    """The JSON text of a `tao sim` document, rounded (`rounded`)."""
    return json.dumps(rounded(document), indent=2, sort_keys=False) + "\n"


def run_json(result: RunResult) -> dict[str, Any]:
    """One run of the JSON's `runs`; `plan_delay_ms` only when recorded."""
    delay = {} if result.plan_delay_ms is None else {"plan_delay_ms": result.plan_delay_ms}
    return {
        "policy": result.policy,
        "concurrency": result.concurrency,
        "seed": result.seed,
        **delay,
        "metrics": _metrics(result.metrics),
    }


def _metrics(metrics: RunMetrics) -> dict[str, Any]:
    """The metrics as a mapping, without the two-model figures of a one-model run nor the chat figures of a run
    without chats."""
    return {k: v for k, v in asdict(metrics).items() if v is not None or k not in OPTIONAL_FIELDS}


COLUMNS = (
    ("policy", "policy", "{}"),
    ("conc", "concurrency", "{}"),
    ("lat mean", "latency_mean_s", "{:.0f}"),
    ("lat p50", "latency_p50_s", "{:.0f}"),
    ("lat p99", "latency_p99_s", "{:.0f}"),
    ("TTFT mean", "ttft_mean_s", "{:.2f}"),
    ("p50", "ttft_p50_s", "{:.2f}"),
    ("p99", "ttft_p99_s", "{:.2f}"),
    ("tok/s", "decode_throughput_tok_s", "{:.0f}"),
    ("tool→1st", "tool_end_to_first_token_mean_s", "{:.2f}"),
    ("hit", "prefix_hit_rate", "{:.1%}"),
    ("preempt", "preemptions", "{}"),
    ("interrupts", "interruptions", "{}"),
    ("recomputed", "recomputed_tokens", "{:,}"),
    ("after intr.", "recomputed_after_interruption_tokens", "{:,}"),
    ("makespan", "makespan_s", "{:.0f}"),
    ("plan ms", "plan_mean_ms", "{:.2f}"),
    ("p95", "plan_p95_ms", "{:.2f}"),
    ("overhead", "planner_overhead_share", "{:.3%}"),
    ("plans", "plans", "{}"),
    ("cut", "plans_cut", "{}"),
    ("dropped", "plans_dropped", "{}"),
)


def render_table(results: list[RunResult]) -> str:
    """Every run a row; with runs at several plan charges (a sweep) a column names each run's."""
    columns = list(COLUMNS)
    sweep = len({result.plan_delay_ms for result in results}) > 1
    if sweep:
        columns.insert(2, ("D ms", "plan_delay_ms", "{:g}"))
    rows = []
    for result in results:
        fields = {
            "policy": result.policy,
            "concurrency": result.concurrency,
            "plan_delay_ms": result.plan_delay_ms,
            **asdict(result.metrics),
        }
        rows.append([_format(fmt, fields[key]) for _, key, fmt in columns])
    headers = [title for title, _, _ in columns]
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(headers)]
    lines = [aligned_line(headers, widths), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    lines += [aligned_line(row, widths) for row in rows]
    lines.append("latencies, makespan, TTFT and tool→1st (tool end to first token) in s, as the agent sees them")
    lines.append(
        "hit: prefix-cache hit rate; preempt: requests the engine preempted; interrupts: places plans took away; "
        "recomputed: prompt tokens computed again (prefixes the session had in KV before), after intr.: those of calls "
        "after an interruption; makespan: virtual time to the end"
    )
    lines.append(
        "plan ms, p95: the planner's wall-clock time per plan, mean and 95th percentile (– without plans or with "
        "--no-timing); overhead: planning time as a share of the makespan"
    )
    lines.append("plans: started; cut: applied only up to a step no longer valid; dropped: no step valid")
    for describe in (_half_lives, _side_calls, _chats):
        for result in results:
            if line := describe(result):
                lines.append(
                    f"{run_label(result.policy, result.concurrency, result.plan_delay_ms if sweep else None)}: {line}"
                )
    return "\n".join(lines)


def run_label(policy: str, concurrency: int, delay_ms: float | None) -> str:
    """A run's name in what `tao sim` prints: policy × concurrency, and its charge when one is given (in a sweep)."""
    charge = "" if delay_ms is None else f" (D = {delay_ms:g} ms)"
    return f"{policy} × {concurrency}{charge}"


def _chats(result: RunResult) -> str:
    """Under the table, for a run with chats: how many were answered, their TTFT and latency (not in the task
    latency)."""
    metrics = result.metrics
    if metrics.chats is None:
        return ""
    ttft = (
        f"TTFT mean {_format('{:.2f}', metrics.chat_ttft_mean_s)} s, p99 {_format('{:.2f}', metrics.chat_ttft_p99_s)} s"
    )
    return (
        f"{metrics.chats} chats answered ({ttft}; latency mean "
        f"{_format('{:.2f}', metrics.chat_latency_mean_s)} s, not in the task latency)"
    )


def _side_calls(result: RunResult) -> str:
    """Under the table, for a two-model run: its side calls, their TTFT, and the calls small-model nodes answered."""
    metrics = result.metrics
    if metrics.side_calls is None:
        return ""
    ttft = (
        f"TTFT mean {_format('{:.2f}', metrics.side_ttft_mean_s)} s, p99 {_format('{:.2f}', metrics.side_ttft_p99_s)} s"
    )
    return f"{metrics.side_calls} side calls ({ttft}); {metrics.small_model_calls} calls on small-model nodes"


def _half_lives(result: RunResult) -> str:
    """Under the table, for every run: each node's credit half-life at the end, the fit's estimate where that is not
    the one used, and how many retention observations the node had."""
    metrics = result.metrics
    if not metrics.credit_half_life_s:
        return ""
    fitted, observed = metrics.credit_half_life_fit_s or {}, metrics.retention_observations or {}
    cells = []
    for name, used in metrics.credit_half_life_s.items():
        fit = fitted.get(name)
        unused = f", fit {fit:.1f}" if fit is not None and fit != used else ""
        cells.append(f"{name} {_format('{:.1f}', used)} (n={observed.get(name, 0)}{unused})")
    return f"credit half-life at the end, s: {', '.join(cells)}"


def aligned_line(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if k else c.ljust(w) for k, (c, w) in enumerate(zip(cells, widths, strict=True)))


def _format(fmt: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt.format(value)
