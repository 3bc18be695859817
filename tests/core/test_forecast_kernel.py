"""The compiled forecast (`core/forecast/kernel.py`) against the formulas of `predictive.py` written with numpy, as
the forecast was computed before it was compiled: the same mixture, the same probabilities (to rounding), the same
readiness schedule (a level may differ only where the probability is a rounding error away from a half-level), and
the same median (to the search's 0.1 %)."""

import math

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.special import ndtr

from tao_coordinator.core.forecast import Forecaster, ToolHistory, ToolKey
from tao_coordinator.core.forecast.forecaster import _GRID
from tao_coordinator.core.forecast.kernel import PRIOR_LOG_SD
from tao_coordinator.core.model import DurationHints
from tao_coordinator.core.settings import CoreSettings


def reference_mixture(levels, kappa, half_life):
    chunks, weights, carry, below = [], [], 1.0, 0
    for samples in levels:
        if not len(samples) or samples.added == below:
            continue
        below = samples.added
        recency = np.exp2(((samples.added - 1) - np.array(samples.arrivals())) * (-1.0 / half_life))
        mass = float(recency.sum())
        share = carry * mass / (mass + kappa)
        chunks.append(np.array(samples.values()))
        weights.append(recency * (share / mass))
        carry -= share
    if not chunks:
        return np.zeros(0), np.zeros(0), carry
    values = np.concatenate(chunks)
    order = np.argsort(values, kind="stable")
    return values[order], np.cumsum(np.concatenate(weights)[order]), carry


def reference_cdf(predictive, x):
    atoms = predictive.below[np.searchsorted(predictive.values, x, side="right")]
    with np.errstate(divide="ignore"):
        z = (np.log(np.maximum(x, 0.0)) - predictive.prior_mu) / PRIOR_LOG_SD
    return np.minimum(1.0, atoms + predictive.prior_weight * ndtr(z))


def reference_return_probabilities(forecast, elapsed, horizon):
    x = elapsed + horizon
    since = elapsed - forecast.sleep_s
    start = np.where(since >= 0.0, reference_cdf(forecast.predictive, np.maximum(since, 0.0)), 0.0)
    left = 1.0 - start
    reached = reference_cdf(forecast.predictive, np.maximum(x - forecast.sleep_s, 0.0))
    within = np.where(left > 1e-12, np.clip((reached - start) / np.where(left > 1e-12, left, 1.0), 0.0, 1.0), 0.0)
    within = np.where((x < elapsed) | (x < forecast.sleep_s), 0.0, within)
    return np.where(x >= forecast.cap_s, 1.0, within)


def reference_instants(forecast, horizon):
    shifted = forecast.predictive.values + forecast.sleep_s
    edges = [forecast.sleep_s, forecast.sleep_s - horizon]
    if math.isfinite(forecast.cap_s):
        edges.append(forecast.cap_s - horizon)
    grid = forecast.sleep_s + _GRID
    elapsed = np.unique(np.concatenate([[0.0], shifted, shifted - horizon, edges, grid, grid - horizon]))
    return elapsed[(elapsed >= 0.0) & (elapsed <= min(forecast.cap_s, _GRID[-1]))]


@settings(max_examples=80, deadline=None)
@given(
    durations=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([0.0, 0.5, 1.0, 2.0]) | st.floats(0.0, 300.0)),
        max_size=200,
    ),
    own=st.lists(st.floats(0.0, 60.0), max_size=40),
    horizon=st.sampled_from([0.0, 0.5, 1.0, 7.5]),
    sleep=st.sampled_from([None, 0.0, 3.0]),
    timeout=st.sampled_from([None, 0.0, 4.0, 90.0]),
    levels=st.sampled_from([1, 2, 5]),
)
# the edges by name: durations of 0 under a sleep (back at once once awake), a cap of 0, a horizon of 0, no history
@example(durations=[("a", 0.0)] * 3, own=[], horizon=1.0, sleep=3.0, timeout=None, levels=1)
@example(durations=[("a", 1.0), ("b", 0.0)], own=[0.0], horizon=0.0, sleep=None, timeout=0.0, levels=2)
@example(durations=[], own=[], horizon=1.0, sleep=None, timeout=None, levels=1)
def test_the_compiled_forecast_is_the_numpy_one(durations, own, horizon, sleep, timeout, levels):
    core = CoreSettings(readiness_levels=levels)
    forecaster = Forecaster(ToolHistory.from_settings(core), core)
    for tool, duration in durations:
        forecaster.history.add(ToolKey.of(tool), duration)
    for duration in own:
        forecaster.history.add(ToolKey.of("a"), duration, "mine")
    forecast = forecaster.forecast(ToolKey.of("a"), DurationHints(timeout, sleep), "mine", 0.0)
    predictive = forecast.predictive

    key = ToolKey.of("a")
    shared = [forecaster.history.shared(level) for level in key.levels]
    mixture = [forecaster.history.own("mine", key.session_level), *shared]
    values, cumulative, prior = reference_mixture(
        [level for level in mixture if level is not None], core.forecast_kappa, core.forecast_recency_half_life
    )
    assert np.array_equal(predictive.values, values)
    assert np.allclose(predictive.below[1:], cumulative, rtol=0, atol=1e-12)
    assert math.isclose(predictive.prior_weight, prior, abs_tol=1e-12)

    instants = reference_instants(forecast, horizon)
    expected = reference_return_probabilities(forecast, instants, horizon)
    assert np.allclose(forecast.return_probabilities(instants, horizon), expected, rtol=0, atol=1e-9)

    schedule = forecaster.forecast_schedule(forecast, 0.0, horizon)
    scaled = levels * expected
    near_half = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-9
    for instant, level, tie in zip(instants, np.rint(scaled), near_half, strict=True):
        if len(schedule.times) == 32 and instant >= schedule.times[-1]:
            break  # past the kept steps
        assert tie or schedule.level_at(float(instant)) == level
    assert set(schedule.times) <= set(instants.tolist())

    cap = forecast.cap_s
    for elapsed in (0.0, 0.7, 5.0):
        median = forecast.median(elapsed)
        if cap <= elapsed:
            assert median == cap
            continue
        assert elapsed - 1e-12 <= median <= cap
        # the search stops within 0.1 % past the point where half of what is left has returned
        back = reference_return_probabilities(forecast, np.array([elapsed]), median * 1.002 + 1e-4 - elapsed)[0]
        assert back >= 0.5 - 1e-9 or median * 1.002 + 1e-4 >= cap
        beyond_sleep = median - forecast.sleep_s
        before = forecast.sleep_s + beyond_sleep * (1 - 1e-3) - 1e-9
        if beyond_sleep > 1e-4 and before > elapsed:  # and not much later than that point
            assert reference_return_probabilities(forecast, np.array([elapsed]), before - elapsed)[0] <= 0.5 + 1e-9
