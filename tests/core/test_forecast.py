"""The tool-return forecast: keys, bounded history, the predictive distribution, readiness schedules, horizon."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tao_coordinator.core.forecast import (
    ALL_TOOLS,
    AdaptiveHorizon,
    Forecaster,
    ToolHistory,
    ToolKey,
    empirical_bernstein_bound,
    normalise_tool,
)
from tao_coordinator.core.model import DurationHints
from tao_coordinator.core.settings import CoreSettings

SETTINGS = CoreSettings()


def forecaster(**history):
    return Forecaster(ToolHistory(**history), SETTINGS)


def test_harness_spellings_of_one_tool_share_a_key():
    assert {normalise_tool(name) for name in ("Bash", "bash", "run_shell_command", "shell")} == {"bash"}
    assert normalise_tool("Web-Fetch") == normalise_tool("web_fetch") == normalise_tool("WebFetch") == "webfetch"
    assert ToolKey.of("Bash", "Cargo").levels == ("bash:cargo", "bash", ALL_TOOLS)
    assert ToolKey.of("Read").levels == ("read", ALL_TOOLS)
    assert ToolKey.of(ALL_TOOLS).levels == ("_*", ALL_TOOLS)


def test_the_history_keeps_the_newest_window_per_level_and_evicts_the_least_recently_used_level():
    history = ToolHistory(window=3, max_levels=3)
    for d in (1.0, 2.0, 3.0, 4.0):
        history.add(ToolKey.of("a"), d)
    assert sorted(history.shared("a").values()) == [2.0, 3.0, 4.0]
    history.add(ToolKey.of("b"), 5.0)  # levels: a, *, b
    history.add(ToolKey.of("c"), 6.0)  # a is the least recently used: it goes, * never does
    assert history.shared("a") is None and history.shared(ALL_TOOLS) is not None
    assert history.levels == 3 and history.evicted == 1
    copy = ToolHistory(window=3, max_levels=3)
    copy.load(history.export())
    assert copy.export() == history.export()


def test_a_sessions_own_levels_go_when_it_closes():
    history = ToolHistory(session_levels=2)
    for tool in ("a", "b", "c"):
        history.add(ToolKey.of(tool), 1.0, "s")
    assert history.own("s", "a") is None and history.own("s", "c") is not None  # capped per session
    history.forget_session("s")
    assert history.own("s", "c") is None


def test_bad_durations_are_refused():
    with pytest.raises(ValueError, match="duration_s"):
        ToolHistory().add(ToolKey.of("a"), math.nan)
    with pytest.raises(ValueError, match="duration_s"):
        ToolHistory().add(ToolKey.of("a"), -1.0)


def test_with_no_history_the_forecast_is_the_prior():
    f = forecaster()
    forecast = f.forecast(ToolKey.of("bash"), DurationHints(), None, 0.0)
    assert forecast.median() == pytest.approx(SETTINGS.default_tool_duration_s, rel=1e-3)


def test_one_or_two_samples_move_the_forecast_only_part_of_the_way():
    f = forecaster()
    for d in (0.1,) * 50:
        f.history.add(ToolKey.of("read"), d)
    f.history.add(ToolKey.of("bash", "cargo"), 60.0)
    cold = f.forecast(ToolKey.of("bash", "cargo"), DurationHints(), None, 0.0)
    # one cargo run of 60 s weighs 1/(1 + κ) against every tool's 0.1 s: the median stays with the majority
    assert cold.median() == pytest.approx(0.1)
    assert 0.2 < 1.0 - cold.predictive.cdf_at(59.0) < 0.4
    for _ in range(10):
        f.history.add(ToolKey.of("bash", "cargo"), 60.0)
    assert f.forecast(ToolKey.of("bash", "cargo"), DurationHints(), None, 0.0).median() == pytest.approx(60.0)


def test_a_sessions_own_calls_outweigh_other_sessions_of_the_same_key():
    f = forecaster()
    for _ in range(100):
        f.history.add(ToolKey.of("bash", "pytest"), 2.0, "other")
    for _ in range(5):
        f.history.add(ToolKey.of("bash", "pytest"), 30.0, "mine")
    key = ToolKey.of("bash", "pytest")
    assert f.forecast(key, DurationHints(), "mine", 0.0).median() == pytest.approx(30.0)
    assert f.forecast(key, DurationHints(), "new", 0.0).median() == pytest.approx(2.0)


def test_return_probability_is_conditional_on_the_time_already_run():
    f = forecaster()
    for d in [1.0, 10.0] * 50:
        f.history.add(ToolKey.of("t"), d)
    forecast = f.forecast(ToolKey.of("t"), DurationHints(), None, 0.0)
    assert forecast.return_probability(0.5, 1.0) == pytest.approx(0.5, abs=0.05)  # recency tilts to the last
    assert forecast.return_probability(2.0, 1.0) < 0.02  # the fast half has returned: the rest takes 10 s
    assert forecast.return_probability(9.5, 1.0) == pytest.approx(1.0, abs=0.05)  # less the prior's tail
    assert forecast.median(elapsed=2.0) == pytest.approx(10.0)


def test_hints_shift_cap_and_short_circuit_the_forecast():
    f = forecaster()
    for _ in range(50):
        f.history.add(ToolKey.of("t"), 0.5)
    key = ToolKey.of("t")
    slept = f.forecast(key, DurationHints(sleep_s=30.0), None, 0.0)
    assert slept.median() == pytest.approx(30.5)
    assert slept.return_probability(10.0, 1.0) == 0.0 and slept.return_probability(29.8, 1.0) > 0.9
    capped = f.forecast(key, DurationHints(sleep_s=30.0, timeout_s=5.0), None, 0.0)
    assert capped.median() == 5.0 and capped.return_probability(4.5, 1.0) == 1.0
    assert f.forecast(key, DurationHints(deadline=102.0), None, 100.0).cap_s == 2.0
    assert f.forecast(key, DurationHints(background=True), None, 0.0).return_probability(0.0, 0.0) == 1.0


def test_learning_a_slept_call_keeps_what_it_took_beyond_the_sleep():
    f = forecaster()
    f.learn_call(ToolKey.of("bash", "sleep"), DurationHints(sleep_s=10.0), 10.25, None)
    assert list(f.history.shared("bash:sleep").values()) == [0.25]


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=60),
    horizon=st.floats(0.1, 10.0),
    sleep=st.sampled_from([0.0, 3.0]),
)
def test_the_schedule_is_the_rounded_return_probability_at_every_instant(durations, horizon, sleep):
    f = forecaster()
    for d in durations:
        f.history.add(ToolKey.of("t"), d)
    forecast = f.forecast(ToolKey.of("t"), DurationHints(sleep_s=sleep or None), None, 0.0)
    schedule = f.forecast_schedule(forecast, 0.0, horizon)
    top = SETTINGS.readiness_levels
    # at the atoms (and just after them) the step function is exact
    probes = np.unique(np.concatenate([np.array(durations) + sleep, np.array(durations) + sleep - horizon]))
    probes = probes[(probes >= 0) & (probes < 1e4)]
    for a in probes:
        if len(schedule.times) == 32 and a >= schedule.times[-1]:
            break  # past the kept steps
        expected = round(top * forecast.return_probability(float(a), horizon))
        assert abs(schedule.level_at(float(a)) - expected) <= (1 if _near_half(top, forecast, a, horizon) else 0)


def _near_half(top, forecast, a, horizon):
    value = top * forecast.return_probability(float(a), horizon)
    return abs(value - math.floor(value) - 0.5) < 1e-6


def test_the_binary_rules_are_todays_bound_and_the_printed_one():
    f = forecaster()
    for d in (1.0, 2.0, 3.0):
        f.history.add(ToolKey.of("t"), d)
    bound = f.bound_prediction("bound", ToolKey.of("t"), DurationHints(), 0.0)
    assert bound.duration_s == pytest.approx(empirical_bernstein_bound([1.0, 2.0, 3.0], SETTINGS.estimator_delta))
    printed = f.bound_prediction("paper", ToolKey.of("t"), DurationHints(), 0.0)
    variance, log_term = 2.0 / 3.0, math.log(3 / SETTINGS.estimator_delta)
    assert printed.duration_s == pytest.approx(2.0 + 2 * variance * log_term / 3 + 3 * 3.0 * log_term / 3)
    schedule = f.binary_schedule(10.0, 0.0, 1.0)
    assert (schedule.level_at(8.9), schedule.level_at(9.0)) == (0, SETTINGS.readiness_levels)


def test_the_horizon_follows_the_median_wait_in_steps_of_root_two():
    horizon = AdaptiveHorizon(1.0)
    assert not horizon.observe_wait(0.0) and horizon.value_s == 1.0
    for _ in range(10):
        horizon.observe_wait(3.0)
    assert horizon.value_s == pytest.approx(4.0)  # the least step at or above 3 s: √2⁴ (√2³ < 3)
    for _ in range(200):
        horizon.observe_wait(1e6)
    assert horizon.value_s == pytest.approx(64.0)
    for _ in range(64):
        horizon.observe_wait(0.0)
    assert horizon.value_s == 1.0


def test_expected_tools_forecast_a_tool_with_too_little_history_of_its_own():
    f = forecaster()
    for _ in range(20):
        f.learn_call(ToolKey.of("bash"), DurationHints(), 60.0, None)  # the session said bash comes next
    for _ in range(20):
        f.learn_call(ToolKey.of("read"), DurationHints(), 0.5, None)  # every tool's level is now half fast reads
    new = ToolKey.of("mcp_build")  # a tool the fleet has never seen
    blind = f.start("forecast", "c", "mcp_build", None, DurationHints(), "s", 0.0, 1.0)
    told = f.start("forecast", "c", "mcp_build", None, DurationHints(), "s", 0.0, 1.0, expected=("Bash",))
    assert told.predicted_end > blind.predicted_end
    assert told.readiness.level_at(0.0) < blind.readiness.level_at(0.0)  # not expected back within H at its start
    for _ in range(SETTINGS.estimator_min_samples):
        f.learn_call(new, DurationHints(), 0.5, None)
    assert f.expected_levels(new, ("bash",)) == []  # enough history of its own: the expected tools are not read
    assert f.expected_levels(ToolKey.of("bash"), ("bash",)) == []


@pytest.mark.parametrize(("policy", "told"), [("tao", True), ("tao-no-expected-tools", False)])
def test_an_acquire_naming_the_next_tool_sets_the_readiness_the_coming_tool_starts_with(policy, told):
    from tao_coordinator.core.coordinator import Coordinator
    from tao_coordinator.core.events import Acquire, LlmEnd, NodeUpdate, Register, ToolEnd, ToolStart
    from tao_coordinator.core.policies import make_policy

    c = Coordinator(make_policy(policy), CoreSettings(lease_ttl_s=1e6))
    c.on_event(NodeUpdate("a", 70_000), 0.0)
    c.on_event(Register("s", expected_input_tokens=1_000), 0.0)
    for k in range(60):  # the fleet knows bash as a 60 s tool, and most tools as fast reads
        tool, duration = ("bash", 60.0) if k % 3 == 0 else ("read", 0.5)
        c.on_event(ToolStart("s", f"b{k}", tool), 0.0)
        c.on_event(ToolEnd("s", f"b{k}", duration_s=duration), 0.0)
    c.on_event(Acquire("s", step_id="7", expected_next_tools=("bash",)), 1.0)
    c.on_event(LlmEnd("s", "a", 1_000, 0, 10), 2.0)
    c.on_event(ToolStart("s", "new", "mcp_build"), 2.0)  # a name the fleet has never seen
    tool = c.session("s").tools[0]
    assert (tool.predicted_end > 2.0 + 30.0) is told
    assert (tool.readiness.initial == 0) is told
