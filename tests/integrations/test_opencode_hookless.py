"""`opencode run` through `tao proxy` without TAO's plugin: the tools the proxy infers from the wire are the ones the
plugin reports (name, program, status), at the same moments but for the ends: with the plugin, the coordinator's
timeline starts a tool at the wire's start (the proxy dates a hook's start by the response that asked for the tool,
which ended first) and ends it before the wire's end by OpenCode's own handling (0.13-0.56 s measured: not within
issue 26's 0.2 s; the wire cannot see a tool end before the request carrying its result); without it, the inferred
timeline is the wire's (see `test_claude_code_hookless.py`)."""

import json
import subprocess
import uuid

import pytest

from tao_sdk import cli

from .conftest import MODEL, harness, opencode_env
from .test_claude_code_hookless import (
    HANDLING_S,
    SAME_S,
    assert_same_moments,
    gaps,
    timeline,
    tools_after_their_call,
    wire_log,
)


@pytest.fixture
def opencode():
    return harness("opencode", "npm opencode-ai")


def run_opencode(binary, root, proxy, prompt, plugin):
    """`opencode run` in a project of `root` whose `tao` provider is `proxy`, with TAO's plugin or without."""
    project, home = root / f"project-{plugin}", root / "home"
    project.mkdir(exist_ok=True)
    assert cli.main(["install", "opencode", "--project", str(project), "--proxy", proxy, "--model", MODEL]) == 0
    if not plugin:
        (project / ".opencode" / "plugin" / "tao.ts").unlink()
    env = opencode_env(project, home)
    command = [binary, "run", f"{prompt} ({uuid.uuid4().hex[:8]})", "--format", "json"]
    completed = subprocess.run(command, cwd=project, env=env, capture_output=True, timeout=150, check=False)
    assert completed.returncode == 0, completed.stderr.decode()[-3000:]
    return [json.loads(line) for line in completed.stdout.splitlines() if line.strip().startswith(b"{")]


def test_without_the_plugin_the_proxy_reports_the_tools_the_plugin_reports(
    opencode, coordinator, start_proxy, tmp_path, capsys
):
    log = tmp_path / "tools.jsonl"
    proxy = start_proxy(coordinator.url, coordinator.token, "--tool-log", str(log))
    views, timings = {}, {}
    for plugin in (True, False):
        lines = run_opencode(opencode, tmp_path, proxy, "opencode hello", plugin)
        assert [line["part"]["text"] for line in lines if line["type"] == "text"][-1] == "All done."
        session_id = lines[0]["sessionID"]
        if plugin:
            coordinator.recorder.wait_closed(session_id)
        view = timeline(coordinator, session_id)
        views[plugin] = tools_after_their_call(view)
        timings[plugin] = gaps(view, wire_log(log, session_id))
    # OpenCode's next request leaves 0.13-0.56 s after tool.execute.after (its own handling, and chat.headers
    # waiting for the plugin's reports): issue 26's 0.2 s is not met on ends here; the figures are printed
    with capsys.disabled():
        print(f"\nopencode plugin - wire (same run): {timings[True]}")
    assert all(abs(start) <= SAME_S and -HANDLING_S <= end <= SAME_S for *_, start, end in timings[True])
    assert_same_moments([], timings[False], capsys, "opencode")
    [(name, program, status, *_)] = views[True]
    [(name_, program_, status_, *_)] = views[False]
    assert (name_, program_, status_) == (name, program, status) == ("bash", "sleep", "ok")
