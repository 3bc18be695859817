"""The load of `tao bench coordinator --ha`: many raw HTTP sessions that follow the leader, and what they were told.

Each session loops over acquire → `llm_end` → `tool_start` → `tool_end`, one cycle every `cycle_s` (started at a
random phase, so the requests spread evenly). Every request goes to the replica believed to lead; on a 421 it goes
to the leader the answer names, on a connection error, a timeout or a 503 to the next replica, and it is repeated
until answered (as the SDK does), so a failover costs the load time, never events.

The ledger records only what a replica acknowledged with a 2xx: per session the `llm_end`s (which the stored
record's `completed_calls` must count) and the tool ends, each with a program unique to it (`<session>.<n>`, which
the stored `P:tools` stream must hold). An answer lost to a kill may hide an event that did land; a repeat of it
then draws a 409, counted as `conflicts` and never as acknowledged, so the ledger never claims more than was
acknowledged. A 404 means the replica forgot the session: it registers again, counted in `reregistered`.

`LoadProcess` runs the sessions in a process of their own and hands the ledger back when stopped; `read_stored` and
`acked_lost` compare it with what Redis holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
from redis.asyncio import Redis

from tao_sdk import protocol
from tao_sdk.replicas import Replicas

from ..ha.client import close_redis

RETRY_S = 0.02
GIVE_UP_S = 30.0


@dataclass
class AckLedger:
    acked_calls: Counter[str] = field(default_factory=Counter)
    acked_tools: dict[str, list[str]] = field(default_factory=dict)
    acquired: list[tuple[float, float]] = field(default_factory=list)
    """`time.monotonic()` when each acquire answered 200 was sent (the attempt answered), and when it was answered."""
    reregistered: set[str] = field(default_factory=set)
    conflicts: int = 0
    unanswered: int = 0
    """Requests no replica answered within `GIVE_UP_S` (repeated that long, then dropped)."""

    @property
    def acknowledged(self) -> int:
        """`llm_end`s and tool ends answered 2xx."""
        return sum(self.acked_calls.values()) + sum(map(len, self.acked_tools.values()))

    def first_acquire_after(self, moment: float) -> float | None:
        """When the first acquire sent after `moment` was answered 200 (one sent before may be answered after)."""
        return min((done for sent, done in self.acquired if sent > moment), default=None)

    def acquires_within(self, start: float, end: float) -> int:
        """Acquires sent after `start` and answered 200 before `end`."""
        return sum(start < sent and done < end for sent, done in self.acquired)


class RawLoad:
    """`sessions` raw sessions over the replicas at `urls`; `run()` until `stop` is set."""

    def __init__(self, urls: list[str], sessions: int, cycle_s: float, prefix: str = "ha") -> None:
        self.replicas = Replicas(tuple(urls))
        self.ids = [f"{prefix}-{k}" for k in range(sessions)]
        self.cycle_s = cycle_s
        self.ledger = AckLedger()
        self.requests = 0

    async def run(self, stop: asyncio.Event, registered: asyncio.Event | None = None) -> None:
        timeout = aiohttp.ClientTimeout(total=1.5)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            await asyncio.gather(*(self._register(http, s) for s in self.ids))
            if registered is not None:
                registered.set()
            await asyncio.gather(*(self._loop(http, s, stop) for s in self.ids))

    async def _register(self, http: aiohttp.ClientSession, session: str) -> None:
        await self._send(http, "/v1/sessions", {"session_id": session, "expected_input_tokens": 2000})

    async def _loop(self, http: aiohttp.ClientSession, session: str, stop: asyncio.Event) -> None:
        await asyncio.sleep(random.uniform(0, self.cycle_s))
        n = 0
        while not stop.is_set():
            begun = time.monotonic()
            n += 1
            await self._cycle(http, session, n)
            left = self.cycle_s - (time.monotonic() - begun)
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), left)

    async def _cycle(self, http: aiohttp.ClientSession, session: str, n: int) -> None:
        base, ledger = f"/v1/sessions/{session}", self.ledger
        sent = [0.0]
        status, grant = await self._send(http, base + "/acquire", {}, session, sent)
        if status == 200:
            ledger.acquired.append((sent[0], time.monotonic()))
        node = grant.get("node") if isinstance(grant, dict) else None
        end = {"node": node or "node-0", "prompt_tokens": 2000, "completion_tokens": 50}
        if (await self._send(http, base + "/llm_end", end, session))[0] == 204:
            ledger.acked_calls[session] += 1
        program = f"{session}.{n}"
        start = {"call_id": f"t{n}", "tool": "bash", "program": program}
        await self._send(http, base + "/tool_start", start, session)
        if (await self._send(http, base + "/tool_end", {"call_id": f"t{n}", "duration_s": 0.01}, session))[0] == 204:
            ledger.acked_tools.setdefault(session, []).append(program)

    async def _send(
        self,
        http: aiohttp.ClientSession,
        path: str,
        body: Any,
        session: str | None = None,
        sent: list[float] | None = None,
    ) -> tuple[int, Any]:
        """POST `path` to the leader until a replica that leads answers it; (status, JSON body or None). `sent[0]`
        becomes the time the answered attempt was sent."""
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline:
            url = self.replicas.leader
            self.requests += 1
            if sent is not None:
                sent[0] = time.monotonic()
            try:
                async with http.post(url + path, json=body) as response:
                    status, text = response.status, await response.text()
                    named = response.headers.get(protocol.LEADER_HEADER)
            except (aiohttp.ClientError, TimeoutError):
                self.replicas.moved(url, None)
                await asyncio.sleep(RETRY_S)
                continue
            answer = json.loads(text) if text else None
            if status == 421 or status >= 500:
                if self.replicas.moved(url, named if status == 421 else None) != named:
                    await asyncio.sleep(RETRY_S)  # no leader named: a pause before the next replica
                continue
            if status == 404 and session is not None:
                self.ledger.reregistered.add(session)
                await self._register(http, session)
                continue
            if status == 409:
                self.ledger.conflicts += 1
            return status, answer
        self.ledger.unanswered += 1
        return 0, None


class LoadProcess:
    """A `RawLoad` in a process of its own (spawned), so that its event loop shares no GIL with what measures: the
    SDK agents, the fake fleet, the probe. `time.monotonic()` is the system's, the same in both processes."""

    def __init__(self, urls: list[str], sessions: int, cycle_s: float, prefix: str = "ha") -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(urls, sessions, cycle_s, prefix, child), name="tao-bench-ha-load", daemon=True
        )
        self.requests = 0

    async def start(self) -> None:
        """Start it; return once every session is registered."""
        self.process.start()
        await asyncio.to_thread(self._pipe.recv)

    async def stop(self) -> AckLedger:
        """Stop the sessions (requests in flight are answered first) and return what they were told."""
        self._pipe.send("stop")
        ledger, self.requests = await asyncio.to_thread(self._pipe.recv)
        await asyncio.to_thread(self.process.join, 10)
        return ledger  # type: ignore[no-any-return]


def _serve(urls: list[str], sessions: int, cycle_s: float, prefix: str, pipe: Connection) -> None:
    load = RawLoad(urls, sessions, cycle_s, prefix)

    async def main() -> None:
        stop, registered = asyncio.Event(), asyncio.Event()
        running = asyncio.create_task(load.run(stop, registered))
        await registered.wait()
        pipe.send("registered")
        await asyncio.to_thread(pipe.recv)
        stop.set()
        await running
        pipe.send((load.ledger, load.requests))

    asyncio.run(main())


@dataclass
class StoredState:
    """What Redis holds at the end: per session its record's fields, and every tool end's program."""

    records: dict[str, dict[str, Any]]
    programs: Counter[str]


async def read_stored(url: str, prefix: str = "tao") -> StoredState:
    redis = Redis.from_url(url)
    try:
        raw = await redis.hgetall(f"{prefix}:sessions")
        records = {_text(k): json.loads(v)["session"] for k, v in raw.items()}
        programs: Counter[str] = Counter()
        for _, fields in await redis.xrange(f"{prefix}:tools") or []:
            programs[_text((fields or {})[b"program"])] += 1
    finally:
        await close_redis(redis)
    return StoredState(records, programs)


def acked_lost(ledger: AckLedger, stored: StoredState) -> int:
    """Acknowledged `llm_end`s the stored `completed_calls` fall short of, plus acknowledged tool ends not stored."""
    calls = sum(max(0, n - stored.records.get(s, {}).get("completed_calls", 0)) for s, n in ledger.acked_calls.items())
    tools = sum(stored.programs[p] == 0 for programs in ledger.acked_tools.values() for p in programs)
    return int(calls + tools)


def registered_at(stored: StoredState) -> dict[str, float]:
    return {s: float(r["registered_at"]) for s, r in stored.records.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
