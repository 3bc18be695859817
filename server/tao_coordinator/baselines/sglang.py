"""SGLang model gateway (SMG) `cache_aware`: an approximate prefix tree built from the router's own decisions.

Source: `reference/routers-and-baselines.md` §2.1 (`smg model_gateway/src/policies/cache_aware.rs::select_worker`,
HEAD 73da68c) with the Python/CLI defaults of §2.2 (`router_args.py`): cache_threshold 0.3, balance_abs_threshold
64, balance_rel_threshold 1.5, eviction every 120 s to max_tree_size 2^26 per tenant; pseudo-code §2.4:

    load(w) = gateway in-flight requests (inc on route, dec on completion)
    if max(load) − min(load) > abs and max(load) > rel · min(load): w = argmin (load, processed, index)
    else: (matched, tenant) = tree.match(r); w = tenant if matched / len(r) > threshold else argmin load
    insert r under w

The approximate tree (the HTTP string tree / gRPC token tree) is kept over KV block ids instead of characters or
tokens: one `RunSet` of ids per tenant, the prompt's blocks as `Acquire.prompt_block_runs`. Because ids are
prefix-chained, "a tenant's ids contain the prompt's first k blocks" is exactly "the tree's path for the prompt
reaches depth k under that tenant", so the match length is the same, counted in 16-token blocks (the trailing partial
block, which has no id, never matches). It learns only from routing — no engine evictions — and is as optimistic
as the original. `max_tree_size` counts tokens; eviction trims each tenant to 2^26 / 16 blocks, least recently
inserted segments first, from their deep end. Among tenants tied on the longest match the most recently inserted
wins (the original takes the first tenant it finds at the deepest node). Min-load ties go to the first node in name
order (`min_by_key`). Admits everything at once; never plans; deterministic. Options: `SglangOptions`
(`baselines/options.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.events import Event
from ..core.model import AgentSession, BlockRun, Node, NodeId
from ..core.policies.base import Router
from .kv_index import RoutedIndex
from .load import InFlight
from .options import SglangOptions
from .runs import block_at


class SglangCacheAwarePolicy(Router):
    name = "sglang-cache-aware"

    def __init__(self, options: SglangOptions | None = None) -> None:
        options = options or SglangOptions()
        self.cache_threshold = options.cache_threshold
        self.balance_abs_threshold = options.balance_abs_threshold
        self.balance_rel_threshold = options.balance_rel_threshold
        self.eviction_interval_s = options.eviction_interval_s
        self.max_tree_tokens = options.max_tree_tokens
        self.in_flight = InFlight()
        self.trees = RoutedIndex()
        self._next_eviction: float | None = None

    def imbalanced(self, nodes: Mapping[NodeId, Node]) -> bool:
        loads = [self.in_flight.load(node) for node in nodes]
        low, high = min(loads), max(loads)
        return high - low > self.balance_abs_threshold and high > self.balance_rel_threshold * low

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        self._evict_if_due(now, nodes)
        ordered = sorted(nodes)
        runs = session.prompt_block_runs
        if self.imbalanced(nodes):
            target = min(ordered, key=lambda n: (self.in_flight.load(n), self.in_flight.processed.get(n, 0)))
        else:
            matched, tenant = self.match(runs, ordered)
            tokens = session.expected_input_tokens
            rate = matched * nodes[ordered[0]].block_size / tokens if tokens else 0.0
            if tenant is not None and rate > self.cache_threshold:
                target = tenant
            else:
                target = min(ordered, key=self.in_flight.load)
        self.trees.routed(target, runs)
        self.in_flight.dispatch(session.id, target)
        return target

    def match(self, runs: tuple[BlockRun, ...], ordered: list[NodeId]) -> tuple[int, NodeId | None]:
        """Longest match over tenants, in blocks, and the tenant that holds it (most recently inserted on ties)."""
        best, tenant, newest = 0, None, -1
        for node in ordered:
            tree = self.trees.get(node)
            if tree is None:
                continue
            matched = tree.prefix(runs)
            if matched == 0:
                continue
            stamp = tree.stamp_at(block_at(runs, matched - 1)) or 0
            if (matched, stamp) > (best, newest):
                best, tenant, newest = matched, node, stamp
        return best, tenant

    def observe(self, event: Event, now: float) -> None:
        self.in_flight.observe(event)

    def _evict_if_due(self, now: float, nodes: Mapping[NodeId, Node]) -> None:
        if self._next_eviction is None:
            self._next_eviction = now + self.eviction_interval_s
        if now < self._next_eviction:
            return
        self._next_eviction = now + self.eviction_interval_s
        for node_id, tree in self.trees.sets.items():
            block_size = nodes[node_id].block_size if node_id in nodes else 16
            tree.evict_to(self.max_tree_tokens // block_size)
