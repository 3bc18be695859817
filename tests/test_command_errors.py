"""The long-running commands fail with one line naming what is wrong, not a traceback."""

import contextlib
import gzip
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from tao_coordinator.bench.fault_runs.disk import TmpfsUnavailable, tmpfs
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.local_coordinator import coordinator_process
from tao_coordinator.store import SCHEMA, STORE_FILE


def tao(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tao_sdk.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def taken_port():
    with socket.create_server(("127.0.0.1", 0)) as held:
        yield held.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ("coordinator", "--insecure-no-auth", "--state-dir", "{tmp}"),
        ("proxy", "--nodes", "http://127.0.0.1:9"),
    ],
)
def test_a_port_in_use_is_one_line_naming_it(tmp_path, taken_port, command):
    run = tao(*(word.format(tmp=tmp_path) for word in command), "--port", str(taken_port))
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"tao {command[0]}: cannot listen on 127.0.0.1:{taken_port}: Address already in use"
    ]
    assert "started" not in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("trace.jsonl", b"not json\n", "is not JSON: Expecting value"),
        ("trace.json", b'{"requests": [', "is not JSON"),
        ("trace.jsonl", b'\n\n{"requests": [}\n', "is not JSON"),
        ("trace.jsonl", b"\xff\xfe\x00garbage\n", "could not be read"),
        ("trace.jsonl.gz", b"not gzip", "could not be read: Not a gzipped file"),
        ("trace.jsonl.gz", gzip.compress(b'{"requests": []}\n')[:-12], "could not be read"),
    ],
)
def test_a_trace_that_is_not_json_is_one_line_naming_the_file(tmp_path, name, content, problem):
    trace = tmp_path / name
    trace.write_bytes(content)
    run = tao("sim", "--trace", str(trace))
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stderr.startswith(f"tao sim: --trace: {str(trace)!r} ") and problem in run.stderr


# a store or a configuration the coordinator cannot use is one line and exit status 2


def a_store(state: Path, rows: int = 5000) -> Path:
    """A sound store with rows, as an earlier run leaves it (closed, write-ahead log checkpointed)."""
    state.mkdir(parents=True, exist_ok=True)
    path = state / STORE_FILE
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)
        with db:
            db.executemany(
                "INSERT INTO tool_calls (tool, program, duration_s, recorded_at) VALUES (?, NULL, ?, 0)",
                [(f"tool-{k % 400}", k / 100) for k in range(rows)],
            )
    return path


def one_line(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_store_is_one_line_naming_the_flag_that_moves_it_aside(tmp_path, damage):
    path = a_store(tmp_path / "state")
    if damage == "garbage":
        path.write_bytes(os.urandom(20_000))
    else:
        with path.open("r+b") as file:
            file.truncate(path.stat().st_size // 2)
    line = one_line(tao("coordinator", "--insecure-no-auth", "--state-dir", str(path.parent), "--port", "0"))
    assert line.startswith(f"tao coordinator: {path}: not a sound SQLite database (")
    assert "--reset-corrupt-store" in line


def test_a_read_only_store_is_one_line_saying_what_to_do(tmp_path):
    with contextlib.ExitStack() as stack:
        state = tmp_path / "state"
        if os.geteuid() == 0:  # root writes whatever the file's mode: a read-only file system is read-only to all
            try:
                stack.enter_context(tmpfs(state))
            except TmpfsUnavailable as error:
                pytest.skip(f"as root, a read-only store needs a tmpfs mounted read-only: {error}")
            path = a_store(state)
            subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
        else:
            path = a_store(state)
            path.chmod(0o444)
        line = one_line(tao("coordinator", "--insecure-no-auth", "--state-dir", str(state), "--port", "0"))
    assert line.startswith(f"tao coordinator: {path}: cannot be written (")
    assert "writable" in line and "--state-dir" in line


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    config = tmp_path / "fleet.toml"
    config.write_bytes("[server]\nport = 8700  # café\n".encode("latin-1"))
    line = one_line(tao("coordinator", "--config", str(config)))
    assert line == f"tao coordinator: {config}: not UTF-8 text (byte 0xe9 at offset 27): save it as UTF-8"


def test_reset_corrupt_store_moves_it_aside_and_starts_with_an_empty_history(tmp_path):
    path = a_store(tmp_path / "state")
    garbage = os.urandom(20_000)
    path.write_bytes(garbage)
    log = tmp_path / "coordinator.log"
    with (
        ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet,
        coordinator_process(
            [f"node-0={fleet.urls[0]},10000000"], path.parent, log_path=log, extra_args=["--reset-corrupt-store"]
        ) as coordinator,
    ):
        assert httpx2.get(f"{coordinator.url}/healthz").json()["status"] == "ok"
    [aside] = path.parent.glob(f"{STORE_FILE}.corrupt-*")
    assert aside.read_bytes() == garbage
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT COUNT(*) FROM tool_calls").fetchone()[0] == 0
    moved = [line for line in log.read_text().splitlines() if "moved aside" in line]
    assert len(moved) == 1 and aside.name in moved[0]
    assert coordinator.tracebacks() == 0
