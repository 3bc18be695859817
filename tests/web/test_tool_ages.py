"""A tool start or end reported late says how late (`age_s`): the coordinator dates it that long before the report
arrived, never before the session's phase began (nor, for an end, before the tool started); a bad age is a 422
naming the field, and changes nothing."""

import asyncio
import time

import pytest

from .conftest import API_TOKEN, running_coordinator
from .test_api import state_of

CLOSE_S = 0.05
"""How far the coordinator's Unix times may stray from this process's clock (it converts its monotonic clock once)."""


async def admitted(c):
    """A session that made one model call: ADMITTED since the call's end, which is returned (Unix time)."""
    session, token = await c.register()
    status, grant = await c.call("POST", f"/v1/sessions/{session}/acquire", {"wait_s": 5}, token)
    assert status == 200 and grant["status"] == "admitted", grant
    ended = time.time()
    end = {"node": grant["node"], "lease_id": grant["lease_id"], "prompt_tokens": 10, "completion_tokens": 5}
    assert (await c.call("POST", f"/v1/sessions/{session}/llm_end", end, token))[0] == 204
    return session, token, ended


async def the_tool(c, session):
    status, view = await c.call("GET", f"/v1/sessions/{session}", token=API_TOKEN)
    assert status == 200, view
    [tool] = view["tools"]
    return tool, view


async def test_a_late_start_and_end_are_dated_when_they_happened(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token, _ = await admitted(c)
        await asyncio.sleep(1.0)
        # each moment is bracketed by the clocks read before and after its report, so a loaded machine widens
        # the bracket instead of failing the test
        sent, core_sent = time.time(), c.service.now()
        start = {"call_id": "c1", "tool": "Bash", "program": "sleep", "age_s": 0.6}
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_start", start, token))[0] == 204
        received, core_received = time.time(), c.service.now()
        core_started = c.service.coordinator.session(session).tools[0].started_at
        assert core_sent - 0.6 <= core_started <= core_received - 0.6
        await asyncio.sleep(1.0)
        ended = time.time()
        end = {"call_id": "c1", "age_s": 0.4}
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_end", end, token))[0] == 204
        end_received = time.time()
        tool, view = await the_tool(c, session)
        assert sent - 0.6 - CLOSE_S <= tool["started_at"] <= received - 0.6 + CLOSE_S
        assert ended - 0.4 - CLOSE_S <= tool["ended_at"] <= end_received - 0.4 + CLOSE_S
        assert abs(tool["actual_s"] - (tool["ended_at"] - tool["started_at"])) < 0.01  # no duration_s: measured
        spans = {(p["phase"], round(p["since"], 3)) for p in view["phases"]}
        assert ("in_tool", round(tool["started_at"], 3)) in spans and ("ready", round(tool["ended_at"], 3)) in spans


async def test_an_age_reaching_past_the_phase_is_cut_at_its_start(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token, call_ended = await admitted(c)
        await asyncio.sleep(0.5)
        start = {"call_id": "c1", "tool": "Bash", "age_s": 3600}
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_start", start, token))[0] == 204
        await asyncio.sleep(0.5)
        end = {"call_id": "c1", "age_s": 3600, "duration_s": 0.25}
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_end", end, token))[0] == 204
        tool, view = await the_tool(c, session)
        admitted_since = max(p["since"] for p in view["phases"] if p["phase"] == "admitted")
        assert tool["started_at"] == pytest.approx(admitted_since, abs=0.01)  # not before the model call ended
        assert call_ended - CLOSE_S <= tool["started_at"]
        assert tool["ended_at"] == pytest.approx(tool["started_at"], abs=0.01)  # not before it started
        assert tool["actual_s"] == 0.25  # what the client measured is kept


async def test_without_an_age_a_report_is_dated_when_it_arrives(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token, _ = await admitted(c)
        await asyncio.sleep(0.3)
        sent = time.time()
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_start", {"call_id": "c", "tool": "x"}, token))[
            0
        ] == 204
        received = time.time()
        tool, _ = await the_tool(c, session)
        assert sent - CLOSE_S <= tool["started_at"] <= received + CLOSE_S


@pytest.mark.parametrize("age", [-0.5, 86_400.5, "soon", None])
@pytest.mark.parametrize("kind", ["tool_start", "tool_end"])
async def test_a_bad_age_is_refused_naming_the_field_and_changes_nothing(tmp_path, fleet, kind, age):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token, _ = await admitted(c)
        if kind == "tool_end":
            assert (await c.call("POST", f"/v1/sessions/{session}/tool_start", {"call_id": "c", "tool": "x"}, token))[
                0
            ] == 204
        await c.settled()
        before = state_of(c)
        body = {"call_id": "c", "age_s": age} | ({"tool": "x"} if kind == "tool_start" else {})
        if age is None:  # in a batch: the batch is refused, naming the event's field
            batch = [{"kind": kind, "session_id": session, "session_token": token, kind: {**body, "age_s": -1}}]
            status, answer = await c.call("POST", "/v1/events", {"events": batch})
            assert status == 422, answer
            assert answer["field"] == f"events.0.{kind}.age_s", answer
        else:
            status, answer = await c.call("POST", f"/v1/sessions/{session}/{kind}", body, token)
            assert status == 422, answer
            assert answer["field"] == "age_s" and answer["error"]
        assert state_of(c) == before
