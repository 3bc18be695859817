"""What the coordinator learns, kept across restarts: tool calls in SQLite (WAL) under the state directory.

Schema: `tool_calls(id, tool, program, duration_s, recorded_at)`, one row per tool end, `tool` normalised and
`program` lower-cased as the history keys them (`ToolKey.of`), `duration_s` what the history learned. A
`tool_durations(tool, duration_s, recorded_at)` table from an older version is moved into it once, on open (its rows
get program NULL).

Bounded like the history it feeds: the store keeps the newest `window` rows of each (tool, program) key, for the
`max_keys` keys used most recently (a key's recency is its newest id). `load` returns exactly those rows, oldest
first, so adding them to a `ToolHistory` rebuilds its levels; the writer thread deletes everything else, when asked
after start-up (`prune`) and every `prune_every` rows written. So the table holds at most
`max_keys × window + prune_every + batch` rows; the file does not shrink, SQLite reuses the freed pages, and the
write-ahead log is truncated after each prune. A prune is SQL only (no rows or keys come into Python): one scan of
the key index finds the evicted keys, whose rows go, and the keys written since the last prune (ids only grow:
AUTOINCREMENT) are trimmed to `window`, one index seek each; the first prune of a process trims every key.

The event loop never writes to the database: `record` only enqueues (dropping the row, counted in `dropped`, when
`max_queued` rows are already waiting), and one writer thread commits in batches of up to `batch` rows, so a burst
of tool ends costs the loop nothing and a crash loses at most what is queued. `load` runs once at start-up, before
the service accepts requests. `close` flushes everything queued, then stops the thread.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from .core.forecast import ToolKey, normalise_tool

log = logging.getLogger("tao.store")

STORE_FILE = "tao.sqlite3"
"""The SQLite file of learned state, in the state directory."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tool TEXT NOT NULL,
    program TEXT,
    duration_s REAL NOT NULL,
    recorded_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tool_calls_by_key ON tool_calls (tool, program, id);
"""

MIGRATE_TOOL_DURATIONS = """
INSERT INTO tool_calls (tool, program, duration_s, recorded_at)
    SELECT normalise_tool(tool), NULL, duration_s, recorded_at FROM tool_durations ORDER BY id;
DROP TABLE tool_durations;
"""

KEYS_BY_RECENCY = "SELECT tool, program FROM tool_calls GROUP BY tool, program ORDER BY MAX(id) DESC"
"""Every (tool, program) key, used last first: one scan of the key index."""

FIRST_KEPT_ID = "SELECT id FROM tool_calls WHERE tool = ? AND program IS ? ORDER BY id DESC LIMIT 1 OFFSET ?"
"""With offset `window - 1`: the oldest of a key's newest `window` ids, none while it has fewer. An index seek."""

EVICT = f"""
DELETE FROM tool_calls WHERE id IN (
    SELECT c.id FROM ({KEYS_BY_RECENCY} LIMIT -1 OFFSET :max_keys) AS k
    JOIN tool_calls AS c ON c.tool = k.tool AND c.program IS k.program)
"""
"""Delete the rows of every key beyond the `max_keys` used last."""

CUTOFFS = """
INSERT INTO temp.cutoffs SELECT * FROM (
    SELECT tool, program, (
        SELECT x.id FROM tool_calls AS x WHERE x.tool = d.tool AND x.program IS d.program
        ORDER BY x.id DESC LIMIT 1 OFFSET :offset) AS first_id
    FROM (SELECT DISTINCT tool, program FROM tool_calls NOT INDEXED WHERE id > :since) AS d)
WHERE first_id IS NOT NULL
"""
"""The first kept id of every key written after id `since` that has more than `window` rows (offset `window - 1`)."""

TRIM = """
DELETE FROM tool_calls WHERE id IN (
    SELECT c.id FROM temp.cutoffs AS t
    JOIN tool_calls AS c ON c.tool = t.tool AND c.program IS t.program AND c.id < t.first_id)
"""

KEPT_ROWS = """
SELECT c.tool, c.program, c.duration_s FROM tool_calls AS c
    JOIN temp.kept AS k ON c.tool = k.tool AND c.program IS k.program
WHERE c.id >= k.first_id ORDER BY c.id
"""

Row = tuple[str, str | None, float, float]
_Prune = Literal["prune"]
_PRUNE: _Prune = "prune"


class HistoryStore:
    def __init__(
        self,
        state_dir: Path,
        window: int = 128,
        max_keys: int = 4096,
        *,
        batch: int = 256,
        prune_every: int = 10_000,
        max_queued: int = 100_000,
    ) -> None:
        if min(window, max_keys, batch, prune_every, max_queued) < 1:
            raise ValueError("HistoryStore: window, max_keys, batch, prune_every and max_queued must be at least 1")
        state_dir = state_dir.expanduser()
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / STORE_FILE
        self.window = window
        self.max_keys = max_keys
        self.prune_every = prune_every
        self._batch = batch
        self._queue: queue.Queue[Row | _Prune | None] = queue.Queue(max_queued)
        self.dropped = 0
        """Rows not recorded because `max_queued` were waiting for the writer."""
        self.prunes = 0
        """Prunes finished by the writer thread (read it after `close` for an exact figure)."""
        with self._connect() as db:
            db.executescript(SCHEMA)
            if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tool_durations'").fetchone():
                db.create_function("normalise_tool", 1, normalise_tool, deterministic=True)
                db.executescript(f"BEGIN; {MIGRATE_TOOL_DURATIONS} COMMIT;")
                log.info("moved tool_durations into tool_calls in %s", self.path)
        self._thread = threading.Thread(target=self._write_loop, name="tao-store", daemon=True)
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def load(self) -> Iterator[tuple[ToolKey, float]]:
        """The kept rows, oldest first, streamed: add each to a `ToolHistory` to rebuild its levels."""
        db = self._connect()
        try:
            kept = db.execute(f"{KEYS_BY_RECENCY} LIMIT ?", (self.max_keys,)).fetchall()
            db.execute("CREATE TEMP TABLE kept (tool TEXT NOT NULL, program TEXT, first_id INTEGER NOT NULL)")
            db.execute("CREATE INDEX temp.kept_by_key ON kept (tool, program)")
            for tool, program in kept:
                first = db.execute(FIRST_KEPT_ID, (tool, program, self.window - 1)).fetchone()
                db.execute("INSERT INTO temp.kept VALUES (?, ?, ?)", (tool, program, first[0] if first else 0))
            keys = {(tool, program): ToolKey(tool, program) for tool, program in kept}
            for tool, program, duration in db.execute(KEPT_ROWS):
                yield keys[tool, program], float(duration)
        finally:
            db.close()

    def record(self, tool: str, program: str | None, duration_s: float, at: float) -> None:
        try:
            self._queue.put_nowait((tool, program, duration_s, at))
        except queue.Full:
            self.dropped += 1
            if self.dropped % 10_000 == 1:
                log.warning("tool-duration writer is behind: %d durations dropped so far", self.dropped)

    def prune(self) -> None:
        """Ask the writer thread to delete every row `load` would not return."""
        self._queue.put(_PRUNE)

    def rows(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0])

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _write_loop(self) -> None:
        db = self._connect()
        db.execute("CREATE TEMP TABLE cutoffs (tool TEXT NOT NULL, program TEXT, first_id INTEGER NOT NULL)")
        written = 0
        pruned_to = 0  # every row after this id is unpruned; 0 at first, so the first prune trims every key
        try:
            stopping = False
            while not stopping:
                rows: list[Row] = []
                prune = False
                item = self._queue.get()
                while True:
                    if item is None:
                        stopping = True
                        break
                    if item == _PRUNE:
                        prune = True
                    else:
                        rows.append(item)
                    if len(rows) >= self._batch:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if rows:
                    self._commit(db, rows)
                    written += len(rows)
                if prune or written >= self.prune_every:
                    written = 0
                    pruned_to = self._prune(db, pruned_to)
        finally:
            db.close()

    def _commit(self, db: sqlite3.Connection, rows: list[Row]) -> None:
        keyed = []
        for tool, program, duration_s, at in rows:
            key = ToolKey.of(tool, program)
            keyed.append((key.tool, key.program, duration_s, at))
        try:
            with db:
                db.executemany(
                    "INSERT INTO tool_calls (tool, program, duration_s, recorded_at) VALUES (?, ?, ?, ?)", keyed
                )
        except sqlite3.Error:
            log.exception("could not persist %d tool durations", len(rows))

    def _prune(self, db: sqlite3.Connection, pruned_to: int) -> int:
        """Delete the rows of evicted keys and trim the keys written after id `pruned_to`; the id pruned to now."""
        try:
            with db:
                newest = db.execute("SELECT COALESCE(MAX(id), 0) FROM tool_calls").fetchone()[0]
                db.execute(EVICT, {"max_keys": self.max_keys})
                db.execute("DELETE FROM temp.cutoffs")
                db.execute(CUTOFFS, {"offset": self.window - 1, "since": pruned_to})
                db.execute(TRIM)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            log.exception("could not prune the tool durations")
            return pruned_to
        self.prunes += 1
        return int(newest)
