"""Fake vLLM nodes on loopback ports, in-process: one `FakeNode`, a `FakeFleet` of N, or a fleet on its own thread.

    async with FakeFleet(3, FakeNodeConfig(time_scale=20)) as fleet:       # inside a running event loop
        fleet.urls            # ["http://127.0.0.1:41234", ...]; OpenAI base URL = url + "/v1"
        fleet.kv_endpoints    # ["tcp://127.0.0.1:50123", ...]   (ZMQ PUB, connect a SUB socket)

    with ThreadedFleet(2) as fleet:                                      # from synchronous code (tests, demos)
        openai.OpenAI(base_url=fleet.nodes[0].openai_base_url, api_key="x")

Each node is its own aiohttp application, engine and registry on a free port (`port=0`); with `kv_events=True` a
node without its own `KvEventsConfig` gets a PUB and a replay socket on free loopback ports and the topic
`kv@<index>`. Nodes listen on 127.0.0.1 unless their config says otherwise. Stopping a node closes its sockets
and cancels the requests in flight (streams end; vLLM would drop them too).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypeVar

from aiohttp import web

from .app import create_node_app
from .config import FakeNodeConfig
from .http_common import NODE_SERVICE
from .kv_publisher import KvEventsConfig
from .service import NodeService

Result = TypeVar("Result")


class FakeNode:
    def __init__(self, config: FakeNodeConfig | None = None) -> None:
        self.config = config or FakeNodeConfig()
        self.app = create_node_app(self.config)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def service(self) -> NodeService:
        return self.app[NODE_SERVICE]

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the fake node is not started")
        return f"http://{self.config.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def kv_endpoint(self) -> str | None:
        publisher = self.service.publisher
        return None if publisher is None else publisher.endpoint

    @property
    def kv_replay_endpoint(self) -> str | None:
        publisher = self.service.publisher
        return None if publisher is None else publisher.replay_endpoint

    async def start(self) -> FakeNode:
        runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()  # starts the service (engine task, ZMQ sockets)
        self._runner = runner
        try:
            await web.TCPSite(runner, self.config.host, self.config.port).start()
        except BaseException:
            await self.stop()
            raise
        self.port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeNode:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def with_loopback_kv_events(config: FakeNodeConfig, index: int) -> FakeNodeConfig:
    """The config with a KV publisher on free loopback ports, unless it already has one."""
    if config.kv_events is not None:
        return config
    events = KvEventsConfig(endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*", topic=f"kv@{index}")
    return config.model_copy(update={"kv_events": events})


class FakeFleet:
    def __init__(
        self, nodes: int | Sequence[FakeNodeConfig] = 1, config: FakeNodeConfig | None = None, *, kv_events: bool = True
    ) -> None:
        configs = [config or FakeNodeConfig()] * nodes if isinstance(nodes, int) else list(nodes)
        if kv_events:
            configs = [with_loopback_kv_events(c, i) for i, c in enumerate(configs)]
        self.nodes = [FakeNode(c) for c in configs]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def kv_endpoints(self) -> list[str | None]:
        return [node.kv_endpoint for node in self.nodes]

    async def start(self) -> FakeFleet:
        try:
            for node in self.nodes:
                await node.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        await asyncio.gather(*(node.stop() for node in self.nodes))

    async def __aenter__(self) -> FakeFleet:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class ThreadedFleet:
    """A `FakeFleet` on its own event loop in a daemon thread; `call` runs a function on that loop."""

    def __init__(
        self, nodes: int | Sequence[FakeNodeConfig] = 1, config: FakeNodeConfig | None = None, *, kv_events: bool = True
    ) -> None:
        self.fleet = FakeFleet(nodes, config, kv_events=kv_events)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-vllm-fleet", daemon=True)

    @property
    def nodes(self) -> list[FakeNode]:
        return self.fleet.nodes

    @property
    def urls(self) -> list[str]:
        return self.fleet.urls

    def call(self, function: Callable[[], Result], timeout: float = 10.0) -> Result:
        async def run() -> Result:
            return function()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def start(self, timeout: float = 10.0) -> ThreadedFleet:
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.fleet.start(), self._loop).result(timeout)
        except BaseException:
            self._shut_loop(timeout)
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.fleet.stop(), self._loop).result(timeout)
        finally:
            self._shut_loop(timeout)

    def _shut_loop(self, timeout: float) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._loop.close()

    def __enter__(self) -> ThreadedFleet:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
