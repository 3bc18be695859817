"""High availability on Redis (docs/coordinator.md#several-coordinators-on-one-fleet-redis): leader election with a
fenced lease, the leader's state in Redis, and a private `redis-server` for tests and benchmarks. Without `--redis`
nothing here connects to Redis."""

from .client import connect
from .codec import SessionRecord, decode_record, encode_record, wall_offset
from .lease import REDIS_ERRORS, LeaderElection
from .local_redis import LocalRedis, RedisNotInstalled
from .store import Fenced, RedisStateStore

__all__ = [
    "REDIS_ERRORS",
    "Fenced",
    "LeaderElection",
    "LocalRedis",
    "RedisNotInstalled",
    "RedisStateStore",
    "SessionRecord",
    "connect",
    "decode_record",
    "encode_record",
    "wall_offset",
]
