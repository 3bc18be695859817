"""`tao sim --plots DIR`: the table as charts — each metric against concurrency, one line per policy.

Every policy gets its own colour (tab20 past ten policies, so no two lines share one); TAO's policies are drawn
solid and thick, the others dashed, so the eye finds TAO first. The y axis is logarithmic where the values span
more than a factor of 20 (a bad baseline would otherwise flatten the rest)."""

from __future__ import annotations

from pathlib import Path

from .report import RunResult

CHARTS = (
    ("latency", "Task latency (s)", ("latency_mean_s", "mean"), ("latency_p99_s", "p99")),
    ("ttft", "Time to first token, as the agent sees it (s)", ("ttft_mean_s", "mean"), ("ttft_p99_s", "p99")),
    (
        "throughput",
        "Decode throughput (tokens/s)",
        ("decode_throughput_tok_s", ""),
    ),
    (
        "hit_rate",
        "Prefix-cache hit rate",
        ("prefix_hit_rate", ""),
    ),
)


def write_plots(results: list[RunResult], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    policies = list(dict.fromkeys(r.policy for r in results))
    palette = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20")
    written = []
    for name, title, *series in CHARTS:
        figure, axes = plt.subplots(1, len(series), figsize=(5.5 * len(series), 4), squeeze=False)
        for axis, (field, label) in zip(axes[0], series, strict=True):
            values = []
            for k, policy in enumerate(policies):
                points = sorted((r.concurrency, getattr(r.metrics, field)) for r in results if r.policy == policy)
                ours = policy.startswith("tao")
                axis.plot(
                    [c for c, _ in points],
                    [v for _, v in points],
                    marker="o",
                    label=policy,
                    color=palette(k),
                    linewidth=2.4 if ours else 1.2,
                    linestyle="-" if ours else "--",
                )
                values += [v for _, v in points if v is not None and v > 0]
            if values and max(values) > 20 * min(values):
                axis.set_yscale("log")
            axis.set_xlabel("concurrent sessions")
            axis.set_title(f"{title}{' — ' + label if label else ''}", fontsize=10)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=8)
        figure.tight_layout()
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written
