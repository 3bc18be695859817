"""Which nodes the coordinator stopped using because they refused calls, and when each is probed again.

A node's `/health` can answer 200 while it refuses every model call (vLLM's `--max-num-queued-reqs` 503s, a
gateway's 429s), and a killed node refuses connections for seconds before its scrapes say so. Clients report every
call a node refused before answering any of it (`LlmEnd.refused`); after `node_demote_after` such reports in a row
the node is demoted. A call it served in between starts the count again; other failures (a stream cut halfway, a
400) neither count nor reset it.

Invariants: a demoted node counts as unhealthy for every decision (the coordinator sets `Node.healthy` to the
scraped health and not demoted); a demoted node always has a probe due at a finite time, every
`node_probe_interval_s` from its demotion on, and only a probe that finds it serving restores it (`probed`), however
many of its calls succeed meanwhile. The counts only grow. Pure: time comes in as `now`; the probe itself is I/O and
lives in `fleet/probe.py`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from .model import NodeId
from .settings import CoreSettings

REASON_MAX_CHARS = 300


@dataclass
class Standing:
    """What the coordinator holds against one node."""

    refusals: int = 0
    """Consecutive refused calls since the last call the node served (or since its restoration)."""
    last_refusal: str = ""
    demoted_at: float | None = None
    reason: str = ""
    """Why it was demoted, for the operator (`GET /v1/nodes`)."""
    probe_at: float = math.inf
    scraped_healthy: bool = True
    """What the node's last scrape said: its health once it is restored."""


@dataclass(frozen=True, slots=True)
class NodeDemotion:
    """Where one node stands, as drivers may read it (`Coordinator.demotion`): the counts only grow."""

    demoted: bool
    reason: str | None
    """Why it is demoted; None when it is not."""
    since: float | None
    """When it was demoted (the core's clock); None when it is not."""
    refused_total: int
    demoted_total: int
    restored_total: int


class Demotions:
    def __init__(self, settings: CoreSettings) -> None:
        self.settings = settings
        self.standings: dict[NodeId, Standing] = {}
        self.refused_total: Counter[NodeId] = Counter()
        self.demoted_total: Counter[NodeId] = Counter()
        self.restored_total: Counter[NodeId] = Counter()

    def _standing(self, node: NodeId) -> Standing:
        return self.standings.setdefault(node, Standing())

    def is_demoted(self, node: NodeId) -> bool:
        standing = self.standings.get(node)
        return standing is not None and standing.demoted_at is not None

    def reason(self, node: NodeId) -> str | None:
        """Why the node is demoted; None when it is not."""
        standing = self.standings.get(node)
        return standing.reason if standing is not None and standing.demoted_at is not None else None

    def demoted_since(self, node: NodeId) -> float | None:
        standing = self.standings.get(node)
        return None if standing is None else standing.demoted_at

    def scraped(self, node: NodeId, healthy: bool) -> bool:
        """Record a scrape's health; the node's health for decisions (False while it is demoted)."""
        standing = self._standing(node)
        standing.scraped_healthy = healthy
        return healthy and standing.demoted_at is None

    def refused(self, node: NodeId, how: str, now: float) -> str | None:
        """Count a refused call; the reason when this refusal demotes the node, else None."""
        self.refused_total[node] += 1
        standing = self._standing(node)
        standing.refusals += 1
        standing.last_refusal = how[:REASON_MAX_CHARS]
        if standing.demoted_at is not None or standing.refusals < self.settings.node_demote_after:
            return None
        standing.demoted_at = now
        standing.probe_at = now + self.settings.node_probe_interval_s
        standing.reason = f"{standing.refusals} calls refused in a row (last: {standing.last_refusal})"
        self.demoted_total[node] += 1
        return standing.reason

    def served(self, node: NodeId) -> None:
        """A call the node served: its refusals no longer run in a row."""
        standing = self.standings.get(node)
        if standing is not None:
            standing.refusals = 0

    def due(self, now: float) -> list[NodeId]:
        """Demoted nodes whose probe is due at `now`, each with its next probe set `node_probe_interval_s` later (so
        a probe whose answer never comes is sent again)."""
        due = sorted(node for node, standing in self.standings.items() if standing.probe_at <= now)
        for node in due:
            self.standings[node].probe_at = now + self.settings.node_probe_interval_s
        return due

    def next_probe(self) -> float | None:
        return min((s.probe_at for s in self.standings.values() if s.demoted_at is not None), default=None)

    def probed(self, node: NodeId, serves: bool, now: float) -> float | None:
        """A probe's answer; when it restores the node, how long the node was demoted, else None."""
        standing = self.standings.get(node)
        if standing is None or standing.demoted_at is None or not serves:
            return None
        demoted_s = max(0.0, now - standing.demoted_at)
        standing.demoted_at = None
        standing.probe_at = math.inf
        standing.refusals = 0
        standing.reason = ""
        self.restored_total[node] += 1
        return demoted_s

    def healthy_after_restore(self, node: NodeId) -> bool:
        standing = self.standings.get(node)
        return standing is None or standing.scraped_healthy

    def forget(self, node: NodeId) -> None:
        self.standings.pop(node, None)
