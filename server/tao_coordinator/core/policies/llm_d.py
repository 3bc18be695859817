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

`llm-d-precise` is the precise-prefix profile (§3.2, §3.4): the same 3/2/2 weights and picker, with the prefix score
of `precise-prefix-cache-scorer` (`llm-d/llm-d-router` `preciseprefixcache/precise_prefix_cache.go`) over the
`llm-d/llm-d-kv-cache` index fed by KV events (`inputs` adds `"kv_events"`):

    prefix[p] = min(1, Σ_{i < n_p} max_{m holds block i on p} weight[m] / floor(tokens / block_size))

where `n_p` is the number of leading prompt blocks p holds in any medium (`LongestPrefixScorer`, `kvblock_scorer.go`:
a block held in several media earns its best weight, `getMaxWeight`; the walk stops at the first block p holds in
none). Media are the events' `medium` lower-cased (`kvevents/pool.go`); weights `gpu` 1.0, `cpu` 0.8
(`DefaultKVCacheBackendConfig`, `backend.go`), and a medium without a configured weight (vLLM's `storage`) counts
1.0, as `getMaxWeight` does. A `BlockRemoved` removes the block from its medium only; `AllBlocksCleared` is a no-op
(the Dec-2025 snapshot, reference §3.4). Speculative indexing is off (its default), so the index learns only from
events and the trailing partial block is never counted.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from itertools import pairwise

from ..events import Event, KvCacheEvent
from ..model import AgentSession, BlockRun, Node, NodeId
from ..plan import Plan
from ..snapshot import Snapshot
from .runs import RunSet

DEFAULT_MEDIUM_WEIGHTS = {"gpu": 1.0, "cpu": 0.8}


def truncate(runs: tuple[BlockRun, ...], limit: int) -> tuple[BlockRun, ...]:
    kept: list[BlockRun] = []
    left = limit
    for first, count in runs:
        if left <= 0:
            break
        kept.append((first, min(count, left)))
        left -= count
    return tuple(kept)


def epp_scores(nodes: list[Node], prefixes: list[float], weights: tuple[float, float, float]) -> list[float]:
    """Both profiles' weighted sum per node: prefix (capped at 1), free KV, and the queue normalised over the nodes."""
    low, high = min(n.waiting for n in nodes), max(n.waiting for n in nodes)
    prefix_w, kv_w, queue_w = weights
    result = []
    for node, prefix in zip(nodes, prefixes, strict=True):
        queue = 1.0 if high == low else (high - node.waiting) / (high - low)
        result.append(prefix_w * min(1.0, prefix) + kv_w * (1.0 - node.kv_usage) + queue_w * queue)
    return result


def max_score(nodes: list[Node], scores: list[float], rng: random.Random) -> Node:
    """The EPP's max-score picker: a uniformly random one among the highest scores."""
    best = max(scores)
    return rng.choice([node for node, score in zip(nodes, scores, strict=True) if score == best])


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

    def scores(self, session: AgentSession, nodes: list[Node]) -> list[float]:
        runs = truncate(session.prompt_block_runs, self.max_prefix_blocks)
        tokens = session.expected_input_tokens or session.context_tokens
        total = min(self.max_prefix_blocks, -(-tokens // nodes[0].block_size)) if tokens else 0
        prefixes = []
        for node in nodes:
            index = self.index.get(node.id)
            prefixes.append(index.prefix(runs) / total if index is not None and total else 0.0)
        return epp_scores(nodes, prefixes, self.weights)

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = [nodes[node_id] for node_id in sorted(nodes)]
        chosen = max_score(ordered, self.scores(session, ordered), self.rng)
        self._stamp += 1
        index = self.index.setdefault(chosen.id, RunSet(lru=True))
        index.touch(truncate(session.prompt_block_runs, self.max_prefix_blocks), self._stamp)
        index.evict_to(chosen.capacity_tokens // chosen.block_size + 1)
        return chosen.id

    def observe(self, event: Event, now: float) -> None:
        return None


def weighted_prefix(held: list[tuple[float, list[tuple[int, int]]]]) -> float:
    """`LongestPrefixScorer` for one pod: per medium (weight, held spans) → Σ of best weights up to the first miss."""
    cuts = sorted({0, *(bound for _, spans in held for span in spans for bound in span)})
    score = 0.0
    for low, high in pairwise(cuts):
        weights = [weight for weight, spans in held if any(a <= low < b for a, b in spans)]
        if not weights:
            break
        score += max(weights) * (high - low)
    return score


class LlmdPrecisePolicy:
    name = "llm-d-precise"
    plans = False
    inputs = frozenset({"node_load", "kv_events"})

    def __init__(
        self,
        *,
        prefix_weight: float = 3.0,
        kv_weight: float = 2.0,
        queue_weight: float = 2.0,
        gpu_weight: float = DEFAULT_MEDIUM_WEIGHTS["gpu"],
        cpu_weight: float = DEFAULT_MEDIUM_WEIGHTS["cpu"],
        seed: int = 0,
    ) -> None:
        self.weights = (prefix_weight, kv_weight, queue_weight)
        self.medium_weights = {"gpu": gpu_weight, "cpu": cpu_weight}
        self.rng = random.Random(seed)
        self.index: dict[NodeId, dict[str, RunSet]] = {}

    def plan(self, snapshot: Snapshot) -> Plan:
        return Plan(())

    def medium_weight(self, medium: str) -> float:
        return self.medium_weights.get(medium, 1.0)

    def prefix_blocks(self, node_id: NodeId, runs: tuple[BlockRun, ...]) -> float:
        """The pod's weighted count of consecutive prompt blocks (before dividing by the prompt's blocks)."""
        media = self.index.get(node_id, {})
        return weighted_prefix([(self.medium_weight(medium), index.held(runs)) for medium, index in media.items()])

    def scores(self, session: AgentSession, nodes: list[Node]) -> list[float]:
        tokens = session.expected_input_tokens or session.context_tokens
        total = tokens // nodes[0].block_size
        prefixes = [self.prefix_blocks(node.id, session.prompt_block_runs) / total if total else 0.0 for node in nodes]
        return epp_scores(nodes, prefixes, self.weights)

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = [nodes[node_id] for node_id in sorted(nodes)]
        return max_score(ordered, self.scores(session, ordered), self.rng).id

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, KvCacheEvent):
            index = self.index.setdefault(event.node_id, {}).setdefault(event.medium.lower(), RunSet())
            index.discard(event.removed)
            index.add(event.stored)
