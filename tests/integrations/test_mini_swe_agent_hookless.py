"""mini-swe-agent's own `LitellmModel` and `LocalEnvironment` through `tao proxy`: no session header, no hooks; the
proxy names the session by its conversation and infers its tools, which are the ones `TaoEnvironment` reports.

The submission is the one difference: mini-swe-agent's last action is a tool call whose result it never sends
(`Submitted` ends the run), so the wire shows that tool start and no end; it ends when the proxy closes the idle
session.

The moments are compared in one run too: the plain model through the proxy with `TaoEnvironment` reporting the same
commands into a session of its own, so the coordinator holds both timelines of one execution (see
`test_claude_code_hookless.py` for why)."""

import gc
import importlib.util
import uuid

from tao_sdk.session_identity import session_id_of

from .conftest import MODEL, missing_harness
from .test_claude_code_hookless import HANDLING_S, assert_same_moments, gaps, timeline, tools_after_their_call, wire_log

if importlib.util.find_spec("minisweagent") is None:  # before importing from a module that skips without it
    missing_harness("mini-swe-agent is not installed (PyPI mini-swe-agent; .ci/run installs it)")

from .test_mini_swe_agent import model_for, run_agent

SYSTEM = "You are a helpful assistant."


def test_without_tao_in_the_agent_the_proxy_reports_its_tools(coordinator, start_proxy, tmp_path, capsys):
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    from tao_integrations.mini_swe_agent import TaoEnvironment

    proxy = start_proxy(coordinator.url, coordinator.token)
    model = model_for({"coordinator": coordinator.url, "token": coordinator.token})
    env = TaoEnvironment(wrapped_class="local", timeout=7, cwd=str(tmp_path))
    assert run_agent(model, env, f"mini hello ({uuid.uuid4().hex[:8]})")["exit_status"] == "Submitted"
    hooked = model.session.id
    del model, env
    gc.collect()  # the session closes with its model
    coordinator.recorder.wait_closed(hooked)

    task = f"mini hello ({uuid.uuid4().hex[:8]})"
    kwargs = {"api_key": "x", "api_base": proxy + "/v1", "drop_params": True}
    plain = LitellmModel(model_name=f"hosted_vllm/{MODEL}", model_kwargs=kwargs, cost_tracking="ignore_errors")
    assert run_agent(plain, LocalEnvironment(timeout=7, cwd=str(tmp_path)), task)["exit_status"] == "Submitted"
    conversation = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]}
    inferred = session_id_of({}, conversation)
    assert inferred.startswith("tao-conversation-")

    views = {
        "hooks": tools_after_their_call(timeline(coordinator, hooked)),
        "wire": tools_after_wire_call(timeline(coordinator, inferred)),
    }
    with capsys.disabled():
        print(f"\nhooks: {views['hooks']}\nwire:  {views['wire']}")
    (command, submit), (command_, submit_) = views["hooks"], views["wire"]
    assert command_[:3] == command[:3] == ("bash", "sleep", "ok")
    assert command_[5] <= command[5] + HANDLING_S and command_[5] >= command[5] - 0.05
    assert submit[:3] == ("bash", "echo", "ok") and submit_[:3] == ("bash", "echo", None)  # never ended on the wire


def tools_after_wire_call(view):
    """As `tools_after_their_call`, a tool that has not ended included."""
    ended = [tool for tool in view["tools"] if tool["ended_at"] is not None]
    running = [tool for tool in view["tools"] if tool["ended_at"] is None]
    found = tools_after_their_call({**view, "tools": ended})
    return found + [(t["tool"], t["program"], t["status"], None, None, None) for t in running]


def test_in_one_run_the_wire_shows_the_moments_tao_environment_reports(coordinator, start_proxy, tmp_path, capsys):
    from minisweagent.models.litellm_model import LitellmModel

    from tao_integrations.mini_swe_agent import TaoEnvironment

    log = tmp_path / "tools.jsonl"
    proxy = start_proxy(coordinator.url, coordinator.token, "--tool-log", str(log))
    tao = {"coordinator": coordinator.url, "token": coordinator.token}
    env = TaoEnvironment(wrapped_class="local", timeout=7, cwd=str(tmp_path), tao=tao)
    task = f"mini hello ({uuid.uuid4().hex[:8]})"
    kwargs = {"api_key": "x", "api_base": proxy + "/v1", "drop_params": True}
    plain = LitellmModel(model_name=f"hosted_vllm/{MODEL}", model_kwargs=kwargs, cost_tracking="ignore_errors")
    assert run_agent(plain, env, task)["exit_status"] == "Submitted"
    conversation = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]}
    inferred = timeline(coordinator, session_id_of({}, conversation))
    hooked = timeline(coordinator, env.session().id)
    wire = wire_log(log, inferred["session_id"])
    reported = gaps(inferred, wire)
    # the environment's call ids are its own: its tools pair with the wire's in order
    same_run = []
    for tool, seen in zip(hooked["tools"], sorted(wire.values(), key=lambda call: call["start"]), strict=True):
        assert (tool["tool"], tool["program"]) == (seen["tool"], seen["program"])
        end = round(tool["ended_at"] - seen["end"], 3) if seen["end"] is not None else None
        same_run.append((tool["tool"], tool["program"], round(tool["started_at"] - seen["start"], 3), end))
    assert [end is None for *_, end in same_run] == [False, True]  # the submission's result is never sent
    assert_same_moments(same_run, reported, capsys, "mini-swe-agent")
