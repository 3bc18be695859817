"""The one tool-return estimator: what every readiness rule, the coordinator, the service and the benchmark call.

Three rules turn the learned history into a running call's readiness schedule (`ReadinessSchedule`):

| rule       | readiness                                    | horizon H                 | duration prediction  |
|------------|----------------------------------------------|---------------------------|----------------------|
| `forecast` | Q·P(T ≤ a + H │ T > a, key, hints), rounded  | the setting, or adaptive  | the forecast median  |
| `bound`    | Q when the predicted end is within H, else 0 | `readiness_horizon_s`     | corrected bound      |
| `paper`    | the same                                     | 1 s                       | the bound as printed |

a is the time the call has run and Q is `readiness_levels`. The `forecast` schedule is exact at every point where
the empirical part of the distribution changes (each sample, and each sample minus H) and sampled on a geometric
grid in between, where only the prior moves it; its steps are the coordinator's wake-up times. The binary rules keep
today's re-estimation: an expired prediction counts as ready until it is re-estimated from the durations longer than
the time already run.

Expected tools: a call whose tool has fewer than `estimator_min_samples` durations (a tool new to the fleet, a name
a harness spells its own way) is forecast, under the `forecast` rule, with the history of the tools the session's
last acquire named in `expected_next_tools` ranked between the tool's own levels and every tool's
(`expected_levels`). A step id keys nothing: the one integration that sends it sends a step counter, which names no
kind of step shared across sessions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ..model import DurationHints, ReadinessSchedule, RunningTool
from ..settings import CoreSettings
from .bounds import SampleStats
from .history import Samples, ToolHistory
from .kernel import schedule
from .keys import ALL_TOOLS, ToolKey, normalise_tool
from .predictive import Predictive, Smoothing, ToolForecast

ReadinessRule = Literal["forecast", "bound", "paper"]
PAPER_HORIZON_S = 1.0
MAX_STEPS = 32
"""Steps kept per schedule: a call's wake-ups are bounded whatever its distribution looks like."""

_GRID = np.geomspace(0.01, 1e5, 72)


@dataclass(frozen=True, slots=True)
class Prediction:
    duration_s: float
    source: str


class Forecaster:
    def __init__(self, history: ToolHistory, settings: CoreSettings) -> None:
        self.history = history
        self.settings = settings
        self.smoothing = Smoothing(
            settings.forecast_kappa, settings.forecast_recency_half_life, settings.default_tool_duration_s
        )

    # --- the continuous forecast ---------------------------------------------------------------------------

    def forecast(
        self,
        key: ToolKey,
        hints: DurationHints,
        session_id: str | None,
        started_at: float,
        expected: tuple[str, ...] = (),
    ) -> ToolForecast:
        levels: list[Samples] = []
        own = self.history.own(session_id, key.session_level)
        if own is not None:
            levels.append(own)
        shared = [samples for level in key.levels[:-1] if (samples := self.history.shared(level)) is not None]
        shared += self.expected_levels(key, expected)
        if (pooled := self.history.shared(ALL_TOOLS)) is not None:
            shared.append(pooled)
        levels += shared
        caps = [hints.timeout_s] if hints.timeout_s is not None else []
        if hints.deadline is not None:
            caps.append(max(0.0, hints.deadline - started_at))
        return ToolForecast(
            Predictive(levels, self.smoothing),
            sleep_s=hints.sleep_s or 0.0,
            cap_s=min(caps, default=math.inf),
            background=hints.background,
        )

    def expected_levels(self, key: ToolKey, expected: tuple[str, ...]) -> list[Samples]:
        """The history of the tools the acquire before this call named (`expected_next_tools`), in their order, for
        a call whose own tool has fewer than `estimator_min_samples` durations: they rank between the tool's own
        levels and every tool's. A tool with enough history of its own is forecast from it alone."""
        own = self.history.shared(key.tool)
        if not expected or (own is not None and len(own) >= self.settings.estimator_min_samples):
            return []
        names = dict.fromkeys(normalise_tool(name) for name in expected)
        return [samples for name in names if name != key.tool and (samples := self.history.shared(name)) is not None]

    def forecast_schedule(self, forecast: ToolForecast, started_at: float, horizon_s: float) -> ReadinessSchedule:
        top = self.settings.readiness_levels
        if forecast.background:
            return ReadinessSchedule(horizon_s, top)
        initial, times, levels = schedule(
            *forecast.predictive.arrays,
            float(forecast.sleep_s),
            float(forecast.cap_s),
            float(horizon_s),
            int(top),
            _GRID,
            MAX_STEPS,
        )
        return ReadinessSchedule(horizon_s, initial, tuple((started_at + times).tolist()), tuple(levels.tolist()))

    # --- the binary rules ----------------------------------------------------------------------------------

    def learned_values(self, key: ToolKey, longer_than: float = 0.0) -> tuple[str, list[float]] | None:
        """The binary rules' sample: the durations of the tool (source "tool"), else of every tool ("global"), that
        are longer than `longer_than` when it is positive, once there are `estimator_min_samples` of them."""
        for source, level in (("tool", key.tool), ("global", ALL_TOOLS)):
            samples = self.history.shared(level)
            if samples is None:
                continue
            values = list(samples.values()) if longer_than <= 0 else [x for x in samples.values() if x > longer_than]
            if len(values) >= self.settings.estimator_min_samples:
                return source, values
        return None

    def _bound(self, rule: ReadinessRule, key: ToolKey, cap: float | None, longer_than: float) -> Prediction | None:
        learned = self.learned_values(key, longer_than)
        if learned is None:
            return None
        source, values = learned
        stats, delta = SampleStats.of(values), self.settings.estimator_delta
        return Prediction(stats.printed_bound(delta, cap) if rule == "paper" else stats.bound(delta, cap), source)

    def bound_prediction(self, rule: ReadinessRule, key: ToolKey, hints: DurationHints, now: float) -> Prediction:
        if hints.background:
            return Prediction(0.0, "hint")
        learned = self._bound(rule, key, hints.timeout_s, 0.0)
        prediction = learned or Prediction(self.settings.default_tool_duration_s, "default")
        return apply_hints(prediction, hints, now, elapsed=0.0)

    def bound_reestimate(
        self, rule: ReadinessRule, key: ToolKey, hints: DurationHints, now: float, elapsed: float
    ) -> Prediction:
        """A new prediction of the total duration for a call that has already run `elapsed` seconds."""
        learned = self._bound(rule, key, hints.timeout_s, elapsed)
        if learned is None or learned.duration_s <= elapsed:
            learned = Prediction(elapsed + self.settings.default_tool_duration_s, "reestimate")
        return apply_hints(Prediction(learned.duration_s, "reestimate"), hints, now, elapsed)

    def binary_schedule(self, predicted_end: float, started_at: float, horizon_s: float) -> ReadinessSchedule:
        top = self.settings.readiness_levels
        flip = predicted_end - horizon_s
        if flip <= started_at:
            return ReadinessSchedule(horizon_s, top)
        return ReadinessSchedule(horizon_s, 0, (flip,), (top,))

    # --- running calls -------------------------------------------------------------------------------------

    def horizon(self, rule: ReadinessRule | None, adaptive_horizon_s: float) -> float:
        if rule == "paper":
            return PAPER_HORIZON_S
        if rule == "bound":
            return self.settings.readiness_horizon_s
        return adaptive_horizon_s

    def start(
        self,
        rule: ReadinessRule | None,
        call_id: str,
        tool: str,
        program: str | None,
        hints: DurationHints,
        session_id: str,
        now: float,
        horizon_s: float,
        expected: tuple[str, ...] = (),
    ) -> RunningTool:
        """A call that starts now, with its predicted end and its readiness schedule (none without a rule).
        `expected`: the tools the session's last acquire said come next (`expected_levels`)."""
        key = ToolKey.of(tool, program)
        if rule is None or rule == "forecast":
            forecast = self.forecast(key, hints, session_id, now, expected)
            end = now + forecast.median()
            if rule is None:
                return RunningTool(call_id, tool, now, hints, end, now, "forecast", program)
            schedule = self.forecast_schedule(forecast, now, horizon_s)
            return RunningTool(call_id, tool, now, hints, end, now, "forecast", program, schedule)
        prediction = self.bound_prediction(rule, key, hints, now)
        end = now + prediction.duration_s
        schedule = self.binary_schedule(end, now, horizon_s)
        return RunningTool(call_id, tool, now, hints, end, now, prediction.source, program, schedule)

    def rescheduled(self, running: RunningTool, session_id: str, horizon_s: float) -> RunningTool:
        """The same call forecast again for a new horizon (the `forecast` rule's schedules depend on it), from its
        own key: the expected tools it may have started with are not kept on the call."""
        forecast = self.forecast(
            ToolKey.of(running.tool, running.program), running.hints, session_id, running.started_at
        )
        return replace(running, readiness=self.forecast_schedule(forecast, running.started_at, horizon_s))

    def reestimated(self, rule: ReadinessRule, running: RunningTool, now: float) -> RunningTool:
        """An expired binary prediction, re-estimated from the durations longer than the time already run."""
        key = ToolKey.of(running.tool, running.program)
        prediction = self.bound_reestimate(rule, key, running.hints, now, now - running.started_at)
        end = running.started_at + prediction.duration_s
        schedule = self.binary_schedule(end, now, running.readiness.horizon_s)
        return replace(running, predicted_end=end, predicted_at=now, source="reestimate", readiness=schedule)

    def learn(self, running: RunningTool, duration_s: float, session_id: str | None) -> None:
        self.learn_call(ToolKey.of(running.tool, running.program), running.hints, duration_s, session_id)

    def learn_call(self, key: ToolKey, hints: DurationHints, duration_s: float, session_id: str | None) -> None:
        self.history.add(key, learned_duration(hints, duration_s), session_id)


def learned_duration(hints: DurationHints, duration_s: float) -> float:
    """What the history learns of a call: the time it took beyond its sleep (see `predictive.py`)."""
    return max(0.0, duration_s - (hints.sleep_s or 0.0))


def apply_hints(prediction: Prediction, hints: DurationHints, now: float, elapsed: float) -> Prediction:
    """The sleep a floor; the timeout and what is left of the deadline (the call has run `elapsed`) caps."""
    duration, source = prediction.duration_s, prediction.source
    if hints.sleep_s is not None and hints.sleep_s > duration:
        duration, source = hints.sleep_s, "hint"
    caps = [hints.timeout_s] if hints.timeout_s is not None else []
    if hints.deadline is not None:
        caps.append(elapsed + max(0.0, hints.deadline - now))
    for cap in caps:
        if cap < duration:
            duration, source = cap, "hint"
    return Prediction(duration, source)
