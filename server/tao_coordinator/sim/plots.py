"""`tao sim`'s charts (written by default; `--no-plots` skips them): the table as one PNG per metric.

With several concurrencies each metric is drawn against concurrency, one line per policy, ticks at the concurrencies
that ran; with a single concurrency a line would be one dot, so each policy gets a labelled bar instead. Every policy
gets its own colour (tab20 past ten policies); TAO's policies are drawn solid and thick, the others dashed (bars:
TAO's with a dark edge), so the eye finds TAO first. Y axes start at 0, except where the values span more than a
factor of 20 (a bad baseline would flatten the rest): there the axis is logarithmic and its label says so.

With limits (`tao sim --limit`, `sim/limit.py`), each chart of a bounded metric also shows the limit: a black dotted
line over the concurrencies, or across the bars at a single concurrency."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .report import RunResult

CHARTS = (
    ("latency", "Task latency (s)", ("latency_mean_s", "mean"), ("latency_p99_s", "p99")),
    ("ttft", "Time to first token, as the agent sees it (s)", ("ttft_mean_s", "mean"), ("ttft_p99_s", "p99")),
    ("throughput", "Decode throughput (tokens/s)", ("decode_throughput_tok_s", "")),
    ("hit_rate", "Prefix-cache hit rate", ("prefix_hit_rate", "")),
)


def write_plots(
    results: list[RunResult], directory: Path, limits: Mapping[int, Mapping[str, float]] | None = None
) -> list[Path]:
    """One PNG per chart; `limits` maps a concurrency to the limit's value per metric field (drawn where present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    policies = list(dict.fromkeys(r.policy for r in results))
    concurrencies = sorted({r.concurrency for r in results})
    palette = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20")
    colours = {policy: palette(k) for k, policy in enumerate(policies)}
    written = []
    for name, title, *series in CHARTS:
        figure, axes = plt.subplots(1, len(series), figsize=(5.5 * len(series), 4), squeeze=False)
        for axis, (field, label) in zip(axes[0], series, strict=True):
            values = {(r.policy, r.concurrency): _value(getattr(r.metrics, field)) for r in results}
            if len(concurrencies) == 1:
                heights = [values.get((p, concurrencies[0])) for p in policies]
                _bars(axis, policies, heights, colours, percent=field == "prefix_hit_rate")
                axis.set_xlabel(f"policy ({concurrencies[0]} concurrent sessions)")
            else:
                _lines(axis, policies, concurrencies, values, colours)
            bound = _limit_line(axis, concurrencies, field, limits or {})
            present = [v for v in [*values.values(), *bound] if v is not None and v > 0]
            if present and max(present) > 20 * min(present):
                axis.set_yscale("log")
                axis.set_ylabel("log scale", fontsize=8)
            else:
                axis.set_ylim(bottom=0, top=1.0 if field == "prefix_hit_rate" else None)
            if field == "prefix_hit_rate":
                axis.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
            axis.set_title(f"{title}{' — ' + label if label else ''}", fontsize=10)
            axis.grid(alpha=0.3, axis="y")
        figure.tight_layout()
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def _limit_line(
    axis: Any, concurrencies: list[int], field: str, limits: Mapping[int, Mapping[str, float]]
) -> list[float]:
    """Draw the limit of `field` (if any) and return its values, so the axis scale takes them into account."""
    points = [(c, limits[c][field]) for c in concurrencies if field in limits.get(c, {})]
    if not points:
        return []
    if len(concurrencies) == 1:
        axis.axhline(points[0][1], color="black", linestyle=":", linewidth=1.5, label="limit")
    else:
        xs, ys = zip(*points, strict=True)
        axis.plot(xs, ys, color="black", linestyle=":", linewidth=1.8, marker="_", label="limit")
    axis.legend(fontsize=8)
    return [value for _, value in points]


def _value(value: Any) -> float | None:
    return None if value is None or value != value else float(value)


def _bars(axis: Any, policies: list[str], heights: list[float | None], colours: dict[str, Any], percent: bool) -> None:
    shown = [h or 0.0 for h in heights]
    bars = axis.bar(
        range(len(policies)),
        shown,
        color=[colours[p] for p in policies],
        edgecolor=["black" if p.startswith("tao") else "none" for p in policies],
        linewidth=1.5,
    )
    axis.bar_label(bars, labels=[_short(h, percent) for h in heights], fontsize=7, padding=2)
    axis.set_xticks(range(len(policies)), policies, rotation=30 if len(policies) > 3 else 0, ha="right", fontsize=8)


def _lines(
    axis: Any,
    policies: list[str],
    concurrencies: list[int],
    values: dict[tuple[str, int], float | None],
    colours: dict[str, Any],
) -> None:
    for policy in policies:
        points = [(c, values[policy, c]) for c in concurrencies if values.get((policy, c)) is not None]
        ours = policy.startswith("tao")
        axis.plot(
            [c for c, _ in points],
            [v for _, v in points],
            marker="o",
            label=policy,
            color=colours[policy],
            linewidth=2.4 if ours else 1.2,
            linestyle="-" if ours else "--",
        )
    axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
    axis.set_xlabel("concurrent sessions")
    axis.legend(fontsize=8)


def _short(value: float | None, percent: bool) -> str:
    if value is None:
        return "–"
    if percent:
        return f"{value:.1%}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
