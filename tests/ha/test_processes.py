"""A leader in a process of its own, as in production: SIGKILLed, it is replaced within a lease; SIGSTOPped past its
lease and resumed (a partition from Redis), none of the writes it keeps attempting lands after the new leader took
over."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from redis.asyncio import Redis

from tao_coordinator.ha import LeaderElection, LocalRedis
from tests.ha.conftest import TTL_S, wait_for

Make = Callable[..., LeaderElection]
FAILOVER_S = TTL_S + TTL_S / 3 + 0.5

LEADER = """
import asyncio, sys
from tao_coordinator.core.model import AgentProfile, AgentSession
from tao_coordinator.ha import REDIS_ERRORS, Fenced, LeaderElection, RedisStateStore, SessionRecord, connect

async def main(url: str, ttl_s: float) -> None:
    redis = connect(url)
    election = LeaderElection(redis, "proc", "http://proc.test:8000", prefix="t", ttl_s=ttl_s)
    election.start()
    store = RedisStateStore(redis, "t", election)
    version = 0
    while True:
        await asyncio.sleep(0.01)
        if election.value is None:  # writes even past its deadline: only Redis's fence stops them
            continue
        version += 1
        try:
            await store.write([SessionRecord(AgentSession("from-proc", AgentProfile(), 0.0, 0.0, version=version))])
        except (Fenced, *REDIS_ERRORS):
            pass

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


@pytest.fixture
def leader_process(redis_server: LocalRedis) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", LEADER, redis_server.url, str(TTL_S)])
    yield process
    process.kill()
    process.wait()


async def version_written(redis: Redis) -> int:
    stored = await redis.hget("t:sessions", "from-proc")
    return 0 if stored is None else int(json.loads(stored)["session"]["version"])


async def wait_writing(redis: Redis, process: subprocess.Popen[bytes]) -> None:
    for _ in range(3000):
        assert process.poll() is None, "the leader process exited"
        if await version_written(redis) > 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the leader process never wrote")


async def test_a_sigkilled_leader_process_is_replaced_within_a_lease(
    elections: Make, leader_process: subprocess.Popen[bytes], connect: Callable[[], Redis]
) -> None:
    redis = connect()
    await wait_writing(redis, leader_process)
    standby = elections("b")
    standby.start()
    await asyncio.sleep(TTL_S / 3)
    assert not standby.is_leader and standby.leader_url == "http://proc.test:8000"

    leader_process.send_signal(signal.SIGKILL)
    took = await wait_for(lambda: standby.is_leader, FAILOVER_S, "b takes over")
    assert took <= FAILOVER_S and standby.fence == 2


async def test_a_paused_leader_process_writes_nothing_after_the_takeover(
    elections: Make, leader_process: subprocess.Popen[bytes], connect: Callable[[], Redis]
) -> None:
    redis = connect()
    await wait_writing(redis, leader_process)
    standby = elections("b")
    standby.start()

    leader_process.send_signal(signal.SIGSTOP)
    await wait_for(lambda: standby.is_leader, FAILOVER_S, "b takes over")
    at_takeover = await version_written(redis)
    leader_process.send_signal(signal.SIGCONT)
    await asyncio.sleep(2 * TTL_S)  # the process runs again, its loop still trying to write

    assert await version_written(redis) == at_takeover
    assert standby.is_leader and standby.value == "2|b|http://b.test:8000"
    assert await redis.get("t:leader") == standby.value.encode()
