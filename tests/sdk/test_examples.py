"""The examples run as shipped, against fake vLLM nodes and a real coordinator; with the policy docs/quickstart.md
puts on the nodes, the tool-calling examples take their tool branch (on a default node they did not)."""

import ast
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tao_coordinator.core.events import ToolEnd, ToolStart
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tests.conftest import listen_to_feed

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
EXAMPLE_FILES = ["openai_agent.py", "anthropic_agent.py", "async_agents.py"]
TOOL_EXAMPLES = ["openai_agent.py", "anthropic_agent.py"]


@pytest.fixture(scope="module")
def fleet():
    with ThreadedFleet(1, FakeNodeConfig(time_scale=100)) as running:
        yield running


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_example_runs_against_a_coordinator_with_a_token(example, fleet, coordinator_factory):
    coordinator = coordinator_factory(fleet.urls)
    assert coordinator.token
    env = {**os.environ, "TAO_COORDINATOR": coordinator.url, "TAO_TOKEN": coordinator.token}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert not coordinator.service.coordinator.sessions  # every session closed on exit
    assert coordinator.service.coordinator.plan_stats.started > 0  # registered: not routing on its own after a 401


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_example_docstring_names_both_settings_the_sdk_reads(example):
    doc = ast.get_docstring(ast.parse((EXAMPLES / example).read_text())) or ""
    assert "TAO_COORDINATOR=" in doc and "TAO_TOKEN" in doc


def quickstart_policy() -> str:
    """The body of docs/quickstart.md's `PUT /fake/policy` command."""
    text = (REPO / "docs" / "quickstart.md").read_text()
    [body] = re.findall(r"/fake/policy \\\n\s*-d '(\{.*?\})'", text)
    return body


@pytest.fixture(scope="module")
def scripted_fleet():
    """Two default nodes given the quickstart's policy the way the quickstart gives it: `PUT /fake/policy`."""
    with ThreadedFleet(2, FakeNodeConfig(time_scale=100)) as running:
        for url in running.urls:
            request = urllib.request.Request(url + "/fake/policy", data=quickstart_policy().encode(), method="PUT")
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200
        yield running


@pytest.mark.parametrize("example", TOOL_EXAMPLES)
def test_with_the_quickstart_policy_the_example_runs_its_tool(example, scripted_fleet, coordinator_factory):
    coordinator = coordinator_factory(scripted_fleet.urls)
    fed = []
    listen_to_feed(coordinator.service, lambda event, actions, error: fed.append(event))
    env = {**os.environ, "TAO_COORDINATOR": coordinator.url, "TAO_TOKEN": coordinator.token}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example)], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    final = json.loads(quickstart_policy())["scripts"][0]["steps"][-1]["text"]
    assert done.stdout.strip() == final  # the scripted final answer, after the tool ran
    [start] = [event for event in fed if isinstance(event, ToolStart)]
    [end] = [event for event in fed if isinstance(event, ToolEnd)]
    assert (start.tool, start.program, start.hints.timeout_s) == ("bash", "ls", 60.0)
    assert (end.call_id, end.status) == (start.call_id, "ok")


def test_the_examples_readme_says_how_to_make_a_fake_node_call_a_tool_and_the_tool_examples_point_to_it():
    readme = (EXAMPLES / "README.md").read_text()
    assert "/fake/policy" in readme and quickstart_policy() in readme
    assert all(f"`{example}`" in readme for example in EXAMPLE_FILES)
    for example in TOOL_EXAMPLES:
        doc = ast.get_docstring(ast.parse((EXAMPLES / example).read_text())) or ""
        assert "README.md" in doc and "fake node" in doc
