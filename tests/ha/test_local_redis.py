"""The private redis-server: starts on a free loopback port, keeps data across a restart only when asked, stops."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tao_coordinator.ha import LocalRedis, RedisNotInstalled
from tests.ha.conftest import local_redis


def test_a_missing_redis_server_is_named() -> None:
    with pytest.raises(RedisNotInstalled, match="apt-get install redis-server"):
        LocalRedis(executable="redis-server-that-is-not-installed")


def test_it_answers_on_loopback_and_stops() -> None:
    server = local_redis()
    with server:
        assert server.process is not None
        process = server.process
        client = redis.Redis.from_url(server.url)
        assert client.ping() and client.config_get("appendonly") == {"appendonly": "no"}
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
        client.close()
    assert process.poll() is not None and server.process is None


def test_its_append_only_file_survives_a_restart(tmp_path: Path) -> None:
    with local_redis(directory=tmp_path, appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "kept")
        server.restart()
        assert client.get("k") == b"kept"
        client.close()
    with local_redis(directory=tmp_path / "other") as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "lost")
        server.restart()
        assert client.get("k") is None
        client.close()
