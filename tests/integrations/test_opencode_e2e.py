"""`opencode run` with TAO's plugin, offline against fake vLLM nodes, the coordinator and `tao proxy`."""

import json
import subprocess
import uuid
from collections import Counter

import pytest

from tao_coordinator.core.events import Register
from tao_sdk import cli

from .conftest import MODEL, harness, opencode_env, served


@pytest.fixture
def opencode():
    return harness("opencode", "npm opencode-ai")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """One HOME and project for the module: OpenCode installs its plugin types into each config directory on first
    use (from npm), so later runs start faster."""
    root = tmp_path_factory.mktemp("opencode")
    (root / "project").mkdir()
    return root


def run_opencode(binary, workspace, proxy, prompt):
    """Install the plugin and provider for `proxy`, run `opencode run`; its JSON lines."""
    project, home = workspace / "project", workspace / "home"
    install = ["install", "opencode", "--project", str(project), "--proxy", proxy, "--model", MODEL]
    assert cli.main(install) == 0
    env = opencode_env(project, home)
    command = [binary, "run", f"{prompt} ({uuid.uuid4().hex[:8]})", "--format", "json", "--print-logs"]
    completed = subprocess.run(command, cwd=project, env=env, capture_output=True, timeout=150, check=False)
    (workspace / f"run-{uuid.uuid4().hex[:6]}.log").write_bytes(completed.stderr + b"\n---\n" + completed.stdout)
    assert completed.returncode == 0, completed.stderr.decode()[-3000:]
    return [json.loads(line) for line in completed.stdout.splitlines() if line.strip().startswith(b"{")]


def final_text(lines):
    return [line["part"]["text"] for line in lines if line["type"] == "text"][-1]


def test_opencode_runs_a_bash_command_reported_to_the_coordinator(opencode, coordinator, start_proxy, fleet, workspace):
    proxy = start_proxy(coordinator.url, coordinator.token)
    before = served(fleet)
    lines = run_opencode(opencode, workspace, proxy, "opencode hello")
    assert final_text(lines) == "All done."
    recorder, session_id = coordinator.recorder, lines[0]["sessionID"]
    recorder.wait_closed(session_id)
    assert session_id in recorder.sessions("opencode")
    [register] = recorder.events(Register, session_id)
    assert register.context.model == MODEL  # from the config's `tao/<model>`; it was registered as ""
    [(start, end)] = recorder.tools(session_id)
    assert (start.tool, start.hints.timeout_s, start.hints.sleep_s, start.hints.background) == ("bash", 5.0, 1.0, False)
    assert start.program == "sleep"  # of `sleep 1; echo hello-from-tao`; the command itself is never sent
    assert end.status == "ok" and 1.0 <= end.duration_s < 5.0
    nodes = recorder.calls_on_assigned_node(session_id)
    assert len(nodes) >= 2  # the title request and two agent steps
    counts = Counter(nodes)
    after = served(fleet)
    assert [a - b for a, b in zip(after, before, strict=True)] == [counts[f"node-{k}"] for k in range(len(after))]


def test_a_failed_tool_is_ended_from_its_error_event(opencode, coordinator, start_proxy, workspace):
    proxy = start_proxy(coordinator.url, coordinator.token)
    lines = run_opencode(opencode, workspace, proxy, "opencode failure")
    [used] = [line["part"] for line in lines if line["type"] == "tool_use"]
    assert (used["tool"], used["state"]["status"]) == ("read", "error")  # `run` rejects paths outside the project
    recorder, session_id = coordinator.recorder, lines[0]["sessionID"]
    recorder.wait_closed(session_id)
    [(start, end)] = recorder.tools(session_id)
    assert (start.tool, start.hints.timeout_s, end.status) == ("read", None, "error")  # only bash has a timeout
    assert start.program is None  # nor a program
    assert end.duration_s is not None and end.duration_s < 5.0
    recorder.calls_on_assigned_node(session_id)


def test_with_the_coordinator_down_opencode_still_completes(opencode, dead_coordinator, start_proxy, fleet, workspace):
    proxy = start_proxy(dead_coordinator, None)
    before = served(fleet)
    lines = run_opencode(opencode, workspace, proxy, "opencode hello")
    assert final_text(lines) == "All done."
    assert any(line["type"] == "tool_use" and line["part"]["state"]["status"] == "completed" for line in lines)
    assert sum(served(fleet)) - sum(before) >= 2
