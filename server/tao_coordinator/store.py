"""What the coordinator learns, kept across restarts: tool calls in SQLite (WAL) under the state directory.

Schema: `tool_calls(id, tool, program, duration_s, recorded_at)`, one row per tool end, `tool` normalised and
`program` lower-cased as the history keys them (`ToolKey.of`), `duration_s` what the history learned. A
`tool_durations(tool, duration_s, recorded_at)` table from an older version is moved into it once, on open (its rows
get program NULL).

Bounded like the history it feeds: the store keeps the newest `window` rows of each (tool, program) key, for the
`max_keys` keys used most recently (a key's recency is its newest id). `load` returns exactly those rows, oldest
first, so adding them to a `ToolHistory` rebuilds its levels; the writer thread deletes everything else, when asked
after start-up (`prune`) and every `prune_every` rows written. So the table holds at most `max_keys × window +
prune_every` rows, plus one transaction's; the file does not shrink, SQLite reuses the freed pages, and the
write-ahead log is truncated after each prune. A prune is SQL only (no rows or keys come into Python): one scan of
the key index finds the evicted keys, whose rows go, and the keys written since the last prune (ids only grow:
AUTOINCREMENT) are trimmed to `window`, one index seek each; the first prune of a process trims every key.

The event loop never writes to the database: `record_all` only enqueues, and one writer thread commits in batches of
about `batch` rows (the rows of one `record_all` stay in one transaction), so a burst of tool ends costs the loop
little. Nothing is acknowledged that is not stored: `record_all` returns one future for its rows, which completes
once the transaction holding them committed, and fails with `StoreUnavailable` when that commit failed; it raises it
at once while the store is failing, or when its rows would make more than `max_queued` wait. The store is failing
from a failed write (a full disk, a read-only file) until a write succeeds again: while it is failing and idle, the
writer tries a one-page write every `probe_interval_s`, so it notices the space coming back without a request. Each
change of that state is one log line. `written` and `not_written` count rows for the shutdown line. A row whose
request gave up before the writer took it is not written.

Files: the database and its -wal and -shm files are the user's alone (`private_files.py`). `check_store` runs
before the service starts: a store that is not a sound SQLite database, or that cannot be written, is a `StoreError`
whose message is one line naming the file, what is wrong and what to do; with `reset_corrupt` a corrupt one is moved
aside (`tao.sqlite3.corrupt-<time>`) and the service starts with an empty history.

`load` runs once at start-up, before the service accepts requests. `close` writes everything queued, then stops the
thread.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Literal

from .core.forecast import ToolKey, normalise_tool
from .private_files import create_private, log_tightened, make_directory, tighten

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

INSERT = "INSERT INTO tool_calls (tool, program, duration_s, recorded_at) VALUES (?, ?, ?, ?)"

ToolRow = tuple[str, str | None, float, float]
_Prune = Literal["prune"]
_PRUNE: _Prune = "prune"
_Queued = tuple[list[ToolRow], "Future[None]"]

CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
RESET_FLAG = "--reset-corrupt-store"


class StoreUnavailable(Exception):
    """A tool end the store cannot take now. It is not stored, so it is not acknowledged: the answer is a 503 with
    `retry_after_s`, and the core never sees the event."""

    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(f"the tool history store cannot take this tool end ({reason}); send it again later")
        self.reason = reason
        self.retry_after_s = retry_after_s


class StoreError(Exception):
    """The store cannot be used at start-up; the message names the file, what is wrong and what to do."""


def store_files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def _prepare(path: Path) -> None:
    """The directory and the database file exist, and every file of the store is private."""
    make_directory(path.parent)
    create_private(path)
    log_tightened(path.parent, tighten(store_files(path)))


def _problem(path: Path) -> tuple[bool, str] | None:
    """What keeps the store at `path` from being used, if anything: (corrupt?, reason). A store that can be used is
    left private (`_prepare`); one that cannot is left as it was found."""
    try:
        make_directory(path.parent)
        create_private(path)
    except OSError as error:
        return False, error.strerror or str(error)
    db: sqlite3.Connection | None = None
    try:
        db = sqlite3.connect(path, timeout=5)
        db.execute("PRAGMA journal_mode=WAL")
        verdict = str(db.execute("PRAGMA quick_check").fetchone()[0])
        if verdict != "ok":
            return True, verdict
        write_one_page(db)  # a read-only file or a full disk shows here
    except sqlite3.Error as error:
        corrupt = error.sqlite_errorcode & 0xFF in CORRUPT_CODES
        return corrupt, str(error) if corrupt or not _read_only(path.parent) else "its file system is read-only"
    finally:
        if db is not None:
            db.close()
    try:
        _prepare(path)
    except OSError as error:
        return False, f"its mode cannot be made owner-only: {error.strerror or error}"
    return None


def write_one_page(db: sqlite3.Connection) -> None:
    """The smallest write there is, changing nothing: the header's user version, set to itself."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    db.execute(f"PRAGMA user_version = {version}")


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_store(state_dir: Path, reset_corrupt: bool = False) -> None:
    """Raise `StoreError` unless the store in `state_dir` is a sound database this process can write; with
    `reset_corrupt`, a corrupt one is first moved aside (logged) and an empty one started."""
    path = state_dir.expanduser() / STORE_FILE
    problem = _problem(path)
    if problem is not None and problem[0] and reset_corrupt:
        try:
            aside = _move_aside(path)
        except OSError as error:
            raise StoreError(
                f"{path}: not a sound SQLite database ({problem[1]}), and it could not be moved aside "
                f"({error.strerror or error}): move it away yourself"
            ) from None
        log.warning(
            "%s was not a sound database (%s): moved aside to %s; starting with an empty tool history",
            path,
            problem[1],
            aside.name,
        )
        problem = _problem(path)
    if problem is None:
        return
    corrupt, reason = problem
    if corrupt:
        raise StoreError(
            f"{path}: not a sound SQLite database ({reason}): restore it from a backup, or start with an empty tool "
            f"history with {RESET_FLAG} (the file is moved aside, not deleted)"
        )
    raise StoreError(
        f"{path}: cannot be written ({reason}): make the file and its directory writable by this user, on a "
        "file system that is writable and has free space, or choose another --state-dir"
    )


def _move_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        aside, n = path.with_name(f"{path.name}.corrupt-{stamp}-{n}"), n + 1
    for file, moved in zip(store_files(path), store_files(aside), strict=True):
        if file.exists():
            file.rename(moved)
    tighten(store_files(aside))  # still the fleet's data: as private as the store it was
    return aside


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
        probe_interval_s: float = 1.0,
    ) -> None:
        if min(window, max_keys, batch, prune_every, max_queued) < 1 or not probe_interval_s > 0:
            raise ValueError(
                "HistoryStore: window, max_keys, batch, prune_every and max_queued must be at least 1, "
                "probe_interval_s above 0"
            )
        self.path = state_dir.expanduser() / STORE_FILE
        _prepare(self.path)
        self.window = window
        self.max_keys = max_keys
        self.prune_every = prune_every
        self.probe_interval_s = probe_interval_s
        self._batch = batch
        self.max_queued = max_queued
        self._queue: queue.Queue[_Queued | _Prune | None] = queue.Queue()
        self._queued_rows = 0
        """Rows queued and not yet taken by the writer (under `_queued_lock`)."""
        self._queued_lock = threading.Lock()
        self.failing: str | None = None
        """Why the last write failed, while no write has succeeded since; None while the store takes writes."""
        self._failing_since = 0.0
        self.written = 0
        """Rows committed by this process (writer thread)."""
        self.commits = 0
        """Transactions that wrote rows, committed by this process (writer thread)."""
        self._failed = 0
        """Rows whose commit failed (writer thread)."""
        self._refused = 0
        """Rows refused before they were queued (the caller's thread)."""
        self.prunes = 0
        """Prunes finished by the writer thread (read it after `close` for an exact figure)."""
        with contextlib.closing(self._connect()) as db:  # `with db` alone commits, it does not close
            db.executescript(SCHEMA)
            if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tool_durations'").fetchone():
                db.create_function("normalise_tool", 1, normalise_tool, deterministic=True)
                db.executescript(f"BEGIN; {MIGRATE_TOOL_DURATIONS} COMMIT;")
                log.info("moved tool_durations into tool_calls in %s", self.path)
        self._thread = threading.Thread(target=self._write_loop, name="tao-store", daemon=True)
        self._thread.start()

    @property
    def not_written(self) -> int:
        """Rows this process was asked to store and did not: each was answered as not stored."""
        return self._refused + self._failed

    @property
    def retry_after_s(self) -> int:
        """When a refused writer may try again: by then the store has been probed."""
        return max(1, math.ceil(self.probe_interval_s))

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

    def record_all(self, rows: list[ToolRow]) -> Future[None]:
        """Queue rows to be committed together; the future completes once they are, or fails with
        `StoreUnavailable`. Raises `StoreUnavailable` at once while the store is failing, or when the rows would make
        more than `max_queued` wait."""
        reason = self.failing
        if reason is None:
            with self._queued_lock:
                fits = self._queued_rows + len(rows) <= self.max_queued
                if fits:
                    self._queued_rows += len(rows)
            if fits:
                done: Future[None] = Future()
                self._queue.put((rows, done))
                return done
            reason = f"{self.max_queued} tool ends already wait to be written"
        self._refused += len(rows)
        raise StoreUnavailable(reason, self.retry_after_s)

    def prune(self) -> None:
        """Ask the writer thread to delete every row `load` would not return."""
        self._queue.put(_PRUNE)

    def rows(self) -> int:
        with contextlib.closing(self._connect()) as db:
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
                batches: list[_Queued] = []
                taken = 0
                prune = False
                try:
                    item = self._queue.get(timeout=self.probe_interval_s if self.failing is not None else None)
                except queue.Empty:
                    self._probe(db)
                    continue
                while True:
                    if item is None:
                        stopping = True
                        break
                    if item == _PRUNE:
                        prune = True
                    else:
                        batches.append(item)
                        taken += len(item[0])
                    if taken >= self._batch:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if batches:
                    with self._queued_lock:
                        self._queued_rows -= taken
                    written += self._commit(db, batches)
                if prune or written >= self.prune_every:
                    written = 0
                    pruned_to = self._prune(db, pruned_to)
        except BaseException:
            # a bug, not a fault of the disk: no row may wait for a writer that is gone
            self.failing = "its writer thread stopped"
            log.exception("the tool history writer stopped; tool ends are refused from now on")
            self._fail_queued()
            raise
        finally:
            db.close()

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, tuple) and item[1].set_running_or_notify_cancel():
                self._failed += len(item[0])
                item[1].set_exception(StoreUnavailable(self.failing or "stopped", self.retry_after_s))

    def _commit(self, db: sqlite3.Connection, batches: list[_Queued]) -> int:
        """Write the rows whose requests still wait, in one transaction; answer each; how many rows were written."""
        live = [(rows, done) for rows, done in batches if done.set_running_or_notify_cancel()]
        if not live:
            return 0
        keyed = []
        for rows, _ in live:
            for tool, program, duration_s, at in rows:
                key = ToolKey.of(tool, program)
                keyed.append((key.tool, key.program, duration_s, at))
        try:
            with db:
                db.executemany(INSERT, keyed)
        except sqlite3.Error as error:
            self._failed += len(keyed)
            reason = self._fails(error)
            for _, done in live:
                done.set_exception(StoreUnavailable(reason, self.retry_after_s))
            return 0
        self.written += len(keyed)
        self.commits += 1
        self._recovered()
        for _, done in live:
            done.set_result(None)
        return len(keyed)

    def _probe(self, db: sqlite3.Connection) -> None:
        """While failing: whether the smallest write works again."""
        try:
            write_one_page(db)
        except sqlite3.Error:
            return
        self._recovered()

    def _fails(self, error: sqlite3.Error) -> str:
        reason = str(error)
        if self.failing is None:
            self._failing_since = time.monotonic()
            log.error(
                "tool history store %s cannot be written (%s): tool ends are refused (503) until it can; "
                "tried again every %g s",
                self.path,
                reason,
                self.probe_interval_s,
            )
        self.failing = reason
        return reason

    def _recovered(self) -> None:
        if self.failing is not None:
            self.failing = None
            log.warning(
                "tool history store %s can be written again after %.1f s; %d tool ends were not written so far",
                self.path,
                time.monotonic() - self._failing_since,
                self.not_written,
            )

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
        except sqlite3.Error as error:
            self._fails(error)  # pruned later: nothing acknowledged depends on it
            return pruned_to
        self._recovered()
        self.prunes += 1
        return int(newest)
