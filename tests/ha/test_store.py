"""The leader's state in a real Redis: round trip, all-or-nothing fenced writes, the bounded tool stream, the
shared token key, and recovery after Redis restarts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from tao_coordinator.core.model import AgentProfile, AgentSession, CacheEvidence, EvidenceSource, Phase
from tao_coordinator.ha import Fenced, LeaderElection, LocalRedis, RedisStateStore, SessionRecord
from tao_coordinator.store import ToolRow
from tests.ha.conftest import assert_close, wait_for

Make = Callable[..., LeaderElection]


def record(session_id: str, now: float, version: int = 1) -> SessionRecord:
    session = AgentSession(
        session_id,
        AgentProfile(harness="mini", labels={"k": "v"}),
        registered_at=now,
        lease_expires_at=now + 60,
        phase=Phase.ADMITTED,
        node="node-1",
        version=version,
        evidence=(CacheEvidence("node-1", 2048, now - 1, EvidenceSource.KV_EVENTS),),
        placed_at=now,
    )
    return SessionRecord(session, lease_id=f"lease-{session_id}")


async def leader_store(elections: Make, name: str = "a", **options: int) -> RedisStateStore:
    election = elections(name)
    election.start()
    await wait_for(lambda: election.is_leader, 3, f"{name} leads")
    return RedisStateStore(election.redis, "t", election, **options)


async def test_what_the_leader_writes_a_new_leader_loads(elections: Make) -> None:
    store = await leader_store(elections)
    now = 1000.0
    rows: list[ToolRow] = [("bash", "pytest", 3.5, 1.7e9), ("edit", None, 0.25, 1.7e9 + 1)]
    await store.write([record(f"s{k}", now) for k in range(5)], tool_rows=rows[:1])
    await store.write([record("s1", now, version=2)], removed=["s3", "never-stored"], tool_rows=rows[1:])

    reader = RedisStateStore(store.redis, "t", elections("reader"))
    records, tools = await reader.load()

    assert sorted(records) == ["s0", "s1", "s2", "s4"]
    assert_close(records["s1"], record("s1", now, version=2))
    assert_close(records["s4"], record("s4", now))
    assert tools == rows
    assert (await reader.sessions()).keys() == records.keys()


async def test_a_write_is_all_or_nothing_and_only_from_the_leader(elections: Make) -> None:
    store = await leader_store(elections)
    await store.write([record("s1", 0.0)])
    standby = RedisStateStore(store.redis, "t", elections("b"))
    with pytest.raises(Fenced, match="not the leader"):
        await standby.write([record("s2", 0.0)])

    await store.redis.set("t:leader", "99|b|http://b")  # another leadership, as after a takeover
    with pytest.raises(Fenced):
        await store.write([record("s2", 0.0)], removed=["s1"], tool_rows=[("bash", None, 1.0, 0.0)])
    assert not store.election.is_leader
    assert await store.redis.hkeys("t:sessions") == [b"s1"]
    assert await store.redis.xlen("t:tools") == 0


async def test_the_tool_stream_is_bounded_and_loads_in_order(elections: Make) -> None:
    store = await leader_store(elections, tools_max=50)
    for batch in range(30):
        await store.write([], tool_rows=[("bash", f"p{batch}", float(k), float(batch * 100 + k)) for k in range(100)])
    length = await store.redis.xlen("t:tools")
    assert 50 <= length <= 50 + 100, "MAXLEN ~ trims whole nodes of (by default) 100 entries"
    _, tools = await store.load()
    assert len(tools) == length
    assert [row[3] for row in tools] == sorted(row[3] for row in tools)
    assert tools[-1] == ("bash", "p29", 99.0, 2999.0)


async def test_every_replica_gets_the_same_token_key(elections: Make, connect: Callable[[], Redis]) -> None:
    keys = [await RedisStateStore(connect(), "t", elections(name)).token_key() for name in ("a", "b", "c")]
    assert len(keys[0]) == 32 and keys[0] == keys[1] == keys[2]
    assert await RedisStateStore(connect(), "other", elections("d")).token_key() != keys[0]


async def test_the_store_and_the_election_recover_after_redis_restarts(
    elections: Make, redis_server: LocalRedis
) -> None:
    store = await leader_store(elections)
    await store.write([record("s1", 5.0)], tool_rows=[("bash", None, 1.0, 2.0)])
    token_key = await store.token_key()

    redis_server.stop()
    await wait_for(lambda: not store.election.is_leader, 2, "the leader steps down")
    with pytest.raises(Fenced):
        await store.write([record("s2", 5.0)])
    redis_server.start()

    await wait_for(lambda: store.election.is_leader, 3, "the leader is back")
    await store.write([record("s3", 5.0)])
    records, tools = await store.load()
    assert sorted(records) == ["s1", "s3"] and tools == [("bash", None, 1.0, 2.0)]
    assert await store.token_key() == token_key


async def test_junk_under_the_prefix_is_left_out_and_logged_once_however_often_it_is_read(
    elections: Make, connect: Callable[[], Redis], caplog: pytest.LogCaptureFixture
) -> None:
    store = await leader_store(elections)
    await store.write([record("good", 5.0)], tool_rows=[("bash", None, 1.0, 2.0)])
    redis = connect()
    await redis.hset("t:sessions", "junk", b"{not json")
    await redis.hset("t:sessions", "old-format", b'{"format": 0}')
    await redis.xadd("t:tools", {"tool": "bash"})  # no duration
    await redis.xadd("t:tools", {"tool": "bash", "program": "", "duration_s": "soon", "recorded_at": "1"})
    for _ in range(5):  # a standby reads on every GET /v1/sessions
        records, tools = await store.load()
        assert sorted(records) == ["good"] and tools == [("bash", None, 1.0, 2.0)]
    warned = [r.getMessage() for r in caplog.records if r.name == "tao.ha.store"]
    assert len(warned) == 4 and all("left out" in message for message in warned)
    assert not any(r.exc_info for r in caplog.records)


async def test_a_key_of_the_wrong_type_is_moved_aside_and_the_store_works_again(
    elections: Make, connect: Callable[[], Redis], caplog: pytest.LogCaptureFixture
) -> None:
    store = await leader_store(elections)
    redis = connect()
    await redis.set("t:sessions", "an operator's string")
    await redis.set("t:tools", "another")
    assert await store.load() == ({}, [])
    aside = sorted(key.decode() for key in await redis.keys("t:*.junk-*"))
    assert [key.split(".junk-")[0] for key in aside] == ["t:sessions", "t:tools"]
    assert await redis.get(aside[0]) == b"an operator's string", "moved aside, not deleted"
    await store.write([record("s1", 5.0)], tool_rows=[("bash", None, 1.0, 2.0)])
    records, tools = await store.load()
    assert sorted(records) == ["s1"] and tools == [("bash", None, 1.0, 2.0)]
    assert len([r for r in caplog.records if "moved" in r.getMessage()]) == 2
