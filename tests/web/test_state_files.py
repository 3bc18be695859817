"""The state directory's files — the session-token key, the SQLite store and its -wal and -shm
files — are the user's alone (0600), whatever existed before and whatever the umask; a loose mode is fixed and said
once. Through a real coordinator process."""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.local_coordinator import coordinator_process
from tao_coordinator.store import STORE_FILE
from tao_coordinator.web.tokens import KEY_FILE

STATE_FILES = (KEY_FILE, STORE_FILE, STORE_FILE + "-wal", STORE_FILE + "-shm")


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet:
        yield f"node-0={fleet.urls[0]},10000000"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def loose_mode_lines(log: Path) -> list[str]:
    messages = [json.loads(line).get("message", "") for line in log.read_text().splitlines()]
    return [message for message in messages if "readable by other users" in message]


def test_a_world_readable_key_and_store_are_made_private_and_said_once(tmp_path, node):
    state, log = tmp_path / "state", tmp_path / "coordinator.log"
    with coordinator_process([node], state):
        pass  # a state directory left by an earlier run, then loosened as an older version or an operator would
    key = secrets.token_bytes(32)
    (state / KEY_FILE).write_bytes(key)
    for name in (KEY_FILE, STORE_FILE):
        os.chmod(state / name, 0o644)
    (state / (STORE_FILE + "-shm")).write_bytes(b"")  # a stale one, loose: SQLite makes it anew, private
    os.chmod(state / (STORE_FILE + "-shm"), 0o666)

    with coordinator_process([node], state, log_path=log) as coordinator:
        registered = httpx2.post(f"{coordinator.url}/v1/sessions", json={"session_id": "s1"})
        assert registered.status_code == 201
        running = {name: mode(state / name) for name in STATE_FILES if (state / name).exists()}
    assert running == dict.fromkeys(STATE_FILES, 0o600)
    assert (state / KEY_FILE).read_bytes() == key, "a sound key is kept: the tokens it signed stay valid"
    said = loose_mode_lines(log)
    for change in ("session-token.key 0644 → 0600", "tao.sqlite3 0644 → 0600"):
        assert sum(change in line for line in said) == 1, (change, said)

    with coordinator_process([node], state, log_path=log):
        pass
    assert loose_mode_lines(log) == said, "fixed once, said once"
    assert coordinator.tracebacks() == 0


def test_a_key_rewritten_over_a_loose_file_is_private(tmp_path, node):
    state = tmp_path / "state"
    state.mkdir()
    (state / KEY_FILE).write_bytes(b"too short")
    os.chmod(state / KEY_FILE, 0o644)
    with coordinator_process([node], state):
        pass
    assert len((state / KEY_FILE).read_bytes()) == 32 and mode(state / KEY_FILE) == 0o600


def test_new_state_files_are_private_even_with_an_open_umask(tmp_path, node):
    state = tmp_path / "fresh" / "state"
    previous = os.umask(0)
    try:
        with coordinator_process([node], state) as coordinator:
            httpx2.post(f"{coordinator.url}/v1/sessions", json={"session_id": "s1"})
            running = {name: mode(state / name) for name in STATE_FILES}
    finally:
        os.umask(previous)
    assert running == dict.fromkeys(STATE_FILES, 0o600)
    assert mode(state) == 0o700
