"""One coordinator among several sharing one fleet through Redis (`--redis`): the leader serves, the others stand by.

The leader is elected with a fenced lease (`ha/lease.py`). What it must not lose lives in Redis (`ha/store.py`):
every live session as the core holds it (phase, place, running tools, cache evidence), with its lease id and its
live token, and every learned tool end. What it rebuilds from the nodes instead: their capacity, load and rates
(the first scrape of each, within `fleet.scrape_interval_s`), their KV-event residency (the replay socket), the
half-life fits and the adaptive targets (from the calls that follow), and the operator's view (timelines and the
decision log start afresh).

Invariants:
- a write request is answered only once everything it changed is in Redis (`durable`): after each fed event the
  sessions the core touched are written, in batches, by one writer task, with one fenced call per batch; a request
  whose changes could not be written is answered 421, so the client sends it again to the leader, and nothing
  acknowledged is lost;
- only a replica that leads and has restored the stored state serves writes (`serving`); every other one answers
  them 421 naming the leader it last saw, and reads from its own view;
- a replica that stops leading — deposed, fenced, or unable to write — forgets every session at once: when it leads
  again it restores them from Redis, never from what it held, so a stored state and a served one never diverge;
- when Redis lost its keys (restarted without persistence, flushed), the election says so once (`lease.py`), fences
  go on from the highest seen, the token key is put back from the one this replica holds, and, when the replica
  that served the lost sessions is the one to lead next, they are counted (`tao_ha_sessions_lost_total`); their
  clients register them again on their next request's 404.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter
from redis.asyncio import Redis

from ..config import ServerConfig
from ..ha.client import close_redis, connect, end_if_cancelled
from ..ha.codec import SessionRecord
from ..ha.lease import LOST, REDIS_ERRORS, LeaderElection
from ..ha.membership import MembershipStore
from ..ha.store import Fenced, RedisStateStore
from ..store import ToolRow

Restore = Callable[[Iterable[SessionRecord], Iterable[ToolRow], Mapping[str, dict[str, object]]], None]
"""Start serving from the stored sessions, tool ends and run-time membership (`ha/membership.py`)."""
Changes = Callable[[], tuple[list[SessionRecord], list[str]]]
"""The sessions the core touched since the last call: their records as they are now, and the ids of those gone."""

log = logging.getLogger("tao.coordinator.replica")


class NotServing(Exception):
    """This replica does not serve writes now: it is not the leader, or it could not store what it changed."""


class Replica:
    """One replica's part in the election and in Redis. What it needs of the service comes in as functions:
    `restore` on taking over, `forget` on stopping to lead (every session dropped with the given reason), `changes`
    for the writer, `live` for the sessions served now."""

    def __init__(
        self,
        server: ServerConfig,
        registry: CollectorRegistry,
        restore: Restore,
        forget: Callable[[Exception], None],
        changes: Changes,
        live: Callable[[], int],
    ) -> None:
        assert server.redis is not None
        self._registry = registry
        self._restore, self._forget, self._changes, self._live = restore, forget, changes, live
        self.redis: Redis = connect(server.redis, timeout_s=server.lease_s)
        self.replica_id = server.replica_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.advertise_url = server.advertise_url or f"http://{server.host}:{server.port}"
        self.election = LeaderElection(
            self.redis,
            self.replica_id,
            self.advertise_url,
            prefix=server.redis_prefix,
            ttl_s=server.lease_s,
            on_elected=self._elected,
            on_deposed=self._deposed,
            on_anomaly=self._anomaly,
        )
        self.store = RedisStateStore(self.redis, server.redis_prefix, self.election)
        self.membership = MembershipStore(self.redis, server.redis_prefix, self.election)
        self.restored = False
        self._tools: list[ToolRow] = []
        self._term = 0
        """Leaderships served so far: a change fed in one is void in the next, which restored from Redis."""
        self._fed = 0
        self._stored = 0
        """Events fed, and of them those whose changes are in Redis (both only grow)."""
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._takeover: asyncio.Task[None] | None = None
        self._token_key = b""
        self._served_last = 0
        """Sessions this replica served when it last stopped leading: what Redis held of them if it loses its keys."""
        self._lost_keys = False
        self.anomalies: Counter | None = None
        self.sessions_lost: Counter | None = None

    @property
    def serving(self) -> bool:
        return self.restored and self.election.is_leader

    @property
    def leader_url(self) -> str | None:
        return self.election.leader_url

    async def start(self) -> bytes:
        """Start electing and writing; the session-token key every replica shares."""
        key = self._token_key = await self.store.token_key()
        registry = self._registry
        self.anomalies = Counter(
            "tao_redis_anomalies",
            "What the election found wrong in Redis: `lost` (its keys were gone), `junk` (a value no replica writes).",
            ["kind"],
            registry=registry,
        )
        self.sessions_lost = Counter(
            "tao_ha_sessions_lost", "Sessions this replica served that Redis lost with its keys.", registry=registry
        )
        self._tasks = [
            asyncio.create_task(self._write_loop(), name="replica writer"),
        ]
        self.election.start()
        return key

    async def stop(self) -> None:
        await self.election.stop()
        for task in [*self._tasks, *([self._takeover] if self._takeover else [])]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await close_redis(self.redis)

    # -- leadership ------------------------------------------------------------------------------------------------

    def _elected(self, fence: int) -> None:
        if self._takeover is not None and not self._takeover.done():
            return
        self._takeover = asyncio.create_task(self._take_over(fence), name="replica takeover")

    def _anomaly(self, kind: str) -> None:
        if self.anomalies is not None:
            self.anomalies.labels("lost" if kind == LOST else "junk").inc()
        if kind == LOST:
            self._lost_keys = True

    async def _take_over(self, fence: int) -> None:
        started = time.perf_counter()
        try:
            if self._lost_keys:
                await self.store.token_key(self._token_key)
            records, tools = await self.store.load()
            nodes = await self.membership.load()
        except REDIS_ERRORS as error:
            self.election.step_down(f"could not read the stored state: {error!r}")
            return
        if not self.election.is_leader:
            return
        if self._lost_keys:
            self._lost_keys = False
            lost, self._served_last = max(0, self._served_last - len(records)), 0
            if lost and self.sessions_lost is not None:
                self.sessions_lost.inc(lost)
                log.error("replica %s: %d sessions it served were lost with Redis's keys", self.replica_id, lost)
        self._restore(records.values(), tools, nodes)
        self._term += 1
        self._stored = self._fed
        self.restored = True
        log.info(
            "replica %s serves as leader (fence %d): %d sessions and %d tool ends restored in %.0f ms",
            self.replica_id,
            fence,
            len(records),
            len(tools),
            (time.perf_counter() - started) * 1000,
        )

    def _deposed(self, reason: str) -> None:
        was_serving, self.restored = self.restored, False
        self._tools.clear()
        self._progress.set()  # every request waiting in `durable` finds it cannot be served
        if was_serving:
            self._served_last = self._live()
            self._forget(NotServing(reason))

    # -- durable writes --------------------------------------------------------------------------------------------

    def fed(self) -> None:
        """The core took an event: what it touched is to be written."""
        if self.restored:
            self._fed += 1
            self._wake.set()

    def learned(self, row: ToolRow) -> None:
        if self.restored:
            self._tools.append(row)

    async def store_node(self, name: str, entry: str) -> None:
        """Store a run-time membership change of node `name` while leading (a standby stores nothing: the leader's
        changes are what a takeover applies); `NotServing` when it cannot be stored."""
        if not self.serving:
            return
        try:
            await self.membership.write(name, entry)
        except (Fenced, *REDIS_ERRORS) as error:
            raise NotServing(f"could not store node {name}: {error!r}") from error

    async def durable(self) -> None:
        """Return once everything fed so far is in Redis; raise `NotServing` if it cannot be (this replica stopped
        leading before, even if it leads again: what it fed then was dropped for the stored state)."""
        term, target = self._term, self._fed
        while True:
            if not self.serving or self._term != term:
                raise NotServing("not the leader")
            if self._stored >= target:
                return
            self._progress.clear()
            await self._progress.wait()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self.restored:
                continue
            target = self._fed
            changed, removed = self._changes()
            tools, self._tools = self._tools, []
            try:
                if changed or removed or tools:
                    await self.store.write(changed, removed, tools)
            except (Fenced, *REDIS_ERRORS) as error:
                end_if_cancelled()  # the error may be the client's answer to our cancellation
                self.election.step_down(f"could not store what it changed: {error!r}")
                continue
            self._stored = max(self._stored, target)
            self._progress.set()
