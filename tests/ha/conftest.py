"""A real `redis-server` per test, on a free loopback port (Debian's package; never a mock).

A test skips when `redis-server` is not installed, and fails instead under `TAO_REQUIRE_HARNESSES` (set by .ci/run,
which installs it), as the harness tests do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tao_coordinator.ha import LeaderElection, LocalRedis, RedisNotInstalled
from tao_coordinator.ha import connect as connect_to
from tao_coordinator.ha.client import close_redis

TTL_S = 1.0
"""The lease of the tests' elections: short, as the default `lease_s` is (a standby takes over within about that
long)."""


def local_redis(**options: Any) -> LocalRedis:
    try:
        return LocalRedis(**options)
    except RedisNotInstalled as error:
        if os.environ.get("TAO_REQUIRE_HARNESSES"):
            pytest.fail(f"{error}, and TAO_REQUIRE_HARNESSES is set", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[LocalRedis]:
    """A server that keeps its data in an append-only file, so `restart()` (SIGTERM, start) brings it back with its
    keys; `kill()` may lose the last second."""
    with local_redis(directory=tmp_path / "redis", appendonly=True, appendfsync="everysec") as server:
        yield server


@pytest.fixture
async def connect(redis_server: LocalRedis) -> AsyncIterator[Callable[[], Redis]]:
    """`connect()`: a new client of `redis_server` (one per replica, as separate processes would have)."""
    clients: list[Redis] = []

    def new() -> Redis:
        clients.append(connect_to(redis_server.url))
        return clients[-1]

    yield new
    for client in clients:
        await close_redis(client)


@pytest.fixture
async def elections(connect: Callable[[], Redis]) -> AsyncIterator[Callable[..., LeaderElection]]:
    """`make(name)`: an election for replica `name` with its own client and the tests' lease; stopped at the end."""
    made: list[LeaderElection] = []

    def make(name: str, **options: Any) -> LeaderElection:
        options.setdefault("ttl_s", TTL_S)
        made.append(LeaderElection(connect(), name, f"http://{name}.test:8000", prefix="t", **options))
        return made[-1]

    yield make
    for election in made:
        await election.stop()


async def wait_for(predicate: Callable[[], bool], timeout: float, what: str = "condition") -> float:
    """Seconds until `predicate()` held, polled every 10 ms; fails the test after `timeout`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        assert loop.time() - start < timeout, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.01)
    return loop.time() - start


def assert_close(a: Any, b: Any, tolerance: float = 1e-3, where: str = "value") -> None:
    """`a == b`, floats within `tolerance` (a round trip through wall time moves them by the clocks' jitter)."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, abs_tol=tolerance) or a == b, f"{where}: {a} != {b}"
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
        for field in dataclasses.fields(a):
            assert_close(getattr(a, field.name), getattr(b, field.name), tolerance, f"{where}.{field.name}")
    elif isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, tolerance, f"{where}[{k}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"
