"""Fuzzing the API from its own OpenAPI description (schemathesis): whatever arrives, never a 5xx.

The coordinator runs on a loopback port in a thread of its own, without auth so generated requests reach the
handlers, beside one fake vLLM node; half of the generated calls target a registered session so they get past the
"unknown session" answer and into the state machine.
"""

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tao_coordinator.config import CoordinatorConfig
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.web.app import create_app
from tao_coordinator.web.openapi import build_spec


class _Server:
    def __init__(self, state_dir: Path, node_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        config = CoordinatorConfig.model_validate(
            {
                "server": {"insecure_no_auth": True, "state_dir": str(state_dir)},
                "nodes": [{"name": "n0", "url": node_url}],
                "fleet": {"scrape_interval_s": 0.2},
            }
        )
        self.runner = web.AppRunner(create_app(config), access_log=None)
        self.url = ""

    def __enter__(self) -> "_Server":
        self.thread.start()

        async def start() -> None:
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", 0).start()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Server]:
    with (
        ThreadedFleet(1, FakeNodeConfig(time_scale=50)) as fleet,
        _Server(tmp_path_factory.mktemp("fuzz-state"), fleet.urls[0]) as running,
    ):
        yield running


@pytest.fixture(scope="module")
def session_id(server: _Server) -> str:
    answer = requests.post(f"{server.url}/v1/sessions", json={"session_id": "fuzzed"}, timeout=5)
    assert answer.status_code == 201
    return "fuzzed"


schema = schemathesis.openapi.from_dict(build_spec())


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: schemathesis.Case, server: _Server, session_id: str) -> None:
    if "session_id" in (case.path_parameters or {}) and hash(str(case.body)) % 2 == 0:
        case.path_parameters["session_id"] = session_id
    if case.path_parameters and "wait_s" in str(case.body):
        case.body = {**case.body, "wait_s": 0} if isinstance(case.body, dict) else case.body
    response = case.call(base_url=server.url, timeout=10)
    case.validate_response(response, checks=(not_a_server_error,))
