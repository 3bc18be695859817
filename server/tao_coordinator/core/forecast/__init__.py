"""Tool-return forecasts: learned durations (`history.py`), keys (`keys.py`), the predictive distribution
(`predictive.py`, its arithmetic compiled in `kernel.py`), the readiness rules (`forecaster.py`), the adaptive
horizon (`horizon.py`)."""

from .bounds import SampleStats, empirical_bernstein_bound
from .forecaster import PAPER_HORIZON_S, Forecaster, Prediction, ReadinessRule, learned_duration
from .history import MEMORY_PER_LEVEL_BYTES, Samples, ToolHistory
from .horizon import AdaptiveHorizon
from .keys import ALL_TOOLS, ToolKey, normalise_tool
from .predictive import Predictive, Smoothing, ToolForecast

__all__ = [
    "ALL_TOOLS",
    "MEMORY_PER_LEVEL_BYTES",
    "PAPER_HORIZON_S",
    "AdaptiveHorizon",
    "Forecaster",
    "Prediction",
    "Predictive",
    "ReadinessRule",
    "SampleStats",
    "Samples",
    "Smoothing",
    "ToolForecast",
    "ToolHistory",
    "ToolKey",
    "empirical_bernstein_bound",
    "learned_duration",
    "normalise_tool",
]
