"""`tao top` as an operator sees it: driven in a real terminal (tmux) against a real coordinator over a fake fleet."""

import shutil
import subprocess
import sys
import time
import uuid

import pytest

import tao_sdk
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.config import DEFAULT_MODEL
from tao_sdk.cli import main as tao


def _screen(tmux: list[str]) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_top_shows_the_nodes_and_sessions_and_quits_on_q(coordinator_factory, tmp_path):
    tmux = ["tmux", "-L", f"tao-top-{uuid.uuid4().hex[:8]}"]
    with ThreadedFleet(2, FakeNodeConfig(time_scale=50)) as fleet:
        coordinator = coordinator_factory(fleet.urls)
        context = tao_sdk.AgentContext(harness="top-test")
        with tao_sdk.session(coordinator.url, token=coordinator.token, context=context, session_id="top-s-1") as s:
            s.openai().chat.completions.create(
                model=DEFAULT_MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=4
            )
            with s.tool("bash", command="pytest -x", timeout=60):
                done = tmp_path / "exited"
                command = (
                    f"{sys.executable} -m tao_sdk.cli top --coordinator {coordinator.url} --token {coordinator.token}"
                    f"; touch {done}"
                )
                subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "150", "-y", "30", command], check=True)
                try:
                    deadline, screen = time.monotonic() + 30, ""
                    while time.monotonic() < deadline and "top-s-1" not in screen:
                        time.sleep(0.3)
                        screen = _screen(tmux)
                    print(screen)
                    for expected in ("node-0", "node-1", "top-s-1", "top-test", "in tool", "bash"):
                        assert expected in screen
                    subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and not done.exists():
                        time.sleep(0.1)
                    assert done.exists(), "tao top did not quit on q"
                finally:
                    subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_top_against_a_dead_coordinator_says_so(capsys):
    assert tao(["top", "--coordinator", "http://127.0.0.1:9"]) == 1
    error = capsys.readouterr().err
    assert "cannot reach the coordinator at http://127.0.0.1:9" in error


def test_top_with_a_wrong_token_says_so(coordinator_factory, capsys):
    coordinator = coordinator_factory(["http://127.0.0.1:9"])
    assert tao(["top", "--coordinator", coordinator.url, "--token", "not-the-token"]) == 1
    assert "refused the token (401)" in capsys.readouterr().err


def test_top_once_prints_one_view(coordinator_factory, capsys):
    coordinator = coordinator_factory(["http://127.0.0.1:9"])
    assert tao(["top", "--coordinator", coordinator.url, "--token", coordinator.token, "--once"]) == 0
    assert "node-0" in capsys.readouterr().out
