"""Leader election over Redis with a fenced lease (the layout: docs/coordinator.md, "Several coordinators").

`P:leader` holds `"<fence>|<replica_id>|<advertise_url>"` and expires after `ttl_s`; `P:fence` is INCR'd once per
acquired leadership, so every leadership has its own value and a write fenced on that exact value (`store.py`) can
never land once another replica has acquired. Every `ttl_s / 3` a standby runs ACQUIRE (take the key if it is free)
and the leader runs RENEW (extend it only if it still holds exactly our value).

Invariants:
- A replica leads (`is_leader`) only until its local deadline: the loop time at which its last successful acquire
  or renew was *sent*, plus `ttl_s − margin_s`. Redis started the key's ttl when it ran the call, after it was sent,
  so the key cannot expire (and nobody else can acquire) before our deadline, unless Redis's clock runs faster than
  ours by more than `margin_s` per `ttl_s`. `is_leader` reads the deadline on every call: a leader whose loop is late
  (process paused, loop blocked, Redis slow) stops counting as leader at its deadline, whatever its task does.
- A refused renew, a Redis error or a passed deadline steps down at once (`on_deposed`, `leading` cleared). A renew
  is awaited until the deadline (not just one tick), so a slow Redis costs no leadership while the lease lasts.
- A replica that stepped down resumes its leadership only if the key still holds exactly its value (it was never
  lost: a transient error), the fence unchanged; otherwise it leads again only by acquiring a new fence.
- `stop()` deletes the key if it holds exactly our value, so a clean shutdown fails over at the next standby tick.
- A cancelled election ends at the end of its round, even when the Redis client caught the cancellation of a call
  in flight and raised its own error instead: a task left running hangs whoever waits for every task.

Times are the event loop's clock; nothing here reads the core's clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from .client import end_if_cancelled

log = logging.getLogger("tao.ha.lease")

REDIS_ERRORS = (RedisError, OSError, TimeoutError)
"""What a call to Redis raises when Redis is unreachable, slow or restarting."""

ACQUIRE = """
local current = redis.pcall('GET', KEYS[1])
local anomaly = ''
if type(current) == 'table' or (current and not string.match(current, '^%d+|[^|]+|')) then
    redis.call('DEL', KEYS[1])
    current = false
    anomaly = 'junk in ' .. KEYS[1]
end
if not current then
    local stored = redis.pcall('GET', KEYS[2])
    local fence = tonumber(stored or '0')
    if type(stored) == 'table' or not fence then
        fence = 0
        anomaly = 'junk in ' .. KEYS[2]
    end
    fence = fence + 1
    local floor = tonumber(ARGV[4]) + 1
    if fence < floor then
        if anomaly == '' then anomaly = 'lost' end
        fence = floor
    end
    redis.call('DEL', KEYS[2])
    redis.call('SET', KEYS[2], fence)
    current = fence .. '|' .. ARGV[1]
    redis.call('SET', KEYS[1], current, 'PX', ARGV[2])
    return {1, current, anomaly}
end
if current == ARGV[3] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, current, anomaly}
end
return {0, current, anomaly}
"""
"""KEYS: leader, fence. ARGV: `replica|url`, ttl in ms, the value we held last (or ""), the highest fence this replica
has seen (0: none). → {1 if ours, the value, what was wrong: "" or `lost` (the fence was below one we had seen: Redis
lost its keys) or `junk in KEY` (a value no replica writes, removed)}.

A new fence is one above both the stored fence and the highest this replica has seen, so fences never go back while
any replica that saw the last one lives, even when Redis comes back empty (a replica that lost its lease while paused
is such a replica: its stale value can never be handed out again)."""

RENEW = """
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
if current then
    return 0
end
return -1
"""
"""KEYS: leader. ARGV: our value, ttl in ms. → 1 renewed, 0 another value is there, -1 no value is there."""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


def parse_leader(value: str) -> tuple[int, str, str]:
    """`(fence, replica_id, advertise_url)` of a `P:leader` value (ACQUIRE replaces any value not of this form)."""
    fence, replica, url = value.split("|", 2)
    return int(fence), replica, url


LOST = "lost"
"""ACQUIRE's anomaly when Redis no longer holds a fence as high as one this replica saw: it lost its keys."""


class LeaderElection:
    """One replica's side of the election. `start()` (or a task running `run()`), then read `is_leader`."""

    def __init__(
        self,
        redis: Redis,
        replica_id: str,
        advertise_url: str,
        *,
        prefix: str = "tao",
        ttl_s: float = 1.0,
        margin_s: float | None = None,
        on_elected: Callable[[int], Any] | None = None,
        on_deposed: Callable[[str], Any] | None = None,
        on_anomaly: Callable[[str], Any] | None = None,
    ) -> None:
        if "|" in replica_id or not replica_id:
            raise ValueError(f"replica id {replica_id!r}: must be non-empty and hold no '|'")
        self.margin_s = ttl_s / 10 if margin_s is None else margin_s
        if ttl_s <= 0 or not 0 <= self.margin_s < ttl_s * 2 / 3:
            raise ValueError(f"lease ttl {ttl_s} s with margin {self.margin_s} s: need ttl > 0, 0 ≤ margin < ⅔ ttl")
        self.redis = redis
        self.replica_id = replica_id
        self.advertise_url = advertise_url
        self.ttl_s = ttl_s
        self.interval_s = ttl_s / 3
        self.leader_key = f"{prefix}:leader"
        self.fence_key = f"{prefix}:fence"
        self.on_elected = on_elected
        """Called with the fence when this replica becomes leader."""
        self.on_deposed = on_deposed
        """Called with the reason when it stops being leader."""
        self.on_anomaly = on_anomaly
        """Called with ACQUIRE's anomaly (`LOST`, or `junk in KEY`) once it was logged."""
        self.highest_fence = 0
        """The highest fence this replica has seen: no fence it takes is lower."""
        self.leading = asyncio.Event()
        """Set while this replica is leader (cleared when it steps down; `is_leader` also checks the deadline)."""
        self.value: str | None = None
        """The exact `P:leader` value of our leadership; None while we do not hold one."""
        self.seen: str | None = None
        """The `P:leader` value last read (ours while we lead); None when there is none or Redis did not answer."""
        self._last_held = ""
        self._deadline = 0.0
        self._task: asyncio.Task[None] | None = None
        self._acquire = redis.register_script(ACQUIRE)
        self._renew = redis.register_script(RENEW)
        self._release = redis.register_script(RELEASE)

    @property
    def is_leader(self) -> bool:
        return self.value is not None and asyncio.get_running_loop().time() < self._deadline

    @property
    def fence(self) -> int | None:
        """The fence of the leader last seen: ours while we lead."""
        return parse_leader(self.seen)[0] if self.seen else None

    @property
    def leader_url(self) -> str | None:
        """Where the leader last seen serves (our own `advertise_url` while we lead)."""
        return parse_leader(self.seen)[2] if self.seen else None

    def start(self) -> asyncio.Task[None]:
        """Run the election in a task of the running loop (the one `stop()` cancels)."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"tao-election-{self.replica_id}")
        return self._task

    async def run(self) -> None:
        """Acquire or renew every `ttl_s / 3`, and wake at the deadline to step down in time. Runs until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self.tick()
            end_if_cancelled()  # `tick` handles Redis errors, and the client may have raised one for our cancellation
            wake = started + self.interval_s
            if self.value is not None:
                wake = min(wake, self._deadline)
            await asyncio.sleep(max(0.0, wake - loop.time()))

    async def tick(self) -> None:
        """One round: step down if the deadline passed, then renew our lease or try to acquire it."""
        now = asyncio.get_running_loop().time()
        if self.value is not None and now >= self._deadline:
            self.step_down("the lease's deadline passed without a renew")
        try:
            if self.value is not None:
                # a slow renew is no error while the lease lasts: wait for it until the deadline, not a tick
                async with asyncio.timeout_at(self._deadline):
                    renewed = await self._renew(keys=[self.leader_key], args=[self.value, self._ttl_ms])
                if renewed == 1:
                    self._deadline = now + self.ttl_s - self.margin_s
                else:
                    self.seen = None
                    gone = "the lease is gone from Redis (it expired, or Redis lost its keys)"
                    self.step_down("another replica holds the lease" if renewed == 0 else gone)
                return
            async with asyncio.timeout(self.interval_s):
                mine, current, anomaly = await self._acquire(
                    keys=[self.leader_key, self.fence_key],
                    args=[f"{self.replica_id}|{self.advertise_url}", self._ttl_ms, self._last_held, self.highest_fence],
                )
        except REDIS_ERRORS as error:
            self.seen = None
            if self.value is not None:
                self.step_down(f"Redis did not answer: {error!r}")
            else:
                log.debug("no answer from Redis: %r", error)
            return
        self.seen = current.decode() if isinstance(current, bytes) else str(current)
        self.highest_fence = max(self.highest_fence, parse_leader(self.seen)[0])
        if anomaly:
            self._report(anomaly.decode() if isinstance(anomaly, bytes) else str(anomaly))
        if mine:
            self._deadline = now + self.ttl_s - self.margin_s
            self._elected(self.seen)

    def step_down(self, reason: str, level: int = logging.WARNING) -> None:
        """Stop leading now (a no-op when not leading); also called by a write that found itself fenced."""
        if self.value is None:
            return
        log.log(level, "replica %s steps down: %s", self.replica_id, reason)
        self._last_held, self.value, self.seen = self.value, None, None
        self.leading.clear()
        if self.on_deposed is not None:
            self.on_deposed(reason)

    async def stop(self) -> None:
        """Cancel the task `start()` made, and release the lease if we hold it, so another replica takes over now."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=self.ttl_s)  # bounded: a stop must not hang on Redis
            self._task = None
        held = self.value or self._last_held
        self.step_down("stopped", logging.INFO)
        self._last_held = ""
        if held:
            try:
                async with asyncio.timeout(self.ttl_s):
                    await self._release(keys=[self.leader_key], args=[held])
            except REDIS_ERRORS as error:
                log.warning("could not release the lease (it expires on its own): %r", error)

    def _report(self, anomaly: str) -> None:
        if anomaly == LOST:
            log.error(
                "Redis lost its keys under %s (restarted without persistence, or flushed): the stored sessions are "
                "gone and their clients register again; fences go on from %d",
                self.leader_key.rsplit(":", 1)[0],
                self.highest_fence,
            )
        else:
            log.warning("removed %s: it held a value no replica writes", anomaly.removeprefix("junk in "))
        if self.on_anomaly is not None:
            self.on_anomaly(anomaly)

    @property
    def _ttl_ms(self) -> int:
        return max(1, round(self.ttl_s * 1000))

    def _elected(self, value: str) -> None:
        resumed = value == self._last_held
        self.value = value
        self.leading.set()
        fence = parse_leader(value)[0]
        log.info("replica %s %s leader with fence %d", self.replica_id, "is again" if resumed else "became", fence)
        if self.on_elected is not None:
            self.on_elected(fence)
