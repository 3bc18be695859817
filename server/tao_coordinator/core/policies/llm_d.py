"""llm-d inference scheduler (Gateway API Inference Extension EPP): weighted scorers and a max-score picker.

Source: `reference/routers-and-baselines.md` §3.1–§3.3 and the pseudo-code of §3.6 (`llm-d/llm-d-router` HEAD 520af47,
built-in default profile `pkg/epp/config/loader/defaults.go`):

    prefix[p] = matched_blocks(p) / total_blocks          approximate prefix producer, blocks truncated to 256
    queue[p]  = 1 if maxQ == minQ else (maxQ − waiting[p]) / (maxQ − minQ)
    kvu[p]    = 1 − kv_cache_usage[p]
    score[p]  = 3·prefix[p] + 2·kvu[p] + 2·queue[p];   p* = a uniformly random one among the highest scores
    after picking: insert the request's blocks under p* (per-pod LRU of capacity num_gpu_blocks, autoTune)

The approximate producer hashes 64-character blocks (16 tokens × 4 characters per token) of the request text; here
a block is a 16-token KV block id from `Acquire.prompt_block_runs`, so `maxPrefixBlocks` = 256 covers the first 4,096
tokens. Total blocks count the trailing partial block (hashed there, never matched later). The index learns only from
the scheduler's own picks (no engine evictions). `waiting` and `kv_usage` come from a `/metrics` scrape of each node
(`inputs = {"node_load"}`). The random tie-break draws from `random.Random(seed)`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from ..events import Event
from ..model import BlockRun, Node, NodeId, Session
from ..plan import Plan
from ..snapshot import Snapshot
from .runs import RunSet


def truncate(runs: tuple[BlockRun, ...], limit: int) -> tuple[BlockRun, ...]:
    kept: list[BlockRun] = []
    left = limit
    for first, count in runs:
        if left <= 0:
            break
        kept.append((first, min(count, left)))
        left -= count
    return tuple(kept)


class LlmdPolicy:
    name = "llm-d"
    plans = False
    inputs = frozenset({"node_load"})

    def __init__(
        self,
        *,
        prefix_weight: float = 3.0,
        kv_weight: float = 2.0,
        queue_weight: float = 2.0,
        max_prefix_blocks: int = 256,
        seed: int = 0,
    ) -> None:
        self.weights = (prefix_weight, kv_weight, queue_weight)
        self.max_prefix_blocks = max_prefix_blocks
        self.rng = random.Random(seed)
        self.index: dict[NodeId, RunSet] = {}
        self._stamp = 0

    def plan(self, snapshot: Snapshot) -> Plan:
        return Plan(())

    def scores(self, session: Session, nodes: list[Node]) -> list[float]:
        runs = truncate(session.prompt_block_runs, self.max_prefix_blocks)
        tokens = session.expected_input_tokens or session.context_tokens
        total = min(self.max_prefix_blocks, -(-tokens // nodes[0].block_size)) if tokens else 0
        low, high = min(n.waiting for n in nodes), max(n.waiting for n in nodes)
        prefix_w, kv_w, queue_w = self.weights
        result = []
        for node in nodes:
            index = self.index.get(node.id)
            prefix = index.prefix(runs) / total if index is not None and total else 0.0
            queue = 1.0 if high == low else (high - node.waiting) / (high - low)
            result.append(prefix_w * min(1.0, prefix) + kv_w * (1.0 - node.kv_usage) + queue_w * queue)
        return result

    def route(self, session: Session, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = [nodes[node_id] for node_id in sorted(nodes)]
        scored = self.scores(session, ordered)
        best = max(scored)
        chosen = self.rng.choice([node for node, score in zip(ordered, scored, strict=True) if score == best])
        self._stamp += 1
        index = self.index.setdefault(chosen.id, RunSet(lru=True))
        index.touch(truncate(session.prompt_block_runs, self.max_prefix_blocks), self._stamp)
        index.evict_to(chosen.capacity_tokens // chosen.block_size + 1)
        return chosen.id

    def observe(self, event: Event, now: float) -> None:
        return None
