"""What one session can make the coordinator hold (fault 7): its context, its running tools and its timeline are
bounded in UTF-8 bytes, whatever script the text is in. A real coordinator on loopback beside fake-vLLM nodes."""

from __future__ import annotations

from typing import Any

from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.web.timeline import ENTRIES, TEXT_BYTES

from .conftest import API_TOKEN, running_coordinator

LIMITS = CoreSettings()
MAX_CONTEXT_BYTES = LIMITS.max_context_bytes
MAX_RUNNING_TOOL_BYTES = LIMITS.max_running_tool_bytes
MAX_RUNNING_TOOLS = LIMITS.max_running_tools
WIDE = "\U0001f600"  # 4 bytes of UTF-8, 4 bytes a character in a Python string


def context_of(utf8_bytes: int) -> dict[str, Any]:
    """A context of exactly `utf8_bytes` of text, every field within its protocol limit, in 4-byte characters."""
    labels: dict[str, str] = {}
    left = utf8_bytes - 4 * 25
    while left >= 6 and len(labels) < 50:
        value = WIDE * min(256, (left - 6) // 4)
        labels[f"{len(labels):02d}" + WIDE] = value
        left -= 6 + 4 * len(value)
    context = {"harness": WIDE * 25, "model": "x" * left, "labels": labels}
    assert sum(len(t.encode()) for t in [context["harness"], context["model"], *labels, *labels.values()]) == utf8_bytes
    return context


async def test_a_context_past_its_budget_is_refused_and_one_at_it_is_taken(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        before = set(c.service.coordinator.sessions)
        status, body = await c.call("POST", "/v1/sessions", {"context": context_of(MAX_CONTEXT_BYTES + 1)}, API_TOKEN)
        assert status == 422 and body["field"] == "context" and f"{MAX_CONTEXT_BYTES:,}" in body["error"]
        batch = {"events": [{"kind": "register", "session_id": "wide", "registration": {"context": context_of(9000)}}]}
        status, answer = await c.call("POST", "/v1/events", batch, API_TOKEN)
        assert answer["results"][0]["status"] == 422
        assert set(c.service.coordinator.sessions) == before
        session, token = await c.register(context=context_of(MAX_CONTEXT_BYTES))
        # an acquire's step id and expected tools count too, and a refused one changes nothing
        status, body = await c.call(
            "POST", f"/v1/sessions/{session}/acquire", {"wait_s": 0, "expected_next_tools": ["bash"]}, token
        )
        assert status == 422 and body["field"] == "expected_next_tools"
        assert c.service.coordinator.sessions[session].context.expected_next_tools == ()
        small, small_token = await c.register(context={"expected_next_tools": ["a" * 200] * 39})
        status, body = await c.call(
            "POST", f"/v1/sessions/{small}/acquire", {"wait_s": 0, "step_id": WIDE * 200}, small_token
        )
        assert status == 422 and body["field"] == "step_id"


async def test_running_tools_past_their_byte_budget_are_refused(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        per_tool = MAX_RUNNING_TOOL_BYTES // 10
        name = WIDE * (per_tool // 8)
        starts = [
            {
                "kind": "tool_start",
                "session_id": session,
                "session_token": token,
                "tool_start": {"call_id": f"{k}" + name[1:], "tool": name},
            }
            for k in range(11)
        ]
        _, answer = await c.call("POST", "/v1/events", {"events": starts})
        assert [r["status"] for r in answer["results"]] == [204] * 10 + [409]
        assert "end one first" in answer["results"][-1]["error"]
        assert len(c.service.coordinator.sessions[session].tools) == 10
        assert MAX_RUNNING_TOOLS == 64  # short names still run 64 at once (tests/web/test_adversarial.py)


async def test_a_timeline_keeps_its_text_clipped(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        call_id, tool = "c" + WIDE * 199, "t" * 200
        for verb, body in (("tool_start", {"call_id": call_id, "tool": tool}), ("tool_end", {"call_id": call_id})):
            assert (await c.call("POST", f"/v1/sessions/{session}/{verb}", body, token))[0] == 204
        status, timeline = await c.call("GET", f"/v1/sessions/{session}", token=API_TOKEN)
        kept = timeline["tools"][0]
        assert status == 200 and kept["status"] == "ok"
        assert kept["call_id"].startswith("c" + WIDE) and kept["call_id"].endswith("…")
        assert len(kept["call_id"].encode()) <= TEXT_BYTES and len(kept["tool"].encode()) <= TEXT_BYTES
        assert ENTRIES == 256
