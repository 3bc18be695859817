"""`tao bench coordinator --ha`: several coordinators on one Redis beside the fake fleet, and what faults cost.

Every run starts its own `redis-server` (`ha.LocalRedis`), its own replicas (`ha_cluster.py`, lease 1 s) and its own
fake fleet, and measures from outside, as clients: `--ha-sessions` raw sessions cycling through acquire, `llm_end`
and a tool (`ha_load.py`), beside `--ha-sdk-sessions` real SDK sessions given every replica and no fallback node.

- failover, once per `--replicas` count: the leader SIGKILLed under load. `failover_s` runs from the kill to the
  answer (200) to the first acquire sent after it; `acked_events_lost` counts acknowledged events the final Redis
  state does not reflect (`ha_load.acked_lost`); `sessions_reregistered` the sessions whose stored `registered_at`
  changed or that got a 404; `sdk_worst_added_ms` the longest SDK model call in progress between the kill and the
  first acquire served, minus the median call before the kill.
- partition: the leader SIGSTOPped for three leases; once the other leads, the load stops and the stored state is
  read; then SIGCONT. Nothing stored may change after the resume but by the new leader (no record's version goes
  back), the fence stays the new leader's, and the old leader must report `standby`.
- latency (`ha_latency.py`): acquire round trips of one probe session under the same raw load, on the leader of two
  replicas and on a single process with SQLite, one after the other.
- Redis restart: Redis (append-only, `appendfsync always`) stopped under load for `down_s`, then started again on
  the same file: the roles the replicas report meanwhile, the time until acquires are served again, what was lost.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from ..ha import LocalRedis
from ..ha.client import close_redis
from ..progress import Progress
from . import ha_latency
from .ha_cluster import Agents, Call, Scale, bed, role, wait_leader
from .ha_load import AckLedger, LoadProcess, StoredState, acked_lost, read_stored, registered_at

REREGISTERED_S = 0.5
"""A stored `registered_at` that moved by more than this registered again. Every session registers before the
`phase_s` that precedes a fault, so a registration after it moves the time by seconds; each write re-expresses the
time in wall-clock time from the writer's clock (`ha/codec.py`), which moves it by the offset's sampling error
(well under a millisecond, a few on loaded cores)."""


@dataclass
class Outcome:
    """What one run under load left: the ledger, the SDK calls, the stored state, and who re-registered."""

    ledger: AckLedger
    calls: list[Call]
    sdk_errors: int
    sdk_reports_lost: int
    stored: StoredState
    reregistered: int
    requests_per_s: float
    """Requests the raw load sent a second (every attempt, repeats included)."""
    registered_at_shift_ms: float
    """The largest move of a stored `registered_at` short of a registration: the clocks' translation error."""
    reregistered_why: list[str]
    """Up to 10 of the sessions that registered again, each with how it showed."""


async def _under_load(
    urls: list[str], scale: Scale, redis_url: str, script: Callable[[], Awaitable[None]], prefix: str = "ha"
) -> Outcome:
    """Register the raw sessions and start the SDK agents, run `script`, stop everything, read what Redis holds."""
    load = LoadProcess(urls, scale.sessions, scale.cycle_s, prefix)
    agents = Agents(urls, scale.sdk_sessions)
    await load.start()
    await asyncio.to_thread(agents.start)
    await asyncio.sleep(0.5)
    before = registered_at(await read_stored(redis_url))
    started = time.monotonic()
    await script()
    ledger = await load.stop()
    rate = load.requests / (time.monotonic() - started)
    await asyncio.to_thread(agents.stop)
    stored = await read_stored(redis_url)
    await asyncio.to_thread(agents.release)
    after = registered_at(stored)
    shifts = {s: abs(after.get(s, -1.0) - at) for s, at in before.items()}
    moved = {s for s, shift in shifts.items() if shift > REREGISTERED_S}
    jitter = max((shift for shift in shifts.values() if shift <= REREGISTERED_S), default=0.0)
    made = {s: sum(c.ok for c in mine) for s, mine in zip(agents.ids, agents.calls, strict=True)}
    reports_lost = sum(max(0, n - stored.records.get(s, {}).get("completed_calls", 0)) for s, n in made.items())
    failed = sum(not c.ok for c in agents.all_calls()) + agents.failed_sessions
    why = {s: "404" for s in ledger.reregistered}
    why |= {s: "record gone" if s not in after else f"registered_at moved {shifts[s]:.3f} s" for s in moved}
    details = [f"{s}: {reason}" for s, reason in sorted(why.items())[:10]]
    return Outcome(ledger, agents.all_calls(), failed, reports_lost, stored, len(why), rate, jitter * 1e3, details)


async def _tick(progress: Progress, seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(min(1.0, left))
        progress.advance()


def _added_ms(calls: list[Call], fault: float, recovered: float) -> tuple[float, float]:
    """(median call before `fault`, worst call in progress between `fault` and `recovered`) in ms."""
    before = [c.ms for c in calls if c.ended < fault]
    during = [c.ms for c in calls if c.started < recovered and c.ended > fault]
    median = statistics.median(before) if before else 0.0
    return median, max(during, default=median)


def failover(count: int, scale: Scale, work: Path) -> dict[str, Any]:
    with bed(count, work) as (server, running):
        leader = wait_leader(running)
        urls = [leader.url] + [r.url for r in running if r is not leader]
        progress = Progress(int(2 * scale.phase_s), f"failover, {count} replicas")
        killed: list[float] = []

        async def script() -> None:
            await _tick(progress, scale.phase_s)
            killed.append(time.monotonic())
            await asyncio.to_thread(leader.kill)
            await _tick(progress, scale.phase_s)

        outcome = asyncio.run(_under_load(urls, scale, server.url, script))
        progress.close()
        after = role(wait_leader([r for r in running if r is not leader]).url) or {}
    served = outcome.ledger.first_acquire_after(killed[0])
    recovered = served if served is not None else time.monotonic()
    median, worst = _added_ms(outcome.calls, killed[0], recovered)
    return {
        "replicas": count,
        "sessions": scale.sessions,
        "failover_s": None if served is None else round(served - killed[0], 3),
        "acked_events": outcome.ledger.acknowledged,
        "acked_events_lost": acked_lost(outcome.ledger, outcome.stored),
        "load_requests_per_s": round(outcome.requests_per_s),
        "sessions_reregistered": outcome.reregistered,
        "registered_at_shift_ms": round(outcome.registered_at_shift_ms, 3),
        "reregistered_why": outcome.reregistered_why,
        "conflicts": outcome.ledger.conflicts,
        "unanswered": outcome.ledger.unanswered,
        "sdk_sessions": scale.sdk_sessions,
        "sdk_calls": len(outcome.calls),
        "sdk_call_errors": outcome.sdk_errors,
        "sdk_reports_lost": outcome.sdk_reports_lost,
        "sdk_median_before_ms": round(median, 1),
        "sdk_worst_added_ms": round(worst - median, 1),
        "new_leader": after.get("replica"),
    }


async def _snapshot(url: str) -> tuple[dict[Any, Any], int, int]:
    redis = Redis.from_url(url)
    try:
        held, tools = await redis.hgetall("tao:sessions"), await redis.xlen("tao:tools")
        return held, int(tools), int(await redis.get("tao:fence") or 0)
    finally:
        await close_redis(redis)


def partition(scale: Scale, work: Path) -> dict[str, Any]:
    with bed(2, work) as (server, running):
        old = wait_leader(running)
        new = next(r for r in running if r is not old)
        progress = Progress(int(scale.phase_s + 6), "partition")
        seen: dict[str, Any] = {}

        async def script() -> None:
            await _tick(progress, scale.phase_s)
            paused = time.monotonic()
            old.pause()
            await asyncio.to_thread(_until, lambda: (role(new.url) or {}).get("role") == "leader", "a new leader")
            seen["takeover_s"] = time.monotonic() - paused
            await _tick(progress, max(0.0, paused + 3.0 - time.monotonic()))  # three leases stopped

        outcome = asyncio.run(_under_load([old.url, new.url], scale, server.url, script))
        held, tools, fence = asyncio.run(_snapshot(server.url))
        old.resume()
        resumed = time.monotonic()
        _until(lambda: (role(old.url) or {}).get("role") == "standby", "the old leader standing by")
        stepped_down_s = time.monotonic() - resumed
        _wait(progress, 2.0)
        after, tools_after, fence_after = asyncio.run(_snapshot(server.url))
        progress.close()
        old_role, new_role = role(old.url) or {}, role(new.url) or {}
        said = _step_downs(work / f"replica-{running.index(old)}.log")
    stale = sum(_version(after.get(k)) < _version(v) for k, v in held.items())
    return {
        "takeover_s": round(seen["takeover_s"], 3),
        "old_leader_stepped_down_s": round(stepped_down_s, 3),
        "old_leader_role": old_role.get("role"),
        "new_leader_role": new_role.get("role"),
        "fence_at_takeover": fence,
        "fence_after_resume": fence_after,
        "records_stored": len(held),
        "records_changed_after_resume": sum(after.get(k) != v for k, v in held.items()),
        "records_gone_back": stale,
        "tool_ends_added_after_resume": tools_after - tools,
        "acked_events_lost": acked_lost(outcome.ledger, outcome.stored),
        "sessions_reregistered": outcome.reregistered,
        "reregistered_why": outcome.reregistered_why,
        "sdk_call_errors": outcome.sdk_errors,
        "old_leader_log": said,
    }


def _until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.02)


def _wait(progress: Progress, seconds: float) -> None:
    for _ in range(int(seconds)):
        time.sleep(1.0)
        progress.advance()


def _version(raw: bytes | None) -> int:
    return -1 if raw is None else int(json.loads(raw)["session"]["version"])


def _step_downs(log: Path) -> list[str]:
    """The old leader's own words on stepping down (its log's `steps down` lines)."""
    lines = []
    for line in log.read_text(errors="replace").splitlines():
        if "steps down" in line:
            try:
                lines.append(str(json.loads(line).get("message", line)))
            except ValueError:
                lines.append(line)
    return lines[-3:]


def redis_restart(scale: Scale, work: Path, down_s: float = 2.0) -> dict[str, Any]:
    server = LocalRedis(directory=work / "redis", appendonly=True, appendfsync="always").start()
    try:
        with bed(2, work, redis=server) as (_, running):
            leader = wait_leader(running)
            urls = [leader.url] + [r.url for r in running if r is not leader]
            progress = Progress(int(2 * scale.phase_s + down_s), "redis restart")
            marks: dict[str, float] = {}
            roles: list[tuple[float, tuple[str | None, ...]]] = []

            async def watch() -> None:
                while True:
                    seen = await asyncio.gather(*(asyncio.to_thread(role, u) for u in urls))
                    roles.append((time.monotonic(), tuple((r or {}).get("role") for r in seen)))
                    await asyncio.sleep(0.05)

            async def script() -> None:
                watching = asyncio.create_task(watch())
                await _tick(progress, scale.phase_s)
                marks["stopped"] = time.monotonic()
                await asyncio.to_thread(server.stop)
                marks["down"] = time.monotonic()
                await _tick(progress, down_s)
                marks["restarting"] = time.monotonic()
                await asyncio.to_thread(server.restart)
                marks["back"] = time.monotonic()
                await _tick(progress, scale.phase_s)
                watching.cancel()

            outcome = asyncio.run(_under_load(urls, scale, server.url, script))
            progress.close()
    finally:
        server.close()
    stopped, back = marks["stopped"], marks["back"]
    no_leader = [t for t, seen in roles if stopped < t and "leader" not in seen]
    leader_again = [t for t, seen in roles if t > back and "leader" in seen]
    served = outcome.ledger.first_acquire_after(back)
    return {
        "down_s": down_s,
        "all_standby_after_s": round(no_leader[0] - stopped, 3) if no_leader else None,
        "acquires_served_while_down": outcome.ledger.acquires_within(marks["down"], marks["restarting"]),
        "leader_again_after_restart_s": round(leader_again[0] - back, 3) if leader_again else None,
        "acquires_served_again_after_restart_s": None if served is None else round(served - back, 3),
        "acked_events": outcome.ledger.acknowledged,
        "acked_events_lost": acked_lost(outcome.ledger, outcome.stored),
        "load_requests_per_s": round(outcome.requests_per_s),
        "sessions_reregistered": outcome.reregistered,
        "reregistered_why": outcome.reregistered_why,
        "sdk_call_errors": outcome.sdk_errors,
        "sdk_reports_lost": outcome.sdk_reports_lost,
    }


def measure(counts: list[int], scale: Scale) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tao-bench-ha-") as scratch:
        root = Path(scratch)

        def work(name: str) -> Path:
            (root / name).mkdir()
            return root / name

        rows = [failover(count, scale, work(f"failover-{count}")) for count in counts]
        return {
            "failover": rows,
            "partition": partition(scale, work("partition")),
            "latency": ha_latency.latency(scale, work("latency")),
            "redis_restart": redis_restart(scale, work("restart")),
        }
