"""Claude Code on a fleet serving two models: four fake vLLM nodes (node-0 and node-1 serve a large model, node-2
and node-3 a small one, each answering 404 for any other name, as vLLM does), a real coordinator that learns what
each serves from its `/v1/models`, and `claude -p` through `tao proxy` with its small fast model set — once with
TAO's hooks (`tao install claude-code --model LARGE --small-model SMALL`) and once without them — then the same
two-model flow through the SDK.

Claude Code 2.1.197 in `-p` mode asks its small model in two places (read in its bundled source): the tool-use
summaries of the main agent, with `CLAUDE_CODE_EMIT_TOOL_USE_SUMMARIES=1`, and the built-in Explore subagent, whose
`haiku` is `ANTHROPIC_DEFAULT_HAIKU_MODEL` unless `CLAUDE_CODE_SUBAGENT_MODEL` puts every subagent elsewhere. The
scripted task asks for an Explore subagent, then a Bash command. What each node answered is read from the nodes
themselves (a middleware of the test's, recording every request's path, model and status), where the coordinator
routed each call from its core's events; the test prints the calls per node and model."""

import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp import web

import tao_sdk
from tao_coordinator.core.actions import Route
from tao_coordinator.core.events import Acquire, LlmEnd
from tao_coordinator.fakevllm import FakeNodeConfig, ReplyPolicy, ThreadedFleet
from tao_sdk import cli

from .conftest import HELLO, claude_env, harness, hook_log

LARGE, SMALL = "org/large-32b", "org/small-4b"
LARGE_NODES, SMALL_NODES = ("node-0", "node-1"), ("node-2", "node-3")
TASK = "claude-code two models"
EXPLORE = "explore-two-models: which files are here?"
SCRIPTS = [
    {
        "match": {"contains": TASK},
        "steps": [
            {"tool": "Agent", "input": {"subagent_type": "Explore", "description": "Look around", "prompt": EXPLORE}},
            {"bash": HELLO, "timeout_ms": 5000},
            {"text": "All done."},
        ],
    },
    {"match": {"contains": "explore-two-models"}, "steps": [{"text": "Nothing but a settings file."}]},
]


@dataclass(frozen=True)
class Answered:
    """One request a fake node answered."""

    node: str
    path: str
    model: str | None
    status: int
    explores: bool
    """A call of the Explore subagent (its conversation starts with the scripted prompt)."""


def answers_of(node: str, log: list[Answered]) -> Any:
    """A middleware recording every model request the node answers (its status, whatever raised)."""

    @web.middleware
    async def record(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method != "POST" or not request.path.startswith("/v1/"):
            return await handler(request)
        try:
            body = await request.json()
        except ValueError:
            body = {}
        model = body.get("model")
        # a tool-use summary of the Agent call quotes the prompt too, but offers no tools
        explores = EXPLORE in json.dumps(body.get("messages", [None])[0]) and bool(body.get("tools"))
        try:
            response = await handler(request)
        except web.HTTPException as error:
            log.append(Answered(node, request.path, model, error.status, explores))
            raise
        log.append(Answered(node, request.path, model, response.status, explores))
        return response

    return record


@pytest.fixture(scope="module")
def fleet() -> Iterator[ThreadedFleet]:
    """The module's fleet (in place of conftest's): two large-model nodes, two small-model ones."""
    policy = ReplyPolicy.model_validate({"filler_tokens": 8, "scripts": SCRIPTS})
    configs = [FakeNodeConfig(time_scale=20, served_model_name=m, policy=policy) for m in (LARGE, LARGE, SMALL, SMALL)]
    running = ThreadedFleet(configs, kv_events=False)
    log: list[Answered] = []
    for k, node in enumerate(running.nodes):
        node.app.middlewares.insert(0, answers_of(f"node-{k}", log))  # outside the error middleware: real statuses
    with running:
        running.answered = log  # type: ignore[attr-defined]
        yield running


@pytest.fixture
def two_model_coordinator(coordinator: Any) -> Any:
    """The coordinator, once it has read what every node serves."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        nodes = coordinator.service.coordinator.nodes
        if len(nodes) == 4 and all(node.models is not None for node in nodes.values()):
            break
        time.sleep(0.05)
    served = {name: node.models for name, node in coordinator.service.coordinator.nodes.items()}
    assert served == {
        **dict.fromkeys(LARGE_NODES, frozenset({LARGE})),
        **dict.fromkeys(SMALL_NODES, frozenset({SMALL})),
    }
    listed = httpx2.get(f"{coordinator.url}/v1/nodes", headers={"Authorization": f"Bearer {coordinator.token}"})
    assert {n["name"]: (n["models"], n["models_from"]) for n in listed.json()["nodes"]} == {
        **dict.fromkeys(LARGE_NODES, ([LARGE], "node")),
        **dict.fromkeys(SMALL_NODES, ([SMALL], "node")),
    }
    return coordinator


@pytest.fixture
def claude() -> str:
    return harness("claude", "npm @anthropic-ai/claude-code")


def routes(recorder: Any, session_id: str) -> list[tuple[str, Route]]:
    """Every route of the session's calls, with the model its acquire asked for (empty for a call the waiting pool
    held and a plan placed: a call of the session's main model)."""
    found = []
    for event, actions in list(recorder.items):
        model = (event.model or "") if isinstance(event, Acquire) and event.session_id == session_id else ""
        found += [(model, a) for a in actions if isinstance(a, Route) and a.session_id == session_id]
    return found


def check_two_models(answered: list[Answered], routed: list[tuple[str, Route]]) -> Counter[tuple[str, str]]:
    """Assert what the issue asks of a two-model run; the model calls per (node, model)."""
    calls = [a for a in answered if a.path in ("/v1/messages", "/v1/chat/completions")]
    assert [a for a in answered if a.status != 200] == [], "a node answered a request with an error"
    assert all(a.node in (SMALL_NODES if a.model == SMALL else LARGE_NODES) for a in calls), calls
    assert {a.model for a in calls} == {LARGE, SMALL}
    side = [(model, route) for model, route in routed if route.side]
    assert side and all(model == SMALL and route.node in SMALL_NODES for model, route in side), routed
    assert all(route.node in LARGE_NODES for model, route in routed if not route.side), routed
    assert len(routed) == len(calls)  # every call the nodes answered was placed by the coordinator
    return Counter((a.node, a.model or "") for a in calls)


def test_claude_code_small_model_calls_run_on_small_model_nodes_with_and_without_hooks(
    claude: str, two_model_coordinator: Any, start_proxy: Any, fleet: ThreadedFleet, tmp_path: Any, capsys: Any
) -> None:
    coordinator = two_model_coordinator
    proxy = start_proxy(coordinator.url, coordinator.token)
    figures = {}
    for hooks in (True, False):
        project = tmp_path / f"project-{hooks}"
        project.mkdir()
        first = len(fleet.answered)  # type: ignore[attr-defined]
        result = run_two_models(claude, project, proxy, hooks)
        assert result["result"] == "All done."
        if hooks:
            coordinator.recorder.wait_closed(result["session_id"], hooks_said=hook_log(tmp_path / "home-True"))
        answered = fleet.answered[first:]  # type: ignore[attr-defined]
        routed = routes(coordinator.recorder, result["session_id"])
        figures[hooks] = check_two_models(answered, routed)
        # the Explore subagent's call went to the small model, as the tool-use summaries did
        assert [(a.model, a.node in SMALL_NODES) for a in answered if a.explores] == [(SMALL, True)]
        ends = coordinator.recorder.events(LlmEnd, result["session_id"])
        assert len(ends) == len(routed) and not [e for e in ends if e.error]
    with capsys.disabled():
        for hooks, counts in figures.items():
            print(f"\n{'hooks' if hooks else 'hook-free'}: {dict(sorted(counts.items()))}")
    # the same calls with hooks and without (the nodes each went to may differ)
    assert Counter(m for (_, m), n in figures[True].items() for _ in range(n)) == Counter(
        m for (_, m), n in figures[False].items() for _ in range(n)
    )


def run_two_models(binary: str, project: Path, proxy: str, hooks: bool) -> dict[str, Any]:
    """`claude -p` on the scripted task in `project` with the small fast model set (by `tao install` with hooks, else
    by the project's settings file alone), tool-use summaries on, subagents free to take their own model; its
    JSON result."""
    if hooks:
        install = ["install", "claude-code", "--project", str(project), "--proxy", proxy]
        assert cli.main([*install, "--model", LARGE, "--small-model", SMALL]) == 0
    else:
        models = {"ANTHROPIC_MODEL": LARGE, "ANTHROPIC_SMALL_FAST_MODEL": SMALL, "ANTHROPIC_DEFAULT_HAIKU_MODEL": SMALL}
        (project / ".claude").mkdir(parents=True, exist_ok=True)
        settings = {"env": {"ANTHROPIC_BASE_URL": proxy, **models}}
        (project / ".claude" / "settings.local.json").write_text(json.dumps(settings))
    env = claude_env(project, project.parent / f"home-{hooks}") | {"CLAUDE_CODE_EMIT_TOOL_USE_SUMMARIES": "1"}
    prompt = f"{TASK} ({uuid.uuid4().hex[:8]})"
    command = [binary, "-p", prompt, "--allowedTools", "Bash,Agent", "--output-format", "json"]
    completed = subprocess.run(command, cwd=project, env=env, capture_output=True, timeout=150, check=False)
    assert completed.returncode == 0, completed.stderr.decode()[-2000:] + completed.stdout.decode()[-2000:]
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def test_the_same_two_model_flow_through_the_sdk(two_model_coordinator: Any, fleet: ThreadedFleet, capsys: Any) -> None:
    coordinator = two_model_coordinator
    first = len(fleet.answered)  # type: ignore[attr-defined]
    context = tao_sdk.AgentContext(harness="claude-code", model=LARGE)
    with tao_sdk.session(coordinator.url, coordinator.token, context) as s:
        client = s.anthropic()
        for turn in range(3):
            main = [{"role": "user", "content": f"{TASK}, step {turn} " + "shared context " * 40}]
            assert client.messages.create(model=LARGE, max_tokens=8, messages=main).content
            with s.tool("Bash", command=HELLO):
                pass
            summary = [{"role": "user", "content": f"Tools completed: Bash, step {turn}. Label:"}]
            assert client.messages.create(model=SMALL, max_tokens=8, messages=summary).content
        s.flush()
        session_id = s.id
    counts = check_two_models(fleet.answered[first:], routes(coordinator.recorder, session_id))  # type: ignore[attr-defined]
    with capsys.disabled():
        print(f"\nsdk: {dict(sorted(counts.items()))}")
    assert sum(n for (_, model), n in counts.items() if model == LARGE) == 3
    assert sum(n for (_, model), n in counts.items() if model == SMALL) == 3
