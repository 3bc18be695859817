"""tao-survival: readiness from the tool's empirical return probability, conditioned on the time already run."""

from tao_coordinator.core.events import ToolEnd, ToolStart
from tao_coordinator.core.model import AgentContext, Phase, RunningTool, Session, ToolHints
from tao_coordinator.core.policies.tao_survival import SurvivalReadiness, ToolDurations, tao_survival
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals.base import SignalContext


def in_tool(tool, started_at, hints=None):
    running = RunningTool("c", tool, started_at, hints or ToolHints(), started_at + 99, started_at, "default")
    return Session("s", AgentContext(), 0.0, 1e9, phase=Phase.IN_TOOL, tools=(running,), completed_calls=1)


def test_return_probability_is_conditioned_on_the_elapsed_time():
    durations = ToolDurations()
    for d in [0.2, 0.3, 0.3, 0.4, 5.0, 20.0, 30.0]:
        durations.add("cat", d)
    assert durations.return_probability("cat", 0.0, 1.0, 3) == 4 / 7
    assert durations.return_probability("cat", 1.0, 1.0, 3) == 0.0  # only the slow ones are left
    assert durations.return_probability("pytest", 0.0, 1.0, 3) == 4 / 7  # no own history: the global one
    assert ToolDurations().return_probability("cat", 0.0, 1.0, 3) is None


def test_a_short_tool_is_ready_at_once_and_a_long_running_call_stops_being_ready():
    durations = ToolDurations(window=5)
    for d in [9.0, 9.0, 0.3, 0.3, 0.3, 0.4, 0.5]:  # the window keeps the newest five
        durations.add("cat", d)
    readiness = SurvivalReadiness(durations)
    ctx = SignalContext(10.0, CoreSettings(), {})
    assert readiness.base(in_tool("cat", 10.0), ctx) == 1
    assert readiness.base(in_tool("cat", 8.0), ctx) == 0  # 2 s in: no recent call ran that long
    assert readiness.base(in_tool("cat", 10.0, ToolHints(sleep_s=5.0)), ctx) == 0


def test_the_policy_learns_durations_from_the_events_it_observes():
    policy = tao_survival()
    for k in range(3):
        policy.observe(ToolStart("s", f"c{k}", "cat"), 10.0 * k)
        policy.observe(ToolEnd("s", f"c{k}"), 10.0 * k + 0.25)
    assert policy.durations.return_probability("cat", 0.0, 1.0, 3) == 1.0
