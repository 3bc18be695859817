"""The fleet's membership while the coordinator runs: nodes added, drained and removed without a restart.

Changes come from four places, each through this one module: the operator's API (`POST /v1/nodes`,
`DELETE /v1/nodes/{name}`, `POST /v1/nodes/{name}/drain`, `handlers.py`), the configuration file re-read on SIGHUP
(`reload`), DNS discovery (`fleet/discovery.py`, `discovered`), and the core itself (`NodeRetired`: a node drained
with `remove` that no session holds any more, `retired`).

Invariants:
- `nodes` (shared with the fleet watch, the metrics and the handlers) holds exactly the nodes watched: a node is
  added to it before its poller starts, and its poller and KV subscribers are stopped before it leaves it;
- a removal reaches the core (`NodeRemoved`) only after the node's poller is stopped, so no scrape adds it back;
- the drains this coordinator asked for are kept here and told again to every core built anew (`replay`): a
  replica's takeover, or a standby's forgotten state, keeps them; a node drained before the core knew it is drained
  as its first scrape reaches the core;
- each node's origin (`config`, `api` or `dns`) is kept: a SIGHUP applies the file's difference to the nodes the
  file gave, and a discovery loop's to the nodes it found, never to another origin's;
- with a store (`persist`, several replicas on Redis, `ha/membership.py`) every change the leader makes is stored
  before the request that made it is answered, and a replica that takes over applies what is stored (`apply_stored`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..config import CoordinatorConfig, NodeConfig
from ..core.events import NodeDrain, NodeRemoved, NodeUpdate
from ..fleet.discovery import Change, DiscoveredNode
from .core_slot import CoreSlot
from .fleet_watch import FleetWatch

log = logging.getLogger("tao.coordinator.membership")

Origin = Literal["config", "api", "dns"]


class MembershipError(Exception):
    """A change the fleet cannot make: `status` 404 (no such node), 409 (a node of that name is in the fleet) or 422
    (a node whose KV-event endpoints cannot be followed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DrainRequest(BaseModel):
    """`POST /v1/nodes/{name}/drain`: stop admitting on the node; with `remove`, remove it once no session holds a
    place there."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
    remove: bool = False
    """Remove the node once no session holds a place there (its last running call ended and its holders moved)."""


class StoredNode(BaseModel):
    """What a leader stores of one node it changed at run time: its configuration (None: removed) and its drain."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    node: NodeConfig | None
    origin: Origin = "api"
    draining: bool = False
    remove: bool = False


Persist = Callable[[str, StoredNode], Awaitable[None]]


class FleetMembership:
    def __init__(
        self,
        nodes: dict[str, NodeConfig],
        urls: dict[str, str],
        fleet: FleetWatch,
        core: CoreSlot,
        feed: Callable[[NodeUpdate | NodeDrain | NodeRemoved], object],
    ) -> None:
        self.nodes = nodes
        self.urls = urls
        """Each node's URL, as the demotion prober reads it (`demotions.py`)."""
        self.fleet = fleet
        self.core = core
        self.feed = feed
        self.origins: dict[str, Origin] = {name: "config" for name in nodes}
        self.draining: dict[str, bool] = {}
        """The nodes drained by this coordinator, and whether each is removed once empty."""
        self.persist: Persist | None = None
        """Stores a change before it is answered (set by a replica that leads); None: nothing is stored."""
        self._retiring: set[asyncio.Task[None]] = set()
        fleet.joined = self._joined

    # -- changes -----------------------------------------------------------------------------------------------------

    async def add(self, node: NodeConfig, origin: Origin = "api") -> None:
        """Start watching `node`; 409 when a node of that name is in the fleet."""
        if node.name in self.nodes:
            raise MembershipError(409, f"node {node.name!r} is in the fleet already; remove it first")
        self._watch(node, origin)
        log.info("node %s added (%s): %s", node.name, origin, node.url)
        await self._store(node.name, StoredNode(node=node, origin=origin))

    async def drain(self, name: str, remove: bool = False) -> None:
        """Stop admitting on node `name` (`NodeDrain`); 404 when the fleet has no such node."""
        self._known(name)
        if name in self.core.coordinator.nodes:
            self.feed(NodeDrain(name, remove))
        self.draining[name] = remove or self.draining.get(name, False)
        log.info("node %s draining%s", name, ", removed once empty" if self.draining[name] else "")
        node = self.nodes.get(name)
        await self._store(
            name, StoredNode(node=node, origin=self.origins.get(name, "api"), draining=True, remove=remove)
        )

    async def remove(self, name: str) -> None:
        """Stop watching node `name` and remove it from the core (`NodeRemoved`); 404 when there is none."""
        self._known(name)
        await self._forget(name)
        log.info("node %s removed", name)
        await self._store(name, StoredNode(node=None))

    def retired(self, name: str) -> None:
        """The core removed a drained node (`NodeRetired`): stop watching it, off the caller's event."""
        task = asyncio.get_running_loop().create_task(self._retire(name), name=f"retire {name}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire(self, name: str) -> None:
        await self._forget(name)
        log.info("node %s drained and removed", name)
        await self._store(name, StoredNode(node=None))

    def replay(self) -> None:
        """Tell a core built anew the drains this coordinator asked for (after the fleet watch's `replay`)."""
        for name, remove in list(self.draining.items()):
            if name in self.core.coordinator.nodes:
                self.feed(NodeDrain(name, remove))

    def _joined(self, name: str) -> None:
        """A node drained before its first scrape reached the core is drained as it joins."""
        if name in self.draining and name in self.core.coordinator.nodes:
            self.feed(NodeDrain(name, self.draining[name]))

    # -- SIGHUP and discovery ----------------------------------------------------------------------------------------

    async def reload(self, config: CoordinatorConfig) -> tuple[list[str], list[str]]:
        """Apply the difference between the file's nodes and those it gave before: nodes added, nodes removed (a
        node whose settings changed is both). Returns the names added and removed."""
        wanted = {node.name: node for node in config.nodes}
        ours = {name for name, origin in self.origins.items() if origin == "config"}
        removed = sorted(name for name in ours if name not in wanted or wanted[name] != self.nodes.get(name))
        taken = sorted(name for name in wanted if name in self.nodes and name not in ours)
        if taken:
            log.warning("SIGHUP: nodes %s are in the fleet already from the API or DNS: kept as they are", taken)
        for name in removed:
            await self.remove(name)
        added = sorted(name for name in wanted if name not in self.nodes)
        for name in added:
            await self.add(wanted[name], "config")
        return added, removed

    async def discovered(self, change: Change[DiscoveredNode]) -> None:
        """A discovery loop's change: found nodes are added; nodes gone from DNS drain and are removed once empty."""
        for found in sorted(change.added):
            if found.name in self.nodes:
                continue
            await self.add(NodeConfig(name=found.name, url=found.url), "dns")
        for gone in sorted(change.removed):
            if self.origins.get(gone.name) == "dns":
                await self.drain(gone.name, remove=True)
                if gone.name not in self.core.coordinator.nodes:
                    await self.remove(gone.name)  # never scraped: nothing to drain

    # -- several replicas ------------------------------------------------------------------------------------------

    def apply_stored(self, stored: Mapping[str, StoredNode]) -> None:
        """Take the run-time changes a leader stored (a replica that takes over): add, remove and drain as they
        say. Runs before the stored sessions are restored, so that they find their nodes."""
        for name, entry in sorted(stored.items()):
            current = self.nodes.get(name)
            if current is not None and current != entry.node:
                self._unwatch_now(name)
            if entry.node is not None and name not in self.nodes:
                self._watch(entry.node, entry.origin)
            if entry.draining and name in self.nodes:
                self.draining[name] = entry.remove
        self.replay()

    # -- helpers -----------------------------------------------------------------------------------------------------

    def _known(self, name: str) -> None:
        if name not in self.nodes:
            raise MembershipError(404, f"no node {name!r} in the fleet")

    def _watch(self, node: NodeConfig, origin: Origin) -> None:
        try:
            self.fleet.watch(node)
        except ValueError as error:
            raise MembershipError(422, f"node {node.name!r}: {error}") from None
        self.nodes[node.name] = node
        self.urls[node.name] = node.url
        self.origins[node.name] = origin
        if node.capacity_tokens is not None:
            self.feed(NodeUpdate(node.name, node.capacity_tokens))

    async def _forget(self, name: str) -> None:
        self.nodes.pop(name, None)
        await self.fleet.unwatch(name)
        self._drop(name)

    def _unwatch_now(self, name: str) -> None:
        self.nodes.pop(name, None)
        task = asyncio.get_running_loop().create_task(self.fleet.unwatch(name), name=f"unwatch {name}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        self._drop(name)

    def _drop(self, name: str) -> None:
        self.urls.pop(name, None)
        self.origins.pop(name, None)
        self.draining.pop(name, None)
        if name in self.core.coordinator.nodes:
            self.feed(NodeRemoved(name))

    async def _store(self, name: str, entry: StoredNode) -> None:
        if self.persist is not None:
            await self.persist(name, entry)
