"""The API's edges: tokens, bad input answered with a 4xx that names the field (and no state change), batches."""

import asyncio
import sqlite3

import pytest

from tao_coordinator.core.events import ToolEnd

from .conftest import API_TOKEN, running_coordinator


def state_of(c):
    core = c.service.coordinator
    return dict(core.sessions), set(core.waiting), core.plan_stats.started


async def test_tokens(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        assert (await c.call("POST", "/v1/sessions", {}))[0] == 401
        assert (await c.call("POST", "/v1/sessions", {}, token="wrong-token"))[0] == 401
        mine, my_token = await c.register()
        _other, other_token = await c.register()
        assert (await c.call("POST", f"/v1/sessions/{mine}/heartbeat", None, my_token))[0] == 204
        status, body = await c.call("POST", f"/v1/sessions/{mine}/heartbeat", None, other_token)
        assert (status, body["field"]) == (403, "Authorization")
        assert (await c.call("POST", f"/v1/sessions/{mine}/heartbeat", None, API_TOKEN))[0] == 403
        assert (await c.call("DELETE", f"/v1/sessions/{mine}", None, other_token))[0] == 403
        assert mine in c.service.coordinator.sessions
        assert (await c.call("GET", "/v1/nodes"))[0] == 401
        assert (await c.call("GET", "/v1/nodes", token=API_TOKEN))[0] == 200
        assert (await c.call("GET", "/healthz"))[0] == 200


async def test_no_auth_mode_on_loopback(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, server={"insecure_no_auth": True, "token": None}) as c:
        session, _ = await c.register(token=None)
        assert (await c.call("POST", f"/v1/sessions/{session}/heartbeat"))[0] == 204


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        (
            "/v1/sessions/{s}/tool_start",
            {"call_id": "c", "tool": "bash", "hints": {"timeout_s": -1}},
            422,
            "hints.timeout_s",
        ),
        ("/v1/sessions/{s}/tool_start", {"call_id": "", "tool": "bash"}, 422, "call_id"),
        ("/v1/sessions/{s}/tool_start", {"tool": "bash"}, 422, "call_id"),
        ("/v1/sessions/{s}/tool_start", {"call_id": "c", "tool": "bash", "extra": 1}, 422, "extra"),
        ("/v1/sessions/{s}/tool_start", {"call_id": "c", "tool": "bash", "program": "ls -la"}, 422, "program"),
        ("/v1/sessions/{s}/tool_start", {"call_id": "c", "tool": "bash", "program": "x" * 65}, 422, "program"),
        ("/v1/sessions/{s}/tool_end", {"call_id": "never"}, 409, None),
        ("/v1/sessions/{s}/tool_end", {"call_id": "c", "status": "weird"}, 422, "status"),
        ("/v1/sessions/{s}/llm_end", {"node": "node-0"}, 409, None),
        (
            "/v1/sessions/{s}/llm_end",
            {"node": "node-0", "prompt_tokens": 10, "cached_tokens": 20},
            422,
            "cached_tokens",
        ),
        ("/v1/sessions/{s}/llm_end", {"node": "x", "prompt_tokens": -5}, 422, "prompt_tokens"),
        ("/v1/sessions/{s}/acquire", {"wait_s": 10_000}, 422, "wait_s"),
        ("/v1/sessions/{s}/acquire", {"step_id": "x" * 201}, 422, "step_id"),
        ("/v1/sessions/{s}/acquire", {"step_id": ""}, 422, "step_id"),
        ("/v1/sessions/{s}/acquire", {"step_id": "3", "expected_next_tools": ["t"] * 51}, 422, "expected_next_tools"),
        ("/v1/sessions/{s}/acquire", {"expected_next_tools": ["bash", "x" * 201]}, 422, "expected_next_tools.1"),
        ("/v1/sessions/{s}/acquire", [1, 2], 422, "body"),
        ("/v1/sessions/{s}/tool_start", None, 400, "body"),
    ],
)
async def test_bad_requests_name_the_field_and_change_nothing(tmp_path, fleet, path, body, status, field):
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        await c.settled()
        before = state_of(c)
        got, answer = await c.call("POST", path.format(s=session), body, token)
        assert got == status, answer
        assert answer["error"]
        if field is not None:
            assert answer["field"] == field
        assert state_of(c) == before


async def test_invalid_json_and_oversized_bodies(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet, server={"max_body_bytes": 2048}) as c:
        session, token = await c.register()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        for garbage in (b"{not json", b"\xff\xfe", b"[" * 2000):  # the last nests past Python's recursion limit
            async with c.http.post(f"{c.url}/v1/sessions/{session}/tool_start", data=garbage, headers=headers) as r:
                assert r.status == 400 and (await r.json())["field"] == "body"
        big = {"call_id": "c", "tool": "x" * 4000}
        assert (await c.call("POST", f"/v1/sessions/{session}/tool_start", big, token))[0] == 413
        assert (await c.call("GET", "/no/such/route"))[0] == 404


async def test_a_batch_applies_each_event_on_its_own(tmp_path, fleet):
    async with running_coordinator(tmp_path, fleet) as c:
        events = [
            {"kind": "register", "session_id": "cc-123", "registration": {"context": {"harness": "claude-code"}}},
            {
                "kind": "tool_start",
                "session_id": "cc-123",
                "session_token": "wrong",
                "tool_start": {"call_id": "a", "tool": "Bash"},
            },
        ]
        status, answer = await c.call("POST", "/v1/events", {"events": events}, API_TOKEN)
        assert status == 200
        registered, refused = answer["results"]
        assert registered["ok"] and registered["status"] == 201
        assert (refused["ok"], refused["status"]) == (False, 403)
        token = registered["session_token"]
        events = [
            {
                "kind": "tool_start",
                "session_id": "cc-123",
                "session_token": token,
                "tool_start": {"call_id": "a", "tool": "Bash", "hints": {"timeout_s": 120}},
            },
            {"kind": "tool_end", "session_id": "cc-123", "session_token": token},
            {
                "kind": "tool_end",
                "session_id": "cc-123",
                "session_token": token,
                "tool_end": {"call_id": "a", "duration_s": 1.25},
            },
            {"kind": "close", "session_id": "nobody", "session_token": token},
        ]
        status, answer = await c.call("POST", "/v1/events", {"events": events})
        assert [(r["ok"], r["status"]) for r in answer["results"]] == [
            (True, 204),
            (False, 422),
            (True, 204),
            (False, 403),  # another session's token: as for a session that exists, nothing said about "nobody"
        ]
        assert c.service.history.shared("bash").oldest_first() == [1.25]
        assert (await c.call("POST", "/v1/events", {"events": []}))[0] == 422


async def test_a_batch_keeps_each_sessions_order_while_its_tool_ends_are_stored_together(tmp_path, fleet):
    """Two sessions reuse one call id three times each, interleaved in one batch: a `tool_start` after a `tool_end`
    of its session finds the call ended (its row stored and the core fed), or it would be refused as running."""
    async with running_coordinator(tmp_path, fleet) as c:
        sessions = [await c.register() for _ in range(2)]
        events = []
        for k in range(3):
            for session, token in sessions:
                start = {"call_id": "x", "tool": "bash"}
                events.append(
                    {"kind": "tool_start", "session_id": session, "session_token": token, "tool_start": start}
                )
            for session, token in sessions:
                end = {"call_id": "x", "duration_s": 1.0 + k}
                events.append({"kind": "tool_end", "session_id": session, "session_token": token, "tool_end": end})
        status, answer = await c.call("POST", "/v1/events", {"events": events})
        assert status == 200 and [r["status"] for r in answer["results"]] == [204] * 12
        assert sorted(c.service.history.shared("bash").oldest_first()) == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
        assert c.service.store.rows() == 6  # each acknowledged tool end is in the file when the answer comes


async def test_the_tool_ends_of_one_batch_are_stored_in_one_transaction(tmp_path, fleet):
    """The rows of the tool ends a batch carries go to the store together, one commit for all of them (one wake-up
    of the loop when it is done), and every one is fed before the answer."""
    async with running_coordinator(tmp_path, fleet) as c:
        sessions = [await c.register() for _ in range(20)]
        starts = [
            {"kind": "tool_start", "session_id": s, "session_token": t, "tool_start": {"call_id": "x", "tool": "bash"}}
            for s, t in sessions
        ]
        status, _ = await c.call("POST", "/v1/events", {"events": starts})
        assert status == 200
        commits = c.service.store.commits
        ends = [
            {"kind": "tool_end", "session_id": s, "session_token": t, "tool_end": {"call_id": "x", "duration_s": 2.0}}
            for s, t in sessions
        ]
        status, answer = await c.call("POST", "/v1/events", {"events": ends})
        assert status == 200 and [r["status"] for r in answer["results"]] == [204] * 20
        assert (c.service.store.rows(), c.service.store.commits - commits) == (20, 1)
        assert all(not c.service.coordinator.session(s).tools for s, _ in sessions)


async def test_a_tool_end_whose_requester_gives_up_is_still_stored_and_fed(tmp_path, fleet):
    """Another connection holds the database's write lock, so the row waits; the request waiting for it is
    cancelled (a client that hung up). Once the lock is released the row commits and the end is fed all the same."""
    async with running_coordinator(tmp_path, fleet) as c:
        session, token = await c.register()
        start = {"call_id": "x", "tool": "bash"}
        event = {"kind": "tool_start", "session_id": session, "session_token": token, "tool_start": start}
        assert (await c.call("POST", "/v1/events", {"events": [event]}))[0] == 200
        blocker = sqlite3.connect(c.service.store.path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            waiting = asyncio.ensure_future(c.service.tool_end(ToolEnd(session, "x", 2.0)))
            await asyncio.sleep(0.2)
            assert not waiting.done() and c.service.coordinator.session(session).tools
            waiting.cancel()
            await asyncio.sleep(0.05)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        for _ in range(200):
            if not c.service.coordinator.session(session).tools:
                break
            await asyncio.sleep(0.025)
        assert waiting.cancelled()
        assert not c.service.coordinator.session(session).tools  # fed, though nobody waits for the answer
        assert c.service.store.rows() == 1
