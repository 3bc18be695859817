"""`opencode run` through `tao proxy` without TAO's plugin: the tools the proxy infers from the wire are the ones the
plugin reports (name, program, status), and the time the wire shows each one running holds the run the plugin
timed (see `test_claude_code_hookless.py` for why the windows, not the moments, are compared)."""

import json
import subprocess
import uuid

import pytest

from tao_sdk import cli

from .conftest import HELLO_SLEEP_S, MODEL, harness, opencode_env
from .test_claude_code_hookless import HANDLING_S, timeline, tools_after_their_call


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
    proxy = start_proxy(coordinator.url, coordinator.token)
    views = {}
    for plugin in (True, False):
        lines = run_opencode(opencode, tmp_path, proxy, "opencode hello", plugin)
        assert [line["part"]["text"] for line in lines if line["type"] == "text"][-1] == "All done."
        session_id = lines[0]["sessionID"]
        if plugin:
            coordinator.recorder.wait_closed(session_id)
        views[plugin] = tools_after_their_call(timeline(coordinator, session_id))
    with capsys.disabled():
        print(f"\nplugin: {views[True]}\nwire:   {views[False]}")
    [(name, program, status, started, _, ran)] = views[True]
    [(name_, program_, status_, started_, _, window)] = views[False]
    assert (name_, program_, status_) == (name, program, status) == ("bash", "sleep", "ok")
    assert started_ <= started + 0.05
    # the window holds the scripted command's sleep; it is bounded by the other run's timed tool plus handling
    assert HELLO_SLEEP_S - 0.05 <= window <= ran + HANDLING_S
