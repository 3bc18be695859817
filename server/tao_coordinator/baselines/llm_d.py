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
(`inputs = {Feed.NODE_LOAD}`). The random tie-break draws from `random.Random(seed)`. Options: `LlmdOptions`,
`LlmdPreciseOptions` (`baselines/options.py`).

`llm-d-precise` is the precise-prefix profile (§3.2, §3.4): the same 3/2/2 weights and picker, with the prefix score
of `precise-prefix-cache-scorer` (`llm-d/llm-d-router` `preciseprefixcache/precise_prefix_cache.go`) over the
`llm-d/llm-d-kv-cache` index fed by KV events (`inputs` adds `Feed.KV_EVENTS`, `kv_index.py`):

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
from abc import abstractmethod
from collections.abc import Mapping
from itertools import pairwise

from ..core.events import Event, KvCacheEvent
from ..core.model import AgentSession, BlockRun, Node, NodeId
from ..core.policies.base import Feed, Router
from .kv_index import KvIndex, RoutedIndex
from .load import prompt_tokens
from .options import EppOptions, LlmdOptions, LlmdPreciseOptions
from .runs import truncate


def epp_scores(nodes: list[Node], prefixes: list[float], weights: tuple[float, float, float]) -> list[float]:
    """Both profiles' weighted sum per node: prefix (capped at 1), free KV, and the queue normalised over the nodes."""
    low, high = min(n.load.waiting for n in nodes), max(n.load.waiting for n in nodes)
    prefix_w, kv_w, queue_w = weights
    result = []
    for node, prefix in zip(nodes, prefixes, strict=True):
        queue = 1.0 if high == low else (high - node.load.waiting) / (high - low)
        result.append(prefix_w * min(1.0, prefix) + kv_w * (1.0 - node.load.kv_usage) + queue_w * queue)
    return result


class EppRouter(Router):
    """The EPP both profiles share: score every healthy node (in name order), pick a uniformly random best one."""

    def __init__(self, options: EppOptions, seed: int) -> None:
        self.weights = (options.prefix_weight, options.kv_weight, options.queue_weight)
        self.rng = random.Random(seed)

    @abstractmethod
    def prefixes(self, session: AgentSession, nodes: list[Node]) -> list[float]:
        """Each node's prefix score before the weights (the profiles differ only here)."""

    def scores(self, session: AgentSession, nodes: list[Node]) -> list[float]:
        return epp_scores(nodes, self.prefixes(session, nodes), self.weights)

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = [nodes[node_id] for node_id in sorted(nodes)]
        scores = self.scores(session, ordered)
        best = max(scores)
        chosen = self.rng.choice([node for node, score in zip(ordered, scores, strict=True) if score == best])
        self.picked(session, chosen)
        return chosen.id

    def picked(self, session: AgentSession, node: Node) -> None:
        """After the pick: what the profile learns from its own decision (nothing, by default)."""


class LlmdPolicy(EppRouter):
    name = "llm-d"
    inputs = frozenset({Feed.NODE_LOAD})

    def __init__(self, options: LlmdOptions | None = None, *, seed: int = 0) -> None:
        options = options or LlmdOptions()
        super().__init__(options, seed)
        self.max_prefix_blocks = options.max_prefix_blocks
        self.index = RoutedIndex()

    def prefixes(self, session: AgentSession, nodes: list[Node]) -> list[float]:
        runs = truncate(session.prompt_block_runs, self.max_prefix_blocks)
        tokens = prompt_tokens(session)
        total = min(self.max_prefix_blocks, -(-tokens // nodes[0].block_size)) if tokens else 0
        prefixes = []
        for node in nodes:
            index = self.index.get(node.id)
            prefixes.append(index.prefix(runs) / total if index is not None and total else 0.0)
        return prefixes

    def picked(self, session: AgentSession, node: Node) -> None:
        index = self.index.routed(node.id, truncate(session.prompt_block_runs, self.max_prefix_blocks))
        index.evict_to(node.capacity_tokens // node.block_size + 1)


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


def _lower(medium: str) -> str:
    return medium.lower()


class LlmdPrecisePolicy(EppRouter):
    name = "llm-d-precise"
    inputs = frozenset({Feed.NODE_LOAD, Feed.KV_EVENTS})

    def __init__(self, options: LlmdPreciseOptions | None = None, *, seed: int = 0) -> None:
        options = options or LlmdPreciseOptions()
        super().__init__(options, seed)
        self.medium_weights = {"gpu": options.gpu_weight, "cpu": options.cpu_weight}
        self.index = KvIndex(_lower, clears=False)

    def medium_weight(self, medium: str) -> float:
        return self.medium_weights.get(medium, 1.0)

    def prefix_blocks(self, node_id: NodeId, runs: tuple[BlockRun, ...]) -> float:
        """The pod's weighted count of consecutive prompt blocks (before dividing by the prompt's blocks)."""
        media = self.index.on(node_id)
        return weighted_prefix([(self.medium_weight(medium), index.held(runs)) for medium, index in media.items()])

    def prefixes(self, session: AgentSession, nodes: list[Node]) -> list[float]:
        total = prompt_tokens(session) // nodes[0].block_size
        return [self.prefix_blocks(node.id, session.prompt_block_runs) / total if total else 0.0 for node in nodes]

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, KvCacheEvent):
            self.index.observe(event)
