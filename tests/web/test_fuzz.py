"""Fuzzing the API from its own OpenAPI description (schemathesis), with auth on: whatever arrives, never a 5xx.

The coordinator runs on a loopback port in a thread of its own, served as `tao coordinator` serves it
(`web/serve.py`), beside one fake vLLM node. Every operation of the description is fuzzed, registration included.
Most generated calls carry a valid token — the API's, or for about half of the session calls the session's own
with the path pointing at a registered session — so they get past authentication into validation and the state
machine; the rest carry none or a wrong one. `test_enough_cases_ran` checks the run's size (≥ `MIN_CASES`).
"""

import asyncio
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tao_coordinator.config import CoordinatorConfig
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.web import serve
from tao_coordinator.web.app import create_app
from tao_coordinator.web.openapi import build_spec
from tao_sdk.listening import listen

API_TOKEN = "fuzz-api-token-0123456789"
SESSION = "fuzzed"
MIN_CASES = 2_000
CASES_PER_OPERATION = 200
ran: Counter[str] = Counter()
statuses: Counter[int] = Counter()


class _Server:
    def __init__(self, state_dir: Path, node_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.config = CoordinatorConfig.model_validate(
            {
                "server": {"token": API_TOKEN, "state_dir": str(state_dir), "acquire_wait_s": 0.2},
                "nodes": [{"name": "n0", "url": node_url}],
                "fleet": {"scrape_interval_s": 0.2},
            }
        )
        self.runner = serve.runner(create_app(self.config), self.config.server, access_log=None)
        self.url = ""
        self.session_token = ""

    def __enter__(self) -> "_Server":
        self.thread.start()
        sock = listen("127.0.0.1", 0)

        async def start() -> None:
            await self.runner.setup()
            await serve.LimitedSite(self.runner, sock, self.config.server.max_connections).start()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.register()
        return self

    def register(self) -> None:
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        answer = requests.post(f"{self.url}/v1/sessions", json={"session_id": SESSION}, headers=headers, timeout=5)
        assert answer.status_code == 201, answer.text
        self.session_token = answer.json()["session_token"]

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Server]:
    with (
        ThreadedFleet(1, FakeNodeConfig(time_scale=50)) as fleet,
        _Server(tmp_path_factory.mktemp("fuzz-state"), fleet.urls[0]) as running,
    ):
        yield running


def _choice(case: schemathesis.Case) -> int:
    """A stable pseudo-random number in 0..99 from the case's contents (hypothesis shrinks reproducibly)."""
    return zlib.crc32(repr((case.path_parameters, case.body, case.headers)).encode()) % 100


def _authorize(case: schemathesis.Case, server: _Server) -> dict[str, str]:
    pick = _choice(case)
    if pick < 10:
        return {}  # whatever schemathesis generated, or nothing
    if pick < 15:
        return {"Authorization": "Bearer not-a-token"}
    if "session_id" in (case.path_parameters or {}):
        if pick < 60:
            case.path_parameters["session_id"] = SESSION
            return {"Authorization": f"Bearer {server.session_token}"}
        return {"Authorization": f"Bearer {API_TOKEN}"}  # not a session token: refused like a guess
    if case.path == "/v1/nodes" and isinstance(case.body, dict):
        _on_loopback(case.body)
    if case.path == "/v1/events" and isinstance(case.body, dict) and isinstance(case.body.get("events"), list):
        for k, event in enumerate(case.body["events"]):
            if isinstance(event, dict) and (pick + k) % 2 == 0 and event.get("kind") != "register":
                event.update(session_id=SESSION, session_token=server.session_token)
    return {"Authorization": f"Bearer {API_TOKEN}"}


def _on_loopback(node: dict[str, Any]) -> None:
    """A node the fuzzer adds is addressed on loopback (a closed port): the coordinator scrapes and subscribes to it,
    and must not resolve generated host names off this machine. Every other field stays as generated."""
    for key, scheme in (("url", "http"), ("kv_events", "tcp"), ("kv_events_replay", "tcp")):
        if isinstance(node.get(key), str):
            node[key] = f"{scheme}://127.0.0.1:9"


schema = schemathesis.openapi.from_dict(build_spec())


@schema.parametrize()
@settings(max_examples=CASES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_request_gets_a_server_error(case: schemathesis.Case, server: _Server) -> None:
    headers: dict[str, Any] = _authorize(case, server)
    response = case.call(base_url=server.url, headers=headers, timeout=10)
    ran[f"{case.method} {case.path}"] += 1
    statuses[response.status_code] += 1
    if case.method == "DELETE" and response.status_code == 204 and case.path_parameters.get("session_id") == SESSION:
        server.register()
    case.validate_response(response, checks=(not_a_server_error,))


def test_enough_cases_ran() -> None:
    operations = {f"{method.upper()} {path}" for path, item in build_spec()["paths"].items() for method in item}
    if not operations <= ran.keys():
        pytest.skip("only part of the fuzz run was selected")
    print(
        f"\nfuzzed {sum(ran.values())} cases: {dict(sorted(ran.items()))}; by status {dict(sorted(statuses.items()))}"
    )
    assert sum(ran.values()) >= MIN_CASES, (dict(ran), dict(statuses))
    assert not [status for status in statuses if status >= 500]
