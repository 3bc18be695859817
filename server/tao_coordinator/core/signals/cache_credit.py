"""Cache credit k(i, b): evidence, in credit units, that node b still holds session i's prefix (design §4).

Sources, best first: live KV events (exact, no decay), usage reported at the end of a call (the node held the whole
context then), an estimate from the node's prefix hit rate. Snapshot evidence decays as k0·2^(−τ/h) with its age τ,
h the node's own (fitted from observed retention, `retention.py`) or the configured one.
The result is floored to whole units of `credit_unit_tokens`; below one unit it is 0.

Invariants: credit is 0 on nodes that are not in the context (unhealthy or removed); for one node only the best
source counts, even when it says less than a worse one (a KV event reporting eviction beats old usage).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..model import CacheEvidence, EvidenceSource, Node, NodeId, Session
from ..settings import CoreSettings
from .base import SignalContext

STEP_MARGIN_S = 1e-6
"""`changes_at` names a drop this much before the exact crossing, so rounding in `math.pow` can never make a kept
value outlive the fresh one (re-evaluating a little early costs nothing)."""


def decayed_tokens(evidence: CacheEvidence, now: float, half_life_s: float | None, hit_rate: float) -> float:
    if evidence.source is EvidenceSource.KV_EVENTS:
        return float(evidence.tokens)
    tokens = evidence.tokens * hit_rate if evidence.source is EvidenceSource.ESTIMATE else float(evidence.tokens)
    if half_life_s is None:
        return tokens
    age = max(0.0, now - evidence.observed_at)
    return tokens * math.pow(2.0, -age / half_life_s)


def node_half_life(node: Node, settings: CoreSettings) -> float | None:
    """The half-life of snapshot evidence on `node`: its fitted one, else the configured one; None (no decay) when
    the settings turn decay off."""
    if settings.credit_half_life_s is None:
        return None
    return node.credit_half_life_s or settings.credit_half_life_s


def best_evidence(evidence: tuple[CacheEvidence, ...]) -> dict[NodeId, CacheEvidence]:
    """Per node, the evidence of the best source; the newest among equals."""
    best: dict[NodeId, CacheEvidence] = {}
    for item in evidence:
        held = best.get(item.node)
        if held is None or (item.source, -item.observed_at) < (held.source, -held.observed_at):
            best[item.node] = item
    return best


def with_evidence(
    evidence: tuple[CacheEvidence, ...], new: CacheEvidence, settings: CoreSettings
) -> tuple[CacheEvidence, ...]:
    """Record `new`, replacing older evidence of the same node and source; keep the most recent nodes only."""
    kept = [e for e in evidence if not (e.node == new.node and e.source == new.source)]
    kept.append(new)
    newest_by_node: dict[NodeId, float] = {}
    for e in kept:
        newest_by_node[e.node] = max(newest_by_node.get(e.node, e.observed_at), e.observed_at)
    keep_nodes = set(sorted(newest_by_node, key=lambda n: -newest_by_node[n])[: settings.max_evidence_nodes])
    return tuple(e for e in kept if e.node in keep_nodes)


def next_drop(evidence: CacheEvidence, units: int, unit: int, half_life_s: float | None, hit_rate: float) -> float:
    """When decayed evidence worth `units` whole units now falls below them (`math.inf`: never)."""
    if units <= 0 or half_life_s is None or evidence.source is EvidenceSource.KV_EVENTS:
        return math.inf
    tokens = evidence.tokens * hit_rate if evidence.source is EvidenceSource.ESTIMATE else float(evidence.tokens)
    return evidence.observed_at + half_life_s * math.log2(tokens / (units * unit)) - STEP_MARGIN_S


class CacheCredit:
    """The first component of TAO's value. `decay=False` is the `tao-no-decay` ablation.

    The value model asks `on_nodes` and then `changes_at` of one session in one context; both come from one pass
    over its evidence, kept for that (session, context) pair only."""

    name = "cache_credit"
    node_dependent = True
    node_fields: tuple[str, ...] = ("prefix_hit_rate", "credit_half_life_s")

    def __init__(self, decay: bool = True) -> None:
        self.decay = decay
        self._last: tuple[Session, SignalContext, dict[NodeId, int], float] | None = None

    def base(self, session: Session, ctx: SignalContext) -> int:
        return 0

    def on_nodes(self, session: Session, ctx: SignalContext) -> Mapping[NodeId, int]:
        return self._credit(session, ctx)[0]

    def changes_at(self, session: Session, ctx: SignalContext) -> float:
        return self._credit(session, ctx)[1]

    def _credit(self, session: Session, ctx: SignalContext) -> tuple[dict[NodeId, int], float]:
        last = self._last
        if last is not None and last[0] is session and last[1] is ctx:
            return last[2], last[3]
        credits: dict[NodeId, int] = {}
        earliest = math.inf
        if session.evidence:
            unit = ctx.settings.credit_unit_tokens
            for node_id, evidence in best_evidence(session.evidence).items():
                node = ctx.nodes.get(node_id)
                if node is None:
                    continue
                half_life = node_half_life(node, ctx.settings) if self.decay else None
                units = int(decayed_tokens(evidence, ctx.now, half_life, node.prefix_hit_rate) // unit)
                if units > 0:
                    credits[node_id] = units
                    earliest = min(earliest, next_drop(evidence, units, unit, half_life, node.prefix_hit_rate))
        self._last = (session, ctx, credits, earliest)
        return credits, earliest
