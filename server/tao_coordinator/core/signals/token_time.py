"""Token time: the KV token-time a session's next call would hold on a node, the less the better
(docs/algorithm.md#the-value-of-a-placement, component 4).

A call with a prompt of p tokens that decodes d tokens holds p + k KV tokens at its k-th decode step, so over the
call it holds τ = p·d + d²/2 token-steps (Justitia's KV token-time: what a call costs in memory, not in count). On a
node whose decode steps take s seconds that is τ·s token-seconds of the node's KV. The component prefers the
placement that holds least: among nodes, the one whose steps are faster now; among sessions equal on everything
above it, the one whose call costs least (a shortest-job-first in memory-time, as Justitia orders agents).

    value(n) = max(0, ⌊HALVING_UNITS × log2(CEILING / (τ · s_n))⌋)

p is what the session asks for (its context, or the prompt its acquire announced), d its mean completion so far (a
default before its first call), s_n the node's inter-token latency as its counters measure it, coarsened to steps of
2^(1/HALVING_UNITS) (`coarse_step_s`, a `Node` field: a value is recomputed whenever a field it reads changes). The log
keeps the scale of the component independent of the workload's prompt sizes: halving a call's memory-time is worth
HALVING_UNITS units whatever it was.

Only sessions without a place get it, and only in the phases that ask for a call now (waiting, ready): it prices
where a session is served and which of equally valued sessions is served first, never a reason to move or keep a
holder (that is the cache credit's and the held footprint's). Below the tier credit: what a node holds of a session's
prefix matters more than how fast it decodes. Leaving it out is `tao-no-token-time`.

Invariants: 0 on nodes whose steps are not measured yet, for holders, and in a tool; constant in time for a fixed
session and fixed nodes.
"""

from __future__ import annotations

import math

from ..model import AgentSession, NodeId, Phase
from ..settings import CoreSettings
from .base import NodeCredits, SignalContext
from .footprint import mean_output_tokens, next_prompt_tokens

HALVING_UNITS = 8
"""Units per halving of a call's memory-time, and the node's step time's resolution (steps of 2^(1/HALVING_UNITS))."""
CEILING_TOKEN_SECONDS = 2.0**40
"""A call holding more token-seconds than this (a million-token prompt decoding for over a day) is worth 0."""


def coarse_step_s(decode_step_s: float) -> float:
    """The node's inter-token latency in steps of 2^(1/HALVING_UNITS); 0 while unmeasured."""
    if decode_step_s <= 0:
        return 0.0
    return math.pow(2.0, round(math.log2(decode_step_s) * HALVING_UNITS) / HALVING_UNITS)


def call_token_steps(session: AgentSession, settings: CoreSettings) -> float:
    """τ = p·d + d²/2 of the session's next call."""
    prompt = next_prompt_tokens(session, settings)
    decode = max(mean_output_tokens(session, settings), 1.0)
    return prompt * decode + decode * decode / 2


class TokenTime(NodeCredits):
    name = "token_time"
    node_fields: tuple[str, ...] = ("decode_step_s",)

    def compute(self, session: AgentSession, ctx: SignalContext) -> tuple[dict[NodeId, int], float]:
        if session.node is not None or session.phase not in (Phase.WAITING, Phase.READY):
            return {}, math.inf
        token_steps = call_token_steps(session, ctx.settings)
        values: dict[NodeId, int] = {}
        for node_id, node in ctx.nodes.items():
            if node.decode_step_s <= 0:
                continue
            units = math.floor(HALVING_UNITS * math.log2(CEILING_TOKEN_SECONDS / (token_steps * node.decode_step_s)))
            if units > 0:
                values[node_id] = units
        return values, math.inf
