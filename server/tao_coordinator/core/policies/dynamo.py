"""NVIDIA Dynamo KV router: event-fed prefix overlap against prefill and decode load, lowest cost wins.

Source: `reference/routers-and-baselines.md` §1.1–§1.2 and the pseudo-code of §1.10 (`ai-dynamo/dynamo`
`lib/kv-router/src/scheduling/selector/default.rs` @ a4bdb9b / 07a6c9c, defaults from `config.rs` @ 0243c51):

    raw_prefill_blocks[w] = (active_prefill_tokens[w] + ISL) / block_size
    cost[w] = prefill_load_scale · max(raw_prefill_blocks[w] − overlap_score_credit · overlap_blocks[w], 0)
            + decode_blocks[w]          # the worker's active blocks (shared ones once) + this request's new blocks
    T = 0: argmin cost, ties uniformly at random;  T > 0: p ∝ exp(−(c − c_min) / ((c_max − c_min) · T))

Defaults: overlap_score_credit 1.0, prefill_load_scale 1.0, router_temperature 0 (the softmax picker is the
`temperature` option, e.g. `dynamo[temperature=0.5]`), credit decay 0, decode_active_request_weight 0, no busy
thresholds, no session affinity. The router queue (`router_queue_threshold`) is off: `config.rs` @ 0243c51 sets
16.0, the configuration doc @ 057096c says disabled by default; a router that holds requests would also need a
dequeue loop this per-request interface does not have. Host/disk tiers do not exist in the simulated fleet.

Signals, as Dynamo sees them with KV events on (its default): `overlap_blocks[w]` = leading blocks of the prompt in
w's cache, from an index fed by every `KvCacheEvent` (stored/removed/cleared); active load from its own slot
tracker — a call adds its uncached prompt tokens to `active_prefill_tokens` at dispatch and removes them at its first
token (`LlmFirstToken`), and holds its blocks in `decode_blocks` until `LlmEnd`. Random draws come from a
`random.Random(seed)`, so a seed gives the same choices.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..events import Close, Event, KvCacheEvent, LlmEnd, LlmFirstToken
from ..model import BlockRun, Node, NodeId, Session, SessionId
from ..plan import Plan
from ..snapshot import Snapshot
from .runs import RunSet, union_size


@dataclass(slots=True)
class _Active:
    runs: tuple[BlockRun, ...]
    blocks: int
    prefill_tokens: int


def worker_cost(
    raw_prefill_blocks: float, overlap_blocks: float, decode_blocks: float, credit: float = 1.0, scale: float = 1.0
) -> float:
    """Dynamo's `worker_logit` with one storage tier and no optional terms."""
    return scale * max(raw_prefill_blocks - credit * overlap_blocks, 0.0) + decode_blocks


def pick(costs: Sequence[float], temperature: float, rng: random.Random) -> int:
    """`softmax_sample_index` for T > 0; for T = 0 the cheapest, ties uniformly at random (reservoir sampling)."""
    if temperature > 0:
        low, high = min(costs), max(costs)
        if low == high:
            weights = [1.0] * len(costs)
        else:
            weights = [math.exp(-(c - low) / ((high - low) * temperature)) for c in costs]
        return rng.choices(range(len(costs)), weights)[0]
    best, ties = 0, 0
    for k, cost in enumerate(costs):
        if cost < costs[best]:
            best, ties = k, 1
        elif cost == costs[best]:
            ties += 1
            if ties > 1 and rng.randrange(ties) == 0:
                best = k
    return best


class DynamoPolicy:
    name = "dynamo"
    plans = False
    inputs = frozenset({"kv_events", "first_token"})

    def __init__(
        self,
        *,
        overlap_score_credit: float = 1.0,
        prefill_load_scale: float = 1.0,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.credit = overlap_score_credit
        self.scale = prefill_load_scale
        self.temperature = temperature
        self.rng = random.Random(seed)
        self.index: dict[NodeId, RunSet] = {}
        self.active: dict[NodeId, dict[SessionId, _Active]] = {}

    def plan(self, snapshot: Snapshot) -> Plan:
        return Plan(())

    def costs(self, session: Session, nodes: Sequence[Node]) -> list[tuple[float, int]]:
        """Per node: the cost of sending this call there, and the blocks of the prompt cached there."""
        runs = session.prompt_block_runs
        isl = session.expected_input_tokens or session.context_tokens
        result = []
        for node in nodes:
            active = self.active.get(node.id, {})
            overlap = self.index[node.id].prefix(runs) if node.id in self.index else 0
            raw_prefill = (sum(a.prefill_tokens for a in active.values()) + isl) / node.block_size
            blocks = -(-isl // node.block_size)
            named = [a.runs for a in active.values()]
            unnamed = sum(a.blocks - _count(a.runs) for a in active.values()) + blocks - _count(runs)
            decode = union_size([*named, runs]) + unnamed
            result.append((worker_cost(raw_prefill, overlap, decode, self.credit, self.scale), overlap))
        return result

    def route(self, session: Session, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = [nodes[node_id] for node_id in sorted(nodes)]
        scored = self.costs(session, ordered)
        chosen = ordered[pick([cost for cost, _ in scored], self.temperature, self.rng)]
        overlap = scored[ordered.index(chosen)][1]
        isl = session.expected_input_tokens or session.context_tokens
        uncached = max(0, isl - overlap * chosen.block_size)
        blocks = -(-isl // chosen.block_size)
        self._forget(session.id)
        self.active.setdefault(chosen.id, {})[session.id] = _Active(session.prompt_block_runs, blocks, uncached)
        return chosen.id

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, KvCacheEvent):
            index = self.index.setdefault(event.node_id, RunSet())
            if event.cleared:
                index.clear()
            index.discard(event.removed)
            index.add(event.stored)
        elif isinstance(event, LlmFirstToken):
            active = self.active.get(event.node_id, {}).get(event.session_id)
            if active is not None:
                active.prefill_tokens = 0
        elif isinstance(event, LlmEnd | Close):
            self._forget(event.session_id)

    def _forget(self, session_id: SessionId) -> None:
        for calls in self.active.values():
            calls.pop(session_id, None)


def _count(runs: tuple[BlockRun, ...]) -> int:
    return sum(count for _, count in runs)
