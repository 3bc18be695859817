"""The examples run as shipped, against fake vLLM nodes and a real coordinator."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def fleet():
    with ThreadedFleet(1, FakeNodeConfig(time_scale=100)) as running:
        yield running


@pytest.mark.parametrize("example", ["openai_agent.py", "anthropic_agent.py", "async_agents.py"])
def test_example_runs(example, fleet, coordinator_factory):
    coordinator = coordinator_factory(fleet.urls, server={"insecure_no_auth": True})
    env = {**os.environ, "TAO_COORDINATOR": coordinator.url}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert not coordinator.service.coordinator.state.sessions  # every session closed on exit
    assert coordinator.service.coordinator.planner.stats.started > 0
