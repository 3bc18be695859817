"""State disk full: a `tao coordinator` process whose state directory is a real tmpfs, flooded with tool_start /
tool_end pairs while the tmpfs is filled, then freed.

Each client holds one session and loops: a tool_start, then the same call's tool_end until it is answered 204 (a 503
is sent again after `TOOL_END_RETRY_S`), so a refused tool end must have left the call running. Every tool end
carries a duration that names it (client, call), so the rows in the SQLite file after a restart show which
acknowledged ends were stored. Measured: tool ends answered 2xx and not in the file (acknowledged and lost, the
target is 0), 503s answered (each with its reason and a Retry-After), seconds from the disk filled to the first 503
(detect) and from the space freed to the first 204 after the last 503 (recover; the target is one scrape interval),
the log lines of the store's state changes, and tracebacks in the log. Mounting needs root: without it the run says
so and is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from ...fakevllm import FakeNodeConfig, ThreadedFleet
from ...local_coordinator import coordinator_process
from ...store import STORE_FILE
from . import FaultRow
from .scrapes import SCRAPE_INTERVAL_S

FAULT = "state disk full"
TOOL_END_RETRY_S = 0.05
"""How soon a client sends a refused tool end again (sooner than Retry-After, to time the recovery closely)."""
TMPFS_BYTES = 8 * 1024 * 1024
CONFIG = "[core]\nforecast_window = 1000000\n"
"""One learned level per client holds every row of the run, so no row is pruned by the store's bound at restart."""


class TmpfsUnavailable(Exception):
    """A tmpfs cannot be mounted here (not root, or no mount permission)."""


@contextmanager
def tmpfs(directory: Path, size_bytes: int = TMPFS_BYTES) -> Iterator[Path]:
    """A real tmpfs of `size_bytes` mounted at `directory` (made if missing), unmounted on the way out."""
    directory.mkdir(parents=True, exist_ok=True)
    command = ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0700", "tmpfs", str(directory)]
    try:
        mounted = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except OSError as error:
        raise TmpfsUnavailable(f"cannot run mount: {error.strerror or error}") from None
    if mounted.returncode != 0:
        raise TmpfsUnavailable(f"cannot mount a tmpfs at {directory}: {mounted.stderr.strip() or 'mount failed'}")
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True, timeout=10).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=10)


def fill(directory: Path) -> Path:
    """Write a file in `directory` until the file system has no space left; the file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    return filler


@dataclass
class DiskFullRun:
    tool_ends: int = 0
    """tool_end requests sent (each refused one counts again when sent again)."""
    acknowledged: set[tuple[int, int]] = field(default_factory=set)
    """(client, call) of every tool end answered 204."""
    acknowledged_while_full: int = 0
    refused: int = 0
    """503s answered to tool ends."""
    refusals_well_formed: bool = True
    """Every 503 had a JSON error body with code `store_unavailable` and a Retry-After."""
    other_answers: int = 0
    """Answers that were neither 204 nor 503, or requests that failed."""
    stored: set[tuple[int, int]] = field(default_factory=set)
    """(client, call) of every row in the SQLite file after the restart."""
    detect_s: float | None = None
    recover_s: float | None = None
    failing_lines: int = 0
    recovered_lines: int = 0
    shutdown_line: str = ""
    refused_metric: float = 0.0
    """`tao_store_refused_writes_total` at the end of the flood."""
    tracebacks: int = 0
    restarted: bool = False

    @property
    def lost(self) -> int:
        return len(self.acknowledged - self.stored)


@dataclass
class _Clock:
    filled_at: float | None = None
    freed_at: float | None = None
    first_refusal: float | None = None
    last_refusal: float | None = None
    first_ack_after_refusals: float | None = None
    stop: bool = False


def disk_full(clients: int = 8, before_s: float = 0.5, full_s: float = 1.5, after_s: float = 1.0) -> DiskFullRun:
    """Raises `TmpfsUnavailable` when no tmpfs can be mounted."""
    result = DiskFullRun()
    with (
        tempfile.TemporaryDirectory() as scratch,
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
        tmpfs(Path(scratch) / "state") as state,
    ):
        config, log = Path(scratch) / "fleet.toml", Path(scratch) / "coordinator.log"
        config.write_text(CONFIG)
        nodes = [f"node-0={fleet.urls[0]},10000000"]
        args = ["--config", str(config)]
        with coordinator_process(nodes, state, log_path=log, extra_args=args) as coordinator:
            clock = _Clock()
            asyncio.run(_flood(coordinator.url, state, clients, (before_s, full_s, after_s), clock, result))
        with coordinator_process(nodes, state, log_path=log, extra_args=args) as again:
            result.restarted = again.process.poll() is None
        result.stored = _stored(state / STORE_FILE)
        lines = [_message(line) for line in log.read_text(errors="replace").splitlines()]
        result.failing_lines = sum("cannot be written" in line for line in lines)
        result.recovered_lines = sum("can be written again" in line for line in lines)
        result.shutdown_line = next((line for line in lines if line.startswith("coordinator stopped")), "")
        result.tracebacks = sum(line.count("Traceback (most recent call last)") for line in lines)
    if clock.first_refusal is not None and clock.filled_at is not None:
        result.detect_s = max(0.0, clock.first_refusal - clock.filled_at)  # refused while the last bytes went in
    if clock.first_ack_after_refusals is not None and clock.freed_at is not None:
        result.recover_s = max(0.0, clock.first_ack_after_refusals - clock.freed_at)
    return result


def _message(line: str) -> str:
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    return f"{entry.get('message', '')}\n{entry.get('exception', '')}" if isinstance(entry, dict) else line


async def _flood(
    url: str, state: Path, clients: int, phases: tuple[float, float, float], clock: _Clock, result: DiskFullRun
) -> None:
    before_s, full_s, after_s = phases

    async def client(k: int, http: aiohttp.ClientSession) -> None:
        session = f"disk-{k}"
        async with http.post(f"{url}/v1/sessions", json={"session_id": session}) as registered:
            assert registered.status == 201, await registered.text()
        call = 0
        while not clock.stop:
            call += 1
            start = {"call_id": f"c{call}", "tool": "bash", "program": f"client{k}"}
            async with http.post(f"{url}/v1/sessions/{session}/tool_start", json=start) as started:
                if started.status != 204:
                    result.other_answers += 1
                    return
            while not await _end(http, url, session, k, call, clock, result):
                await asyncio.sleep(TOOL_END_RETRY_S)

    async def disk() -> None:
        await asyncio.sleep(before_s)
        await asyncio.to_thread(fill, state)
        clock.filled_at = time.monotonic()
        await asyncio.sleep(full_s)
        (state / "filler").unlink()
        clock.freed_at = time.monotonic()
        await asyncio.sleep(after_s)
        while clock.first_ack_after_refusals is None and time.monotonic() - clock.freed_at < 10 * SCRAPE_INTERVAL_S:
            await asyncio.sleep(0.1)
        clock.stop = True

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await asyncio.gather(disk(), *(client(k, http) for k in range(clients)))
        async with http.get(f"{url}/metrics") as metrics:
            text = await metrics.text()
    result.refused_metric = next(
        (float(line.split()[-1]) for line in text.splitlines() if line.startswith("tao_store_refused_writes_total")),
        0.0,
    )


async def _end(
    http: aiohttp.ClientSession, url: str, session: str, k: int, call: int, clock: _Clock, result: DiskFullRun
) -> bool:
    """Send the call's tool end once; True once it is answered 204 (or the run is over)."""
    end = {"call_id": f"c{call}", "duration_s": call / 1000}
    result.tool_ends += 1
    try:
        async with http.post(f"{url}/v1/sessions/{session}/tool_end", json=end) as ended:
            status = ended.status
            body = await ended.json() if status == 503 else None
            retry_after = ended.headers.get("Retry-After")
    except (aiohttp.ClientError, TimeoutError, ValueError):
        result.other_answers += 1
        return clock.stop
    now = time.monotonic()
    if status == 204:
        result.acknowledged.add((k, call))
        if clock.filled_at is not None and clock.freed_at is None:
            result.acknowledged_while_full += 1
        if clock.last_refusal is not None and clock.first_ack_after_refusals is None and clock.freed_at is not None:
            clock.first_ack_after_refusals = now
        return True
    if status == 503:
        result.refused += 1
        well_formed = isinstance(body, dict) and body.get("code") == "store_unavailable" and bool(body.get("error"))
        result.refusals_well_formed &= well_formed and retry_after is not None and retry_after.isdigit()
        clock.first_refusal = clock.first_refusal or now
        clock.last_refusal = now
        clock.first_ack_after_refusals = None
        return clock.stop
    result.other_answers += 1
    return clock.stop


def _stored(path: Path) -> set[tuple[int, int]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT program, duration_s FROM tool_calls WHERE tool = 'bash'").fetchall()
    return {(int(program.removeprefix("client")), round(duration * 1000)) for program, duration in rows}


def run() -> list[FaultRow]:
    try:
        measured = disk_full(clients=16, before_s=0.5, full_s=2.0, after_s=0.5)
    except TmpfsUnavailable as error:
        return [FaultRow(FAULT, 0, 0, note=f"skipped: {error}")]
    note = (
        f"{len(measured.acknowledged)} tool ends acknowledged ({measured.acknowledged_while_full} while full), "
        f"{measured.refused} answered 503; store state lines: {measured.failing_lines} failing, "
        f"{measured.recovered_lines} recovered; recover target {SCRAPE_INTERVAL_S:g} s (one scrape)"
    )
    return [
        FaultRow(
            FAULT,
            calls=measured.tool_ends,
            failed=measured.refused + measured.other_answers,
            acked_lost=measured.lost,
            detect_s=measured.detect_s,
            recover_s=measured.recover_s,
            tracebacks=measured.tracebacks,
            note=note,
        )
    ]
