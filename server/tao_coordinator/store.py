"""What the coordinator learns, kept across restarts: tool durations in SQLite (WAL) under the state directory.

The event loop never touches the database: `record` only enqueues, and one writer thread commits in small batches,
so a burst of tool ends costs the loop nothing and a crash loses at most the last batch in flight. `load` runs once
at start-up, before the service accepts requests. `close` flushes everything queued, then stops the thread.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections import defaultdict
from pathlib import Path

log = logging.getLogger("tao.store")

SCHEMA = """
CREATE TABLE IF NOT EXISTS tool_durations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tool TEXT NOT NULL,
    duration_s REAL NOT NULL,
    recorded_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tool_durations_by_tool ON tool_durations (tool, id);
"""


class HistoryStore:
    def __init__(self, state_dir: Path, batch: int = 256) -> None:
        state_dir = state_dir.expanduser()
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "tao.sqlite3"
        self._batch = batch
        self._queue: queue.Queue[tuple[str, float, float] | None] = queue.Queue()
        with self._connect() as db:
            db.executescript(SCHEMA)
        self._thread = threading.Thread(target=self._write_loop, name="tao-store", daemon=True)
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def load(self, window: int) -> dict[str, list[float]]:
        """The newest `window` durations of every tool, oldest first."""
        by_tool: dict[str, list[float]] = defaultdict(list)
        with self._connect() as db:
            rows = db.execute(
                "SELECT tool, duration_s FROM ("
                " SELECT tool, duration_s, id, ROW_NUMBER() OVER (PARTITION BY tool ORDER BY id DESC) AS newest"
                " FROM tool_durations) WHERE newest <= ? ORDER BY id",
                (window,),
            ).fetchall()
        for tool, duration in rows:
            by_tool[tool].append(float(duration))
        return dict(by_tool)

    def record(self, tool: str, duration_s: float, at: float) -> None:
        self._queue.put((tool, duration_s, at))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _write_loop(self) -> None:
        db = self._connect()
        try:
            stopping = False
            while not stopping:
                rows: list[tuple[str, float, float]] = []
                item = self._queue.get()
                while True:
                    if item is None:
                        stopping = True
                        break
                    rows.append(item)
                    if len(rows) >= self._batch:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if rows:
                    self._commit(db, rows)
        finally:
            db.close()

    def _commit(self, db: sqlite3.Connection, rows: list[tuple[str, float, float]]) -> None:
        try:
            with db:
                db.executemany("INSERT INTO tool_durations (tool, duration_s, recorded_at) VALUES (?, ?, ?)", rows)
        except sqlite3.Error:
            log.exception("could not persist %d tool durations", len(rows))
