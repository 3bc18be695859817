"""The stack the harness tests run against: two scripted fake vLLM nodes, a real coordinator whose core events are
recorded, and `tao proxy` as its own process — the way a user runs them.

The harnesses themselves (`claude`, `opencode` from npm, `mini` from PyPI) run as real processes with a fresh HOME,
offline: every model call goes to the fake nodes. A test skips, naming the package, only when its harness is not
installed; `.ci/run` installs them (npm packages under ~/.cache/tao-ci-npm, whose bin dir is searched too) and sets
`TAO_REQUIRE_HARNESSES=1`, under which a missing harness fails the test instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tao_coordinator.core.actions import Route
from tao_coordinator.core.events import Close, LlmEnd, Register, ToolEnd, ToolStart
from tao_coordinator.fakevllm import FakeNodeConfig, ReplyPolicy, ThreadedFleet
from tests.conftest import listen_to_feed

MODEL = "fake-model"
REPO = Path(__file__).resolve().parents[2]
CI_NPM_BIN = Path.home() / ".cache" / "tao-ci-npm" / "node_modules" / ".bin"
HELLO_SLEEP_S = 1.0
HELLO = f"sleep {HELLO_SLEEP_S:g}; echo hello-from-tao"
SCRIPTS = {
    "claude-code hello": [{"content": "Running it.", "bash": HELLO, "timeout_ms": 5000}, {"text": "All done."}],
    "claude-code background": [
        {"bash": "sleep 4; echo bg-done", "timeout_ms": 5000, "run_in_background": True},
        {"text": "Started it."},
        {"text": "It finished."},
    ],
    "opencode hello": [{"bash": HELLO, "timeout_ms": 5000}, {"text": "All done."}],
    "opencode failure": [{"tool": "read", "input": {"filePath": "/nonexistent/tao/x.txt"}}],
    "mini hello": [{"bash": HELLO}, {"submit": True}],
}
"""Task prompt → the fake nodes' scripted steps (a task's prompt contains its key)."""


def missing_harness(message: str) -> None:
    """Skip the test, or fail it where the harnesses must be installed (`$TAO_REQUIRE_HARNESSES`, set by .ci/run)."""
    if os.environ.get("TAO_REQUIRE_HARNESSES"):
        pytest.fail(f"{message}, and TAO_REQUIRE_HARNESSES is set", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def harness(name: str, package: str) -> str:
    """The harness binary, or skip the test naming the package to install."""
    found = shutil.which(name) or (str(CI_NPM_BIN / name) if (CI_NPM_BIN / name).exists() else None)
    if found is None:
        missing_harness(f"`{name}` is not installed ({package}; .ci/run installs it)")
    assert found is not None
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def python_env(**extra: str) -> dict[str, str]:
    """This environment plus the repository's source roots, so `tao` runs from a checkout too."""
    roots = [str(REPO), str(REPO / "server"), str(REPO / "integrations")]
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def hook_log(home: Path) -> Path:
    """Where TAO's Claude Code hooks of a `claude_env(…, home)` run say what became of each event."""
    return home / "tao-hook.log"


def claude_env(project: Path, home: Path) -> dict[str, str]:
    """The environment of an offline `claude -p` in `project` with its own `home`. Its model calls reach the proxy
    only through the project's settings' `env` block: the base URL here is a dead address (for which Claude Code also
    skips its start-up policy fetches, about 5 s offline)."""
    env = python_env(
        PWD=str(project),
        HOME=str(home),
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        ANTHROPIC_API_KEY="sk-fake",
        ANTHROPIC_BASE_URL="http://127.0.0.1:9",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        TAO_HOOK_LOG=str(hook_log(home)),
    )
    for name in ("TAO_PROXY_URL", "ANTHROPIC_MODEL", "CLAUDECODE", "CLAUDE_CODE_SESSION_ID"):
        env.pop(name, None)
    return env


def opencode_env(project: Path, home: Path) -> dict[str, str]:
    """The environment of an offline `opencode run` in `project` (OpenCode takes its directory from $PWD, not from
    the process's cwd) with its own `home`, reading only the project's configuration."""
    env = python_env(
        PWD=str(project),
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local/state"),
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
    )
    for name in ("TAO_PROXY_URL", "OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG"):
        env.pop(name, None)
    return env


class Recorder:
    """Every event the coordinator's core is fed, with the nodes it routed sessions to (wraps `service.feed`)."""

    def __init__(self, coordinator: Any) -> None:
        self.items: list[tuple[Any, list[Any]]] = []
        self.refused: list[tuple[Any, Exception]] = []
        """Events the core refused (the coordinator answered 4xx), with the error."""
        listen_to_feed(coordinator.service, self._listen)

    def _listen(self, event: Any, actions: list[Any] | None, error: Exception | None) -> None:
        if error is not None:
            self.refused.append((event, error))
        else:
            self.items.append((event, actions or []))

    def events(self, kind: type, session_id: str | None = None) -> list[Any]:
        return [e for e, _ in list(self.items) if isinstance(e, kind) and session_id in (None, e.session_id)]

    def sessions(self, harness_name: str) -> list[str]:
        return [e.session_id for e in self.events(Register) if e.context.harness == harness_name]

    def wait_closed(self, session_id: str, timeout: float = 10.0, hooks_said: Path | None = None) -> None:
        """Wait for the session's close; a failure says what the core was fed, and what the hooks logged to
        `hooks_said` (a `hook_log`)."""
        deadline = time.monotonic() + timeout
        while not self.events(Close, session_id):
            if time.monotonic() >= deadline:
                said = hooks_said.read_text() if hooks_said is not None and hooks_said.exists() else "nothing"
                raise AssertionError(f"session {session_id} was never closed; {self.story(session_id)}; hooks: {said}")
            time.sleep(0.05)

    def story(self, session_id: str) -> str:
        """What the core was fed for the session, and what it refused: the evidence when a wait fails."""

        def mine(event: Any) -> bool:
            return getattr(event, "session_id", None) == session_id

        fed = [type(e).__name__ for e, _ in list(self.items) if mine(e)]
        refused = [f"{type(e).__name__}: {error}" for e, error in list(self.refused) if mine(e)]
        return f"fed {fed}, refused {refused}"

    def tools(self, session_id: str) -> list[tuple[ToolStart, ToolEnd]]:
        """Each reported tool call: its start, and its end (every start must have one)."""
        ends = {e.call_id: e for e in self.events(ToolEnd, session_id)}
        starts = self.events(ToolStart, session_id)
        assert set(ends) == {s.call_id for s in starts}, "tool starts and ends do not pair up"
        return [(start, ends[start.call_id]) for start in starts]

    def calls_on_assigned_node(self, session_id: str) -> list[str]:
        """The node of every model call, each checked against the node the coordinator last routed the session to."""
        assigned: str | None = None
        nodes = []
        for event, actions in list(self.items):
            assigned = next((a.node for a in actions if isinstance(a, Route) and a.session_id == session_id), assigned)
            if isinstance(event, LlmEnd) and event.session_id == session_id:
                assert event.node_id == assigned, f"a call ran on {event.node_id}, the session was assigned {assigned}"
                nodes.append(event.node_id)
        return nodes


def served(fleet: ThreadedFleet) -> list[int]:
    """Model requests each fake node has finished."""
    return [
        fleet.call(lambda n=node: sum(n.service.driver.engine.counters().request_success.values()))
        for node in fleet.nodes
    ]


@pytest.fixture(scope="module")
def fleet() -> Iterator[ThreadedFleet]:
    scripts = [{"match": {"contains": task}, "steps": steps} for task, steps in SCRIPTS.items()]
    policy = ReplyPolicy.model_validate({"filler_tokens": 8, "scripts": scripts})
    with ThreadedFleet(2, FakeNodeConfig(time_scale=20, served_model_name=MODEL, policy=policy)) as running:
        yield running


@pytest.fixture
def coordinator(coordinator_factory: Callable[..., Any], fleet: ThreadedFleet) -> Any:
    running = coordinator_factory(fleet.urls)
    running.recorder = Recorder(running)
    return running


@pytest.fixture
def start_proxy(fleet: ThreadedFleet, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """`start(coordinator_url, token, *more)` runs `tao proxy` (fail-open nodes: the fleet; `more`: more of its
    arguments) and returns its URL."""
    started: list[subprocess.Popen[bytes]] = []

    def start(coordinator_url: str, token: str | None, *more: str) -> str:
        port = free_port()
        command = [sys.executable, "-m", "tao_sdk.cli", "proxy", "--coordinator", coordinator_url, "--port", str(port)]
        command += ["--nodes", ",".join(fleet.urls)] + (["--token", token] if token else []) + list(more)
        with (tmp_path / f"proxy-{port}.log").open("wb") as log:
            started.append(subprocess.Popen(command, env=python_env(), stdout=log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx2.get(url + "/healthz", timeout=1).status_code == 200:
                    return url
            except httpx2.HTTPError:
                pass
            assert started[-1].poll() is None and time.monotonic() < deadline, "tao proxy did not start"
            time.sleep(0.1)

    yield start
    for process in started:
        process.terminate()
        process.wait(10)


@pytest.fixture
def dead_coordinator() -> str:
    """A coordinator URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"
