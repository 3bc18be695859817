"""`tao bench estimator`: how well tool durations are predicted on real traces, by the coordinator's rule and by the
alternatives the design asks to compare it with (design §4).

Each trace's tool calls are replayed in order, session after session, into one learning history, as a long-running
coordinator would see them: every call is predicted from what was learned before it, then learned. Reported per
estimator: mean absolute error (MAE), the share of predictions within 0.5 s, and the mean signed error (positive:
too pessimistic). The TAO write-up reports MAE 0.410 s and 82.9 % within 0.5 s for its estimator.

| estimator | rule |
|---|---|
| `bernstein` | what the coordinator uses: the corrected empirical-Bernstein bound, tool history → global → 5 s, hints |
| `paper-s`, `paper-ms` | the published bound without the square root, computed in seconds / in milliseconds |
| `mean`, `median`, `p75` | the tool's running mean / median / 75th percentile (then global history, then 5 s) |

Tool names: mini-swe-agent commands give the program's name (`cat`, `pytest`, …); AgentX traces record none, so
every call there is one tool. Tool times: AgentX `think_time` after a tool result (whole seconds, a proxy); for
mini-swe-agent the loader's fitted split of each gap (see docs/workloads.md) — so these figures measure the
estimators on those data, not on measured tool executions.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.model import ToolHints
from ..core.settings import CoreSettings
from ..core.signals.duration import DurationEstimator, DurationHistory
from ..sim.workloads import Workload, load_agentx, load_mini_swe, traces_dir

Predictor = Callable[[str, ToolHints], float]


@dataclass(frozen=True)
class EstimatorFigures:
    dataset: str
    estimator: str
    calls: int
    mae_s: float
    within_half_second: float
    bias_s: float


def tool_calls(workload: Workload) -> Iterator[tuple[str, ToolHints, float]]:
    for script in workload.scripts:
        for spec in script.all_requests():
            if spec.gap_kind == "tool":
                yield spec.tool, spec.hints or ToolHints(), spec.gap_before_s


def paper_bound(samples: Sequence[float], delta: float, scale: float) -> float:
    """The published form, `mean + 2s²·log(3/δ)/n + 3R·log(3/δ)/n`, computed in units of 1/scale seconds."""
    values = [x * scale for x in samples]
    n, log_term = len(values), math.log(3 / delta)
    mean = statistics.fmean(values)
    variance = statistics.pvariance(values)
    return (mean + 2 * variance * log_term / n + 3 * max(values) * log_term / n) / scale


class _Learned:
    """Per-tool and global durations, with the coordinator's fallback order."""

    def __init__(self, settings: CoreSettings) -> None:
        self.settings = settings
        self.by_tool: dict[str, list[float]] = defaultdict(list)
        self.everything: list[float] = []

    def samples(self, tool: str) -> Sequence[float] | None:
        minimum = self.settings.estimator_min_samples
        for samples in (self.by_tool.get(tool, []), self.everything):
            if len(samples) >= minimum:
                return samples[-self.settings.estimator_window :]
        return None

    def learn(self, tool: str, duration: float) -> None:
        self.by_tool[tool].append(duration)
        self.everything.append(duration)


def _statistic(learned: _Learned, rule: Callable[[Sequence[float]], float]) -> Predictor:
    def predict(tool: str, hints: ToolHints) -> float:
        samples = learned.samples(tool)
        value = rule(samples) if samples else learned.settings.default_tool_duration_s
        return min(value, hints.timeout_s) if hints.timeout_s is not None else value

    return predict


def evaluate(dataset: str, calls: list[tuple[str, ToolHints, float]], settings: CoreSettings) -> list[EstimatorFigures]:
    learned = _Learned(settings)
    history = DurationHistory(settings.estimator_window)
    coordinator = DurationEstimator(history, settings)
    delta = settings.estimator_delta
    predictors: dict[str, Predictor] = {
        "bernstein": lambda tool, hints: coordinator.predict(tool, hints, now=0.0).duration_s,
        "paper-s": _statistic(learned, lambda s: paper_bound(s, delta, 1.0)),
        "paper-ms": _statistic(learned, lambda s: paper_bound(s, delta, 1000.0)),
        "mean": _statistic(learned, statistics.fmean),
        "median": _statistic(learned, statistics.median),
        "p75": _statistic(learned, lambda s: statistics.quantiles(s, n=4, method="inclusive")[2]),
    }
    errors: dict[str, list[float]] = {name: [] for name in predictors}
    for tool, hints, actual in calls:
        for name, predict in predictors.items():
            errors[name].append(predict(tool, hints) - actual)
        history.add(tool, actual)
        learned.learn(tool, actual)
    return [
        EstimatorFigures(
            dataset=dataset,
            estimator=name,
            calls=len(signed),
            mae_s=statistics.fmean(abs(e) for e in signed),
            within_half_second=sum(abs(e) <= 0.5 for e in signed) / len(signed),
            bias_s=statistics.fmean(signed),
        )
        for name, signed in errors.items()
        if signed
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", type=Path, help="trace folder (default: $TAO_TRACES or ../shared/traces)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON to this file")


def run(args: argparse.Namespace) -> int:
    import sys

    folder = args.traces or traces_dir()
    sources = {
        "mini-swe-agent": (folder / "mini_swe_agent/steps_dev.jsonl.gz", load_mini_swe),
        "agentx": (folder / "agentx_cc/dev.jsonl.gz", load_agentx),
    }
    settings = CoreSettings()
    rows: list[EstimatorFigures] = []
    for dataset, (path, load) in sources.items():
        if not path.is_file():
            print(f"tao bench estimator: skipping {dataset}: {path} not found", file=sys.stderr)
            continue
        rows += evaluate(dataset, list(tool_calls(load(path))), settings)
    if not rows:
        print(f"tao bench estimator: no traces under {folder} (set --traces or $TAO_TRACES)", file=sys.stderr)
        return 2
    print(f"{'dataset':<16}{'estimator':<12}{'calls':>8}{'MAE (s)':>10}{'within 0.5 s':>14}{'bias (s)':>10}")
    for r in rows:
        print(
            f"{r.dataset:<16}{r.estimator:<12}{r.calls:>8}{r.mae_s:>10.2f}{r.within_half_second:>14.1%}{r.bias_s:>+10.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
