"""mini-swe-agent 2.x with `TaoModel` and `TaoEnvironment`, from Python and from the `mini` CLI, offline against
fake vLLM nodes and the coordinator."""

import gc
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tao_coordinator.core.events import Acquire, Register

from .conftest import MODEL, REPO, missing_harness, python_env, served

MINI_ENV = {
    "MSWEA_SILENT_STARTUP": "1",
    "MSWEA_CONFIGURED": "1",
    "MSWEA_GLOBAL_CONFIG_DIR": tempfile.mkdtemp(prefix="mswea-"),
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches its price map from the internet
    "MSWEA_COST_TRACKING": "ignore_errors",
    "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
}
os.environ.update({k: v for k, v in MINI_ENV.items() if k not in os.environ})
if importlib.util.find_spec("minisweagent") is None:
    missing_harness("mini-swe-agent is not installed (PyPI mini-swe-agent; .ci/run installs it)")

EXAMPLE_CONFIG = REPO / "integrations" / "tao_integrations" / "mini_swe_agent.yaml"


def run_agent(model, env, task):
    from minisweagent.agents.default import DefaultAgent

    agent = DefaultAgent(model, env, system_template="You are a helpful assistant.", instance_template="{{task}}")
    return agent.run(task)


def model_for(tao, api_base="http://127.0.0.1:9/v1"):
    from tao_integrations.mini_swe_agent import TaoModel

    kwargs = {"api_key": "x", "api_base": api_base, "drop_params": True}
    return TaoModel(model_name=f"hosted_vllm/{MODEL}", model_kwargs=kwargs, cost_tracking="ignore_errors", tao=tao)


def assert_reported(recorder, fleet, session_id, before, timeout_s):
    recorder.wait_closed(session_id)
    assert recorder.sessions("mini-swe-agent") == [session_id]
    (command, command_end), (submit, submit_end) = recorder.tools(session_id)
    assert (command.tool, command.hints.timeout_s, command.hints.sleep_s) == ("bash", timeout_s, 1.0)
    assert command_end.status == "ok" and 1.0 <= command_end.duration_s < timeout_s
    assert (submit.hints.timeout_s, submit_end.status) == (timeout_s, "ok")  # the submission, `Submitted` re-raised
    assert (command.program, submit.program) == ("sleep", "echo")  # never the command itself
    nodes = recorder.calls_on_assigned_node(session_id)
    assert len(nodes) == 2
    counts, after = Counter(nodes), served(fleet)
    assert [a - b for a, b in zip(after, before, strict=True)] == [counts[f"node-{k}"] for k in range(len(after))]


def test_mini_swe_agent_solves_a_scripted_task_from_python(coordinator, fleet, tmp_path):
    from tao_integrations.mini_swe_agent import TaoEnvironment

    before = served(fleet)
    model = model_for({"coordinator": coordinator.url, "token": coordinator.token, "workflow_id": "task-1"})
    env = TaoEnvironment(wrapped_class="local", timeout=7, cwd=str(tmp_path))
    result = run_agent(model, env, f"mini hello ({uuid.uuid4().hex[:8]})")
    assert result["exit_status"] == "Submitted"
    session_id = model.session.id
    del model, env
    gc.collect()  # the session closes with its model
    assert_reported(coordinator.recorder, fleet, session_id, before, 7.0)
    # each model call names the agent's step: its count of queries, the agent's `n_calls`
    assert [event.step_id for event in coordinator.recorder.events(Acquire, session_id)] == ["1", "2"]
    [register] = coordinator.recorder.events(Register, session_id)
    assert register.context.workflow_id == "task-1"


def test_the_mini_cli_runs_with_the_example_config(coordinator, fleet, tmp_path):
    mini = shutil.which("mini") or str(Path(sys.executable).parent / "mini")
    before = served(fleet)
    trajectory = tmp_path / "run.traj.json"
    configs = ["mini.yaml", str(EXAMPLE_CONFIG)]  # the coordinator from the environment, as docs/integrations.md says
    configs += ["environment.timeout=9", f"environment.cwd={tmp_path}"]
    command = [mini, "-m", f"hosted_vllm/{MODEL}", "-t", f"mini hello ({uuid.uuid4().hex[:8]})", "-y"]
    command += ["--exit-immediately", "-o", str(trajectory)] + [arg for spec in configs for arg in ("-c", spec)]
    env = python_env(TAO_COORDINATOR=coordinator.url, TAO_TOKEN=coordinator.token, **MINI_ENV)
    completed = subprocess.run(
        command, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=180, check=False
    )
    assert completed.returncode == 0, completed.stdout.decode()[-3000:] + completed.stderr.decode()[-3000:]
    saved = json.loads(trajectory.read_text())
    assert saved["info"]["exit_status"] == "Submitted"
    session_id = saved["info"]["tao_session_id"]
    assert_reported(coordinator.recorder, fleet, session_id, before, 9.0)


def test_with_the_coordinator_down_mini_swe_agent_still_completes(dead_coordinator, fleet, tmp_path):
    from tao_integrations.mini_swe_agent import TaoEnvironment

    before = served(fleet)
    model = model_for({"coordinator": dead_coordinator}, api_base=fleet.nodes[0].openai_base_url)
    env = TaoEnvironment(wrapped_class="local", timeout=7, cwd=str(tmp_path))
    result = run_agent(model, env, f"mini hello ({uuid.uuid4().hex[:8]})")
    assert result["exit_status"] == "Submitted"
    assert model.session.detached
    assert served(fleet)[0] - before[0] == 2  # the configured api_base: no node was known otherwise


def test_the_environment_alone_reports_statuses_and_passes_the_submission_on(coordinator, tmp_path, monkeypatch):
    from minisweagent.exceptions import Submitted

    from tao_integrations.mini_swe_agent import TaoEnvironment

    gc.collect()  # no TaoModel of an earlier test is current any more
    monkeypatch.setenv("TAO_COORDINATOR", coordinator.url)
    monkeypatch.setenv("TAO_TOKEN", coordinator.token)
    env = TaoEnvironment(wrapped_class="local", timeout=5, cwd=str(tmp_path))
    assert env.execute({"command": "cd . && exit 3", "tool_call_id": "c1"})["returncode"] == 3
    assert env.execute({"command": "sleep 5", "tool_call_id": "c2"}, timeout=1)["returncode"] == -1
    with pytest.raises(Submitted):
        env.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "tool_call_id": "c3"})
    session = env.session()
    session.flush()
    tools = coordinator.recorder.tools(session.id)
    assert [(s.call_id, s.hints.timeout_s, s.program, e.status) for s, e in tools] == [
        ("c1", 5.0, "exit", "error"),
        ("c2", 1.0, "sleep", "timeout"),
        ("c3", 5.0, "echo", "ok"),
    ]
    assert env.config.timeout == 5 and env.serialize()["info"]["config"]["environment"]["cwd"] == str(tmp_path)
