"""Where nodes come from while the coordinator runs, besides the operator's API: the configuration file read again
on SIGHUP, and DNS names looked up on an interval (`fleet/discovery.py`). Both hand their changes to the fleet's
membership (`membership.py`).

Invariants: a file that cannot be read or is not valid changes nothing and says why in one log line; a change is
applied one at a time, in the order it was found (one queue for both sources), so a SIGHUP and a discovery never
interleave their adds and removes; a lookup that fails changes nothing (`fleet/discovery.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..config import ConfigError, CoordinatorConfig, DiscoveryConfig
from ..fleet.discovery import Change, DiscoveredNode, DnsDiscovery
from .membership import FleetMembership

log = logging.getLogger("tao.coordinator.membership")

Reload = Callable[[], CoordinatorConfig]
"""Reads the configuration again, as the command line first read it; raises `ConfigError`."""


class NodeSources:
    def __init__(self, membership: FleetMembership, discovery: list[DiscoveryConfig], reload: Reload | None) -> None:
        self.membership = membership
        self.discovery = [DnsDiscovery(config, self._discovered) for config in discovery]
        self.reload_config = reload
        self._changes: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._apply(), name="membership changes")]
        self._tasks += [
            asyncio.create_task(loop.run(), name=f"discovery {loop.config.name}") for loop in self.discovery
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def sighup(self) -> None:
        """Read the configuration again and apply its node list's difference (queued)."""
        self._changes.put_nowait(self._reload)

    async def settled(self) -> None:
        """Return once every change queued so far is applied (tests)."""
        await self._changes.join()

    def _discovered(self, change: Change[DiscoveredNode]) -> None:
        self._changes.put_nowait(lambda: self.membership.discovered(change))

    async def _reload(self) -> None:
        if self.reload_config is None:
            log.warning("SIGHUP: this coordinator has no configuration file to read again")
            return
        try:
            config = self.reload_config()
        except ConfigError as error:
            log.error("SIGHUP: the configuration was not applied, nothing changed: %s", error)
            return
        added, removed = await self.membership.reload(config)
        log.info("SIGHUP: nodes added %s; removed %s", ", ".join(added) or "none", ", ".join(removed) or "none")

    async def _apply(self) -> None:
        while True:
            change = await self._changes.get()
            try:
                await change()
            except Exception:
                log.exception("a membership change could not be applied")
            finally:
                self._changes.task_done()
