"""Tool-duration prediction: hints, per-tool history, global history, a default (design §4).

The history bound is the empirical-Bernstein upper confidence bound of Audibert, Munos & Szepesvári (2009):

    mean + sqrt(2·V·log(3/δ)/n) + 3·R·log(3/δ)/n

with V the empirical variance (1/n), R the range (the largest duration seen, capped by the call's timeout) and
δ = 0.2. The TAO write-up drops the square root, which makes the bound depend on the unit of time; this form is
unit-free: scaling every duration by c scales the bound by c.

Hints adjust the estimate: a background call returns at once; a parsed `sleep N` is a floor; the timeout and an
absolute deadline are caps. An expired prediction is re-estimated from the durations longer than the time already
elapsed (the conditional bound), or elapsed + the default when history has none.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..model import ToolHints
from ..settings import CoreSettings


@dataclass(frozen=True, slots=True)
class SampleStats:
    """What the bound needs of a sample: its size, mean, (population) variance and largest value."""

    n: int
    mean: float
    variance: float
    largest: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> SampleStats:
        n = len(samples)
        if n == 0:
            raise ValueError("samples: need at least one duration")
        mean = math.fsum(samples) / n
        variance = max(0.0, math.fsum((x - mean) ** 2 for x in samples) / n)
        return cls(n, mean, variance, max(samples))

    def bound(self, delta: float, range_cap: float | None = None) -> float:
        spread = self.largest if range_cap is None else min(self.largest, range_cap)
        log_term = math.log(3.0 / delta)
        return self.mean + math.sqrt(2.0 * self.variance * log_term / self.n) + 3.0 * spread * log_term / self.n


def empirical_bernstein_bound(samples: Sequence[float], delta: float, range_cap: float | None = None) -> float:
    """Upper confidence bound on the mean duration; samples must be non-empty and non-negative."""
    return SampleStats.of(samples).bound(delta, range_cap)


@dataclass(frozen=True, slots=True)
class Prediction:
    duration_s: float
    source: str


class DurationHistory:
    """Durations seen per tool and over all tools; the newest `window` are kept. The core's one learned state."""

    def __init__(self, window: int = 1000) -> None:
        self.window = window
        self._by_tool: dict[str, deque[float]] = {}
        self._all: deque[float] = deque(maxlen=window)
        self._stats: dict[str | None, SampleStats] = {}
        """Statistics of a tool's samples (None: of all), valid until the next `add` of that tool."""

    def add(self, tool: str, duration_s: float) -> None:
        if not math.isfinite(duration_s) or duration_s < 0:
            raise ValueError(f"duration_s: must be a finite non-negative number, got {duration_s!r}")
        self._by_tool.setdefault(tool, deque(maxlen=self.window)).append(duration_s)
        self._all.append(duration_s)
        self._stats.pop(tool, None)
        self._stats.pop(None, None)

    def stats(self, tool: str | None) -> SampleStats:
        """Statistics of a tool's samples, or of all samples for None; the samples must not be empty."""
        stats = self._stats.get(tool)
        if stats is None:
            stats = self._stats[tool] = SampleStats.of(self.all_samples() if tool is None else self.samples(tool))
        return stats

    def samples(self, tool: str) -> Sequence[float]:
        return self._by_tool.get(tool, ())

    def all_samples(self) -> Sequence[float]:
        return self._all

    def export(self) -> dict[str, list[float]]:
        """Per-tool durations, oldest first: enough to rebuild this history with `load`."""
        return {tool: list(durations) for tool, durations in self._by_tool.items()}

    def load(self, durations_by_tool: Mapping[str, Iterable[float]]) -> None:
        for tool, durations in durations_by_tool.items():
            for duration in durations:
                self.add(tool, duration)


class DurationEstimator:
    """Predicts how long a tool call will run, from its hints and the history."""

    def __init__(self, history: DurationHistory, settings: CoreSettings) -> None:
        self.history = history
        self.settings = settings

    def _history_bound(self, tool: str, cap: float | None, longer_than: float = 0.0) -> Prediction | None:
        settings = self.settings
        for source, key in (("tool", tool), ("global", None)):
            samples = self.history.all_samples() if key is None else self.history.samples(key)
            if longer_than > 0:
                relevant = [x for x in samples if x > longer_than]
                if len(relevant) >= settings.estimator_min_samples:
                    return Prediction(empirical_bernstein_bound(relevant, settings.estimator_delta, cap), source)
            elif len(samples) >= settings.estimator_min_samples:
                return Prediction(self.history.stats(key).bound(settings.estimator_delta, cap), source)
        return None

    def predict(self, tool: str, hints: ToolHints, now: float) -> Prediction:
        if hints.background:
            return Prediction(0.0, "hint")
        learned = self._history_bound(tool, hints.timeout_s)
        prediction = learned or Prediction(self.settings.default_tool_duration_s, "default")
        return _apply_hints(prediction, hints, now, elapsed=0.0)

    def reestimate(self, tool: str, hints: ToolHints, now: float, elapsed: float) -> Prediction:
        """A new prediction of the total duration for a call that has already run `elapsed` seconds."""
        learned = self._history_bound(tool, hints.timeout_s, longer_than=elapsed)
        if learned is None or learned.duration_s <= elapsed:
            learned = Prediction(elapsed + self.settings.default_tool_duration_s, "reestimate")
        else:
            learned = Prediction(learned.duration_s, "reestimate")
        return _apply_hints(learned, hints, now, elapsed)


def _apply_hints(prediction: Prediction, hints: ToolHints, now: float, elapsed: float) -> Prediction:
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
