"""Every transition of the session state machine (docs/design.md#session-life-cycle), the illegal ones, and the
invariants after each."""

import pytest

from tao_coordinator.core import state_machine as sm
from tao_coordinator.core.errors import IllegalTransition
from tao_coordinator.core.model import AgentProfile, AgentSession, DurationHints, Phase, RunningTool


def new(**fields):
    return AgentSession(**(dict(id="s", context=AgentProfile(), registered_at=0.0, lease_expires_at=1e9) | fields))


def tool(call_id="c1"):
    return RunningTool(call_id, "bash", 1.0, DurationHints(), 3.0, 1.0, "default")


def checked(session):
    session.check()
    return session


def test_the_main_loop_of_a_session():
    s = new()
    s = checked(sm.admit(s, 1.0, "a"))
    assert (s.phase, s.node, s.version) == (Phase.ADMITTED, "a", 1)
    s = checked(sm.acquire(s, 2.0, "a", 5000))
    assert (s.phase, s.llm_calls, s.expected_input_tokens) == (Phase.IN_LLM, 1, 5000)
    s = checked(sm.llm_end(s, 3.0, context_tokens=5200))
    assert (s.phase, s.node, s.context_tokens) == (Phase.ADMITTED, "a", 5200)
    s = checked(sm.tool_start(s, 3.0, tool()))
    assert (s.phase, s.node) == (Phase.IN_TOOL, "a")
    s = checked(sm.interrupt(s, 4.0))
    assert (s.phase, s.node) == (Phase.IN_TOOL, None)
    s = checked(sm.tool_end(s, 5.0, "c1"))
    assert (s.phase, s.node) == (Phase.READY, None)
    s = checked(sm.acquire(s, 5.0, None, None))
    assert (s.phase, s.acquire_pending) == (Phase.WAITING, True)
    s = checked(sm.admit(s, 6.0, "b"))
    assert (s.phase, s.node, s.llm_calls, s.acquire_pending) == (Phase.IN_LLM, "b", 1, False)
    s = checked(sm.close(sm.llm_end(s, 7.0), 8.0))
    assert (s.phase, s.node) == (Phase.CLOSED, None)
    assert s.version == 10  # one per transition


def test_resident_tool_end_keeps_the_place_and_acquire_goes_straight_in():
    s = sm.tool_start(sm.admit(new(), 0.0, "a"), 0.0, tool())
    s = checked(sm.tool_end(s, 1.0, "c1"))
    assert (s.phase, s.node) == (Phase.READY, "a")
    s = checked(sm.acquire(s, 1.0, "a", None))
    assert (s.phase, s.node) == (Phase.IN_LLM, "a")


def test_parallel_tools_end_with_the_last():
    s = sm.tool_start(sm.tool_start(sm.admit(new(), 0.0, "a"), 0.0, tool("x")), 0.0, tool("y"))
    s = checked(sm.tool_end(s, 1.0, "x"))
    assert s.phase is Phase.IN_TOOL and [t.call_id for t in s.tools] == ["y"]
    assert checked(sm.tool_end(s, 2.0, "y")).phase is Phase.READY


def test_overlapping_llm_calls_are_counted():
    s = sm.acquire(sm.admit(new(), 0.0, "a"), 0.0, "a", None)
    s = checked(sm.acquire(s, 0.5, "a", None))
    assert s.llm_calls == 2
    s = checked(sm.llm_end(s, 1.0))
    assert (s.phase, s.llm_calls) == (Phase.IN_LLM, 1)
    assert checked(sm.llm_end(s, 2.0)).phase is Phase.ADMITTED


def test_sequential_tools_without_llm_call_between():
    s = sm.tool_end(sm.tool_start(new(), 0.0, tool("x")), 1.0, "x")
    assert s.phase is Phase.READY
    assert checked(sm.tool_start(s, 1.0, tool("y"))).phase is Phase.IN_TOOL


def test_interrupting_an_admitted_session_returns_it_to_waiting():
    assert checked(sm.interrupt(sm.admit(new(), 0.0, "a"), 1.0)).phase is Phase.WAITING


in_llm = sm.acquire(sm.admit(new(), 0.0, "a"), 0.0, "a", None)
in_tool = sm.tool_start(new(), 0.0, tool())
closed = sm.close(new(), 0.0)


@pytest.mark.parametrize(
    ("session", "transition", "message"),
    [
        (in_llm, lambda s: sm.admit(s, 1.0, "b"), "never moved"),
        (in_llm, lambda s: sm.interrupt(s, 1.0), "interrupt"),
        (in_llm, lambda s: sm.tool_start(s, 1.0, tool("z")), "llm_end first"),
        (in_llm, lambda s: sm.acquire(s, 1.0, "b", None), "overlapping"),
        (in_tool, lambda s: sm.acquire(s, 1.0, "a", None), "tool_end first"),
        (in_tool, lambda s: sm.tool_end(s, 1.0, "unknown"), "not running"),
        (in_tool, lambda s: sm.tool_start(s, 1.0, tool()), "already running"),
        (in_tool, lambda s: sm.llm_end(s, 1.0), "no call"),
        (new(), lambda s: sm.interrupt(s, 1.0), "holds no place"),
        (new(), lambda s: sm.tool_end(s, 1.0, "c1"), "not running"),
        (closed, lambda s: sm.acquire(s, 1.0, "a", None), "CLOSED"),
        (closed, lambda s: sm.close(s, 1.0), "already closed"),
        (closed, lambda s: sm.admit(s, 1.0, "a"), "CLOSED"),
    ],
)
def test_illegal_transitions_raise_and_change_nothing(session, transition, message):
    before = session
    with pytest.raises(IllegalTransition, match=message):
        transition(session)
    assert session == before
