"""The asyncio Redis client the HA parts expect: bounded socket timeouts, one immediate retry.

A pooled connection is found broken only when used; after Redis restarts, the first command on each old connection
fails, and the immediate retry on a fresh connection hides that. Anything longer is the caller's to handle: the
election retries every tick and steps down by its deadline, a failed write fails its request.

A call in flight when its task is cancelled may end in the client's own error instead of the cancellation: a loop
that handles Redis errors and goes on must call `end_if_cancelled` after handling one, or it outlives its
cancellation (and hangs whoever waits for it).
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


def end_if_cancelled() -> None:
    """Raise `CancelledError` when the running task was asked to stop, whoever caught the cancellation since."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def connect(url: str, *, timeout_s: float = 1.0) -> Redis:
    """A client of the Redis at `url` (`redis://host:port/db`); connects on first use."""
    return Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), retries=1)
    )


async def close_redis(client: Redis, timeout_s: float = 1.0) -> None:
    """Close `client`, waiting at most `timeout_s`: a pool whose connection is stuck on a restarted server can make
    `aclose` wait for ever, and a shutdown must not."""
    closing = asyncio.ensure_future(client.aclose())
    await asyncio.wait({closing}, timeout=timeout_s)
