"""Fixtures of the SDK tests: two fake vLLM nodes per module, and a real coordinator beside them per test."""

import pytest

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet


@pytest.fixture(scope="module")
def fleet():
    with ThreadedFleet(2, FakeNodeConfig(time_scale=50)) as running:
        yield running


@pytest.fixture
def coordinator(coordinator_factory, fleet):
    return coordinator_factory(fleet.urls)
