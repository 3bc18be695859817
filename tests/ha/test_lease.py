"""Leader election against a real Redis: one leader among contenders, failover after a crash or a clean stop, a
paused leader that cannot write once another took over, and recovery after Redis restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tao_coordinator.core.model import AgentProfile, AgentSession
from tao_coordinator.ha import Fenced, LeaderElection, LocalRedis, RedisStateStore, SessionRecord
from tao_coordinator.ha.lease import parse_leader
from tests.ha.conftest import TTL_S, wait_for

Make = Callable[..., LeaderElection]
FAILOVER_S = TTL_S + TTL_S / 3 + 0.5
"""The key expires at most a ttl after the dead leader's last renew; a standby looks every ttl/3 (+ slack)."""


def leaders(elections: list[LeaderElection]) -> list[LeaderElection]:
    return [election for election in elections if election.is_leader]


async def test_exactly_one_of_three_contenders_leads_and_standbys_know_where(elections: Make) -> None:
    contenders = [elections(name) for name in ("a", "b", "c")]
    for election in contenders:
        election.start()
    await wait_for(lambda: len(leaders(contenders)) == 1, 2, "a leader")
    for _ in range(3 * 3):  # three leases' worth of renews: nobody else gets in
        await asyncio.sleep(TTL_S / 3)
        assert len(leaders(contenders)) == 1
    (leader,) = leaders(contenders)
    assert leader.fence == 1
    for election in contenders:
        assert election.leader_url == leader.advertise_url
        assert election.fence == 1


async def test_a_killed_leader_is_replaced_within_a_lease_and_the_fence_grows(elections: Make) -> None:
    contenders = {name: elections(name) for name in ("a", "b", "c")}
    tasks = {name: election.start() for name, election in contenders.items()}
    await wait_for(lambda: len(leaders(list(contenders.values()))) == 1, 2, "a leader")
    fences = [1]
    for _ in range(2):
        (first,) = leaders(list(contenders.values()))
        tasks[first.replica_id].cancel()  # a crash: no renew, no release
        del contenders[first.replica_id]
        took = await wait_for(lambda: len(leaders(list(contenders.values()))) == 1, FAILOVER_S, "a new leader")
        (second,) = leaders(list(contenders.values()))
        assert second.fence is not None and second.fence > fences[-1]
        fences.append(second.fence)
        assert took <= FAILOVER_S
    assert fences == [1, 2, 3]


async def test_a_clean_stop_releases_the_lease_at_once(elections: Make) -> None:
    a, b = elections("a"), elections("b")
    a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads")
    b.start()
    await asyncio.sleep(TTL_S / 3)
    await a.stop()
    assert not a.is_leader
    took = await wait_for(lambda: b.is_leader, 2, "b takes over")
    assert took < TTL_S / 3 + 0.2, "b should not have waited for the lease to expire"


async def test_a_paused_leader_cannot_write_after_another_took_over(elections: Make) -> None:
    deposed: list[str] = []
    a = elections("a", on_deposed=deposed.append)
    b = elections("b")
    store_a = RedisStateStore(a.redis, "t", a)
    store_b = RedisStateStore(b.redis, "t", b)
    renewing = a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads")
    b.start()
    await store_a.write([record("s1", version=1)])

    renewing.cancel()  # a's process is paused: no renew reaches Redis
    await wait_for(lambda: b.is_leader, TTL_S * 2 + 0.5, "b takes over")
    assert not a.is_leader, "a's deadline passed: it must not count itself leader"
    assert a.value is not None, "a has not noticed yet: its write goes to Redis, and Redis must refuse it"

    with pytest.raises(Fenced):
        await store_a.write([record("s1", version=2)], removed=["s0"], tool_rows=[("bash", None, 1.0, 0.0)])
    assert deposed == ["a write found another replica's lease"]
    stored, tools = await store_b.load()
    assert stored["s1"].session.version == 1 and tools == []

    await store_b.write([record("s1", version=3)])
    assert (await store_b.load())[0]["s1"].session.version == 3


async def test_a_resumed_leader_steps_down_and_stays_standby(elections: Make) -> None:
    deposed: list[str] = []
    a = elections("a", on_deposed=deposed.append)
    b = elections("b")
    renewing = a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads")
    b.start()
    renewing.cancel()
    await wait_for(lambda: b.is_leader, TTL_S * 2 + 0.5, "b takes over")

    a.start()  # the process resumes
    await wait_for(lambda: a.value is None, TTL_S, "a steps down")
    assert deposed == ["the lease's deadline passed without a renew"]
    for _ in range(3):
        await asyncio.sleep(TTL_S / 3)
        assert b.is_leader and not a.is_leader
    assert a.fence == b.fence == 2
    assert not a.leading.is_set() and b.leading.is_set()


async def test_the_election_recovers_after_redis_restarts_empty_and_the_fence_never_goes_back(
    elections: Make, redis_server: LocalRedis, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[str] = []
    anomalies: list[str] = []
    a = elections("a", on_elected=lambda fence: events.append(f"elected {fence}"), on_deposed=events.append)
    b = elections("b", on_anomaly=anomalies.append)
    a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads")
    b.start()
    await wait_for(lambda: b.fence == 1, 2, "b sees a's fence")

    redis_server.kill()
    redis_server.appendonly = False  # it comes back without the lease: a new election
    await wait_for(lambda: not a.is_leader, TTL_S, "a steps down without Redis")
    await wait_for(lambda: b.leader_url is None, TTL_S, "b sees no leader")
    assert not b.is_leader
    redis_server.restart()

    await wait_for(lambda: len(leaders([a, b])) == 1, 3, "a leader once Redis is back")
    assert leaders([a, b])[0].fence == 2, "Redis came back empty, but a fence once handed out is never handed again"
    assert events[0] == "elected 1" and events[1].startswith("Redis did not answer")
    lost = [r for r in caplog.records if "Redis lost its keys" in r.getMessage()]
    whoever = a if a.is_leader else b
    assert len(lost) == 1 and (anomalies == ["lost"]) == (whoever is b)
    assert not any(r.exc_info for r in caplog.records)


async def test_a_leader_whose_lease_vanished_says_so(elections: Make, connect: Callable[[], Redis]) -> None:
    deposed: list[str] = []
    a = elections("a", on_deposed=deposed.append)
    a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads")
    await connect().flushall()  # what a restart without persistence leaves, seen from a live connection
    await wait_for(lambda: bool(deposed), TTL_S, "a steps down")
    assert deposed[0] == "the lease is gone from Redis (it expired, or Redis lost its keys)"
    await wait_for(lambda: a.is_leader, 2, "a leads again")
    assert a.fence == 2


@pytest.mark.parametrize(
    ("key", "junk"),
    [("t:leader", "not a leader value"), ("t:fence", "twelve"), ("t:leader", ["a", "list"]), ("t:fence", ["x"])],
)
async def test_junk_in_the_election_keys_is_removed_once_and_a_leader_is_elected(
    elections: Make, connect: Callable[[], Redis], caplog: pytest.LogCaptureFixture, key: str, junk: str | list[str]
) -> None:
    redis = connect()
    if isinstance(junk, list):
        await redis.rpush(key, *junk)
    else:
        await redis.set(key, junk)
    anomalies: list[str] = []
    a = elections("a", on_anomaly=anomalies.append)
    a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads despite the junk")
    for _ in range(3):
        await asyncio.sleep(TTL_S / 3)
        assert a.is_leader
    assert anomalies == [f"junk in {key}"] and a.fence == 1
    assert [r.levelname for r in caplog.records if key in r.getMessage()] == ["WARNING"]
    assert not any(r.exc_info for r in caplog.records)


async def test_a_leader_resumes_its_lease_after_a_short_redis_outage(elections: Make, redis_server: LocalRedis) -> None:
    """Redis restarted from its append-only file within the lease: the key still holds a's value, so a resumes it
    with the same fence (no other replica can have led in between)."""
    events: list[str] = []
    a = elections("a", ttl_s=3.0, on_elected=lambda fence: events.append(f"elected {fence}"), on_deposed=events.append)
    a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads")
    held = a.value
    redis_server.stop()
    await wait_for(lambda: a.value is None, 2, "a steps down at its first failed renew")
    redis_server.start()
    await wait_for(lambda: a.is_leader, 3, "a leads again")
    assert a.value == held and parse_leader(held or "")[0] == 1
    assert events[0] == events[2] == "elected 1" and events[1].startswith("Redis did not answer")


def record(session_id: str, version: int) -> SessionRecord:
    return SessionRecord(
        AgentSession(session_id, AgentProfile(), 1.0, 2.0, version=version), lease_id=f"lease-{session_id}"
    )


async def test_a_stop_ends_the_election_even_when_the_client_turns_the_cancellation_into_an_error(
    elections: Make,
) -> None:
    """A client library may catch the cancellation of a call in flight and raise its own error instead, so the
    election sees a Redis error, not a cancellation. It must end anyway: a task left running hangs whoever waits for
    every task (a test runner closing its loop did, under load)."""
    a = elections("a")
    task = a.start()
    await wait_for(lambda: a.is_leader, 2, "a leads")
    in_call = asyncio.Event()
    renew = a._renew

    async def swallowing(**_: object) -> int:
        in_call.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RedisConnectionError("connection closed while reading") from None
        return 1

    a._renew = swallowing  # type: ignore[assignment]
    try:
        await asyncio.wait_for(in_call.wait(), 2)
        await a.stop()
        assert task.done() and task.cancelled()
        assert not a.is_leader
    finally:
        a._renew = renew
        task.cancel()
