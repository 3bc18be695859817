"""`tao coordinator` as an operator runs it: a TOML file, JSON logs, and a SIGTERM that persists what it learned."""

import json
import signal
import socket
import sqlite3
import subprocess
import sys

import httpx2

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.local_coordinator import free_port, wait_ready

TOKEN = "cli-test-token-0123456789"


def coordinator(*args: str) -> list[str]:
    return [sys.executable, "-m", "tao_sdk.cli", "coordinator", *args]


def test_an_unknown_policy_is_a_config_error_naming_the_field(tmp_path):
    run = subprocess.run(
        coordinator("--insecure-no-auth", "--policy", "no-such-policy", "--state-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "policy.name" in run.stderr and "no-such-policy" in run.stderr and "Traceback" not in run.stderr


def test_config_file_json_logs_and_a_graceful_shutdown_that_persists(tmp_path):
    port = free_port()
    with ThreadedFleet(1, FakeNodeConfig(time_scale=50), kv_events=False) as fleet:
        config = tmp_path / "fleet.toml"
        config.write_text(
            f'[server]\nport = {port}\ntoken = "{TOKEN}"\nstate_dir = "{tmp_path / "state"}"\nlog_format = "json"\n'
            f'[[nodes]]\nname = "a"\nurl = "{fleet.urls[0]}"\n[policy]\nname = "tao-no-dp"\n'
        )
        server = subprocess.Popen(coordinator("--config", str(config)), stderr=subprocess.PIPE, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, server)
            api = {"Authorization": f"Bearer {TOKEN}"}
            registered = httpx2.post(f"{url}/v1/sessions", json={}, headers=api).json()
            session = {"Authorization": f"Bearer {registered['session_token']}"}
            calls = f"{url}/v1/sessions/{registered['session_id']}"
            started = httpx2.post(f"{calls}/tool_start", json={"call_id": "c", "tool": "make"}, headers=session)
            ended = httpx2.post(f"{calls}/tool_end", json={"call_id": "c", "duration_s": 7.5}, headers=session)
            assert (started.status_code, ended.status_code) == (204, 204)
            with socket.create_connection(("127.0.0.1", port)) as raw:  # a malformed request: 400, no traceback
                raw.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
                assert raw.recv(100).split(b" ")[1] == b"400"
        finally:
            server.send_signal(signal.SIGTERM)
            _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0
    logs = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert {"ts", "level", "logger", "message"} <= logs[0].keys()
    assert "loaded 0 tool durations" in logs[0]["message"] and "policy tao-no-dp" in logs[1]["message"]
    assert "tool history persisted" in logs[-1]["message"]
    assert not [entry for entry in logs if "exception" in entry or entry["level"] == "error"]
    with sqlite3.connect(tmp_path / "state" / "tao.sqlite3") as db:
        assert db.execute("SELECT tool, program, duration_s FROM tool_calls").fetchall() == [("make", None, 7.5)]
