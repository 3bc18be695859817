"""Cache credit k(i, b): evidence, in credit units, that node b still holds session i's prefix in HBM
(docs/design.md#cache-credit).

Sources, best first: live KV events (exact), usage reported at the end of a call (the node held the whole context
then), an estimate from the node's prefix hit rate. Snapshot evidence decays as k0·2^(−τ/h) with its age τ, h the
node's own (fitted from observed retention, `retention.py`) or the configured one.

Live evidence decays too, from what is resident now, with τ the time since the session's last call on the node
ended (its newest usage evidence there; without one, it does not decay). The decay is not only doubt about whether
the cache survives — KV events remove that doubt — but the rent of a place held idle: a cache that will not be used
for a long while is worth less than the memory it holds. Undecayed live credit let holders in long tools keep their
places against every newcomer: with KV events TAO lost 15 % of task latency on AgentX 200 at 128 sessions, and
gained nothing on mini-swe-agent (docs/benchmarks.md#cache-credit-from-kv-events). Eviction still shows at once: the
decay starts from the resident tokens, so a cache evicted to 0 is 0.

The result is floored to whole units of `credit_unit_tokens`; below one unit it is 0.

Only HBM counts here: what a node's CPU offloading tier holds is priced by `TierCredit` (`tier.py`), a component
below readiness, because a CPU copy survives whether or not the session keeps its place.

Invariants: credit is 0 on nodes that are not in the context (unhealthy or removed); for one node only the best
source counts, even when it says less than a worse one (a KV event reporting eviction beats old usage); evidence
about another tier than HBM is never read here.
"""

from __future__ import annotations

import math

from ..model import AgentSession, CacheEvidence, EvidenceSource, Node, NodeId, Tier
from ..settings import CoreSettings
from .base import NodeCredits, SignalContext

STEP_MARGIN_S = 1e-6
"""`changes_at` names a drop this much before the exact crossing, so rounding in `math.pow` can never make a kept
value outlive the fresh one (re-evaluating a little early costs nothing)."""


def observed_tokens(evidence: CacheEvidence, hit_rate: float) -> float:
    """What `evidence` said when it was observed (an estimate scaled by the node's hit rate)."""
    return evidence.tokens * hit_rate if evidence.source is EvidenceSource.ESTIMATE else float(evidence.tokens)


def node_half_life(node: Node, settings: CoreSettings) -> float | None:
    """The half-life of cache evidence on `node`: its fitted one, else the configured one; None (no decay) when
    the settings turn decay off."""
    if settings.credit_half_life_s is None:
        return None
    return node.credit_half_life_s or settings.credit_half_life_s


def best_evidence(evidence: tuple[CacheEvidence, ...], tier: Tier = "GPU") -> dict[NodeId, CacheEvidence]:
    """Per node, the evidence about `tier` of the best source; the newest among equals."""
    best: dict[NodeId, CacheEvidence] = {}
    for item in evidence:
        if item.tier != tier:
            continue
        held = best.get(item.node)
        if held is None or (item.source, -item.observed_at) < (held.source, -held.observed_at):
            best[item.node] = item
    return best


def with_evidence(
    evidence: tuple[CacheEvidence, ...], new: CacheEvidence, settings: CoreSettings
) -> tuple[CacheEvidence, ...]:
    """Record `new`, replacing older evidence of the same node, source and tier; keep the most recent nodes only."""
    kept = [e for e in evidence if not (e.node == new.node and e.source == new.source and e.tier == new.tier)]
    kept.append(new)
    newest_by_node: dict[NodeId, float] = {}
    for e in kept:
        newest_by_node[e.node] = max(newest_by_node.get(e.node, e.observed_at), e.observed_at)
    keep_nodes = set(sorted(newest_by_node, key=lambda n: -newest_by_node[n])[: settings.max_evidence_nodes])
    return tuple(e for e in kept if e.node in keep_nodes)


def next_drop(tokens: float, observed_at: float, units: int, unit: int, half_life_s: float | None) -> float:
    """When `tokens` observed at `observed_at`, decaying with `half_life_s` (None: never), fall below `units` whole
    units (`math.inf`: never)."""
    if units <= 0 or half_life_s is None:
        return math.inf
    return observed_at + half_life_s * math.log2(tokens / (units * unit)) - STEP_MARGIN_S


def last_use(evidence: tuple[CacheEvidence, ...], node_id: NodeId) -> float | None:
    """When the session's last call on `node_id` ended, by its newest usage evidence there (None: no such call)."""
    usage = EvidenceSource.USAGE
    return max(
        (e.observed_at for e in evidence if e.node == node_id and e.source is usage and e.tier == "GPU"), default=None
    )


def hbm_credit(session: AgentSession, ctx: SignalContext, decay: bool) -> tuple[dict[NodeId, float], float]:
    """Per node of the context, the tokens of `session`'s prefix its HBM holds by the best evidence, decayed, and when
    the first of them falls below its whole units (`math.inf`: never)."""
    held: dict[NodeId, float] = {}
    earliest = math.inf
    unit = ctx.settings.credit_unit_tokens
    for node_id, evidence in best_evidence(session.evidence).items():
        node = ctx.nodes.get(node_id)
        if node is None:
            continue
        half_life = node_half_life(node, ctx.settings) if decay else None
        observed, since = observed_tokens(evidence, node.prefix_hit_rate), evidence.observed_at
        if evidence.source is EvidenceSource.KV_EVENTS:
            used = last_use(session.evidence, node_id)
            if used is None:
                held[node_id] = float(evidence.tokens)
                continue
            since = used
        tokens = observed if half_life is None else observed * math.pow(2.0, -max(0.0, ctx.now - since) / half_life)
        held[node_id] = tokens
        earliest = min(earliest, next_drop(observed, since, int(tokens // unit), unit, half_life))
    return held, earliest


class CacheCredit(NodeCredits):
    """The first component of TAO's value. `decay=False` is the `tao-no-decay` ablation."""

    name = "cache_credit"
    node_fields: tuple[str, ...] = ("prefix_hit_rate", "credit_half_life_s")

    def __init__(self, decay: bool = True, workflow: bool = True) -> None:
        super().__init__()
        self.decay = decay
        self.workflow = workflow
        """Raise credit to what the session's workflow relatives hold of its prefix (`workflow.py`);
        False is `tao-no-workflow`."""

    def compute(self, session: AgentSession, ctx: SignalContext) -> tuple[dict[NodeId, int], float]:
        credits: dict[NodeId, int] = {}
        earliest = math.inf
        if session.evidence:
            unit = ctx.settings.credit_unit_tokens
            held, earliest = hbm_credit(session, ctx, self.decay)
            credits = {node_id: int(tokens // unit) for node_id, tokens in held.items() if tokens >= unit}
        if self.workflow and ctx.workflows is not None:
            credits, earliest = ctx.workflows.with_relatives(session, ctx, credits, earliest, decay=self.decay)
        return credits, earliest
