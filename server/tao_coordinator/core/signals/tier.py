"""Tier credit: what a node's CPU offloading tier holds of a session's prefix, and what that is worth
(docs/algorithm.md#the-value-of-a-placement, component 3).

On a node with a CPU tier (vLLM's `--kv-offloading-size`) every block the node computes is also written to host
memory, where it outlives its HBM copy. A prefix token found there saves its recompute but must first be loaded over
the host link, where loads queue one at a time. With `w` requests waiting for their loads on average, a new one
waits about (1 + w) loads' time, so, per token,

    worth = max(0, 1 − t_load / t_recompute),   t_load = (1 + w) / load rate,   t_recompute = 1 / prefill rate,

both rates the node's own (`node_rates.py`). Under a congested link a CPU hit is worth nothing (loading is slower
than recomputing: the regime Concur measured under agentic load). Before the node has measured both rates the worth
is the configured prior.

A prefix leaves the CPU tier when the tier's LRU turns over: a block nobody touches is gone after about capacity /
new-KV rate seconds, treated as an exponential survival with half-life ln 2 × capacity / rate (never shorter than
HBM's). The tier holds what live KV events say (medium CPU), else, from a call's usage (the context was in HBM then,
so it was written through), that many tokens decayed with the tier's half-life — only on a tier larger than HBM.
The tier is written through and its LRU turns over with every block computed, so a tier no larger than HBM keeps
what HBM keeps, not longer: a usage estimate of it says nothing the HBM credit does not, and counting it anyway
(as outliving HBM) sent sessions to nodes that had lost their prefix on both tiers — with a 128 GiB tier on 8
`h100-tp4` (419k tokens each against 895k of HBM), 236 tok/s against 267 without any tier and 280 with the
credit left out (docs/benchmarks.md, the CPU tier). The same fact bounds the admission stretch (`tier_reach`).

Why a component of its own, below readiness: HBM credit (`cache_credit.py`) says what is lost if the session does
not get its place now — vLLM evicts what nobody holds. A CPU copy survives whether or not the session holds a place,
so it must not make a session outrank one that needs the GPU sooner, and it is no reason to keep a place for a
session in a tool. What it does say is where the session is cheapest to serve: among nodes, and among sessions
equally ready, the one whose prefix a node can load rather than recompute. Sessions in a tool get none.

Both node figures are coarse on purpose (worth in steps of 1/16, half-life in steps of 2^(1/4)): they are `Node`
fields the value model reads, and a value is recomputed whenever one of its node's fields changes.

Invariants: 0 on nodes without a tier or whose link makes a CPU hit worthless, and for sessions in a tool; never
grows with time alone; `changes_at` is never later than the first lost unit.
"""

from __future__ import annotations

import math

from ..model import AgentSession, EvidenceSource, NodeId, NodeRates, Phase
from .base import NodeCredits, SignalContext
from .cache_credit import best_evidence, next_drop, node_half_life, observed_tokens

WORTH_STEPS = 16
RETENTION_STEPS_PER_DOUBLING = 4
LONGEST_RETENTION_S = 2.0**16
"""An idle node's turnover rate decays towards 0; its tier then keeps a prefix for about this long (18 h) at most."""


def cpu_hit_worth(rates: NodeRates, prior: float) -> float:
    if rates.load_tokens_per_s <= 0 or rates.prefill_tokens_per_s <= 0:
        return prior
    load_per_token = (1 + rates.kv_fetch_queue) / rates.load_tokens_per_s
    worth = max(0.0, 1.0 - load_per_token * rates.prefill_tokens_per_s)
    return math.floor(worth * WORTH_STEPS) / WORTH_STEPS


def cpu_retention_s(cpu_capacity_tokens: int, rates: NodeRates) -> float | None:
    if cpu_capacity_tokens <= 0 or rates.new_kv_tokens_per_s <= 0:
        return None
    half_life = min(math.log(2) * cpu_capacity_tokens / rates.new_kv_tokens_per_s, LONGEST_RETENTION_S)
    return math.pow(2.0, round(math.log2(half_life) * RETENTION_STEPS_PER_DOUBLING) / RETENTION_STEPS_PER_DOUBLING)


class TierCredit(NodeCredits):
    """A component of TAO's value, below readiness; leaving it out is `tao-no-tier`."""

    name = "tier_credit"
    node_fields: tuple[str, ...] = (
        "capacity_tokens",
        "cpu_capacity_tokens",
        "cpu_hit_worth",
        "cpu_retention_s",
        "credit_half_life_s",
        "prefix_hit_rate",
    )

    def compute(self, session: AgentSession, ctx: SignalContext) -> tuple[dict[NodeId, int], float]:
        credits: dict[NodeId, int] = {}
        earliest = math.inf
        if session.evidence and session.phase is not Phase.IN_TOOL:
            unit = ctx.settings.credit_unit_tokens
            live = best_evidence(session.evidence, "CPU")
            snapshots = best_evidence(session.evidence)
            for node_id in live.keys() | snapshots.keys():
                node = ctx.nodes.get(node_id)
                if node is None or node.cpu_hit_worth <= 0 or node.cpu_capacity_tokens <= 0:
                    continue
                if node_id in live:
                    units = int(node.cpu_hit_worth * live[node_id].tokens // unit)
                    drop = math.inf
                else:
                    evidence = snapshots[node_id]
                    if evidence.source is EvidenceSource.KV_EVENTS or node.cpu_retention_s is None:
                        continue
                    if node.cpu_capacity_tokens <= node.capacity_tokens:
                        continue  # no larger than HBM: it keeps nothing HBM lost (module docstring)
                    half_life = max(node.cpu_retention_s, node_half_life(node, ctx.settings) or 0.0)
                    worth = node.cpu_hit_worth * observed_tokens(evidence, node.prefix_hit_rate)
                    age = max(0.0, ctx.now - evidence.observed_at)
                    units = int(worth * math.pow(2.0, -age / half_life) // unit)
                    drop = next_drop(worth, evidence.observed_at, units, unit, half_life)
                if units > 0:
                    credits[node_id] = units
                    earliest = min(earliest, drop)
        return credits, earliest
