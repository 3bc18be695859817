"""The examples run as shipped, against fake vLLM nodes and a real coordinator."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = ["openai_agent.py", "anthropic_agent.py", "async_agents.py"]


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
    assert not coordinator.service.coordinator.state.sessions  # every session closed on exit
    assert coordinator.service.coordinator.planner.stats.started > 0  # registered: not routing on its own after a 401


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_example_docstring_names_both_settings_the_sdk_reads(example):
    doc = ast.get_docstring(ast.parse((EXAMPLES / example).read_text())) or ""
    assert "TAO_COORDINATOR=" in doc and "TAO_TOKEN" in doc
