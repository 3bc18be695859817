"""How well tool returns are forecast on real traces, replayed for `tao bench estimator` (`estimator.py`): by the
coordinator's forecast (`core/forecast/`), by the binary rules it replaces and by simple statistics
(docs/algorithm.md#the-value-of-a-placement).

| dataset | file under `--traces` | tool time | key |
|---|---|---|---|
| `claude-code-sessions` | `claude_code_sessions/dev.jsonl.gz` | measured (result − use) | `ToolKey.of(name, prog)` |
| `mini-swe-agent` | `mini_swe_agent/steps_dev.jsonl.gz` | fitted split of each gap | `ToolKey.of("bash", program)` |
| `agentx` | `agentx_cc/dev.jsonl.gz` | `think_time` after a tool result | one anonymous tool, and `Task` |

Replay: sessions in file order into one history, as a long-running coordinator sees them. Within a session a call
is forecast when it starts, from every duration whose result came before its start (so the parallel calls of one
message, and a `Task` and its sub-agent's calls, do not see each other's), and learned when its result comes; the
session's own level is forgotten when the session ends. Claude Code sub-agent (sidechain) calls are included, under
their session. mini-swe-agent replies without one bash block (nothing ran) stay in, as a tool of their own.

| estimator | point prediction | readiness at elapsed a (H = 1 s) |
|---|---|---|
| `tao` | the forecast's median | P(T ≤ a + H │ T > a) of the forecast |
| `bound` | the corrected empirical-Bernstein bound, today's binary rule | 1 iff prediction − a ≤ H |
| `paper` | the bound as printed | the same |
| `median`, `mean`, `p75` | the normalised tool's running statistic, then every tool's, then 5 s | the same |

Binary rules (`bound`, `paper` and the statistics): once a sampled instant a is past the prediction, the prediction is
re-estimated from the durations longer than a (`Forecaster.bound_reestimate`; the statistic of those durations).
The coordinator instead counts an expired prediction as ready until it re-estimates, at most every
`reestimate_interval_s`; the benchmark re-estimates at once. The statistics are taken of the sample the bounds use
(`Forecaster.learned_values`: the durations the history learned, beyond any sleep); hints cap them (timeout) and
floor them (`sleep`).

Figures: MAE, share within 0.5 s, bias (mean signed error, positive: too pessimistic), and `readiness_brier`: the
mean of (p − o)² over the instants `sampled_instants(T)` of every call, o = 1 iff T ≤ a + H. H is `PAPER_HORIZON_S`
for every rule (the coordinator's adaptive horizon never goes below it).
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.forecast import PAPER_HORIZON_S, Forecaster, Prediction, ReadinessRule, ToolHistory, ToolKey
from ..core.forecast.forecaster import apply_hints
from ..core.model import DurationHints
from ..core.settings import CoreSettings
from ..progress import Progress
from ..sim.workloads import SessionScript, Workload, load_agentx, load_mini_swe
from ..sim.workloads.files import read_records

OFFSETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Fixed instants since the start at which a call is scored, besides its quarters, when it is still running."""
CLAUDE_CODE_TRACE = Path("claude_code_sessions/dev.jsonl.gz")


@dataclass(frozen=True, slots=True)
class TracedToolCall:
    session: str
    key: ToolKey
    duration_s: float
    started_at: float
    """On the session's own clock: orders its calls and says which results came before this one."""
    hints: DurationHints = field(default_factory=DurationHints)


@dataclass(frozen=True)
class EstimatorFigures:
    dataset: str
    estimator: str
    calls: int
    mae_s: float
    within_half_second: float
    bias_s: float
    readiness_brier: float


Scorer = Callable[[TracedToolCall, Sequence[float]], tuple[float, list[float]]]
"""A call and the instants to score → the predicted duration, and P(returns within H) at each instant."""


def sampled_instants(duration_s: float) -> list[float]:
    """0 (when the call starts), T/4, T/2, 3T/4 and every `OFFSETS_S` below T: every instant but 0 is < T."""
    quarters = [k * duration_s / 4 for k in (1, 2, 3)]
    return sorted({0.0, *(a for a in (*quarters, *OFFSETS_S) if 0 < a < duration_s)})


def claude_code_sessions(path: Path) -> list[list[TracedToolCall]]:
    """Each session's tool calls with a measured duration (`dur_s` not null), sub-agents' included."""
    return [
        [
            TracedToolCall(
                str(record["session"]), ToolKey.of(tool["name"], tool.get("prog")), tool["dur_s"], tool["t_use"]
            )
            for call in record["calls"]
            for tool in call["tools"]
            if tool.get("dur_s") is not None
        ]
        for record in read_records(path)
    ]


def workload_sessions(workload: Workload) -> list[list[TracedToolCall]]:
    """The tool gaps of every script (each sub-agent its own session), keyed as the loader names their tools."""
    return [calls for script in workload.scripts for calls in _script_sessions(script)]


def _script_sessions(script: SessionScript) -> Iterator[list[TracedToolCall]]:
    calls: list[TracedToolCall] = []
    clock = 0.0
    for spec in script.requests:
        if spec.gap_kind == "tool":
            key = ToolKey.of(spec.tool, spec.program)
            calls.append(TracedToolCall(script.id, key, spec.gap_before_s, clock, spec.hints or DurationHints()))
            clock += spec.gap_before_s
    yield calls
    for launch in script.subagents:
        yield from _script_sessions(launch.script)


def _statistic_prediction(
    forecaster: Forecaster, rule: Callable[[list[float]], float], call: TracedToolCall, longer_than: float
) -> float:
    """The statistic of the sample the binary rules use (the tool's durations longer than `longer_than`, else every
    tool's), else the default; the sleep is a floor and the timeout a cap, as for the bounds."""
    learned = forecaster.learned_values(call.key, longer_than)
    value = rule(learned[1]) if learned else forecaster.settings.default_tool_duration_s + longer_than
    return apply_hints(Prediction(value, "tool"), call.hints, 0.0, longer_than).duration_s


def _binary(first: float, reestimate: Callable[[float], float], instants: Sequence[float]) -> tuple[float, list[float]]:
    """Readiness 1 iff the predicted end is within H; a prediction the call has run past is re-estimated."""
    predicted, ready = first, []
    for elapsed in instants:
        if elapsed > predicted:
            predicted = reestimate(elapsed)
        ready.append(1.0 if predicted - elapsed <= PAPER_HORIZON_S else 0.0)
    return first, ready


def _tao(forecaster: Forecaster) -> Scorer:
    def score(call: TracedToolCall, instants: Sequence[float]) -> tuple[float, list[float]]:
        forecast = forecaster.forecast(call.key, call.hints, call.session, 0.0)
        probabilities = forecast.return_probabilities(np.asarray(instants, dtype=np.float64), PAPER_HORIZON_S)
        return forecast.median(), probabilities.tolist()

    return score


def _bound(forecaster: Forecaster, rule: ReadinessRule) -> Scorer:
    def score(call: TracedToolCall, instants: Sequence[float]) -> tuple[float, list[float]]:
        first = forecaster.bound_prediction(rule, call.key, call.hints, 0.0).duration_s

        def reestimate(elapsed: float) -> float:
            return forecaster.bound_reestimate(rule, call.key, call.hints, elapsed, elapsed).duration_s

        return _binary(first, reestimate, instants)

    return score


def _statistic(forecaster: Forecaster, rule: Callable[[list[float]], float]) -> Scorer:
    def score(call: TracedToolCall, instants: Sequence[float]) -> tuple[float, list[float]]:
        first = _statistic_prediction(forecaster, rule, call, 0.0)
        return _binary(first, lambda a: _statistic_prediction(forecaster, rule, call, a), instants)

    return score


def _p75(values: list[float]) -> float:
    return statistics.quantiles(values, n=4, method="inclusive")[2]


@dataclass
class _Tally:
    errors: list[float] = field(default_factory=list)
    squared: float = 0.0
    instants: int = 0

    def add(self, error: float, readiness: Sequence[float], outcomes: Sequence[float]) -> None:
        self.errors.append(error)
        self.squared += sum((p - o) ** 2 for p, o in zip(readiness, outcomes, strict=True))
        self.instants += len(outcomes)


def evaluate(
    dataset: str,
    sessions: Iterable[Sequence[TracedToolCall]],
    settings: CoreSettings,
    progress: Progress | None = None,
) -> list[EstimatorFigures]:
    history = ToolHistory.from_settings(settings)
    forecaster = Forecaster(history, settings)
    scorers: dict[str, Scorer] = {
        "tao": _tao(forecaster),
        "bound": _bound(forecaster, "bound"),
        "paper": _bound(forecaster, "paper"),
        "median": _statistic(forecaster, statistics.median),
        "mean": _statistic(forecaster, statistics.fmean),
        "p75": _statistic(forecaster, _p75),
    }
    tallies = {name: _Tally() for name in scorers}

    def learn(call: TracedToolCall) -> None:
        forecaster.learn_call(call.key, call.hints, call.duration_s, call.session)

    for calls in sessions:
        pending: list[tuple[float, int, TracedToolCall]] = []  # calls started and not yet returned, by their end
        for index, call in enumerate(sorted(calls, key=lambda c: c.started_at)):
            while pending and pending[0][0] <= call.started_at:
                learn(heapq.heappop(pending)[2])
            instants = sampled_instants(call.duration_s)
            outcomes = [1.0 if call.duration_s <= a + PAPER_HORIZON_S else 0.0 for a in instants]
            for name, score in scorers.items():
                point, readiness = score(call, instants)
                tallies[name].add(point - call.duration_s, readiness, outcomes)
            heapq.heappush(pending, (call.started_at + call.duration_s, index, call))
            if progress is not None:
                progress.advance()
        for _, _, call in sorted(pending):
            learn(call)
        for session in {call.session for call in calls}:
            history.forget_session(session)
    return [
        EstimatorFigures(
            dataset=dataset,
            estimator=name,
            calls=len(tally.errors),
            mae_s=statistics.fmean(abs(e) for e in tally.errors),
            within_half_second=sum(abs(e) <= 0.5 for e in tally.errors) / len(tally.errors),
            bias_s=statistics.fmean(tally.errors),
            readiness_brier=tally.squared / tally.instants,
        )
        for name, tally in tallies.items()
        if tally.errors
    ]


def datasets(folder: Path) -> dict[str, tuple[Path, Callable[[Path], list[list[TracedToolCall]]]]]:
    return {
        "claude-code-sessions": (folder / CLAUDE_CODE_TRACE, claude_code_sessions),
        "mini-swe-agent": (
            folder / "mini_swe_agent/steps_dev.jsonl.gz",
            lambda path: workload_sessions(load_mini_swe(path)),
        ),
        "agentx": (folder / "agentx_cc/dev.jsonl.gz", lambda path: workload_sessions(load_agentx(path))),
    }
