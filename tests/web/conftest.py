"""A real coordinator on a loopback port beside real fake-vLLM nodes, for the service's end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tao_coordinator.config import CoordinatorConfig
from tao_coordinator.fakevllm import FakeFleet, FakeNodeConfig
from tao_coordinator.web import serve
from tao_coordinator.web.app import create_app
from tao_coordinator.web.keys import SERVICE
from tao_coordinator.web.service import CoordinatorService
from tao_sdk.listening import listen

API_TOKEN = "test-api-token-0123456789"
PROMPT = 30_000


@dataclass
class Running:
    url: str
    http: aiohttp.ClientSession
    app: web.Application
    fleet: FakeFleet
    site: serve.LimitedSite

    @property
    def service(self) -> CoordinatorService:
        return self.app[SERVICE]

    async def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.request(method, self.url + path, json=body, headers=headers) as response:
            text = await response.text()
            return response.status, (await response.json() if text else None)

    async def metric(self, name: str, **labels: str) -> float:
        """One sample of the coordinator's `/metrics`, read as a Prometheus scraper would."""
        async with self.http.get(self.url + "/metrics") as response:
            text = await response.text()
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
        return next(s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items()))

    async def settled(self) -> None:
        """Until no plan is in flight or pending: state changes only through requests after this."""
        core = self.service.coordinator
        await eventually(lambda: core.plan_in_flight is None and not core.plan_pending)

    async def register(self, expected: int = PROMPT, token: str | None = API_TOKEN, **fields: Any) -> tuple[str, str]:
        status, body = await self.call("POST", "/v1/sessions", {"expected_input_tokens": expected, **fields}, token)
        assert status == 201, body
        return body["session_id"], body["session_token"]


@asynccontextmanager
async def running_coordinator(
    state_dir: Path,
    fleet: FakeFleet,
    *,
    capacity: int | None = None,
    kv_events: bool = False,
    core: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    nodes: list[dict[str, Any]] | None = None,
    **sections: Any,
) -> AsyncIterator[Running]:
    """`nodes`: the node entries as given, instead of one per fake server; `sections`: more sections of the
    configuration (`limits`, `tokens`)."""
    given, nodes = nodes, []
    for k, node in enumerate(fleet.nodes if given is None else []):
        entry: dict[str, Any] = {"name": f"node-{k}", "url": node.url}
        if capacity is not None:
            entry["capacity_tokens"] = capacity
        if kv_events and node.kv_endpoint:
            entry["kv_events"] = node.kv_endpoint
            entry["kv_events_replay"] = node.kv_replay_endpoint
        nodes.append(entry)
    nodes = nodes if given is None else given
    config = CoordinatorConfig.model_validate(
        {
            "server": {"token": API_TOKEN, "state_dir": str(state_dir), "port": 0, **(server or {})},
            "fleet": {"scrape_interval_s": 0.1, "scrape_timeout_s": 0.5, "kv_flush_interval_s": 0.05},
            "nodes": nodes,
            "core": {"lease_ttl_s": 600, **(core or {})},
            **sections,
        }
    )
    app = create_app(config)
    runner = serve.runner(app, config.server, access_log=None)
    await runner.setup()
    sock = listen("127.0.0.1", 0)
    site = serve.LimitedSite(runner, sock, config.server.max_connections)
    await site.start()
    port = sock.getsockname()[1]
    try:
        async with aiohttp.ClientSession() as http:
            running = Running(f"http://127.0.0.1:{port}", http, app, fleet, site)
            await eventually(lambda: len(running.service.coordinator.nodes) == len(nodes))
            yield running
    finally:
        await runner.cleanup()


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@pytest.fixture
async def fleet() -> AsyncIterator[FakeFleet]:
    async with FakeFleet(2, FakeNodeConfig(time_scale=50)) as running:
        yield running


async def raw_exchange(
    url: str, request: bytes, timeout: float = 5.0, half_close: bool = False
) -> tuple[int | None, bytes, float]:
    """Send raw bytes on a fresh connection (then close our side for writing, if `half_close`); read until the
    server closes it or `timeout`. Returns the status of the first response (None if none came), everything read,
    and the seconds it took."""
    host, _, port = url.removeprefix("http://").partition(":")
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        if half_close:
            writer.write_eof()
        try:
            data = await asyncio.wait_for(reader.read(), timeout)
        except (TimeoutError, ConnectionError):
            data = b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None
    return status, data, time.monotonic() - started


def http_request(method: str, path: str, body: bytes = b"", headers: Sequence[tuple[str, bytes]] = ()) -> bytes:
    """One HTTP/1.1 request with `Connection: close`, as bytes; headers are sent exactly as given, repeated ones
    too; Content-Type and Content-Length are added unless given (or Transfer-Encoding is)."""
    given = {name.lower() for name, _ in headers}
    defaults = [("Content-Type", b"application/json"), ("Content-Length", str(len(body)).encode())]
    if "transfer-encoding" in given:
        given.add("content-length")
    chosen = [*(pair for pair in defaults if pair[0].lower() not in given), *headers]
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close"]
    lines += [name.encode() + b": " + value for name, value in chosen]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
