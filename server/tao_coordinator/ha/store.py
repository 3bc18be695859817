"""The leader's state in Redis: live sessions (`P:sessions`), learned tool ends (`P:tools`), the token key.

Every write is ONE Lua call that first checks `P:leader` holds exactly the value of our leadership, and does nothing
(raising `Fenced`, after stepping the election down) otherwise: a leader that lost its lease while paused cannot
write after another replica acquired, whatever its own clock says. A script runs atomically, so a reader never sees
half a write: its changed records, removed ids and tool rows land together, or (fenced) none do. Nothing is written
without a leadership (`election.value` None → `Fenced` without a call).

Whatever else is found under the prefix is junk to us and never stops a replica: a record that does not decode is
left out (in Redis, until overwritten or removed), a stream entry without its fields is skipped, each logged once per
process, without a traceback; a key of the wrong type (say a string where the hash belongs), which no write could
use, is renamed aside to `KEY.junk-<unix ms>` and logged.

`P:tools` is a stream bounded with `XADD MAXLEN ~ tools_max` (Redis trims whole macro-nodes, so it may hold a little
more); `load` returns its rows oldest first, as `HistoryStore.load`'s caller expects to replay them. Records hold
wall-clock times (`codec.py`): `write` and `load` convert with the loop's `wall_offset()` at the time of the call.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Iterable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ..store import ToolRow
from .codec import SessionRecord, decode_record, encode_record, wall_offset
from .lease import LeaderElection

log = logging.getLogger("tao.ha.store")

Answer = TypeVar("Answer")

"""`(tool, program, duration_s, recorded_at)` as `store.HistoryStore.record` takes them; `recorded_at` unix time."""

WRITE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
local i = 5
for _ = 1, tonumber(ARGV[3]) do
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
    i = i + 2
end
for _ = 1, tonumber(ARGV[4]) do
    redis.call('HDEL', KEYS[2], ARGV[i])
    i = i + 1
end
while i <= #ARGV do
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*',
        'tool', ARGV[i], 'program', ARGV[i + 1], 'duration_s', ARGV[i + 2], 'recorded_at', ARGV[i + 3])
    i = i + 4
end
return 1
"""
"""KEYS: leader, sessions, tools. ARGV: our leader value, tools_max, #changed, #removed, then (id, record) pairs,
removed ids, and (tool, program, duration_s, recorded_at) quadruples. → 1 written, 0 fenced."""

LOAD_PAGE = 10_000
"""Stream entries read per XRANGE call by `load`."""


class Fenced(Exception):
    """A write refused because `P:leader` does not hold our leadership's value: another replica leads, or none."""


class RedisStateStore:
    """The leader's writes and a new leader's read, under `prefix`, fenced by `election`."""

    def __init__(self, redis: Redis, prefix: str, election: LeaderElection, *, tools_max: int = 100_000) -> None:
        if tools_max < 1:
            raise ValueError("RedisStateStore: tools_max must be at least 1")
        self.redis = redis
        self.election = election
        self.tools_max = tools_max
        self.leader_key = f"{prefix}:leader"
        self.sessions_key = f"{prefix}:sessions"
        self.tools_key = f"{prefix}:tools"
        self.token_key_key = f"{prefix}:token-key"
        self._write = redis.register_script(WRITE)
        self._reported: set[str] = set()
        """Junk already logged (record ids, stream entry ids): logged once, however often it is read."""

    async def write(
        self, changed: Iterable[SessionRecord], removed: Iterable[str] = (), tool_rows: Iterable[ToolRow] = ()
    ) -> None:
        """Store `changed` records (by session id), delete `removed` ids, append `tool_rows`: all or nothing.

        Raises `Fenced` (and steps the election down) when we do not hold the lease; Redis errors propagate."""
        value = self.election.value
        if value is None:
            raise Fenced("not the leader")
        offset = wall_offset()
        records = [(record.session.id, encode_record(record, offset)) for record in changed]
        gone = list(removed)
        args: list[str | bytes | float] = [value, self.tools_max, len(records), len(gone)]
        for session_id, data in records:
            args += [session_id, data]
        args += gone
        for tool, program, duration_s, recorded_at in tool_rows:
            args += [tool, program or "", repr(float(duration_s)), repr(float(recorded_at))]
        keys = [self.leader_key, self.sessions_key, self.tools_key]
        if not await self._write(keys=keys, args=args):
            self.election.step_down("a write found another replica's lease")
            raise Fenced(f"{self.leader_key} no longer holds {value!r}")

    async def load(self) -> tuple[dict[str, SessionRecord], list[ToolRow]]:
        """Every stored session record by id (converted to this loop's clock), and the tool rows oldest first."""
        return await self.sessions(), await self._tool_rows()

    async def sessions(self) -> dict[str, SessionRecord]:
        """Every stored session record by id, converted to this loop's clock (a standby's read of the leader's state).

        A record that does not decode is left out, and logged the first time it is seen."""
        offset = wall_offset()
        records: dict[str, SessionRecord] = {}
        stored = await self._read(self.sessions_key, "hash", self.redis.hgetall(self.sessions_key), {})
        for key, data in stored.items():
            session_id = _text(key)
            try:
                records[session_id] = decode_record(data, offset)
            except ValueError as error:
                self._junk(f"session record {session_id!r}", str(error).splitlines()[0])
        return records

    async def _tool_rows(self) -> list[ToolRow]:
        rows: list[ToolRow] = []
        start = "-"
        while True:
            read = self.redis.xrange(self.tools_key, min=start, count=LOAD_PAGE)
            page = await self._read(self.tools_key, "stream", read, []) or []
            last = start
            for entry_id, fields in page:
                last = _text(entry_id or b"")
                entry = {_text(k): _text(v) for k, v in (fields or {}).items()}
                try:
                    row = (entry["tool"], entry["program"] or None, float(entry["duration_s"]))
                    rows.append((*row, float(entry["recorded_at"])))
                except (KeyError, ValueError) as error:
                    self._junk(f"tool entry {last}", f"{type(error).__name__}: {error}")
            if len(page) < LOAD_PAGE:
                return rows
            start = "(" + last

    async def _read(self, key: str, kind: str, read: Awaitable[Answer], empty: Answer) -> Answer:
        """What `read` (of `key`) answers, or `empty` after moving `key` aside when it is not a `kind` (WRONGTYPE)."""
        try:
            return await read
        except ResponseError as error:
            if not str(error).startswith("WRONGTYPE"):
                raise
        aside = f"{key}.junk-{int(time.time() * 1000)}"
        await self.redis.rename(key, aside)
        log.warning(
            "moved %s aside to %s: it is not a %s, so nothing could be read from or written to it", key, aside, kind
        )
        return empty

    def _junk(self, what: str, why: str) -> None:
        if what not in self._reported:
            self._reported.add(what)
            log.warning("left out %s under %s: %s", what, self.sessions_key.rsplit(":", 1)[0], why)

    async def token_key(self, held: bytes | None = None) -> bytes:
        """The 32-byte key of session tokens shared by every replica: made by the first one to ask (SET NX), or put
        back from the one a replica `held` when Redis lost it, so that replicas started later still agree."""
        await self.redis.set(self.token_key_key, (held or secrets.token_bytes(32)).hex(), nx=True)
        stored = await self.redis.get(self.token_key_key)
        if stored is None:
            raise RuntimeError(f"{self.token_key_key} vanished right after it was set")
        return bytes.fromhex(_text(stored))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
