"""Two coordinators on one Redis beside a fake fleet: the leader goes away under a live SDK session, the standby
takes over with the session as it was, and the agent sees no error. A real `redis-server`, real coordinators."""

import json
import time

import httpx2
import pytest
import redis

import tao_sdk
from tao_coordinator.core.events import LlmEnd, Register, ToolEnd, ToolStart
from tao_coordinator.local_coordinator import free_port
from tests.conftest import listen_to_feed
from tests.ha.conftest import local_redis

MODEL = "Qwen/Qwen3-32B"
PREFIX = "tao"


@pytest.fixture
def redis_server(tmp_path):
    with local_redis(directory=tmp_path / "redis") as server:
        yield server


def roles(replicas):
    return [httpx2.get(r.url + "/v1/leader").json()["role"] for r in replicas]


def leader_among(replicas, timeout=10.0):
    deadline = time.monotonic() + timeout
    while (seen := roles(replicas)).count("leader") != 1:
        assert time.monotonic() < deadline, f"no single leader: {seen}"
        time.sleep(0.05)
    return replicas[seen.index("leader")]


def start_replicas(coordinator_factory, fleet, redis_server, count=2):
    replicas = []
    for _ in range(count):
        port = free_port()
        server = {"redis": redis_server.url, "advertise_url": f"http://127.0.0.1:{port}", "lease_s": 1.0}
        replicas.append(coordinator_factory(fleet.urls, port=port, server=server))
    return replicas


def fed(coordinator):
    """Every write event the coordinator's core accepts from now on, in order."""
    events = []
    kinds = (Register, LlmEnd, ToolStart, ToolEnd)
    listen_to_feed(coordinator.service, lambda e, actions, error: error or not isinstance(e, kinds) or events.append(e))
    return events


def turn(client, s, text):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=3)
    assert reply.usage.completion_tokens == 3
    with s.tool("bash", command="true"):
        pass


def stored_session(redis_server, session_id):
    raw = redis.Redis.from_url(redis_server.url).hget(f"{PREFIX}:sessions", session_id)
    return None if raw is None else json.loads(raw)["session"]


def test_the_standby_takes_over_the_session_as_it_was_when_the_leader_stops(redis_server, coordinator_factory, fleet):
    replicas = start_replicas(coordinator_factory, fleet, redis_server)
    leader = leader_among(replicas)
    standby = next(r for r in replicas if r is not leader)
    on_standby = fed(standby)
    with tao_sdk.session([leader.url, standby.url], leader.token) as s:  # no fallback node: a detached call raises
        client = s.openai(max_retries=0)
        for k in range(2):
            turn(client, s, f"before the failover {k} " * 20)
        s.flush()
        assert stored_session(redis_server, s.id)["completed_calls"] == 2  # written before it was acknowledged
        # a standby answers reads from what the leader stored
        listed = httpx2.get(standby.url + "/v1/sessions", headers={"Authorization": f"Bearer {leader.token}"})
        assert [(x["session_id"], x["node"]) for x in listed.json()["sessions"]] == [(s.id, s.state.last.node)]
        leader.stop()
        for k in range(2):
            turn(client, s, f"after the failover {k} " * 20)
        s.flush()
        assert not s.detached and s.state.replicas.leader == standby.url
        session = standby.service.coordinator.sessions[s.id]
        # the session went on where it was: its calls counted across both leaders, never registered again
        assert session.completed_calls == 4 and session.last_node is not None
        assert not any(isinstance(e, Register) for e in on_standby)
        assert [type(e).__name__ for e in on_standby].count("ToolEnd") == 2
    assert roles([standby]) == ["leader"]
    tools = redis.Redis.from_url(redis_server.url).xlen(f"{PREFIX}:tools")
    assert tools == 4  # every learned tool end, from both leaders


def test_a_leader_paused_past_its_lease_writes_nothing_once_resumed(redis_server, coordinator_factory, fleet):
    replicas = start_replicas(coordinator_factory, fleet, redis_server)
    old = leader_among(replicas)
    new = next(r for r in replicas if r is not old)
    with tao_sdk.session([old.url, new.url], old.token) as s:
        client = s.openai(max_retries=0)
        turn(client, s, "before the pause " * 20)
        s.flush()
        on_old = fed(old)
        # the old leader's loop stops for three leases, as a process stopped with SIGSTOP would
        old.loop.call_soon_threadsafe(time.sleep, 3.0)
        turn(client, s, "during the pause " * 20)  # waits for the old leader, then follows the new one
        s.flush()
        assert s.state.replicas.leader == new.url and not s.detached
        deadline = time.monotonic() + 10
        while old.service.replica.election.value is not None or roles([old]) != ["standby"]:
            assert time.monotonic() < deadline, "the resumed leader did not step down"
            time.sleep(0.05)
        turn(client, s, "after the pause " * 20)
        s.flush()
        assert on_old == []  # whatever reached it late was refused before it touched anything
        assert old.service.coordinator.sessions == {}  # it forgot what it held
        live = new.service.coordinator.sessions[s.id]
        stored = stored_session(redis_server, s.id)
        assert stored["completed_calls"] == live.completed_calls == 3
        assert stored["version"] == live.version  # what Redis holds is the new leader's, nothing later
    assert roles(replicas).count("leader") == 1


def test_redis_restarted_empty_under_a_live_session_is_said_once_counted_and_the_session_goes_on(
    redis_server, coordinator_factory, fleet, caplog
):
    """Redis without persistence restarts under a live SDK session: the loss is logged once and counted, the fence
    goes on, the session registers again on its own and its calls keep working; no traceback."""
    redis_server.appendonly = False
    (coordinator,) = start_replicas(coordinator_factory, fleet, redis_server, count=1)
    leader_among([coordinator])
    with tao_sdk.session(coordinator.url, coordinator.token) as s:
        client = s.openai(max_retries=0)
        turn(client, s, "before Redis restarts " * 20)
        s.flush()
        before = s.id
        fence = httpx2.get(coordinator.url + "/v1/leader").json()["fence"]
        redis_server.restart()
        leader_among([coordinator])
        deadline = time.monotonic() + 15  # registered again at its next acquire's 404, or by its background retry
        k = 0
        while stored_session(redis_server, s.id) is None:
            assert time.monotonic() < deadline, "the session never registered again"
            turn(client, s, f"after Redis restarted {k} " * 20)
            s.flush()
            k += 1
        assert s.id == before
    assert httpx2.get(coordinator.url + "/v1/leader").json()["fence"] > fence
    metrics = httpx2.get(coordinator.url + "/metrics").text
    assert 'tao_redis_anomalies_total{kind="lost"} 1.0' in metrics
    assert "tao_ha_sessions_lost_total 1.0" in metrics
    assert len([r for r in caplog.records if "Redis lost its keys under" in r.getMessage()]) == 1
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("tao"))
