"""The live service's watch over its fleet: each node's scrapes (`fleet/poller.py`) and KV events
(`fleet/kv_subscriber.py`), turned into the core's `NodeUpdate` and `CacheResidency` events.

Invariants:
- a node with a configured capacity is known to the core before its first scrape; a scrape without capacity, of a node
  the core does not know, is fed as capacity 0 when the node is down (so a fleet with no healthy node is recognised as
  such) and not at all otherwise;
- each node's last scrape is kept: a core built anew (a replica's takeover, `replica.py`) is told the configured
  nodes and then every last scrape again (`replay`), never starts from nothing;
- KV evidence is fed every `kv_flush_interval_s`, only for sessions the current core holds;
- nodes come and go while it runs (`membership.py`): `watch` starts a node's poller and KV subscribers, `unwatch`
  stops them and forgets its last scrape; a scrape of a node no longer in `nodes` is dropped, never fed;
- every event goes through `feed`, the service's one way into the core (`service.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import aiohttp
import zmq.asyncio

from ..config import FleetConfig, NodeConfig
from ..core.events import CacheResidency, NodeUpdate
from ..fleet.kv_index import NodeKvIndex
from ..fleet.kv_subscriber import KvEventSubscriber, rank_endpoint
from ..fleet.poller import NodeObservation, NodePoller
from .core_slot import CoreSlot


class FleetWatch:
    """Polls the nodes of `nodes` and subscribes to their KV events from `start` to `stop`; tells `observed` of every
    scrape before feeding it."""

    def __init__(
        self,
        nodes: Mapping[str, NodeConfig],
        fleet: FleetConfig,
        core: CoreSlot,
        feed: Callable[[NodeUpdate | CacheResidency], object],
        observed: Callable[[NodeObservation], None],
    ) -> None:
        self.nodes = nodes
        self.fleet = fleet
        self.core = core
        self.feed = feed
        self.observed = observed
        self._kv_indexes: dict[str, NodeKvIndex] = {}
        self._last: dict[str, NodeObservation] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._node_tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._flush: asyncio.Task[None] | None = None
        self.joined: Callable[[str], object] | None = None
        """Told the name of each node the core learns of from a scrape (`membership.py` drains it if it must)."""
        self._http: aiohttp.ClientSession | None = None
        self._zmq: zmq.asyncio.Context | None = None

    def start(self) -> None:
        self._http = aiohttp.ClientSession()
        for node in self.nodes.values():
            self.watch(node)

    def watch(self, node: NodeConfig) -> None:
        """Start polling `node` and following its KV events (its scrapes are fed once it is in `nodes`); a
        `ValueError` (a KV-event endpoint a rank cannot use) starts nothing."""
        assert self._http is not None, "start() first"
        poller = NodePoller(node, self.fleet, self._http, self.observe)
        subscribers = []
        for endpoint in (node.kv_events, node.kv_events_replay):
            if endpoint is not None:
                for rank in range(node.dp_size):
                    rank_endpoint(endpoint, rank)  # a ValueError before anything is built
        if node.kv_events:
            self._zmq = self._zmq or zmq.asyncio.Context()
            index = self._kv_indexes.get(node.name) or NodeKvIndex()
            subscribers = [  # all built before any runs: one that cannot be built leaves nothing running
                KvEventSubscriber(node.name, node.kv_events, node.kv_events_replay, index, self._zmq, rank)
                for rank in range(node.dp_size)
            ]
            self._kv_indexes[node.name] = index
        tasks = [asyncio.create_task(poller.run(), name=f"poll {node.name}")]
        for rank, subscriber in enumerate(subscribers):
            tasks.append(asyncio.create_task(subscriber.run(), name=f"kv {node.name} rank {rank}"))
        if subscribers and self._flush is None:
            self._flush = asyncio.create_task(self._flush_kv_evidence(), name="kv flush")
            self._tasks.append(self._flush)
        self._node_tasks[node.name] = tasks

    async def unwatch(self, name: str) -> None:
        """Stop polling node `name` and following its KV events; forget its last scrape and KV index."""
        tasks = self._node_tasks.pop(name, [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._last.pop(name, None)
        self._kv_indexes.pop(name, None)

    async def stop(self) -> None:
        tasks = [*self._tasks, *(task for tasks in self._node_tasks.values() for task in tasks)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        if self._zmq is not None:
            self._zmq.term()

    def last_observation(self, name: str) -> NodeObservation | None:
        """What the node's last scrape reported (with its reason when the node is not used); None before the first."""
        return self._last.get(name)

    def kv_index(self, name: str) -> NodeKvIndex | None:
        """The node's KV-event index; None without KV events."""
        return self._kv_indexes.get(name)

    def replay(self) -> None:
        """Tell the current core the configured capacities, then every node's last scrape."""
        for node in self.nodes.values():
            if node.capacity_tokens is not None:
                models = None if node.models is None else frozenset(node.models)
                self.feed(NodeUpdate(node.name, node.capacity_tokens, models=models))
        for observation in list(self._last.values()):
            self.observe(observation)

    def observe(self, observation: NodeObservation) -> None:
        """One scrape of a node: kept, told to `observed`, and fed to the core when its capacity is known."""
        if observation.name not in self.nodes:
            return  # it left the fleet while the scrape was under way
        self.observed(observation)
        self._last[observation.name] = observation
        known = self.core.coordinator.nodes.get(observation.name)
        capacity = observation.capacity_tokens or (known.capacity_tokens if known else None)
        if capacity is None and not observation.healthy:
            capacity = 0  # down since start-up: known, so that a fleet with no healthy node is recognised as such
        if capacity is None:
            return
        joins = known is None
        # the load figures feed load-aware policies (least-loaded, llm-d) and TAO's adaptive utilisation target; a
        # change in them alone starts no plan
        self.feed(
            NodeUpdate(
                observation.name,
                capacity,
                observation.block_size,
                observation.healthy,
                observation.prefix_hit_rate,
                observation.load,
                cpu_capacity_tokens=observation.cpu_capacity_tokens,
                counters=observation.counters,
                models=observation.models,
            )
        )
        if joins and self.joined is not None:
            self.joined(observation.name)

    async def _flush_kv_evidence(self) -> None:
        while True:
            await asyncio.sleep(self.fleet.kv_flush_interval_s)
            for node, index in list(self._kv_indexes.items()):
                for (session_id, tier), tokens in index.take_changed().items():
                    if session_id in self.core.coordinator.sessions:
                        self.feed(CacheResidency(node, session_id, tokens, tier))
