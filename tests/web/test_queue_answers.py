"""A waiting acquire says where the session stands in the queue and how long it may wait (`web/queue_answer.py`)."""

from .conftest import PROMPT, running_coordinator


async def test_waiting_answers_carry_the_position_and_once_the_queue_moved_an_estimate(tmp_path, fleet):
    # one node of 60,000 tokens at 0.9: one 30k session at a time
    one = [{"name": "node-0", "url": fleet.nodes[0].url, "capacity_tokens": 60_000}]
    async with running_coordinator(tmp_path, fleet, nodes=one) as c:
        sessions = [await c.register() for _ in range(4)]
        answers = [await c.call("POST", f"/v1/sessions/{s}/acquire", {"wait_s": 0.05}, t) for s, t in sessions]
        assert [status for status, _ in answers] == [200, 202, 202, 202]
        assert "queue_position" not in answers[0][1] and "estimated_wait_s" not in answers[0][1]
        assert [body["queue_position"] for _, body in answers[1:]] == [1, 2, 3]
        assert all("estimated_wait_s" not in body for _, body in answers[1:])  # the queue was never served yet
        first, first_token = sessions[0]
        end = {"node": "node-0", "prompt_tokens": PROMPT, "completion_tokens": 10}
        await c.call("POST", f"/v1/sessions/{first}/llm_end", end, first_token)
        await c.call("DELETE", f"/v1/sessions/{first}", token=first_token)
        status, grant = await c.call("POST", f"/v1/sessions/{sessions[1][0]}/acquire", {"wait_s": 2}, sessions[1][1])
        assert status == 200 and grant["node"] == "node-0"
        later = [await c.call("POST", f"/v1/sessions/{s}/acquire", {"wait_s": 0.05}, t) for s, t in sessions[2:]]
        assert [body["queue_position"] for _, body in later] == [1, 2]
        estimates = [body["estimated_wait_s"] for _, body in later]
        assert 0 < estimates[0] < estimates[1] < 60


async def test_a_call_that_only_polls_keeps_its_session_while_it_waits(tmp_path, fleet):
    # a client without heartbeats (`tao proxy` holding a harness's call) asks again and again for longer than a lease
    one = [{"name": "node-0", "url": fleet.nodes[0].url, "capacity_tokens": 60_000}]
    async with running_coordinator(tmp_path, fleet, nodes=one, core={"lease_ttl_s": 1.0}) as c:
        (holder, holder_token), (waiter, waiter_token) = [await c.register() for _ in range(2)]
        assert (await c.call("POST", f"/v1/sessions/{holder}/acquire", {"wait_s": 0.05}, holder_token))[0] == 200
        for _ in range(6):  # 3 s of polling, three leases
            status, body = await c.call("POST", f"/v1/sessions/{waiter}/acquire", {"wait_s": 0.5}, waiter_token)
            assert status == 202 and body["status"] == "waiting"
            await c.call("POST", f"/v1/sessions/{holder}/heartbeat", {}, holder_token)
        end = {"node": "node-0", "prompt_tokens": PROMPT, "completion_tokens": 10}
        await c.call("POST", f"/v1/sessions/{holder}/llm_end", end, holder_token)
        await c.call("DELETE", f"/v1/sessions/{holder}", token=holder_token)
        status, grant = await c.call("POST", f"/v1/sessions/{waiter}/acquire", {"wait_s": 2}, waiter_token)
        assert status == 200 and grant["node"] == "node-0"
