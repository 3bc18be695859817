"""A side call in flight when the leader goes away: it is part of the session's record, so the replica that takes
over tells the side call's end from the end of the session's own call running meanwhile. Two real coordinators
on a real Redis, beside two fake vLLM nodes (one serving a large model, one a small one); the test speaks the
coordinator's HTTP protocol itself, to hold both calls open across the takeover."""

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis

from tao_coordinator.core.model import Phase
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.ha import LocalRedis
from tao_coordinator.local_coordinator import free_port
from tests.ha.conftest import local_redis

LARGE, SMALL = "org/large-32b", "org/small-4b"
PREFIX = "tao"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[LocalRedis]:
    with local_redis(directory=tmp_path / "redis") as server:
        yield server


@pytest.fixture(scope="module")
def fleet() -> Iterator[ThreadedFleet]:
    configs = [FakeNodeConfig(time_scale=50, served_model_name=model) for model in (LARGE, SMALL)]
    with ThreadedFleet(configs, kv_events=False) as running:
        yield running


def wait(predicate: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


def role(replica: Any) -> str:
    return str(httpx2.get(replica.url + "/v1/leader").json()["role"])


def post(replica: Any, path: str, body: dict[str, Any], token: str) -> httpx2.Response:
    return httpx2.post(replica.url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_a_side_call_ending_at_the_new_leader_leaves_the_session_in_its_own_call(
    redis_server: LocalRedis, coordinator_factory: Any, fleet: ThreadedFleet
) -> None:
    replicas = []
    for _ in range(2):
        port = free_port()
        server = {"redis": redis_server.url, "advertise_url": f"http://127.0.0.1:{port}", "lease_s": 1.0}
        replicas.append(coordinator_factory(fleet.urls, port=port, server=server))
    wait(lambda: [role(r) for r in replicas].count("leader") == 1, "one leader")
    leader = next(r for r in replicas if role(r) == "leader")
    standby = next(r for r in replicas if r is not leader)
    wait(lambda: all(n.models is not None for n in leader.service.coordinator.nodes.values()), "models read")

    registered = post(leader, "/v1/sessions", {"context": {"harness": "claude-code", "model": LARGE}}, leader.token)
    assert registered.status_code == 201, registered.text
    session_id, token = registered.json()["session_id"], registered.json()["session_token"]
    own = post(leader, f"/v1/sessions/{session_id}/acquire", {"model": LARGE}, token).json()
    side = post(leader, f"/v1/sessions/{session_id}/acquire", {"model": SMALL}, token).json()
    assert (own["node"], side["node"], side["lease_id"]) == ("node-0", "node-1", None)
    raw = redis.Redis.from_url(redis_server.url).hget(f"{PREFIX}:sessions", session_id)
    assert raw is not None
    stored = json.loads(raw)["session"]
    assert (stored["phase"], stored["node"], stored["side_calls"]) == (Phase.IN_LLM.value, "node-0", ["node-1"])

    leader.stop()
    wait(lambda: role(standby) == "leader", "the standby takes over")
    core = standby.service.coordinator
    assert core.session(session_id).side_calls == ("node-1",)

    ended = post(standby, f"/v1/sessions/{session_id}/llm_end", {"node": "node-1", "completion_tokens": 2}, token)
    assert ended.status_code == 204, ended.text
    session = core.session(session_id)
    assert (session.phase, session.node, session.llm_calls, session.side_calls) == (Phase.IN_LLM, "node-0", 1, ())
    assert session.completed_calls == 0  # the side call's end was not taken for the session's own call's

    body = {"lease_id": own["lease_id"], "node": "node-0", "prompt_tokens": 100, "completion_tokens": 4}
    assert post(standby, f"/v1/sessions/{session_id}/llm_end", body, token).status_code == 204
    session = core.session(session_id)
    assert (session.phase, session.completed_calls) == (Phase.ADMITTED, 1)
