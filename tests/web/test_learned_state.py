"""A live coordinator told of more distinct tools than it keeps levels for stays within its cap, and after a
restart it loads only what it kept; its database is pruned to the same."""

from typing import Any

from .conftest import eventually, running_coordinator

CAP = 8


def tool_pairs(session: str, token: str, tools: range) -> list[dict[str, Any]]:
    events = []
    for k in tools:
        start = {"call_id": f"c{k}", "tool": f"tool-{k}"}
        end = {"call_id": f"c{k}", "duration_s": float(k)}
        events.append({"kind": "tool_start", "session_id": session, "session_token": token, "tool_start": start})
        events.append({"kind": "tool_end", "session_id": session, "session_token": token, "tool_end": end})
    return events


async def test_distinct_tools_beyond_the_cap_are_forgotten_and_stay_forgotten(tmp_path, fleet):
    core = {"forecast_max_levels": CAP}
    async with running_coordinator(tmp_path, fleet, core=core) as c:
        session, token = await c.register()
        status, answer = await c.call("POST", "/v1/events", {"events": tool_pairs(session, token, range(30))})
        assert status == 200 and all(result["ok"] for result in answer["results"])
        history = c.service.history
        assert history.levels == CAP and history.evicted == 30 + 1 - CAP
        kept = history.export()
    async with running_coordinator(tmp_path, fleet, core=core) as c:
        store = c.service.store
        await eventually(lambda: store.prunes >= 1)
        restarted = c.service.history.export()
        assert restarted.keys() == kept.keys() == {"*", *(f"tool_{k}" for k in range(30 - CAP + 1, 30))}
        assert all(restarted[level] == kept[level] for level in kept if level != "*")
        assert store.rows() == CAP
