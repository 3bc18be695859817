"""Shared test settings: hypothesis profiles (CI runs the same number of examples as a developer), and the header
that states the release of every dependency the suite ran with."""

import asyncio
import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

with contextlib.suppress(ImportError):
    # Imported before any test, when installed (litellm, under mini-swe-agent, imports it): openai 3.63 finalizes an
    # unfinished stream by reading `sys.modules["httpx"]`, and a collection that ran while a test was importing httpx
    # found it half-initialized — an unraisable AttributeError that failed
    # tests/integrations/test_mini_swe_agent.py once in three full runs.
    import httpx  # noqa: F401

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


def dependency_releases() -> str:
    """The installed release of each of tao-sdk's dependencies (every extra)."""
    names = {re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0] for requirement in requires("tao-sdk") or []}
    found = []
    for name in sorted(names - {"tao-sdk"}):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """States the releases the suite ran with, so that a red run after a new release names it (CI installs the
    newest releases the ranges allow, as a fresh machine does)."""
    terminalreporter.write_line(f"ran with: {dependency_releases()}")


def listen_to_feed(service: Any, listener: Callable[[Any, list[Any] | None, Exception | None], None]) -> None:
    """Tell `listener(event, actions, error)` about every event `service` feeds its core from now on (its `feed`,
    wrapped with its whole signature: a finished plan comes with its job and solve time)."""
    feed = service.feed

    def listening(event: Any, *args: Any) -> list[Any]:
        try:
            actions = feed(event, *args)
        except Exception as error:
            listener(event, None, error)
            raise
        listener(event, actions, None)
        return actions

    service.feed = listening


class ThreadedCoordinator:
    """A real coordinator on a loopback port, on an event loop of its own thread (for synchronous tests)."""

    def __init__(self, state_dir: Path, node_urls: list[str], port: int = 0, **config: Any) -> None:
        from aiohttp import web

        from tao_coordinator.config import CoordinatorConfig
        from tao_coordinator.web.app import create_app

        server = {"state_dir": str(state_dir), **config.pop("server", {})}
        if "token" not in server and not server.get("insecure_no_auth"):
            server["token"] = "sdk-test-token-0123456789"
        self.token = server.get("token")
        nodes = [{"name": f"node-{k}", "url": url} for k, url in enumerate(node_urls)]
        self.config = CoordinatorConfig.model_validate(
            {"server": server, "nodes": nodes, "fleet": {"scrape_interval_s": 0.1}, **config}
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner = web.AppRunner(create_app(self.config), access_log=None)
        self.port = port
        self.url = ""

    def start(self) -> "ThreadedCoordinator":
        from aiohttp import web

        self.thread.start()

        async def start() -> None:
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

        self.call(start())
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    def call(self, coroutine: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    @property
    def service(self) -> Any:
        from tao_coordinator.web.keys import SERVICE

        return self.runner.app[SERVICE]

    def stop(self) -> None:
        if self.thread.is_alive():
            self.call(self.runner.cleanup(), timeout=30.0)  # a loaded machine: a replica releases its lease too
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture
def coordinator_factory(tmp_path: Path) -> Iterator[Callable[..., ThreadedCoordinator]]:
    started: list[ThreadedCoordinator] = []

    def start(node_urls: list[str], port: int = 0, **config: Any) -> ThreadedCoordinator:
        """A coordinator over `node_urls` (on `port`, e.g. a stopped one's, when given); `config` as in fleet.toml."""
        coordinator = ThreadedCoordinator(tmp_path / f"state-{len(started)}", node_urls, port, **config).start()
        started.append(coordinator)
        return coordinator

    yield start
    for coordinator in started:
        coordinator.stop()
