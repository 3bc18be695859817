"""Nodes discovered in DNS: a name's A and AAAA records looked up on an interval, reported as nodes added and removed.

A Kubernetes headless Service is one DNS name resolving to every ready pod, so a `DiscoveryConfig`
(`config.py`) turns a fleet that scales into a set of nodes that follows it: each address is a node at
`scheme://address:port` (`scheme://[address]:port` for IPv6).

Node names are `<prefix>-<address>` with the address's dots and colons written as dashes: `vllm-10-0-0-5`,
`vllm-fd00--5` for `fd00::5` (the prefix defaults to the name's first label). The address is in canonical form
(`fleet/dns_lookup.py`), so a node keeps its name for as long as it keeps its address, and two addresses never share a
name (an IPv4 address has four non-empty parts, a compressed IPv6 one an empty part or eight parts). A pod that comes
back with a new address is a new node; names are unique within one `DiscoveryConfig`, distinct configs need distinct
prefixes.

Invariants: a failed lookup changes nothing — the nodes found last stay, so a DNS outage never empties the fleet;
it is reported once when lookups start failing and again only when the kind of failure changes (`FailureKind`), not
on every interval; a lookup that succeeds after failures is logged once. `on_change` is called only with a change
that is not empty, after `nodes` holds the new set. An exception raised by a callback ends `run()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import Generic, TypeVar

import dns.asyncresolver

from ..config import DiscoveryConfig
from .dns_lookup import FailureKind, LookupFailed, lookup_addresses, make_resolver

log = logging.getLogger("tao.fleet")

T = TypeVar("T")


@dataclass(frozen=True, slots=True, order=True)
class DiscoveredNode:
    name: str
    url: str


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    added: frozenset[T]
    removed: frozenset[T]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


def diff(previous: Set[T], new: Set[T]) -> Change[T]:
    """What `new` added to `previous`, and what it removed."""
    return Change(added=frozenset(new - previous), removed=frozenset(previous - new))


def node_name(prefix: str, address: str) -> str:
    return f"{prefix}-{address.replace('.', '-').replace(':', '-')}"


def node_url(scheme: str, address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{port}"


def nodes_at(addresses: Set[str], config: DiscoveryConfig) -> frozenset[DiscoveredNode]:
    """The nodes serving at `addresses` (canonical IP addresses), named and addressed as `config` says."""
    return frozenset(
        DiscoveredNode(node_name(config.prefix, address), node_url(config.scheme, address, config.port))
        for address in addresses
    )


class DnsDiscovery:
    """Looks `config.name` up every `config.interval_s` (`run()`), or once (`refresh()`), and reports each change."""

    def __init__(
        self,
        config: DiscoveryConfig,
        on_change: Callable[[Change[DiscoveredNode]], None],
        on_failure: Callable[[LookupFailed], None] | None = None,
        *,
        resolver: dns.asyncresolver.Resolver | None = None,
    ) -> None:
        self.config = config
        self.on_change = on_change
        self.on_failure = on_failure
        self.resolver = resolver or make_resolver(config.resolver_address, config.timeout_s)
        self.nodes: frozenset[DiscoveredNode] = frozenset()
        """The nodes found by the last lookup that succeeded."""
        self.failing: FailureKind | None = None
        """What the lookups fail with since the last success; None while they succeed."""

    async def refresh(self) -> Change[DiscoveredNode]:
        """Look the name up once; report and return the change (empty when the lookup failed)."""
        try:
            addresses = await lookup_addresses(self.resolver, self.config.name)
        except LookupFailed as failure:
            self._failed(failure)
            return diff(self.nodes, self.nodes)
        if self.failing is not None:
            log.info("discovery of %s: resolves again, after failing (%s)", self.config.name, self.failing)
            self.failing = None
        found = nodes_at(addresses, self.config)
        change = diff(self.nodes, found)
        if change:
            self.nodes = found
            log.info(
                "discovery of %s: %d nodes (added %s; removed %s)",
                self.config.name,
                len(self.nodes),
                _names(change.added),
                _names(change.removed),
            )
            self.on_change(change)
        return change

    async def run(self) -> None:
        """Refresh now and then every `interval_s` (measured from one lookup's start to the next's), until cancelled."""
        while True:
            started = time.monotonic()
            await self.refresh()
            await asyncio.sleep(max(0.0, started + self.config.interval_s - time.monotonic()))

    def _failed(self, failure: LookupFailed) -> None:
        if failure.kind == self.failing:
            return
        self.failing = failure.kind
        log.warning("discovery of %s failed, keeping its %d nodes: %s", self.config.name, len(self.nodes), failure)
        if self.on_failure is not None:
            self.on_failure(failure)


def _names(nodes: Set[DiscoveredNode]) -> str:
    return ", ".join(sorted(node.name for node in nodes)) or "none"
