"""NVIDIA Dynamo KV router: event-fed prefix overlap against prefill and decode load, lowest cost wins.

Source: `reference/routers-and-baselines.md` §1.1–§1.2 and the pseudo-code of §1.10 (`ai-dynamo/dynamo`
`lib/kv-router/src/scheduling/selector/default.rs` @ a4bdb9b / 07a6c9c, defaults from `config.rs` @ 0243c51):

    raw_prefill_blocks[w] = (active_prefill_tokens[w] + ISL) / block_size
    credit[w] = overlap_score_credit · device_blocks[w] + host_cache_hit_weight · host_blocks[w]
              + disk_cache_hit_weight · disk_blocks[w]
    cost[w] = prefill_load_scale · max(raw_prefill_blocks[w] − credit[w], 0)
            + decode_blocks[w]          # the worker's active blocks (shared ones once) + this request's new blocks
    T = 0: argmin cost, ties uniformly at random;  T > 0: p ∝ exp(−(c − c_min) / ((c_max − c_min) · T))

Defaults: overlap_score_credit 1.0, prefill_load_scale 1.0, host_cache_hit_weight 0.75, disk_cache_hit_weight 0.25,
router_temperature 0 (the softmax picker is the `temperature` option, e.g. `dynamo[temperature=0.5]`; all options in
`DynamoOptions`, `baselines/options.py`), credit decay
0, shared_cache_multiplier 0, decode_active_request_weight 0, no busy thresholds, no session affinity. The router
queue (`router_queue_threshold`) is off: `config.rs` @ 0243c51 sets 16.0, the configuration doc @ 057096c says
disabled by default; a router that holds requests would also need a dequeue loop this per-request interface does not
have.

Tiers (§1.5–§1.6; `lib/kv-router/src/indexer/lower_tier_indexers.rs` `query_lower_tiers`, `protocols.rs`
`StorageTier::from_kv_medium`, `ai-dynamo/dynamo` @ 1783f72): an event's `medium` names its tier — `GPU`/`DEVICE` the
device; `CPU`, `CPU_PINNED`, `CPU_TIER1` host; `CPU_TIER2`, `DISK`, `NVME`, `STORAGE` disk; `EXTERNAL`, `NETWORK`,
`REMOTE`, `SHARED` external; any other string the device (`from_kv_medium_or_default`); `AllBlocksCleared` clears
the device tier only. Each tier has its own index, so a CPU `BlockRemoved` leaves the device index alone. The walk
is a continuation: `device_blocks` = leading prompt blocks on the device, `host_blocks` = the blocks held on host
that follow them, `disk_blocks` = the disk, then external, blocks after those (both weighted by the disk weight). A
block on the device and on host counts once, as a device block. The load tracker books the prompt minus the
effective cached tokens, `round((device + 0.75·host + 0.25·disk) · block_size)` (`cache_hit_estimates`).

Signals, as Dynamo sees them with KV events on (its default): the overlaps above, from indexes fed by every
`KvCacheEvent` (stored/removed/cleared, `kv_index.py`); active load from its own slot
tracker — a call adds its uncached prompt tokens to `active_prefill_tokens` at dispatch and removes them at its first
token (`LlmFirstToken`), and holds its blocks in `decode_blocks` until `LlmEnd`. Random draws come from a
`random.Random(seed)`, so a seed gives the same choices.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.events import Close, Event, KvCacheEvent, LlmEnd, LlmFirstToken
from ..core.model import AgentSession, BlockRun, Node, NodeId
from ..core.policies.base import Feed, Router
from .choice import pick
from .kv_index import KvIndex
from .load import OpenCalls, prompt_tokens
from .options import DynamoOptions
from .runs import block_count, skip, union_size


@dataclass(slots=True)
class _Active:
    node: NodeId
    runs: tuple[BlockRun, ...]
    blocks: int
    prefill_tokens: int


DEVICE, HOST, DISK, EXTERNAL = "device", "host_pinned", "disk", "external"
LOWER_TIERS = (HOST, DISK, EXTERNAL)
"""Walked in this order after the device (`lower_tier_query_order`)."""
_TIERS = {
    **dict.fromkeys(("GPU", "DEVICE"), DEVICE),
    **dict.fromkeys(("CPU", "CPU_PINNED", "CPU_TIER1"), HOST),
    **dict.fromkeys(("CPU_TIER2", "DISK", "NVME", "STORAGE"), DISK),
    **dict.fromkeys(("EXTERNAL", "NETWORK", "REMOTE", "SHARED"), EXTERNAL),
}


def storage_tier(medium: str) -> str:
    """`StorageTier::from_kv_medium_or_default`: exact, case-sensitive names; unknown media count as the device."""
    return _TIERS.get(medium, DEVICE)


def dynamo_cost(
    raw_prefill_blocks: float,
    overlap_blocks: float,
    decode_blocks: float,
    credit: float = 1.0,
    scale: float = 1.0,
    lower_credit: float = 0.0,
) -> float:
    """Dynamo's `worker_logit` without optional terms; `lower_credit` is the weighted host and disk blocks."""
    return scale * max(raw_prefill_blocks - credit * overlap_blocks - lower_credit, 0.0) + decode_blocks


class DynamoPolicy(Router):
    name = "dynamo"
    inputs = frozenset({Feed.KV_EVENTS, Feed.FIRST_TOKEN})

    def __init__(self, options: DynamoOptions | None = None, *, seed: int = 0) -> None:
        options = options or DynamoOptions()
        self.credit = options.overlap_score_credit
        self.scale = options.prefill_load_scale
        disk = options.disk_cache_hit_weight
        self.weights = {HOST: options.host_cache_hit_weight, DISK: disk, EXTERNAL: disk}
        self.temperature = options.temperature
        self.rng = random.Random(seed)
        self.index = KvIndex(storage_tier)
        """Per node, the device tier's index and those of the lower tiers it reported."""
        self.calls: OpenCalls[_Active] = OpenCalls()

    def overlaps(self, node_id: NodeId, runs: tuple[BlockRun, ...]) -> dict[str, int]:
        """Blocks of the prompt per tier, each tier continuing where the previous one stopped (`query_lower_tiers`)."""
        device = self.index.prefix(node_id, DEVICE, runs)
        result = {DEVICE: device, HOST: 0, DISK: 0, EXTERNAL: 0}
        reached = device
        for tier in LOWER_TIERS:
            index = self.index.get(node_id, tier)
            if index is not None:
                result[tier] = index.prefix(skip(runs, reached))
                reached += result[tier]
        return result

    def lower_credit(self, overlaps: Mapping[str, int]) -> float:
        return sum(self.weights[tier] * overlaps[tier] for tier in LOWER_TIERS)

    def costs(self, session: AgentSession, nodes: Sequence[Node]) -> list[tuple[float, float]]:
        """Per node: the cost of sending this call there, and its effective cached blocks (lower tiers weighted)."""
        runs = session.prompt_block_runs
        isl = prompt_tokens(session)
        result = []
        for node in nodes:
            active = self.calls.on(node.id)
            overlaps = self.overlaps(node.id, runs)
            overlap, lower = overlaps[DEVICE], self.lower_credit(overlaps)
            raw_prefill = (sum(a.prefill_tokens for a in active) + isl) / node.block_size
            blocks = -(-isl // node.block_size)
            named = [a.runs for a in active]
            unnamed = sum(a.blocks - block_count(a.runs) for a in active) + blocks - block_count(runs)
            decode = union_size([*named, runs]) + unnamed
            cost = dynamo_cost(raw_prefill, overlap, decode, self.credit, self.scale, lower)
            result.append((cost, overlap + lower))
        return result

    def route(self, session: AgentSession, nodes: Mapping[NodeId, Node], now: float) -> NodeId | None:
        if not nodes:
            return None
        ordered = [nodes[node_id] for node_id in sorted(nodes)]
        scored = self.costs(session, ordered)
        chosen = ordered[pick([cost for cost, _ in scored], self.temperature, self.rng)]
        overlap = scored[ordered.index(chosen)][1]
        isl = prompt_tokens(session)
        uncached = max(0, isl - round(overlap * chosen.block_size))
        blocks = -(-isl // chosen.block_size)
        self.calls.book(session.id, _Active(chosen.id, session.prompt_block_runs, blocks, uncached))
        return chosen.id

    def observe(self, event: Event, now: float) -> None:
        if isinstance(event, KvCacheEvent):
            self.index.observe(event)
        elif isinstance(event, LlmFirstToken):
            active = self.calls.at(event.session_id, event.node_id)
            if active is not None:
                active.prefill_tokens = 0
        elif isinstance(event, LlmEnd | Close):
            self.calls.end(event.session_id)
