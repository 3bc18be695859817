"""The tool-duration estimator: the corrected bound, its unit invariance, hints and fallbacks."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tao_coordinator.core.model import ToolHints
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals.duration import DurationEstimator, DurationHistory, empirical_bernstein_bound

durations = st.lists(st.floats(0.0, 600.0, allow_nan=False), min_size=1, max_size=200)


@given(durations, st.one_of(st.none(), st.floats(0.1, 600.0)))
def test_bound_in_milliseconds_is_the_bound_in_seconds_times_1000(samples, cap):
    seconds = empirical_bernstein_bound(samples, 0.2, cap)
    millis = empirical_bernstein_bound([x * 1000 for x in samples], 0.2, None if cap is None else cap * 1000)
    assert millis == pytest.approx(seconds * 1000, rel=1e-9, abs=1e-9)


@given(durations)
def test_bound_is_at_least_the_mean(samples):
    assert empirical_bernstein_bound(samples, 0.2) >= math.fsum(samples) / len(samples) - 1e-9


def test_bound_matches_the_formula():
    samples = [1.0, 2.0, 3.0, 6.0]
    mean, variance, log_term = 3.0, (4 + 1 + 0 + 9) / 4, math.log(3 / 0.2)
    expected = mean + math.sqrt(2 * variance * log_term / 4) + 3 * 6.0 * log_term / 4
    assert empirical_bernstein_bound(samples, 0.2) == pytest.approx(expected)
    # the range term uses the timeout when it is tighter than the largest sample
    capped = mean + math.sqrt(2 * variance * log_term / 4) + 3 * 4.0 * log_term / 4
    assert empirical_bernstein_bound(samples, 0.2, range_cap=4.0) == pytest.approx(capped)


def test_bound_rejects_no_samples():
    with pytest.raises(ValueError, match="at least one"):
        empirical_bernstein_bound([], 0.2)


def _estimator(**history):
    store = DurationHistory()
    store.load(history)
    return DurationEstimator(store, CoreSettings())


def test_fallback_order_tool_then_global_then_default():
    assert _estimator().predict("pytest", ToolHints(), now=0).source == "default"
    assert _estimator().predict("pytest", ToolHints(), now=0).duration_s == 5.0
    only_other = _estimator(grep=[0.1, 0.2, 0.1, 0.3])
    assert only_other.predict("pytest", ToolHints(), now=0).source == "global"
    own = _estimator(grep=[0.1, 0.2, 0.1, 0.3], pytest=[10.0, 12.0, 11.0])
    prediction = own.predict("pytest", ToolHints(), now=0)
    assert prediction.source == "tool"
    assert prediction.duration_s == pytest.approx(empirical_bernstein_bound([10.0, 12.0, 11.0], 0.2))


def test_hints_background_sleep_timeout_deadline():
    estimator = _estimator(bash=[1.0, 1.0, 1.0])
    base = estimator.predict("bash", ToolHints(), now=0).duration_s
    assert estimator.predict("bash", ToolHints(background=True), now=0).duration_s == 0.0
    assert estimator.predict("bash", ToolHints(sleep_s=base + 30), now=0).duration_s == base + 30
    assert estimator.predict("bash", ToolHints(sleep_s=0.5), now=0).duration_s == base
    assert estimator.predict("bash", ToolHints(timeout_s=0.25), now=0).duration_s == 0.25
    assert estimator.predict("bash", ToolHints(sleep_s=100, timeout_s=30), now=0).duration_s == 30
    assert estimator.predict("bash", ToolHints(deadline=102.0), now=100.0).duration_s == 2.0


def test_reestimate_conditions_on_the_time_already_elapsed():
    estimator = _estimator(build=[1.0, 1.2, 0.9, 40.0, 45.0, 50.0])
    later = estimator.reestimate("build", ToolHints(), now=20.0, elapsed=20.0)
    assert later.source == "reestimate"
    assert later.duration_s == pytest.approx(empirical_bernstein_bound([40.0, 45.0, 50.0], 0.2))
    beyond = estimator.reestimate("build", ToolHints(), now=100.0, elapsed=100.0)
    assert beyond.duration_s == 105.0


def test_history_window_keeps_the_newest_and_round_trips():
    history = DurationHistory(window=3)
    for value in (1.0, 2.0, 3.0, 4.0):
        history.add("ls", value)
    assert list(history.samples("ls")) == [2.0, 3.0, 4.0]
    copy = DurationHistory(window=3)
    copy.load(history.export())
    assert copy.export() == history.export()
    with pytest.raises(ValueError, match="duration_s"):
        history.add("ls", -1.0)
